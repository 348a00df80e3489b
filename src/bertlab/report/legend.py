"""The findings' legend in `reports/ablations.md`: what a pair's interval resamples and how it is built, the verdict
on the direction and on the paper's size, the power and the family-wise reading, and how a repeated pair is counted;
each sentence said only where the findings have what it speaks of."""

from __future__ import annotations

from typing import Any

from bertlab.report import power, stats
from bertlab.report.cells import PPL
from bertlab.report.multiboot import SETTLED_Z
from bertlab.report.pairs import Finding, Pair

VERDICTS = (
    "Each claim is the paper's \"A better than B\"; each pair shows A − B on our runs (points of the dev metric; for "
    "perplexity, in perplexity, where lower is better: a negative difference is A's win) with its {level:.0%} "
    "interval ({draws:,} draws resampling the dev items, the same for A and B{seeds}), and a verdict in two parts. "
    "On the direction: **{r}** (the interval excludes 0 in the paper's direction), **{c}** (it excludes 0 the "
    "other way), **{u}** (it includes 0), **{b}** (it includes 0, and even unlimited pretraining runs a side would "
    "have under {beyond:.0%} power to detect the paper's effect: the dev items' noise alone hides it), **{m}** (a side "
    "is missing, or its metric is not finite). On the size, where the paper gives its own A − B (from its numbers in "
    "the tables above): **{holds}** (the interval admits it) or **{out}** (it lies outside: above the interval, the "
    "effect here is smaller than the paper's or of the other sign; below it, larger). So \"{r}; {out}\" is the "
    "paper's direction at a size the paper's is not. No size verdict where the paper has no number for a side, nor "
    "for perplexity (the paper's is on another tokenizer and corpus). A side at (or below) its floor is flagged: "
    "there effects are compressed."
)
SEEDS = {  # what the intervals resample of the fine-tuning seeds, by whether the measured pairs' sides have several
    (True, False): ", and each side's fine-tuning seeds",
    (False, True): "; each side has one fine-tuning seed, so the variation between seeds is not in the interval",
}
MULTI = (" Where a side is over several pretraining runs (the items × runs column: runs × fine-tuning seeds each), the "
         "interval speaks of the procedures, not of one run of each: it is A − B ± t × SE on the Multi-Bootstrap's "
         "(Sellam et al. 2022) variance parts, the dev items' noise shared by every run and the runs' spread of the "
         "mean, with Welch-Satterthwaite's degrees of freedom (few where the runs' spread dominates: 2 with three "
         "paired runs), not the draws' percentiles, which over 3 runs cover well under 95% (docs/design.md); each "
         "run's own A − B follows the interval (\"runs\").")
SOME_SEEDS = (", and the fine-tuning seeds of a side that has more than one; a side with one seed, as the items × "
              "runs column shows, leaves the variation between seeds out of the interval")
POWER = (
    "Beside each verdict, its power and its family-wise reading. **MDE**: the smallest |A − B| the pair's design "
    "detects with {power:.0%} power at a two-sided {alpha:g} level ({z:.2f} × the estimate's SE), and "
    "whether the paper's |A − B| is above it (this design could have detected the paper's effect) or below it."
    "{runs} **Holm**: Holm's correction of the pairs' two-sided p-values (of A − B = 0; the t interval's where a "
    "side has several runs; with one run a side the draws', which at their smallest, 2 / (draws + 1), read \"≤\": "
    "the true one is below) within each table's measured pairs: a resolved verdict **holds** family-wise where its adjusted p "
    "is at most {alpha:g}, and is **not family-wise** otherwise, flagged **edge** where the p-values' Monte-Carlo "
    "error spans both readings (the perplexity-over-floor claim is its own family). A verdict whose interval end "
    "lies within {z_mc:g} Monte-Carlo errors of 0 (the item variance's, for a t interval; the draws', in binomial "
    "SDs of the end's rank, for a percentile one) reads unresolved, flagged **edge: within the bootstrap's "
    "Monte-Carlo error of 0**, with its ends' Monte-Carlo error: the bootstrap's own seed does not decide a verdict."
)
ONE_RUN = (" {where}ach side is one pretraining run, so the variation between pretraining runs is in neither the "
           "interval nor the MDE (a lower bound).")
