"""Verdicts that respect the noise: paired-bootstrap contrasts of per-item scores across items and seeds.

Method: each draw resamples the evaluation items with replacement (the same items for both sides) and each
side's runs (fine-tuning seeds) with replacement; a side's value is the mean over its drawn runs of the
corpus-level metric recomputed on the drawn items, and the draw's value is A - B. The percentile interval of
the draws (95% by default) bounds the difference. Verdict on the paper's claim "A is better than B", on its direction:
reproduced (the interval excludes 0 in the better direction), contradicted (it excludes 0 the other way),
unresolved at this scale (it includes 0), not measured (a side has no runs, or a value is not finite). And on its size,
where the paper gives its own A - B (`size_of`): the paper's size holds (the interval admits it) or is ruled out (it
lies outside): "reproduced; the paper's size ruled out" is the right direction at a size the paper's is not.

Metrics are `bertlab.metrics`' (0-100; perplexity raw), rebuilt from per-item columns: count metrics from
summed per-item counts (one matrix product scores every draw), correlations on the drawn pairs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from bertlab.kinds import KINDS
from bertlab.kinds.base import Scored
from bertlab.report.tinterval import run_part, t_interval

REPRODUCED, CONTRADICTED = "reproduced", "contradicted"
UNRESOLVED, NOT_MEASURED = "unresolved at this scale", "not measured"
BEYOND = "beyond this scale"  # unresolved, and no number of pretraining runs would resolve the paper's effect here
ABOVE_FLOOR, AT_FLOOR, BELOW_FLOOR = "above floor", "at floor", "below floor"
SIZE_HOLDS, SIZE_OUT = "the paper's size holds", "the paper's size ruled out"  # the interval admits its A - B, or not

Columns = Mapping[str, np.ndarray]


class HeldOut(Scored):
    """A pretrained model's held-out token predictions (`lm`): per-item `loss_sum` and `count`, scored as
    perplexity (pretraining writes them; no task is of this kind)."""

    name = "lm"
    metrics = ("ppl",)
    lower_is_better = ("ppl",)

    def item_count(self, metric: str, cols: Columns) -> int:
        return len(cols["count"])

    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        return np.stack([np.asarray(cols[c], dtype=np.float64) for c in ("loss_sum", "count")], axis=1)

    def finish(self, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.exp(sums[0] / sums[1])


SCORED: dict[str, Scored] = {**KINDS, "lm": HeldOut()}  # what a `kind` argument names: a task kind, or "lm"
METRICS = {name: kind.metrics for name, kind in SCORED.items()}
_CELLS_PER_CHUNK = 1 << 22  # draws x items resampled at once: bounds memory to a few tens of MB


@dataclass(frozen=True)
class Contrast:
    """A - B (each side the mean over its runs, on all items), its bootstrap interval, and the verdict."""

    estimate: float
    low: float
    high: float
    verdict: str
    n_items: int
    runs_a: int
    runs_b: int


def higher_is_better(metric: str) -> bool:
    """Whether more is better for `metric`: as the kind that scores it says (`Scored.lower_is_better`)."""
    return not any(metric in scored.lower_is_better for scored in SCORED.values())


def score(kind: str, metric: str, cols: Columns, idx: np.ndarray | None = None) -> float:
    """`metric` of one run on the items `idx` (all when None; repeats count), 0-100 (ppl raw); NaN if undefined."""
    check_metric(kind, metric)
    idx = np.arange(item_count(kind, metric, cols)) if idx is None else np.asarray(idx, dtype=np.intp)
    if SCORED[kind].correlated:
        pred, label = _item_stats(kind, metric, cols)[idx].T
        return float(_correlation(metric, pred, label))
    return float(_finish(kind, metric, _item_stats(kind, metric, cols)[idx].sum(axis=0), len(idx)))


def compare(
    a: Sequence[Columns], b: Sequence[Columns], kind: str, metric: str, *, draws: int = 2000, seed: int = 0,
    level: float = 0.95,
) -> Contrast:
    """Paired bootstrap of `metric`(A) - `metric`(B) over items and runs; the verdict on "A is better than B"."""
    check_metric(kind, metric)
    sizes = {item_count(kind, metric, cols) for cols in (*a, *b)}
    if len(sizes) > 1:
        raise ValueError(f"compare: the runs have different item counts {sorted(sizes)}")
    n = sizes.pop() if sizes else 0
    nan = float("nan")
    if not a or not b or n == 0:
        return Contrast(nan, nan, nan, NOT_MEASURED, n, len(a), len(b))
    mean_a, mean_b = (np.mean([score(kind, metric, cols) for cols in side]) for side in (a, b))
    estimate = float(mean_a - mean_b)
    if not np.isfinite(estimate):
        return Contrast(estimate, nan, nan, NOT_MEASURED, n, len(a), len(b))

    rng = np.random.default_rng(seed)
    runs_a, runs_b = (rng.integers(0, len(side), size=(draws, len(side))) for side in (a, b))
    per_run = bootstrap_scores(kind, metric, [*a, *b], n, draws, rng)  # (draws, runs of A then of B)
    rows = np.arange(draws)[:, None]
    diff = per_run[:, : len(a)][rows, runs_a].mean(axis=1) - per_run[:, len(a) :][rows, runs_b].mean(axis=1)
    low, high = (float(q) for q in np.quantile(diff, [(1 - level) / 2, (1 + level) / 2]))
    return Contrast(estimate, low, high, verdict_of(estimate, low, high, higher_is_better(metric)), n, len(a), len(b))


def interval(runs: Sequence[Columns], kind: str, metric: str, *, draws: int = 2000, seed: int = 0,
             level: float = 0.95) -> tuple[float, float]:
    """The bootstrap interval of one cell's value (the mean of `metric` over its runs), resampling items and runs
    as `compare` does; NaNs without runs or items."""
    check_metric(kind, metric)
    n = item_count(kind, metric, runs[0]) if runs else 0
    if n == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(runs), size=(draws, len(runs)))
    per_run = bootstrap_scores(kind, metric, runs, n, draws, rng)
    values = per_run[np.arange(draws)[:, None], picks].mean(axis=1)
    low, high = (float(q) for q in np.quantile(values, [(1 - level) / 2, (1 + level) / 2]))
    return low, high


def ratio_to_floor(runs: Sequence[Columns], floor: Columns, bound: float, *, draws: int = 2000, seed: int = 0,
                   level: float = 0.95) -> Contrast:
    """Held-out perplexity of an LM over its floor's on the same positions (`lm` columns): the mean over its
    pretraining runs of each run's ratio, with the bootstrap interval over held-out instances and, with several runs,
    the t interval (`bertlab.report.tinterval`) on the runs' spread and the instances' noise that every run shares
    (the mean covariance of distinct runs' resampled ratios); the verdict on "at most `bound` times the floor's":
    reproduced (interval below `bound`), contradicted (above it), unresolved (it straddles `bound`)."""
    n = item_count("lm", "ppl", runs[0])
    nan = float("nan")
    ratios = [score("lm", "ppl", run) / score("lm", "ppl", floor) for run in runs] if n else [nan]
    estimate = float(np.mean(ratios))
    if not np.isfinite(estimate):
        return Contrast(estimate, nan, nan, NOT_MEASURED, n, len(runs), 1)
    rng = np.random.default_rng(seed)
    both = bootstrap_scores("lm", "ppl", [*runs, floor], n, draws, rng)
    drawn = both[:, :-1] / both[:, -1:]  # (draws, runs): each run's ratio on each draw's instances
    if len(runs) > 1:
        cov = np.cov(drawn, rowvar=False)
        shared = max(0.0, float((cov.sum() - np.trace(cov)) / (cov.size - len(cov))))
        part, df = run_part(np.array(ratios), np.zeros(len(ratios)), paired=True)
        low, high = (float(v) for v in t_interval(estimate, shared, part, df, n, level)[:2])
    else:
        low, high = (float(q) for q in np.quantile(drawn[:, 0], [(1 - level) / 2, (1 + level) / 2]))
    return Contrast(estimate, low, high, verdict_of(bound - estimate, bound - high, bound - low, True), n,
                    len(runs), 1)


def floor_status(
    runs: Sequence[Columns], floor: Columns, kind: str, metric: str, **kw: float
) -> tuple[str, Contrast]:
    """Whether the runs beat their floor: `compare(runs, [floor])`, its verdict read as above/at/below floor."""
    contrast = compare(runs, [floor], kind, metric, **kw)
    statuses = {REPRODUCED: ABOVE_FLOOR, CONTRADICTED: BELOW_FLOOR, UNRESOLVED: AT_FLOOR, NOT_MEASURED: NOT_MEASURED}
    return statuses[contrast.verdict], contrast


def against_paper(contrast: Contrast, paper: float | None) -> str | None:
    """Where the paper's own effect (its A - B) lies against our interval: "inside", "above" or "below" it; None when
    the paper gives no comparable number or nothing was measured. An unresolved interval that excludes the paper's
    effect still answers the question at this scale: the effect here is smaller than the paper's (or of the other
    sign)."""
    if paper is None or contrast.verdict == NOT_MEASURED or not np.isfinite([contrast.low, contrast.high]).all():
        return None
    return "above" if paper > contrast.high else "below" if paper < contrast.low else "inside"


def size_of(contrast: Contrast, paper: float | None) -> str | None:
    """The verdict on the paper's size: `SIZE_HOLDS` where the interval admits the paper's own A - B, `SIZE_OUT` where
    it lies outside; None where the paper gives no number or nothing was measured."""
    where = against_paper(contrast, paper)
    return None if where is None else SIZE_HOLDS if where == "inside" else SIZE_OUT


def label(contrast: Contrast, paper: float | None) -> str:
    """The verdict on direction and size in a few words, e.g. "reproduced; the paper's size ruled out"."""
    size = size_of(contrast, paper)
    return contrast.verdict + (f"; {size}" if size else "")


def reading(contrast: Contrast, paper: float | None, compressed: bool = False, unlimited: float | None = None) -> str:
    """`label` with what the interval says of the paper's effect, e.g. "unresolved at this scale; the paper's size
    ruled out: its +3.5 is above the interval" or "...; the paper's size holds: the interval admits its +3.5";
    `unlimited`: the power with unlimited pretraining runs a side (beyond this scale); `compressed`: a side is at (or
    below) its floor, where differences shrink."""
    where = against_paper(contrast, paper)
    text = label(contrast, paper)
    if where == "inside":
        text += f": the interval admits its {paper:+.1f}"
    elif where is not None:
        text += f": its {paper:+.1f} is {where} the interval"
    if contrast.verdict == BEYOND and unlimited is not None:
        text += (f" (with unlimited pretraining runs a side, {unlimited:.0%} power to detect it: the dev items' noise "
                 "alone hides it)")
    if compressed and contrast.verdict != NOT_MEASURED:
        text += "; a side is at its floor, where effects are compressed"
    return text


def summarize(contrasts: Sequence[Contrast], papers: Sequence[float | None] | None = None, why_unmeasured: str = ""
              ) -> str:
    """One line of verdict counts, e.g. "3 reproduced, 1 contradicted, 10 unresolved at this scale of 14 pairs", and
    with the paper's effects (`papers`, one a contrast) how many of the resolved hold the paper's size;
    `why_unmeasured` goes in brackets after the not measured count."""
    counts = Counter(c.verdict for c in contrasts)
    parts = [f"{counts[v]} {v}" for v in (REPRODUCED, CONTRADICTED, UNRESOLVED)]
    parts += [f"{counts[v]} {v}" + (f" ({why_unmeasured})" if v == NOT_MEASURED and why_unmeasured else "")
              for v in (BEYOND, NOT_MEASURED) if counts[v]]
    text = f"{', '.join(parts)} of {len(contrasts)} pair{'' if len(contrasts) == 1 else 's'}"
    sizes = Counter(size_of(c, p) for c, p in zip(contrasts, papers or ()) if c.verdict in (REPRODUCED, CONTRADICTED))
    if sizes[SIZE_HOLDS] or sizes[SIZE_OUT]:
        text += (f" (of the {sizes[SIZE_HOLDS] + sizes[SIZE_OUT]} resolved beside the paper's own A - B: "
                 f"{sizes[SIZE_HOLDS]} at its size, {sizes[SIZE_OUT]} ruling it out)")
    return text


def verdict_of(estimate: float, low: float, high: float, higher: bool) -> str:
    if not np.isfinite([estimate, low, high]).all():
        return NOT_MEASURED
    if low > 0:
        return REPRODUCED if higher else CONTRADICTED
    if high < 0:
        return CONTRADICTED if higher else REPRODUCED
    return UNRESOLVED


def check_metric(kind: str, metric: str) -> None:
    if metric not in METRICS.get(kind, ()):
        raise ValueError(f"unknown kind/metric {kind!r}/{metric!r}; known: {METRICS}")


def item_count(kind: str, metric: str, cols: Columns) -> int:
    return SCORED[kind].item_count(metric, cols)


def _item_stats(kind: str, metric: str, cols: Columns) -> np.ndarray:
    """Per-item counts (n, k) whose sums over any items determine the metric on those items."""
    return SCORED[kind].item_stats(metric, cols)


def _finish(kind: str, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
    """The metric from `_item_stats` summed over `m` items (last axis: the k sums; any leading axes)."""
    return SCORED[kind].finish(metric, np.moveaxis(sums, -1, 0), m)


def _correlation(metric: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson or Spearman (average ranks for ties) along the last axis, 0-100; NaN for a constant side."""
    constant = (np.ptp(x, axis=-1) == 0) | (np.ptp(y, axis=-1) == 0)
    if metric == "spearman":
        x, y = rankdata(x, axis=-1), rankdata(y, axis=-1)
    x, y = x - x.mean(axis=-1, keepdims=True), y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))
    return np.where(constant, np.nan, 100.0 * (x * y).sum(axis=-1) / np.where(constant, 1.0, den))


def bootstrap_scores(
    kind: str, metric: str, runs: Sequence[Columns], n: int, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """Each run's metric on `draws` resamples of the n items (the same resamples for every run): (draws, runs)."""
    chunk = max(1, _CELLS_PER_CHUNK // n)
    correlated = SCORED[kind].correlated
    if correlated:
        pairs = [tuple(_item_stats(kind, metric, cols).T) for cols in runs]
    else:
        stats = np.stack([_item_stats(kind, metric, cols) for cols in runs], axis=1)  # (n, runs, k)
    out = []
    for start in range(0, draws, chunk):
        size = min(chunk, draws - start)
        idx = rng.integers(0, n, size=(size, n))
        if correlated:
            out.append(np.stack([_correlation(metric, pred[idx], label[idx]) for pred, label in pairs], axis=1))
        else:  # how often each item is drawn, times its counts: every run's sums in one product
            counts = np.bincount((idx + n * np.arange(size)[:, None]).ravel(), minlength=size * n)
            sums = counts.reshape(size, n).astype(np.float64) @ stats.reshape(n, -1)
            out.append(_finish(kind, metric, sums.reshape(size, len(runs), -1), n))
    return np.concatenate(out)
