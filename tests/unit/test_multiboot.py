"""The Multi-Bootstrap over pretraining runs: today's paired bootstrap with one run a side, coverage of the
procedure-level effect on synthetic studies with a known between-run variance, paired against unpaired run draws,
its p-value and Monte-Carlo error, and the variance parts the power reads."""

import math

import numpy as np
import pytest
from scipy.stats import t as student

from bertlab.report import multiboot, stats, tinterval
from bertlab.report.multiboot import MultiContrast, multi_bootstrap

Side = list[list[dict[str, np.ndarray]]]


def study(rng: np.random.Generator, means: tuple[float, float], *, runs: int = 5, seeds: int = 2, items: int = 400,
          sd_run: float = 0.02, sd_seed: float = 0.01, shared: float = 0.0, agree: float = 0.9) -> tuple[Side, Side]:
    """Two sides of accuracy runs on one dev set. Pretraining run r of a side has true accuracy mean + e_r,
    e_r ~ N(0, sd_run) (a share `shared` of its variance common to both sides' run r, as a shared pretraining seed);
    each fine-tuning seed adds N(0, sd_seed). Item i has a difficulty d_i ~ U(0, 1): a seed of true accuracy t gets it
    right when u < t, u = d_i with probability `agree`, else a fresh U(0, 1). Over the item population P(right) = t,
    so the procedure-level effect (the expected A - B over runs, seeds and items) is 100 (mean_A - mean_B)."""
    difficulty, labels = rng.random(items), rng.integers(0, 2, items)
    common = rng.normal(0, sd_run, runs)
    sides = []
    for mean in means:
        side = []
        for r in range(runs):
            run_mean = mean + math.sqrt(shared) * common[r] + math.sqrt(1 - shared) * rng.normal(0, sd_run)
            side.append([])
            for _ in range(seeds):
                u = np.where(rng.random(items) < agree, difficulty, rng.random(items))
                right = u < run_mean + rng.normal(0, sd_seed)
                side[-1].append({"pred": np.where(right, labels, 1 - labels), "label": labels})
        sides.append(side)
    return sides[0], sides[1]


def test_one_run_a_side_is_todays_paired_bootstrap_draw_for_draw() -> None:
    rng = np.random.default_rng(0)
    a, b = study(rng, (0.75, 0.72), runs=1, seeds=3)
    span = [[{"f1": rng.random(300) * 100, "exact_match": rng.random(300) * 100} for _ in range(k)] for k in (1, 2)]
    label = rng.integers(0, 6, 200).astype(float)
    sts = [[{"pred": label + rng.normal(0, sd, 200), "label": label} for _ in range(2)] for sd in (1.0, 1.5)]
    lm = [[{"loss_sum": rng.gamma(3.0, size=250) * 9, "count": np.full(250, 9)}] for _ in range(2)]
    for (x, y), kind, metric in [((a[0], b[0]), "classification", "accuracy"), ((a[0], b[0]), "classification", "f1"),
                                 ((a[0], b[0]), "classification", "matthews"), (span, "span", "f1"),
                                 (sts, "regression", "spearman"), (lm, "lm", "ppl")]:
        multi = multi_bootstrap([x], [y], kind, metric, paired=True, draws=800, seed=5)
        today = stats.compare(x, y, kind, metric, draws=800, seed=5)
        assert (multi.estimate, multi.low, multi.high, multi.verdict) == (
            today.estimate, today.low, today.high, today.verdict)
        unpaired = multi_bootstrap([x], [y], kind, metric, paired=False, draws=800, seed=5)
        assert (unpaired.low, unpaired.high) == (multi.low, multi.high)  # one run a side: nothing to pair


