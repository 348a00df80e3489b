"""Power of a contrast's design: the MDE from the Multi-Bootstrap's draws, the MDE and runs needed from the variance
parts, "not at this scale" when item noise alone hides an effect, and an unmeasured between-run variance stated."""

import math

import numpy as np
import pytest

from bertlab.report import power
from bertlab.report.multiboot import multi_bootstrap
from tests.unit.test_multiboot import study


def test_z_sum_is_2_80_at_5_percent_and_80_percent_power() -> None:
    assert power.z_sum() == pytest.approx(1.959964 + 0.841621, abs=1e-5)
    assert power.z_sum(0.01, 0.9) == pytest.approx(2.575829 + 1.281552, abs=1e-5)


def test_mde_is_z_sum_standard_errors() -> None:
    assert power.mde(0.5) == pytest.approx(2.8016 * 0.5, rel=1e-4)
    assert power.mde_at(4, run_var=2.0, item_var=0.5) == pytest.approx(power.z_sum() * 1.0)


@pytest.mark.parametrize(("delta", "run_var", "item_var", "runs"), [
    (3.5, 2 * 1.4**2, 0.0, 3),         # the textbook 2 Z^2 sd^2 / delta^2 = 7.85 x 3.92 / 12.25 = 2.5
    (2.0, 2 * 1.4**2, 0.1, 10),        # 3.92 / (4 / 7.85 - 0.1) = 9.6
    (0.6, 2 * 1.4**2, 0.1, math.inf),  # item noise alone hides it: 7.85 x 0.1 > 0.6^2
    (5.0, 0.0, 0.5, 1),                # no between-run variance: one run does
])
def test_runs_needed(delta: float, run_var: float, item_var: float, runs: float) -> None:
    assert power.runs_needed(delta, run_var, item_var) == runs
    if math.isfinite(runs):  # that many runs detect delta, one fewer does not
        assert power.mde_at(runs, run_var, item_var) <= delta
        assert runs == 1 or power.mde_at(runs - 1, run_var, item_var) > delta
    else:  # nor does any number of runs
        assert power.mde_at(1e9, run_var, item_var) > delta


def test_power_of_a_multi_bootstrap_contrast() -> None:
    rng = np.random.default_rng(1)
    a, b = study(rng, (0.75, 0.72), runs=5, items=600)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=4000)
    got = power.power_of(c, effect=3.5)
    assert got.note == "" and got.mde == pytest.approx(power.z_sum() * c.se)
    assert got.runs_needed == power.runs_needed(3.5, c.run_var, c.item_var)
    assert power.mde_at(5, c.run_var, c.item_var) == pytest.approx(got.mde, rel=0.35)  # the parts explain the draws
    assert power.power_of(c).runs_needed is None


def test_one_run_a_side_states_the_between_run_variance_unmeasured() -> None:
    rng = np.random.default_rng(2)
    a, b = study(rng, (0.75, 0.72), runs=1, items=600)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=4000)
    plain = power.power_of(c, effect=3.5)
    assert plain.note == power.UNMEASURED and plain.runs_needed is None
    assert plain.mde == pytest.approx(power.z_sum() * c.se)
    assumed = power.power_of(c, effect=3.5, assumed_run_var=2 * 1.4**2)
    assert assumed.note == power.ASSUMED
    assert assumed.mde == pytest.approx(power.z_sum() * math.sqrt(c.se**2 + 2 * 1.4**2))
    assert assumed.runs_needed == power.runs_needed(3.5, 2 * 1.4**2, c.item_var)


