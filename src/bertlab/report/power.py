"""What a contrast's design can detect: its minimum detectable effect, and the pretraining runs a side an effect needs.

A two-sided test at level alpha detects a true effect delta with probability `power` once |delta| >= Z SE, Z =
z_{1-alpha/2} + z_power (2.80 at 5% and 80%; normal approximation): the minimum detectable effect (MDE) is Z SE, with
SE the contrast's (`MultiContrast.se`: its t interval's, or with one run a side the draws' SD). With n pretraining
runs a side SE(n)^2 = item_var + run_var / n
(`multiboot.MultiContrast`: run_var the between-run variance of one pair of runs' margin, item_var the dev items'
noise shared by every run, which more runs do not average away). An effect delta needs
n = run_var / (delta^2 / Z^2 - item_var) runs a side (the textbook 2 Z^2 sd^2 / delta^2 when item_var = 0 and
run_var = 2 sd^2), and no number of runs decides it at this scale when Z^2 item_var >= delta^2.
item_var is an estimate with Monte-Carlo error (`MultiContrast.item_var_mc`): the runs needed are also read at item_var
-/+ `SETTLED_Z` of it, and an effect whose reading changes between "some number of runs" and "none" within that band is
on the edge, stated as such.
A measured run_var is itself an estimate on `run_df` degrees of freedom (2 with three paired runs), so the runs
needed are also read at the ends of its `RUN_VAR_LEVEL` chi-square interval, run_var df / chi2_{(1 +/- level) / 2, df}
(x0.43 to x9.5 at 2 degrees of freedom and 80%): `runs_range` spans those and the Monte-Carlo band's, the figure's
own uncertainty, and the figure is rounded to what that range carries (`carried`: one significant figure where the
range spans more than a factor of 2, e.g. 35 with a range of 16 to 332 reads 40).
"Beyond this scale" is a number, not a rule firing at any ratio above 1: `unlimited`, the power to detect delta with
unlimited runs a side (SE^2 = item_var), Phi(|delta| / sqrt(item_var) - z_{1-alpha/2}) + Phi(-|delta| / sqrt(item_var)
- z_{1-alpha/2}); below `BEYOND_POWER` (a coin toss: the effect is inside the item noise's own interval) no number of
runs would resolve it. With one run a side item_var holds all the item noise, the runs' own luck on the items too, so
`unlimited` is a lower bound there and is not read as "beyond".
With one run a side the between-run variance is unmeasured: the MDE leaves it out (a lower bound), unless the caller
assumes one (e.g. a pilot's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2, norm

from bertlab.report.multiboot import SETTLED_Z, MultiContrast

UNMEASURED = "between-run variance unmeasured (one pretraining run a side): the MDE leaves it out"
ASSUMED = "between-run variance assumed, not measured (one pretraining run a side)"
RUN_VAR_LEVEL = 0.8  # the level of the interval of a measured between-run variance that `runs_range` reads
BEYOND_POWER = 0.5  # below this power with unlimited runs a side, no number of pretraining runs resolves an effect


@dataclass(frozen=True)
class Power:
    """A contrast's MDE, the runs a side its effect needs (inf: not decidable at this scale), and any caveat."""

    mde: float
    runs_needed: float | None  # None: no effect to size
    note: str = ""
    runs_band: tuple[float, float] | None = None  # the runs needed at item_var -/+ SETTLED_Z Monte-Carlo SDs
    runs_range: tuple[float, float] | None = None  # the runs needed over run_var's interval and the band (hi: inf)
    unlimited: float | None = None  # the power to detect the effect with unlimited runs a side (a lower bound: 1 run)
    unlimited_best: float | None = None  # ... at item_var's lower Monte-Carlo end: the most it could be

    @property
    def beyond(self) -> bool:
        """Whether no number of runs would resolve the effect: even at item_var's Monte-Carlo lower end, unlimited
        runs a side have less than `BEYOND_POWER` to detect it."""
        return self.unlimited_best is not None and self.unlimited_best < BEYOND_POWER

    @property
    def edge(self) -> bool:
        """Whether item_var's Monte-Carlo error spans both "some number of runs decides it" and "none does"."""
        return self.runs_band is not None and math.isinf(self.runs_band[0]) != math.isinf(self.runs_band[1])