def test_the_estimate_averages_each_runs_corpus_metric() -> None:
    """Entity F1 is not a mean of per-item values: a run's score is F1 on its items, averaged over seeds, then runs."""
    rng = np.random.default_rng(1)

    def run() -> dict[str, np.ndarray]:
        return {k: rng.integers(0, 4, 150) for k in ("tp", "fp", "fn")}

    a, b = [[run(), run()], [run()]], [[run()], [run(), run(), run()]]
    c = multi_bootstrap(a, b, "tagging", "f1", paired=False, draws=500)
    scores_a, scores_b = ([np.mean([stats.score("tagging", "f1", s) for s in r]) for r in side] for side in (a, b))
    assert c.scores_a == pytest.approx(scores_a) and c.scores_b == pytest.approx(scores_b)
    assert c.estimate == pytest.approx(np.mean(scores_a) - np.mean(scores_b))
    assert (c.runs_a, c.runs_b, c.n_items) == (2, 2, 150) and c.low < c.estimate < c.high


def test_the_interval_covers_the_procedure_level_effect_in_95_percent_of_studies() -> None:
    """Done-when 1 of issue 55: 200 simulated studies, 5 pretraining runs a side (2 fine-tuning seeds each, 400 shared
    dev items), between-run SD 2 points, true effect +3 points. The Multi-Bootstrap's 95% interval covers the effect in
    93-97% of them; one run's paired bootstrap (today's, over its items and seeds) in well under 90%."""
    rng = np.random.default_rng(0)
    effect, covered_multi, covered_one = 3.0, 0, 0
    for i in range(200):
        a, b = study(rng, (0.75, 0.72))
        multi = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=1000, seed=i)
        one = stats.compare(a[0], b[0], "classification", "accuracy", draws=1000, seed=i)
        covered_multi += multi.low <= effect <= multi.high
        covered_one += one.low <= effect <= one.high
    print(f"coverage of the procedure-level effect: Multi-Bootstrap {covered_multi / 200:.3f}, "
          f"one run's paired bootstrap {covered_one / 200:.3f}")
    assert 0.93 <= covered_multi / 200 <= 0.97
    assert covered_one / 200 < 0.85


def test_paired_runs_give_a_narrower_interval_when_run_effects_are_shared() -> None:
    """Run r's pretraining seed moves both sides alike (SD 5 points): pairing the run draws cancels it."""
    rng = np.random.default_rng(2)
    a, b = study(rng, (0.75, 0.72), runs=8, sd_run=0.05, shared=1.0, items=1000)
    paired = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=4000)
    unpaired = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=4000)
    assert paired.estimate == unpaired.estimate and paired.paired and not unpaired.paired
    assert paired.high - paired.low < 0.4 * (unpaired.high - unpaired.low)
    assert paired.run_var < 0.1 * unpaired.run_var  # the margins' spread, against the two sides' spreads summed
    assert paired.low <= 3.0 <= paired.high


def test_p_value_and_monte_carlo_error() -> None:
    """One run a side: p = 2 min(#draws <= 0 + 1, #draws >= 0 + 1) / (B + 1), at its floor flagged as "below that";
    the MC error of an end is its SD over bootstrap seeds."""
    rng = np.random.default_rng(3)
    a, b = study(rng, (0.75, 0.73), runs=1, seeds=4, items=600)
    results = [multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=2000, seed=s)
               for s in range(12)]
    c = results[0]
    below, above = np.count_nonzero(c.draws <= 0), np.count_nonzero(c.draws >= 0)
    assert c.p_value == pytest.approx(2 * (min(below, above) + 1) / 2001) and math.isnan(c.df)
    assert c.p_band[0] < c.p_value < c.p_band[1] and not c.p_floor
    assert len(c.draws) == 2000 and c.se == pytest.approx(np.std(c.draws, ddof=1))
    spread = np.std([r.low for r in results], ddof=1)
    assert 0.5 < np.mean([r.mc_error for r in results]) / spread < 2.0
    assert multiboot.mc_error(np.arange(10_001.0), 0.5) == pytest.approx(math.sqrt(10_000 * 0.25), rel=0.01)
    far = multi_bootstrap(*study(rng, (0.9, 0.6), runs=1, items=600), "classification", "accuracy", paired=False,
                          draws=500)
    assert far.p_value == pytest.approx(2 / 501) and far.p_floor


