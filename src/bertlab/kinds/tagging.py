"""Tagging (CoNLL-2003 NER): a tag per word, on its first sub-token.

Data: a column of word lists and one of integer tag lists (tags in 0 .. num_labels - 1). Training: token-level
cross-entropy over the labelled tokens. Items: one per sentence (`tp`, `fp`, `fn`: entities as seqeval's conlleval
mode extracts them, so micro scores from their sums are `bertlab.metrics.entity_f1`'s); metrics `f1`, `precision`,
`recall`. Floor: all "O".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bertlab.kinds.base import (
    Batch, Columns, Encoded, Encoding, Evaluation, Evaluator, Floor, Kind, TaskSpec, count_metric, is_integer,
    is_list_of, is_text,
)

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa
    from torch import Tensor


@dataclass
class TaggingEvaluator(Evaluator):
    """Tag ids per token -> each word's tag (its first sub-token's), entity-level scores; one item per sentence."""

    word_ids: list[list[int | None]] = field(default_factory=list)
    gold: list[list[str]] = field(default_factory=list)
    label_names: tuple[str, ...] = ()

    @property
    def outside(self) -> int:
        return self.label_names.index("O") if "O" in self.label_names else 0

    def evaluate(self, predictions: list) -> Evaluation:
        from bertlab.data.ner import word_predictions
        from bertlab.metrics import entity_f1

        pred = [
            [self.label_names[t] for t in word_predictions(p, w, len(g), outside_id=self.outside)]
            for p, w, g in zip(predictions, self.word_ids, self.gold, strict=True)
        ]
        counts = np.array([entity_counts(g, p) for g, p in zip(self.gold, pred)], dtype=np.int64).reshape(-1, 3)
        columns = {k: counts[:, i].tolist() for i, k in enumerate(("tp", "fp", "fn"))}
        return Evaluation(entity_f1(self.gold, pred), columns)

    def floor(self) -> Floor:
        return Floor('all "O" (no entity predicted)', [[self.outside] * len(w) for w in self.word_ids])


def entity_counts(gold: list[str], pred: list[str]) -> tuple[int, int, int]:
    """True positives, false positives and false negatives of one sentence's entities (type and both boundaries
    must match), extracted as seqeval does: summed over sentences they give its micro precision, recall and F1."""
    from seqeval.metrics.sequence_labeling import get_entities

    g, p = set(get_entities(list(gold))), set(get_entities(list(pred)))
    tp = len(g & p)
    return tp, len(p) - tp, len(g) - tp


class Tagging(Kind):
    """A tag per word, on its first sub-token: token-level cross-entropy over the labelled tokens."""

    name = "tagging"
    metrics = ("f1", "precision", "recall")
    holds = ("lists of words", "lists of integer tags")
    sentence = False
    probe = "token"

    def text_type(self, kind: pa.DataType) -> bool:
        return is_list_of(kind, is_text)

    def label_type(self, kind: pa.DataType) -> bool:
        return is_list_of(kind, is_integer)

    def class_ids(self, labels: pa.ChunkedArray) -> pa.ChunkedArray | None:
        import pyarrow as pa

        return pa.chunked_array([c.flatten() for c in labels.chunks], type=labels.type.value_type)

    def lines(self, task: TaskSpec, split: datasets.Dataset) -> Iterator[str]:
        """A sentence's words joined by spaces."""
        for words in split[task.text_columns[0]]:
            if words:
                yield " ".join(words)

    def encode(self, task: TaskSpec, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        from bertlab.data.ner import encode_words

        words, tags = [list(w) for w in ds[task.text_columns[0]]], [list(t) for t in ds[task.label_column]]
        enc = encode_words(how.tokenizer, words, tags, how.lengths.max_seq_length)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "label_ids": labels, "index": i}
            for i, (ids, types, labels) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], enc["label_ids"]))
        ]
        names = task.label_names or tuple(str(i) for i in range(task.num_labels))
        gold = [[names[t] for t in sentence] for sentence in tags]
        return rows, TaggingEvaluator(split, len(rows), word_ids=enc["word_ids"], gold=gold, label_names=names)

    def loss(self, logits: Tensor, batch: Batch) -> Tensor:
        import torch.nn.functional as F

        from bertlab.data.vocab import IGNORE_INDEX

        labels = batch["label_ids"]  # the mean over labelled tokens (0 when there are none), without a host sync
        total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
        return total / (labels != IGNORE_INDEX).sum().clamp(min=1)

    def predictions(self, logits: Tensor, batch: Batch) -> list:
        return [p[:n] for p, n in zip(logits.argmax(-1).tolist(), batch["attention_mask"].sum(1).tolist())]

    def item_count(self, metric: str, cols: Columns) -> int:
        return len(cols["tp"])

    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        return np.stack([np.asarray(cols[c], dtype=np.float64) for c in ("tp", "fp", "fn")], axis=1)

    def finish(self, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
        return count_metric(metric, *sums, m)


KIND = Tagging()