def z_sum(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_{1 - alpha/2} + z_power: the MDE in SEs."""
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def mde(se: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest |A - B| detected with `power` at two-sided `alpha`: z_sum x the estimate's SE."""
    return z_sum(alpha, power) * se


def unlimited_power(delta: float, item_var: float, alpha: float = 0.05) -> float:
    """The power to detect `delta` at two-sided `alpha` with unlimited runs a side: only item_var is left."""
    if item_var <= 0:
        return 1.0 if delta else alpha
    shift, z = abs(delta) / math.sqrt(item_var), norm.ppf(1 - alpha / 2)
    return float(norm.cdf(shift - z) + norm.cdf(-shift - z))


def carried(runs: float, low: float, high: float) -> float:
    """`runs` rounded to what its range carries: one significant figure where high > 2 low, else as it is."""
    if math.isinf(runs) or high <= 2 * low or runs < 10:
        return runs
    step = 10 ** math.floor(math.log10(runs))
    return float(math.floor(runs / step + 0.5) * step)


def mde_at(runs: float, run_var: float, item_var: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The MDE with `runs` pretraining runs a side: z_sum sqrt(item_var + run_var / runs)."""
    return z_sum(alpha, power) * math.sqrt(item_var + run_var / runs)


def runs_needed(delta: float, run_var: float, item_var: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Pretraining runs a side for `delta` to be detected (at least 1); inf when item noise alone hides it."""
    room = delta**2 / z_sum(alpha, power) ** 2 - item_var
    if room <= 0:
        return math.inf
    return float(max(1, math.ceil(run_var / room)))


def run_var_interval(run_var: float, df: float, level: float = RUN_VAR_LEVEL) -> tuple[float, float]:
    """The `level` chi-square interval of a variance estimated as `run_var` on `df` degrees of freedom."""
    return tuple(float(run_var * df / chi2.ppf(q, df)) for q in ((1 + level) / 2, (1 - level) / 2))


def power_of(contrast: MultiContrast, effect: float | None = None, assumed_run_var: float | None = None,
             alpha: float = 0.05, power: float = 0.8) -> Power:
    """The MDE of `contrast`'s design and the runs a side `effect` (e.g. the paper's) needs. With one run a side the
    between-run variance is unmeasured: `assumed_run_var` stands in for it (added to the draws' variance), else the
    MDE leaves it out and the runs needed are not sized."""
    measured = np.isfinite(contrast.run_var)
    run_var = contrast.run_var if measured else assumed_run_var
    if measured or run_var is None:
        found = mde(contrast.se, alpha, power)
    else:
        found = z_sum(alpha, power) * math.sqrt(contrast.se**2 + run_var / min(contrast.runs_a, contrast.runs_b))
    note = "" if measured else UNMEASURED if run_var is None else ASSUMED
    if effect is None or run_var is None:
        return Power(found, None, note)
    needed = runs_needed(effect, run_var, contrast.item_var, alpha, power)
    spread = SETTLED_Z * contrast.item_var_mc
    band = None if not np.isfinite(spread) else tuple(
        runs_needed(effect, run_var, max(0.0, contrast.item_var + s), alpha, power) for s in (-spread, spread))
    span = None if not measured or not np.isfinite(contrast.run_df) or math.isinf(needed) else tuple(
        runs_needed(effect, v, contrast.item_var, alpha, power) for v in run_var_interval(run_var, contrast.run_df))
    ends = [needed, *(span or ()), *(band or ())]
    spread_of = (min(ends), max(ends)) if span or (band and band[0] != band[1]) else None
    if spread_of is not None and not math.isinf(needed):
        needed = carried(needed, *spread_of)
    best = max(0.0, contrast.item_var - (spread if np.isfinite(spread) else 0.0))
    return Power(found, needed, note, band, spread_of if not math.isinf(needed) else None,
                 unlimited_power(effect, contrast.item_var, alpha), unlimited_power(effect, best, alpha))
