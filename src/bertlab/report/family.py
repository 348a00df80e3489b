"""Family-wise verdicts: Holm's step-down correction of the contrasts' bootstrap p-values within a family (a table).

Holm: with the m finite p-values sorted, p_(1) <= ... <= p_(m), the i-th adjusted p-value is
max_{j <= i} min(1, (m - j + 1) p_(j)); rejecting where it is <= alpha holds the family-wise error rate at alpha.
A contrast keeps its verdict (reproduced or contradicted) family-wise where its adjusted p-value is <= alpha, and
reads unresolved otherwise; one unresolved (or beyond this scale) keeps its verdict; one not measured (NaN p-value)
is not in the family and keeps its verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bertlab.report import stats
from bertlab.report.multiboot import MultiContrast


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values, in the given order (NaN stays NaN and does not count towards m)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def familywise(contrasts: Sequence[MultiContrast], alpha: float = 0.05) -> list[str]:
    """Each contrast's verdict read family-wise (Holm within `contrasts` at `alpha`)."""
    adjusted = holm([c.p_value for c in contrasts])
    kept = (stats.NOT_MEASURED, stats.UNRESOLVED, stats.BEYOND)
    return [c.verdict if c.verdict in kept or p <= alpha else stats.UNRESOLVED for c, p in zip(contrasts, adjusted)]