def test_several_runs_a_side_get_the_t_interval_and_its_p_value() -> None:
    """A - B -/+ t_df SE, SE^2 = item_var + the margins' variance / R, df Welch-Satterthwaite's (the run part at its
    upper bound); the p-value the same t's, not floored by the draws; the interval the same under every bootstrap
    seed, its Monte-Carlo error item_var's."""
    rng = np.random.default_rng(3)
    a, b = study(rng, (0.75, 0.73), runs=3, seeds=1, items=600, shared=0.5)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=2000, seed=1)
    part = np.var(np.subtract(c.scores_a, c.scores_b), ddof=1) / 3
    df = float(tinterval.satterthwaite(c.item_var, part, 2, 600))
    assert c.df == pytest.approx(df) and 2 < df < 599 and c.se == pytest.approx(math.sqrt(c.item_var + part))
    half = student.ppf(0.975, df) * c.se
    assert (c.low, c.high) == pytest.approx((c.estimate - half, c.estimate + half))
    assert c.p_value == pytest.approx(2 * student.sf(abs(c.estimate) / c.se, df)) and not c.p_floor
    assert c.p_band[0] <= c.p_value <= c.p_band[1]
    assert c.mc_error == pytest.approx(student.ppf(0.975, df) * c.item_var_mc / (2 * c.se))
    again = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=2000, seed=9)
    assert (again.low, again.high, again.p_value) == (c.low, c.high, c.p_value)
    plug_in = student.ppf(0.975, (c.item_var + part) ** 2 / (c.item_var**2 / 599 + part**2 / 2)) * c.se
    assert half > plug_in  # the run part read at its upper bound: fewer degrees of freedom than the plug-in's


def test_a_settled_verdict_keeps_to_the_bootstrap_seed() -> None:
    rng = np.random.default_rng(4)
    a, b = study(rng, (0.80, 0.72), runs=3, items=800)
    results = [multi_bootstrap(a, b, "classification", "accuracy", paired=False, seed=s) for s in range(5)]
    assert all(r.settled for r in results) and {r.verdict for r in results} == {stats.REPRODUCED}
    assert max(r.mc_error for r in results) < 0.01 * (results[0].high - results[0].low)  # 10,000 draws: ~0.7%
    single = [run[:1] for run in a]  # one seed a run, so both sides draw the very same seeds
    tie = multi_bootstrap(single, single, "classification", "accuracy", paired=True, draws=500)
    assert (tie.estimate, tie.low, tie.high, tie.p_value, tie.settled) == (0.0, 0.0, 0.0, 1.0, False)


def test_a_discrete_metrics_edge_is_not_settled() -> None:
    """Draws on a lattice (100 items: F1 in whole points): 220 of 10,000 at 0, the rest at +1. The 2.5% quantile is +1
    and the order statistics around it agree (Monte-Carlo error 0), yet another seed draws Binomial(10,000, 0.022)
    at or below 0, 1.9 of the end's binomial SDs (15.6 draws) from the 250 that put the end on 0: not settled. 150 at
    0 (6.4 SDs) is."""
    def at_zero(count: int) -> MultiContrast:
        draws = np.r_[np.zeros(count), np.ones(10_000 - count)]
        low, high = np.quantile(draws, [0.025, 0.975])
        return MultiContrast(0.9, low, high, stats.REPRODUCED, 100, 1, 1, True, float(np.std(draws)), 0.04,
                             multiboot.mc_error(draws, 0.025), (), (), math.nan, math.nan, draws)

    edge, clear = at_zero(220), at_zero(150)
    assert (edge.low, edge.mc_error, edge.settled) == (1.0, 0.0, False)
    assert (clear.low, clear.settled) == (1.0, True)
    reseeded = np.random.default_rng(0).binomial(10_000, 0.022, 2000)  # the draws at or below 0 under other seeds
    assert 0.01 < np.mean(reseeded >= 250) < 0.05  # the end reaches 0 under some seeds


