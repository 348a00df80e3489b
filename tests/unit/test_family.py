"""Holm's family-wise correction of the Multi-Bootstrap p-values, and the family-wise verdicts it gives."""

import math

import numpy as np
import pytest

from bertlab.report import family, stats
from bertlab.report.multiboot import MultiContrast


def test_holm_adjusts_in_step_down_order() -> None:
    # sorted 0.01, 0.02, 0.03, 0.04 (m = 4): 4 x 0.01, max(0.04, 3 x 0.02), max(0.06, 2 x 0.03), max(0.06, 0.04)
    got = family.holm([0.04, 0.01, math.nan, 0.03, 0.02])
    assert got[[1, 4, 3, 0]] == pytest.approx([0.04, 0.06, 0.06, 0.06]) and math.isnan(got[2])
    assert family.holm([0.5, 0.4]) == pytest.approx([0.8, 0.8])  # 2 x 0.4, then max(0.8, 0.5)
    assert family.holm([0.9, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert family.holm([]).size == 0


def contrast(verdict: str, p: float) -> MultiContrast:
    nan = math.nan
    return MultiContrast(1.0, 0.5, 1.5, verdict, 100, 3, 3, True, nan, p, nan, (), (), nan, nan, np.empty(0))


def test_familywise_verdicts() -> None:
    """Three resolved at p 0.001, 0.02, 0.03 and one unresolved at 0.3: Holm keeps 0.004 and drops 0.06, 0.06."""
    cs = [contrast(stats.REPRODUCED, 0.02), contrast(stats.REPRODUCED, 0.001), contrast(stats.CONTRADICTED, 0.03),
          contrast(stats.UNRESOLVED, 0.3), contrast(stats.NOT_MEASURED, math.nan)]
    assert family.familywise(cs) == [stats.UNRESOLVED, stats.REPRODUCED, stats.UNRESOLVED, stats.UNRESOLVED,
                                     stats.NOT_MEASURED]
    assert family.familywise(cs, alpha=0.1) == [c.verdict for c in cs]  # 0.06 <= 0.1: all kept
    assert family.familywise(cs[:1]) == [stats.REPRODUCED]  # a family of one is the claim itself