RUNS = (" {where}t an assumed between-run SD of {sd:g} points for an A − B margin (`ablations.bootstrap.run_sd`: a "
        "pilot's three pretraining runs a side, NSP at the `cpu` recipe) the column gives the pretraining runs a side "
        "the paper's effect would need, or the power unlimited runs a side would have where no number reaches 80%: "
        "a lower bound, since one run's item noise holds its own luck on the items too, which more runs average away "
        "(so no pair of one run a side is called beyond this scale).")
SEVERAL_RUNS = (
    " {where}ach side is over several pretraining runs, so the variation between them is in the interval and the MDE, "
    "and the column gives the pretraining runs a side the paper's effect needs at the measured between-run variance "
    "of a margin, or, where no number of runs reaches {power:.0%} power, the power that unlimited runs a side would "
    "have. That variance is an estimate on few degrees of freedom (2 with three paired runs), so the runs needed "
    "carry their range over its {level:.0%} chi-square interval and the item variance's Monte-Carlo error, and are "
    "rounded to what that range carries (\"~40\": one significant figure where it spans more than a factor of 2): "
    "a planning figure, not a measurement.")
ONCE = ("Counted once: a pair whose sides are the models of an earlier pair's repeats its contrast: the same rows "
        "in another claim, or a row that is the same model as another at the encoder's depth (it reads the same "
        "hidden states and combines them alike, as Table 7's weighted sums of all layers and of the last four do at a "
        "4-layer encoder). It is shown with its numbers, marked *counted once*, and left out of the verdict counts and "
        "the family-wise reading.")
def _runs_legend(boot: dict[str, Any], pairs: list[Pair]) -> str:
    """What the interval and the power hold of the variation between pretraining runs: unmeasured where a side is one
    run (the runs needed at the assumed `run_sd`, if any), measured where both sides are several."""
    one = {min(p.pretrain_runs) == 1 for p in pairs}
    mixed = len(one) == 2
    text = ""
    if True in one:
        text += ONE_RUN.format(where="Where a side is one run, e" if mixed else "E")
        if boot.get("run_sd") is not None:
            text += RUNS.format(where="Where a side is one run, a" if mixed else "A", sd=boot["run_sd"])
    if False in one:
        text += SEVERAL_RUNS.format(where="Where both sides are several runs, e" if mixed else "E", power=0.8,
                                    level=power.RUN_VAR_LEVEL)
    return text


def legend(boot: dict[str, Any], findings: list[Finding]) -> list[str]:
    """The findings' legend: what a pair shows (the fine-tuning seeds resampled as the measured task pairs' sides
    have them), its power and family-wise reading, and, where a pair repeats another's models, how it is counted."""
    pairs = [p for f in findings for p in f.pairs if p.counted and p.contrast.n_items and p.column != PPL]
    several = {n > 1 for p in pairs for n in p.seeds}
    alpha = round(1 - boot["level"], 6)
    runs = _runs_legend(boot, pairs)
    seeds = SEEDS.get((True in several, False in several), SOME_SEEDS)  # all several, all one; else mixed (or none)
    multi = MULTI if any(max(p.pretrain_runs) > 1 for p in pairs) else ""
    lines = [VERDICTS.format(level=boot["level"], draws=boot["draws"], seeds=seeds, r=stats.REPRODUCED,
                             c=stats.CONTRADICTED, u=stats.UNRESOLVED, b=stats.BEYOND, m=stats.NOT_MEASURED,
                             beyond=power.BEYOND_POWER, holds=stats.SIZE_HOLDS, out=stats.SIZE_OUT) + multi,
             "", POWER.format(power=0.8, alpha=alpha, z=power.z_sum(alpha), runs=runs, draws=boot["draws"],
                              z_mc=SETTLED_Z)]
    return lines + (["", ONCE] if any(not p.counted for f in findings for p in f.pairs) else [])