def test_variance_parts() -> None:
    """Copies of one run a side: no between-run variance, and all the item variance is shared by the runs (read on its
    own fixed stream of item draws, so equal to the draws' variance up to Monte-Carlo error, ~2.6% at 3,000)."""
    rng = np.random.default_rng(5)
    (a,), (b,) = study(rng, (0.75, 0.72), runs=1, seeds=1)
    copies = multi_bootstrap([a] * 3, [b] * 3, "classification", "accuracy", paired=False, draws=3000)
    assert copies.run_var == 0.0 and copies.item_var == pytest.approx(copies.se**2, rel=0.1)
    one = multi_bootstrap([a], [b], "classification", "accuracy", paired=False, draws=3000)
    assert math.isnan(one.run_var) and one.item_var == pytest.approx(one.se**2, rel=0.1)
    # runs that share no item noise (each item's outcome drawn afresh per run): none of it is left for more runs
    fresh_a, fresh_b = study(rng, (0.75, 0.72), runs=5, seeds=1, sd_run=0.0, sd_seed=0.0, agree=0.0)
    fresh = multi_bootstrap(fresh_a, fresh_b, "classification", "accuracy", paired=False, draws=3000)
    assert fresh.item_var < 0.1 * fresh.se**2 and fresh.run_var > 0


def test_the_item_variance_keeps_to_the_evidence_not_the_bootstrap_seed() -> None:
    """The item variance is read on a fixed stream: every bootstrap seed gives the same value (so the same interval,
    the same runs needed and the same "beyond this scale"), while the draws do change with the seed."""
    a, b = study(np.random.default_rng(8), (0.75, 0.74), runs=3, seeds=2, sd_run=0.005)
    results = [multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=2000, seed=s) for s in range(4)]
    assert len({r.item_var for r in results}) == 1 and results[0].item_var > 0
    assert len({r.low for r in results}) == 1 and len({float(r.draws[0]) for r in results}) > 1


def test_the_item_variances_monte_carlo_sd_is_its_spread_over_streams(monkeypatch) -> None:
    """`item_var_mc` (batch means) agrees with the SD of item_var over 30 fixed streams, to within sampling error."""
    a, b = study(np.random.default_rng(8), (0.75, 0.74), runs=3, seeds=2, sd_run=0.005)
    values, mcs = [], []
    for stream in range(30):
        monkeypatch.setattr(multiboot, "ITEM_VAR_SEED", stream)
        c = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=1000)
        values.append(c.item_var)
        mcs.append(c.item_var_mc)
    print(f"item_var SD over streams {np.std(values, ddof=1):.4f}, batch-means MC SD {np.mean(mcs):.4f}")
    assert 0.6 < np.mean(mcs) / np.std(values, ddof=1) < 1.6


def test_bad_inputs() -> None:
    rng = np.random.default_rng(6)
    a, b = study(rng, (0.7, 0.7), runs=2, items=50)
    with pytest.raises(ValueError, match="as many runs"):
        multi_bootstrap(a, b[:1], "classification", "accuracy", paired=True)
    with pytest.raises(ValueError, match="without fine-tuning seeds"):
        multi_bootstrap(a, [[]], "classification", "accuracy", paired=False)
    _, short = study(rng, (0.7, 0.7), runs=1, items=40)
    with pytest.raises(ValueError, match="item counts"):
        multi_bootstrap(a, short, "classification", "accuracy", paired=False)
    empty = multi_bootstrap(a, [], "classification", "accuracy", paired=False)
    assert empty.verdict == stats.NOT_MEASURED and (empty.runs_a, empty.runs_b) == (2, 0)
    assert math.isnan(empty.p_value) and empty.scores_a == pytest.approx([np.mean(
        [stats.score("classification", "accuracy", s) for s in run]) for run in a])