def test_an_effect_within_the_item_variances_monte_carlo_error_of_the_boundary_is_an_edge() -> None:
    """At delta = Z sqrt(item_var) the runs needed are finite just below item_var and infinite just above: an edge.
    Twice that effect, or half of it, reads the same across the band."""
    a, b = study(np.random.default_rng(1), (0.75, 0.72), runs=5, items=600)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=4000)
    assert 0 < c.item_var_mc < 0.2 * c.item_var
    boundary = power.z_sum() * math.sqrt(c.item_var)
    edge = power.power_of(c, effect=boundary)
    assert edge.edge and math.isfinite(edge.runs_band[0]) and math.isinf(edge.runs_band[1])
    for clear in (2 * boundary, 0.5 * boundary):
        got = power.power_of(c, effect=clear)
        assert not got.edge and math.isinf(got.runs_needed) == (clear < boundary)
    assert power.power_of(c).runs_band is None


def test_a_measured_between_run_variance_carries_its_interval_into_the_runs_needed() -> None:
    """Three paired runs measure run_var on 2 degrees of freedom: its 80% chi-square interval (x0.43 to x9.5) covers
    the true variance in ~80% of studies, and the runs needed are read at its ends, around the point figure. An
    assumed variance (one run a side) has no such range."""
    rng = np.random.default_rng(3)
    covered = [lo <= 2.0 <= hi for lo, hi in
               (power.run_var_interval(np.var(rng.normal(0, math.sqrt(2.0), 3), ddof=1), 2) for _ in range(4000))]
    assert 0.78 <= np.mean(covered) <= 0.82
    assert power.run_var_interval(1.0, 2) == pytest.approx((0.4343, 9.4912), rel=1e-4)
    a, b = study(np.random.default_rng(1), (0.75, 0.70), runs=3, items=600)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=4000)
    assert c.run_df == 2
    got = power.power_of(c, effect=5.0)
    lo, hi = power.run_var_interval(c.run_var, 2)
    assert got.runs_range == (power.runs_needed(5.0, lo, c.item_var), power.runs_needed(5.0, hi, c.item_var))
    assert got.runs_range[0] <= got.runs_needed <= got.runs_range[1] and got.runs_range[0] < got.runs_range[1]
    assert power.power_of(c, effect=0.01).runs_range is None  # under the items' noise: no number to range over
    unpaired = multi_bootstrap(a, b, "classification", "accuracy", paired=False, draws=4000)
    assert 2 <= unpaired.run_df <= 4  # Welch-Satterthwaite: between one side's and both sides' runs - 1
    one = multi_bootstrap(*(side[:1] for side in (a, b)), "classification", "accuracy", paired=True, draws=4000)
    assert power.power_of(one, effect=5.0, assumed_run_var=2 * 1.4**2).runs_range is None


def test_beyond_this_scale_is_the_power_with_unlimited_runs_not_a_ratio_above_1() -> None:
    """Past Z^2 item_var = delta^2 no number of runs reaches 80% power, yet unlimited runs may still have 77%: only
    under 50% (the effect inside the item noise's own interval) does no number of runs resolve it."""
    a, b = study(np.random.default_rng(1), (0.75, 0.72), runs=3, items=600)
    c = multi_bootstrap(a, b, "classification", "accuracy", paired=True, draws=4000)
    sd = math.sqrt(c.item_var)
    near = power.power_of(c, effect=2.7 * sd)  # z_sum is 2.80: just short of 80% with unlimited runs
    assert math.isinf(near.runs_needed) and 0.7 < near.unlimited < 0.8 and not near.beyond
    far = power.power_of(c, effect=1.0 * sd)
    assert math.isinf(far.runs_needed) and far.unlimited == pytest.approx(0.17, abs=0.01) and far.beyond
    assert power.unlimited_power(1.96, 1.0) == pytest.approx(0.5, abs=0.001)
    assert power.unlimited_power(0.0, 1.0) == pytest.approx(0.05)


@pytest.mark.parametrize(("runs", "low", "high", "carried"), [
    (35, 16, 332, 40), (35, 30, 50, 35), (7, 3, 60, 7), (149, 60, 900, 100), (math.inf, 3, math.inf, math.inf)])
def test_the_runs_needed_keep_what_their_range_carries(runs: float, low: float, high: float, carried: float) -> None:
    assert power.carried(runs, low, high) == carried
