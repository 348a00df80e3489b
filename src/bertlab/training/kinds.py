"""Task kinds, one class each, as `bertlab.evaluate` has one evaluator per kind: how a kind's split becomes model rows
and an evaluator, which head it gets and what that head reads, its loss, and its prediction per row.

`KINDS[task.kind]` is the one place that tells the kinds apart (their names: `settings.CHOICES["task.kind"]`). Rows
hold `input_ids`, `token_type_ids`, the kind's targets (`label`; `start_positions` and `end_positions`; `label_ids`)
and `index`, the row's position in its split.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import datasets
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import Tensor, nn

from bertlab.data.ner import encode_words
from bertlab.data.squad import encode_squad
from bertlab.data.tasks import Task, encode_pairs
from bertlab.data.vocab import IGNORE_INDEX
from bertlab.evaluate import Evaluator, GlueEvaluator, SquadEvaluator, TaggingEvaluator
from bertlab.modeling.heads import LinearHead, SpanHead

log = logging.getLogger(__name__)
Rows = list[dict[str, Any]]
Encoded = tuple[Rows, Evaluator | None]  # a split's model rows and the evaluator of predictions on them


@dataclass
class Lengths:
    """Sequence settings in effect (capped by the encoder's position embeddings)."""

    max_seq_length: int
    doc_stride: int = 128
    max_query_length: int = 64

    @classmethod
    def capped(cls, max_seq_length: int, doc_stride: int, max_query_length: int, positions: int) -> Lengths:
        """The wanted lengths within `positions`; the SQuAD stride and question length at most half a window."""
        max_len = min(int(max_seq_length), positions)
        if max_len < max_seq_length:
            log.warning("max_seq_length %d > the encoder's %d positions: using %d", max_seq_length, positions, max_len)
        return cls(max_len, min(int(doc_stride), max_len // 2), min(int(max_query_length), (max_len - 3) // 2))


@dataclass
class Encoding:
    """How a task's splits are encoded and scored."""

    tokenizer: Tokenizer
    lengths: Lengths
    n_best_size: int = 20  # SQuAD's answer search
    max_answer_length: int = 30
    train_labels: list = field(default_factory=list)  # GLUE: the labels the model trains on, which set the floor


class Kind(ABC):
    """What one task kind does, from a dataset split to a prediction per row."""

    sentence = True  # the head reads one vector per input (the pooled one, or the BiLSTM's), not per-token states
    windows = False  # inputs are windows over a context, with their own length and size settings (`squad_*`)

    @abstractmethod
    def encode(self, task: Task, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        """Model rows of one split (with targets when `train`) and the evaluator of predictions on them (SQuAD's
        training windows have none: their targets are token positions, not answers)."""

    def head(self, size: int, num_labels: int, dropout: float) -> nn.Module:
        return LinearHead(size, num_labels, dropout)

    def logits(self, head: nn.Module, x: Tensor, attention_mask: Tensor) -> Any:
        """The head's output on `x` (sentence vectors, or token states when not `sentence`)."""
        return head(x)

    @abstractmethod
    def loss(self, logits: Any, batch: dict[str, Tensor]) -> Tensor:
        """The training loss of a batch."""

    @abstractmethod
    def predictions(self, logits: Any, lengths: list[int]) -> list:
        """One prediction per row of a batch (rows of `lengths` real tokens), as the kind's evaluator reads it."""


class Classification(Kind):
    """Sentences or pairs (GLUE), a class per input: cross-entropy on the sentence vector's logits."""

    def label(self, value: Any) -> int | float:
        return int(value)

    def encode(self, task: Task, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
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

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.cross_entropy(logits, batch["label"])

    def predictions(self, logits: Tensor, lengths: list[int]) -> list:
        return logits.argmax(-1).tolist()


class Regression(Classification):
    """Pairs scored on a scale (STS-B): one output, mean squared error."""

    def label(self, value: Any) -> int | float:
        return float(value)

    def logits(self, head: nn.Module, x: Tensor, attention_mask: Tensor) -> Tensor:
        return head(x).squeeze(-1)

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return F.mse_loss(logits, batch["label"].float())

    def predictions(self, logits: Tensor, lengths: list[int]) -> list:
        return logits.float().tolist()


class Span(Kind):
    """Extractive question answering (SQuAD v1.1): start and end logits per token of windows over a context."""

    sentence = False
    windows = True

    def encode(self, task: Task, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        cols = task.text_columns
        questions, contexts = list(ds[cols[0]]), list(ds[cols[1]])
        answers = list(ds[task.label_column])
        lengths = how.lengths
        settings = dict(max_length=lengths.max_seq_length, doc_stride=lengths.doc_stride,
                        max_query_length=lengths.max_query_length)
        if train:  # first reference answer, as run_squad.py; unanswerable rows (none in v1.1) are skipped
            keep = [i for i, a in enumerate(answers) if a["text"]]
            feats = encode_squad(
                how.tokenizer, [questions[i] for i in keep], [contexts[i] for i in keep],
                [answers[i]["answer_start"][0] for i in keep], [answers[i]["text"][0] for i in keep], **settings,
            )
            rows = [
                {"input_ids": ids, "token_type_ids": types, "start_positions": s, "end_positions": e, "index": i}
                for i, (ids, types, s, e) in enumerate(zip(
                    feats["input_ids"], feats["token_type_ids"], feats["start_positions"], feats["end_positions"]))
            ]
            return rows, None
        feats = encode_squad(how.tokenizer, questions, contexts, **settings)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "index": i}
            for i, (ids, types) in enumerate(zip(feats["input_ids"], feats["token_type_ids"]))
        ]
        refs = [list(a["text"]) for a in answers]
        return rows, SquadEvaluator(split, len(rows), features=feats, contexts=contexts, answers=refs,
                                    n_best_size=how.n_best_size, max_answer_length=how.max_answer_length)

    def head(self, size: int, num_labels: int, dropout: float) -> nn.Module:
        return SpanHead(size)

    def logits(self, head: nn.Module, x: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        return head(x, attention_mask)

    def loss(self, logits: tuple[Tensor, Tensor], batch: dict[str, Tensor]) -> Tensor:
        start, end = logits
        return (F.cross_entropy(start, batch["start_positions"]) + F.cross_entropy(end, batch["end_positions"])) / 2

    def predictions(self, logits: tuple[Tensor, Tensor], lengths: list[int]) -> list:
        start, end = (x.float().cpu().numpy() for x in logits)
        return [(s[:n], e[:n]) for s, e, n in zip(start, end, lengths)]


class Tagging(Kind):
    """A tag per word (CoNLL-2003), on its first sub-token: token-level cross-entropy over the labelled tokens."""

    sentence = False

    def encode(self, task: Task, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        words, tags = [list(w) for w in ds[task.text_columns[0]]], [list(t) for t in ds[task.label_column]]
        enc = encode_words(how.tokenizer, words, tags, how.lengths.max_seq_length)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "label_ids": labels, "index": i}
            for i, (ids, types, labels) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], enc["label_ids"]))
        ]
        names = task.label_names or tuple(str(i) for i in range(task.num_labels))
        gold = [[names[t] for t in sentence] for sentence in tags]
        return rows, TaggingEvaluator(split, len(rows), word_ids=enc["word_ids"], gold=gold, label_names=names)

    def loss(self, logits: Tensor, batch: dict[str, Tensor]) -> Tensor:
        labels = batch["label_ids"]  # the mean over labelled tokens (0 when there are none), without a host sync
        total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")
        return total / (labels != IGNORE_INDEX).sum().clamp(min=1)

    def predictions(self, logits: Tensor, lengths: list[int]) -> list:
        return [p[:n] for p, n in zip(logits.argmax(-1).tolist(), lengths)]


KINDS: dict[str, Kind] = {"classification": Classification(), "regression": Regression(), "span": Span(),
                          "tagging": Tagging()}
