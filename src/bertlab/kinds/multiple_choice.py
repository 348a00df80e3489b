"""Multiple choice (SWAG): a context and N candidate endings; the label is the right ending's index.

Data: `text_columns` are the context's column then one text column per ending (`num_labels` = N endings), the
label an integer in 0 .. N-1. Training: each (context, ending) pair is encoded as a sentence pair and scored by a
one-output linear head on its sentence vector; a softmax over a row's N scores, cross-entropy on it (BERT's SWAG
head). Items: one per example (`pred`, `label`); metric `accuracy`. Floor: the majority ending of the training
labels (SWAG's are near uniform: about 1/N of the dev examples).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bertlab.kinds.base import MODEL_INPUTS, Batch, Encoded, Encoding, TaskSpec
from bertlab.kinds.classification import Classification, GlueEvaluator

if TYPE_CHECKING:
    import datasets
    from torch import Tensor, nn


class MultipleChoice(Classification):
    """A context and N endings: a score per (context, ending) pair, cross-entropy over a row's N scores."""

    name = "multiple_choice"
    metrics = ("accuracy",)
    probe = None

    def encode(self, task: TaskSpec, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        """A row per example holding its N pairs' ids and type ids (N lists each) and its label."""
        from bertlab.data.encoding import encode_pairs

        context, *endings = task.text_columns
        n = len(endings)
        pairs = encode_pairs(how.tokenizer, [c for c in ds[context] for _ in range(n)],
                             [e for row in zip(*(ds[c] for c in endings)) for e in row], how.lengths.max_seq_length)
        labels = [self.label(y) for y in ds[task.label_column]]
        rows = [{"input_ids": pairs["input_ids"][i * n:(i + 1) * n],
                 "token_type_ids": pairs["token_type_ids"][i * n:(i + 1) * n], "label": y, "index": i}
                for i, y in enumerate(labels)]
        return rows, GlueEvaluator(split, len(rows), task=task.name, labels=labels,
                                   train_labels=list(how.train_labels))

    def collate(self, rows: Sequence[Mapping[str, Any]], pad_id: int) -> Batch:
        """(B, N, S) model inputs, every pair padded to the batch's longest; `label` and `index` (B,)."""
        import torch

        from bertlab.data.encoding import pad_collate

        n = len(rows[0]["input_ids"])
        pairs = [{"input_ids": ids, "token_type_ids": types}
                 for row in rows for ids, types in zip(row["input_ids"], row["token_type_ids"], strict=True)]
        batch = {k: v.view(len(rows), n, -1) for k, v in pad_collate(pairs, pad_id).items()}
        return batch | {k: torch.tensor([row[k] for row in rows]) for k in ("label", "index") if k in rows[0]}

    def head(self, size: int, num_labels: int, dropout: float) -> nn.Module:
        from bertlab.modeling.heads import LinearHead

        return LinearHead(size, 1, dropout)

    def forward(self, represent: Callable[[Batch], Tensor], head: nn.Module, batch: Batch) -> Tensor:
        """(B, N) scores: the pairs run through the encoder as B x N inputs."""
        b, n = batch["input_ids"].shape[:2]
        return head(represent({k: batch[k].flatten(0, 1) for k in MODEL_INPUTS})).view(b, n)


KIND = MultipleChoice()
