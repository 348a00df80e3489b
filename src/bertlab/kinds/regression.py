"""Regression (STS-B): pairs scored on a scale, one output read from the sentence vector.

Data: text columns and numeric labels. Training: mean squared error. Items: one per example (`pred`, `label`);
metrics `pearson`, `spearman`, scored by the correlation over the items. Floor: random normal predictions with the
training labels' mean and (population) sd, seed 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from bertlab.kinds.base import Batch, Columns, is_integer
from bertlab.kinds.classification import Classification

if TYPE_CHECKING:
    import pyarrow as pa
    from torch import Tensor, nn


class Regression(Classification):
    """Pairs scored on a scale: one output, mean squared error."""

    name = "regression"
    metrics = ("pearson", "spearman")
    holds = ("text", "numbers")
    probe = None
    correlated = True

    def label_type(self, kind: pa.DataType) -> bool:
        import pyarrow as pa

        return is_integer(kind) or pa.types.is_floating(kind)

    def class_ids(self, labels: pa.ChunkedArray) -> pa.ChunkedArray | None:
        return None

    def label(self, value: Any) -> int | float:
        return float(value)

    def forward(self, represent: Callable[[Batch], Tensor], head: nn.Module, batch: Batch) -> Tensor:
        return head(represent(batch)).squeeze(-1)

    def loss(self, logits: Tensor, batch: Batch) -> Tensor:
        import torch.nn.functional as F

        return F.mse_loss(logits, batch["label"].float())

    def predictions(self, logits: Tensor, batch: Batch) -> list:
        return logits.float().tolist()

    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        return np.stack([np.asarray(cols[c], dtype=np.float64) for c in ("pred", "label")], axis=1)


KIND = Regression()
