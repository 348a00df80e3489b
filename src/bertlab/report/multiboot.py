"""The Multi-Bootstrap (Sellam et al., "The MultiBERTs", ICLR 2022): A - B decided over several pretraining runs a side.

Input: each side a sequence of pretraining runs, each a sequence of its fine-tuning seeds' per-item columns
(`stats.Columns` of one kind, as `stats.score` reads them), all scored on the same dev items in the same order.

A draw resamples, with replacement, (a) the pretraining runs: one draw of run indices for both sides when `paired` (run
r of A and of B share pretraining seed r's initialisation and data order; equal run counts), an independent draw per
side otherwise; where only the first `shared` runs of each side share their seeds (a side ran more), those are drawn
once for both sides and each side's others apart (a claim passes the shared runs alone where there are two or more:
`claims.decide`); (b) within each drawn run, its fine-tuning seeds (afresh for every drawn run); (c) the dev items, one
draw for every seed of every run of both sides. A seed's score is the corpus-level metric recomputed on the drawn items
(`stats.bootstrap_scores`: means, F1s, Matthews, correlations, perplexity alike); a run's is the mean over its drawn
seeds, a side's the mean over its drawn runs, the draw's value A - B. The estimate is the same on all items with every
run and seed once; with one run a side the interval is the draws' percentiles. Its target: the expected A - B over
pretraining runs, fine-tuning seeds and the population the dev items are drawn from. With one run a side it is
`stats.compare`, draw for draw. Resampling both runs and items counts their interaction (a run's own luck on particular
items) twice (McCullagh, "Resampling and exchangeable arrays", Bernoulli 2000): the interval errs wide where runs
disagree on many items, and a handful of runs errs narrow ((R - 1) / R of their variance); at 5 runs a side and runs
agreeing on ~90% of the items it covers the effect in 94.7% of 2,200 simulated studies (tests/unit/test_multiboot.py's
model).

The interval with several pretraining runs a side (`bertlab.report.tinterval`): a percentile bootstrap over 3 clusters
cannot be as wide as a t-quantile on 2 degrees of freedom (the small-sample problem of cluster bootstraps; at the
default's 3 runs a side it covered 74-90% where the runs vary, tests/unit/test_coverage.py), so the interval is A - B
-/+ t_{df} SE, SE^2 = item_var + run_part, on the Multi-Bootstrap's own variance parts: run_part, the run scores'
variance of the mean (the paired margins' variance / R; unpaired, each side's over its runs, summed), on run_df degrees
of freedom, and item_var (below), on n_items - 1; df by Welch-Satterthwaite over the two (the run part read at an upper
bound). Where the runs agree, df is large and the interval the item noise's normal one; where they dominate, it is a t
interval on R - 1 degrees of freedom. Its p-value (of "A - B = 0") is the same t's. Both read item_var on its fixed
stream, so they are a function of the evidence, not of the bootstrap's seed; their Monte-Carlo error is item_var's
(`item_var_mc`): an end's is t_{df} item_var_mc / (2 SE).
With one run a side the interval is the draws' percentiles, as `stats.compare`'s, and its p-value
2 min(#{d <= 0} + 1, #{d >= 0} + 1) / (B + 1), at most 1, over the B draws d: at its floor 2 / (B + 1) it says only
"below that" (`p_floor`).
Monte-Carlo error of a percentile end, the q-quantile of B draws: the number of draws below the true quantile is
Binomial(B, q), so half the spread between the order statistics at ranks Bq -/+ sqrt(Bq(1 - q)) is its SD.
Whether the verdict keeps to the bootstrap's seed (`settled`) is read on the same counts, in draws rather than in
points, which holds where the metric is discrete (many draws on one value, where the order statistics' spread reads
0): another seed draws Binomial(B, share) below 0, so an end changes sides (or sits on 0) only where its rank, Bq or
B(1 - q), comes within `SETTLED_Z` binomial SDs of the counts of draws below 0 and at or below 0. A t interval's end
keeps its side where it lies more than `SETTLED_Z` Monte-Carlo errors from 0.
Variance parts (for `bertlab.report.power`): `run_var`, the between-run variance of one pair of runs' margin (the
variance of the paired margins, or the sum of the sides' variances of run scores), an estimate on `run_df` degrees of
freedom (2 with three paired runs: rough); `item_var`, the variance of the
estimate under item resampling that is shared by different runs (the mean covariance of distinct runs' item-resampled
scores, A's with A's and B's with B's less twice A's with B's): more runs do not average it away. It is read on an
item resampling of its own, drawn from a fixed seed (`ITEM_VAR_SEED`), so that the power's readings (the runs a side an
effect needs; "beyond this scale") are a function of the evidence alone and not of the bootstrap's seed, even for an
effect on the boundary Z^2 item_var = delta^2. Its Monte-Carlo SD (`item_var_mc`, by batch means over 10 batches of
the draws) exceeds a single variance's sqrt(2 / B) of it where A's, B's and their cross covariances cancel (~3% of it at
10,000 draws on the committed run's SST-2 depth pairs); `bertlab.report.power` reads an effect within it of the
boundary as an edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import t as student

from bertlab.report import stats
from bertlab.report.tinterval import run_part, t_interval, t_p_value

DRAWS = 10_000  # Monte-Carlo error of an interval end ~1% of the interval's width: verdicts keep to the seed
ITEM_VAR_SEED = 55  # the item variance's own stream: the same for every bootstrap seed
ITEM_VAR_BATCHES = 10  # batch means for item_var's Monte-Carlo SD
SETTLED_Z = 3.0  # an end this many binomial SDs (in draws) from 0 keeps its side of 0 under another bootstrap seed

Runs = Sequence[Sequence[stats.Columns]]  # pretraining runs, each its fine-tuning seeds' per-item columns


@dataclass(frozen=True)
class MultiContrast(stats.Contrast):
    """A - B over pretraining runs (`runs_a`, `runs_b` count them), its Multi-Bootstrap interval and verdict."""

    paired: bool
    se: float  # the estimate's SE: sqrt(item_var + run_part) with a t interval, else the draws' SD
    p_value: float
    mc_error: float  # the larger Monte-Carlo SD of the interval's two ends
    scores_a: tuple[float, ...]  # each pretraining run's score: the mean over its seeds, on all items
    scores_b: tuple[float, ...]
    run_var: float  # between-run variance of one pair of runs' margin; NaN: unmeasured (one run a side)
    item_var: float  # the estimate's item variance that more runs do not remove (all of it with one run a side)
    draws: np.ndarray = field(repr=False, compare=False)
    level: float = 0.95  # the interval's
    item_var_mc: float = float("nan")  # Monte-Carlo SD of item_var
    run_df: float = float("nan")  # run_var's degrees of freedom (runs - 1 paired; Welch-Satterthwaite unpaired)
    df: float = float("nan")  # the t interval's (Welch-Satterthwaite); NaN: the draws' percentile interval
    p_band: tuple[float, float] = (float("nan"), float("nan"))  # the p-value -/+ SETTLED_Z Monte-Carlo SDs

    @property
    def p_floor(self) -> bool:
        """Whether the p-value is the smallest the draws can show (2 / (B + 1)): the true one is below it."""
        return bool(np.isnan(self.df) and len(self.draws) and self.p_value <= 2 / (len(self.draws) + 1))

    @property
    def settled(self) -> bool:
        """The verdict keeps to the bootstrap's seed: a t interval's ends lie more than `SETTLED_Z` Monte-Carlo errors
        from 0 (or on 0 with none); a percentile end's rank (Bq, B(1 - q); q = (1 - level) / 2) lies more than
        `SETTLED_Z` binomial SDs outside [#draws < 0, #draws <= 0], where that end would sit on 0 or cross it."""
        if not np.isnan(self.df):
            return bool(min(abs(self.low), abs(self.high)) > SETTLED_Z * self.mc_error)
        n, q = len(self.draws), (1 - self.level) / 2
        below, upto = np.count_nonzero(self.draws < 0), np.count_nonzero(self.draws <= 0)
        margin = SETTLED_Z * np.sqrt(n * q * (1 - q))
        return bool(n) and not any(below - margin <= rank <= upto + margin for rank in (n * q, n * (1 - q)))


def multi_bootstrap(
    a: Runs, b: Runs, kind: str, metric: str, *, paired: bool, draws: int = DRAWS, seed: int = 0, level: float = 0.95,
    shared: int | None = None,
) -> MultiContrast:
    """Multi-Bootstrap of `metric`(A) - `metric`(B) over pretraining runs, fine-tuning seeds and items; `shared`: how
    many leading runs of each side share their pretraining seeds, drawn paired (None: all where `paired`, else none)."""
    stats.check_metric(kind, metric)
    if paired and len(a) != len(b):
        raise ValueError(f"multi_bootstrap: paired sides need as many runs each, not {len(a)} and {len(b)}")
    shared = (len(a) if paired else 0) if shared is None else shared
    if not 0 <= shared <= min(len(a), len(b)):
        raise ValueError(f"multi_bootstrap: {shared} shared runs, but the sides have {len(a)} and {len(b)}")
    if any(not run for run in (*a, *b)):
        raise ValueError("multi_bootstrap: a pretraining run without fine-tuning seeds")
    cols = [c for side in (a, b) for run in side for c in run]
    sizes = {stats.item_count(kind, metric, c) for c in cols}
    if len(sizes) > 1:
        raise ValueError(f"multi_bootstrap: the runs have different item counts {sorted(sizes)}")
    n = sizes.pop() if sizes else 0
    scores = [np.array([np.mean([stats.score(kind, metric, c) for c in run]) for run in side]) for side in (a, b)]
    estimate = float(scores[0].mean() - scores[1].mean()) if a and b and n else float("nan")
    if not np.isfinite(estimate):
        return _not_measured(estimate, n, a, b, paired, scores)

    rng = np.random.default_rng(seed)
    picks = _run_picks(rng, draws, len(a), len(b), shared)
    seeds = [rng.integers(0, np.array([len(r) for r in side])[p][..., None], size=(*p.shape, max(map(len, side))))
             for side, p in zip((a, b), picks)]
    per_seed = stats.bootstrap_scores(kind, metric, cols, n, draws, rng)  # (draws, every seed of A's runs then B's)
    first_a = np.cumsum([0] + [len(r) for r in a])
    first_b = first_a[-1] + np.cumsum([0] + [len(r) for r in b])
    diff = _side(per_seed, first_a, picks[0], seeds[0]) - _side(per_seed, first_b, picks[1], seeds[1])
    ends = ((1 - level) / 2, (1 + level) / 2)
    fixed = stats.bootstrap_scores(kind, metric, cols, n, draws, np.random.default_rng(ITEM_VAR_SEED))
    run_scores = [_run_scores(fixed, first) for first in (first_a, first_b)]
    item_var = _item_var(*run_scores, paired)
    item_mc = _batch_sd([_item_var(a_rows, b_rows, paired) for a_rows, b_rows in
                         zip(*(np.array_split(side, ITEM_VAR_BATCHES) for side in run_scores))])
    part, part_df = run_part(*scores, paired, shared)
    if np.isfinite(part):
        low, high, se, df = t_interval(estimate, item_var, part, part_df, n, level)
        p_value = t_p_value(estimate, item_var, part, part_df, n)
        spread = SETTLED_Z * item_mc
        p_band = tuple(sorted(float(t_p_value(estimate, max(0.0, item_var + s), part, part_df, n))
                              for s in (-spread, spread)))  # not monotone: df grows with item_var
        error = float(student.ppf(ends[1], df) * item_mc / (2 * se)) if se > 0 else 0.0
        low, high, se, df, p_value = (float(v) for v in (low, high, se, df, p_value))
    else:
        low, high = (float(q) for q in np.quantile(diff, ends))
        tail = int(min(np.count_nonzero(diff <= 0), np.count_nonzero(diff >= 0))) + 1
        p_value, se, df = min(1.0, 2 * tail / (draws + 1)), float(np.std(diff, ddof=1)), float("nan")
        wobble = SETTLED_Z * np.sqrt(tail * max(0.0, 1 - tail / draws))
        p_band = tuple(float(np.clip(2 * (tail + s) / (draws + 1), 0, 1)) for s in (-wobble, wobble))
        error = max(mc_error(diff, q) for q in ends)
    verdict = stats.verdict_of(estimate, low, high, stats.higher_is_better(metric))
    return MultiContrast(
        estimate, low, high, verdict, n, len(a), len(b), paired, se, p_value, error, tuple(map(float, scores[0])),
        tuple(map(float, scores[1])), _run_var(*scores, paired), item_var, diff, level, item_mc,
        _run_df(*scores, paired), df, p_band)


def mc_error(draws: np.ndarray, q: float) -> float:
    """The draws' q-quantile's Monte-Carlo SD: half the spread of the order statistics at ranks Bq -/+ sqrt(Bq(1-q))."""
    spread = np.sqrt(len(draws) * q * (1 - q))
    lo, hi = np.quantile(draws, np.clip([q - spread / len(draws), q + spread / len(draws)], 0, 1))
    return float((hi - lo) / 2)


def _run_picks(rng: np.random.Generator, draws: int, n_a: int, n_b: int, shared: int) -> list[np.ndarray]:
    """Each side's drawn runs (draws, runs): its first `shared` runs drawn once for both sides, its others apart."""
    def draw(lo: int, hi: int) -> np.ndarray:
        return lo + rng.integers(0, hi - lo, size=(draws, hi - lo)) if hi > lo else np.empty((draws, 0), np.int64)

    both = draw(0, shared)
    return [np.concatenate([both, draw(shared, n)], axis=1) for n in (n_a, n_b)]


def _side(per_seed: np.ndarray, first: np.ndarray, runs: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """A side's value on every draw: the mean over its drawn runs of the mean over each one's drawn seeds."""
    counts = np.diff(first)[runs][..., None]  # (draws, runs, 1)
    mask = np.arange(seeds.shape[-1]) < counts
    column = np.where(mask, first[:-1][runs][..., None] + seeds, 0).reshape(len(runs), -1)
    picked = np.take_along_axis(per_seed, column, axis=1).reshape(seeds.shape)
    return (np.where(mask, picked, 0.0).sum(axis=-1) / counts[..., 0]).mean(axis=-1)


def _run_scores(per_seed: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Each run's item-resampled score, every seed once: (draws, runs)."""
    return np.stack([per_seed[:, i:j].mean(axis=1) for i, j in zip(first[:-1], first[1:])], axis=1)


def _batch_sd(estimates: list[float]) -> float:
    """The Monte-Carlo SD of an estimate on all the draws, from its estimates on equal batches of them."""
    return float(np.std(estimates, ddof=1) / np.sqrt(len(estimates)))


def _run_var(a: np.ndarray, b: np.ndarray, paired: bool) -> float:
    if paired:
        return float(np.var(a - b, ddof=1)) if len(a) > 1 else float("nan")
    return float(np.var(a, ddof=1) + np.var(b, ddof=1)) if min(len(a), len(b)) > 1 else float("nan")


def _run_df(a: np.ndarray, b: np.ndarray, paired: bool) -> float:
    """The degrees of freedom of `_run_var`: runs - 1 paired, Welch-Satterthwaite's unpaired; NaN unmeasured."""
    if paired:
        return float(len(a) - 1) if len(a) > 1 else float("nan")
    if min(len(a), len(b)) < 2:
        return float("nan")
    va, vb = np.var(a, ddof=1), np.var(b, ddof=1)
    spread = va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)
    return float((va + vb) ** 2 / spread) if spread > 0 else float("nan")


def _item_var(a: np.ndarray, b: np.ndarray, paired: bool) -> float:
    """The item variance shared by distinct runs (see the module's text); with one run a side, all of it."""
    if min(a.shape[1], b.shape[1]) < 2:
        return float(np.var(a.mean(axis=1) - b.mean(axis=1), ddof=1))
    cov = np.cov(np.concatenate([a, b], axis=1), rowvar=False)
    ra = a.shape[1]
    aa, bb, ab = cov[:ra, :ra], cov[ra:, ra:], cov[:ra, ra:]

    def distinct(block: np.ndarray, square: bool) -> float:
        return float((block.sum() - np.trace(block)) / (block.size - len(block))) if square else float(block.mean())

    return max(0.0, distinct(aa, True) + distinct(bb, True) - 2 * distinct(ab, paired))


def _not_measured(estimate: float, n: int, a: Runs, b: Runs, paired: bool, scores: list[np.ndarray]) -> MultiContrast:
    nan = float("nan")
    return MultiContrast(estimate, nan, nan, stats.NOT_MEASURED, n, len(a), len(b), paired, nan, nan, nan,
                         tuple(map(float, scores[0])), tuple(map(float, scores[1])), nan, nan, np.empty(0))
