"""Classification (GLUE): sentences or pairs, a class per input, read from the sentence vector.

Data: text columns (one or two) and integer class ids in 0 .. num_labels - 1. Training: cross-entropy on the linear
head's logits. Items: one per example (`pred`, `label`); metrics `accuracy`, `f1` (positive class 1), `matthews`
(`bertlab.metrics.glue_metrics` says which task reports which). Floor: the majority class of the training labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from bertlab.kinds.base import (
    FLOOR_SEED, Batch, Columns, Encoded, Encoding, Evaluation, Evaluator, Floor, Kind, TaskSpec, count_metric,
)

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa
    from torch import Tensor


@dataclass
class GlueEvaluator(Evaluator):
    """Classification (class ids) or regression (scores) of sentences or pairs; one item per example."""

    task: str = ""
    kind: str = "classification"
    labels: list = field(default_factory=list)
    train_labels: list = field(default_factory=list)  # of the examples the model trained on: the floor's

    def evaluate(self, predictions: list) -> Evaluation:
        from bertlab.metrics import glue_metrics

        return Evaluation(glue_metrics(self.task, predictions, self.labels),
                          {"pred": list(predictions), "label": list(self.labels)})

    def floor(self) -> Floor:
        y = np.asarray(self.train_labels, dtype=np.float64)
        if self.kind == "regression":
            mean, sd = float(y.mean()), float(y.std())
            preds = np.random.default_rng(FLOOR_SEED).normal(mean, sd, self.rows).tolist()
            return Floor(f"random normal predictions (the training labels' mean {mean:.4g} and sd {sd:.4g}, "
                         f"seed {FLOOR_SEED})", preds)
        majority = int(np.bincount(y.astype(np.int64)).argmax())  # ties: the lowest class id
        return Floor(f"majority class of the training labels ({majority})", [majority] * self.rows)


class Classification(Kind):
    """Sentences or pairs, a class per input: cross-entropy on the sentence vector's logits."""

    name = "classification"
    metrics = ("accuracy", "f1", "matthews")
    probe = "sentence"

    def class_ids(self, labels: pa.ChunkedArray) -> pa.ChunkedArray | None:
        return labels

    def label(self, value: Any) -> int | float:
        return int(value)

    def encode(self, task: TaskSpec, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        from bertlab.data.encoding import encode_pairs

        cols = task.text_columns
        enc = encode_pairs(how.tokenizer, ds[cols[0]], ds[cols[1]] if len(cols) > 1 else None,
                           how.lengths.max_seq_length)
        labels = [self.label(y) for y in ds[task.label_column]]
        rows = [
            {"input_ids": ids, "token_type_ids": types, "label": y, "index": i}
            for i, (ids, types, y) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], labels))
        ]
        return rows, GlueEvaluator(split, len(rows), task=task.name, kind=task.kind, labels=labels,
                                   train_labels=list(how.train_labels))

    def loss(self, logits: Tensor, batch: Batch) -> Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(logits, batch["label"])

    def predictions(self, logits: Tensor, batch: Batch) -> list:
        return logits.argmax(-1).tolist()

    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        pred, label = np.asarray(cols["pred"]), np.asarray(cols["label"])
        if metric == "accuracy":
            return (pred == label)[:, None].astype(np.float64)
        pos, true = pred == 1, label == 1
        return np.stack([pos & true, pos & ~true, ~pos & true], axis=1).astype(np.float64)  # tp, fp, fn

    def finish(self, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
        if metric == "accuracy":
            return 100.0 * sums[0] / m
        return count_metric(metric, *sums, m)


KIND = Classification()
