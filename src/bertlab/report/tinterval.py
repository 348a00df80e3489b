"""The t interval for A - B over few pretraining runs (`bertlab.report.multiboot`, `stats.ratio_to_floor`): a
percentile bootstrap over 3 clusters cannot be as wide as a t-quantile on 2 degrees of freedom (the small-sample
problem of cluster bootstraps), so the interval is estimate -/+ t_{df} SE on two variance parts. The run part: the
run scores' variance of the mean (`run_part`), on few degrees of freedom; the item part: the dev items' noise that
every run shares (the Multi-Bootstrap's `item_var`), on n_items - 1. SE^2 is their sum; df is Welch-Satterthwaite's
over the two, with the run part read at its `DF_BOUND` upper confidence bound: the plug-in df is large exactly where
the run part is underestimated by chance, which drops coverage to 92% at 3 runs a side
(tests/unit/test_coverage.py). Every function is elementwise over numpy arrays, so a simulation reads thousands of
studies at once."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2
from scipy.stats import t as student

DF_BOUND = 0.8  # the run part's upper confidence bound that Satterthwaite's df reads (`satterthwaite`)

Values = np.ndarray | float


def run_part(a: np.ndarray, b: np.ndarray, paired: bool, shared: int = 0) -> tuple[float, float]:
    """The run scores' variance of A - B's mean over runs and its degrees of freedom: the paired margins' variance / R
    on R - 1; where the first `shared` (>= 2) runs of each side share their seeds, each side's variance / its runs
    less twice the shared runs' covariance's share (s cov / (R_A R_B)), on s - 1 (the paired one where all are
    shared); unpaired, each side's variance over its runs / its runs, summed, on Welch-Satterthwaite's; NaNs where a
    side has one run."""
    if paired or shared == len(a) == len(b):
        return (float(np.var(a - b, ddof=1) / len(a)), float(len(a) - 1)) if len(a) > 1 else (math.nan, math.nan)
    if min(len(a), len(b)) < 2:
        return math.nan, math.nan
    if shared >= 2:
        cov = float(np.cov(a[:shared], b[:shared], ddof=1)[0, 1])
        part = np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b) - 2 * shared * cov / (len(a) * len(b))
        return max(float(part), 0.0), float(shared - 1)
    parts = np.array([np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)])
    dfs = np.array([len(a) - 1, len(b) - 1])
    spread = float(np.sum(parts**2 / dfs))
    return float(parts.sum()), float(parts.sum() ** 2 / spread) if spread > 0 else math.inf


def satterthwaite(item_var: Values, part: Values, part_df: Values, n_items: Values) -> np.ndarray:
    """Welch-Satterthwaite's degrees of freedom of item_var (on n_items - 1) + part (on part_df), with the part read
    at its `DF_BOUND` upper confidence bound, part part_df / chi2_{1 - DF_BOUND}(part_df): the plug-in df is large
    exactly where the part is underestimated by chance, which drops coverage to 92% at 3 runs; elementwise."""
    item_var, part, part_df = (np.asarray(v, dtype=float) for v in (item_var, part, part_df))
    with np.errstate(divide="ignore", invalid="ignore"):
        upper = np.where(np.isfinite(part_df), part * part_df / chi2.ppf(1 - DF_BOUND, part_df), part)
        spread = item_var**2 / (np.asarray(n_items) - 1) + np.where(upper > 0, upper**2 / part_df, 0.0)
        return np.where(spread > 0, (item_var + upper) ** 2 / spread, np.inf)


def t_interval(estimate: Values, item_var: Values, part: Values, part_df: Values, n_items: Values,
               level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, SE, df): estimate -/+ t_{df, (1 + level) / 2} SE, SE^2 = item_var + part, df `satterthwaite`'s;
    elementwise, so a simulation can read thousands of studies at once."""
    se = np.sqrt(np.asarray(item_var, dtype=float) + part)
    df = satterthwaite(item_var, part, part_df, n_items)
    half = student.ppf((1 + level) / 2, df) * se
    return estimate - half, estimate + half, se, df


def t_p_value(estimate: Values, item_var: Values, part: Values, part_df: Values, n_items: Values) -> np.ndarray:
    """The two-sided p-value of "A - B = 0" on `t_interval`'s t: 1 where SE is 0 and the estimate too."""
    se = np.sqrt(np.asarray(item_var, dtype=float) + part)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, np.abs(estimate) / se, np.where(np.asarray(estimate) == 0, 0.0, np.inf))
    return np.minimum(1.0, 2 * student.sf(z, satterthwaite(item_var, part, part_df, n_items)))
