"""What a task kind is (`Kind`), and what every kind shares: its encoding settings, its evaluator's interface and the
count metrics.

A kind's module says everything of it, from the data's columns to the report's per-item scores. The stages that
only read a kind's declaration (`configs`, `download`, `report`) import no torch: what trains (rows, batches,
head, loss, predictions) imports torch, the tokenizers and the model in its own methods.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa
    from tokenizers import Tokenizer
    from torch import Tensor, nn

log = logging.getLogger(__name__)
Rows = list[dict[str, Any]]
Batch = dict[str, "Tensor"]
Columns = Mapping[str, np.ndarray]
FLOOR_SEED = 0
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


class TaskSpec(Protocol):
    """What a kind reads of a task (`bertlab.data.tasks.Task`)."""

    name: str
    kind: str
    text_columns: tuple[str, ...]
    label_column: str
    num_labels: int
    label_names: tuple[str, ...] | None


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


@dataclass
class Evaluation:
    metrics: dict[str, float]  # the split's official metrics, 0-100
    columns: dict[str, list]  # per item, the columns that recompute them


@dataclass
class Floor:
    name: str
    predictions: list  # one per row, shaped as the model's


@dataclass
class Evaluator(ABC):
    split: str
    rows: int  # rows of the eval dataset (SQuAD: windows)

    @abstractmethod
    def evaluate(self, predictions: list) -> Evaluation:
        """Metrics and per-item columns from one prediction per row, in dataset order."""

    @abstractmethod
    def floor(self) -> Floor:
        """The floor's predictions, one per row."""


Encoded = tuple[Rows, Evaluator | None]  # a split's model rows and the evaluator of predictions on them
ArrowCheck = Callable[["pa.DataType"], bool]


def is_text(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def is_integer(kind: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind)


def is_list_of(kind: pa.DataType, element: ArrowCheck) -> bool:
    import pyarrow as pa

    return (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and element(kind.value_type)


class Scored(ABC):
    """How the report scores a run's per-item columns (`bertlab.report.stats`): counts per item whose sums over any
    items give a metric, or (`correlated`) a correlation of the items' `pred` and `label`."""

    name: str
    metrics: tuple[str, ...]  # the metrics, 0-100 (perplexity raw), as its evaluator reports them
    lower_is_better: tuple[str, ...] = ()  # its metrics where less is better (an error, a perplexity): the report's
    correlated = False                     # verdicts read each metric's direction here

    def item_count(self, metric: str, cols: Columns) -> int:
        return len(cols["pred"])

    @abstractmethod
    def item_stats(self, metric: str, cols: Columns) -> np.ndarray:
        """Per-item values (n, k): counts whose sums over any items determine `metric` on those items (`correlated`:
        the pair of `pred` and `label`)."""

    def finish(self, metric: str, sums: np.ndarray, m: int) -> np.ndarray:
        """`metric` from `item_stats` summed over `m` items (first axis: the k sums; any axes after it)."""
        raise TypeError(f"{self.name}: a correlation is not a function of summed per-item counts")


class Kind(Scored):
    """What one task kind does, from a dataset split to a prediction per row and the report's per-item scores."""

    holds: tuple[str, str] = ("text", "integer labels")  # what its text columns and its label column hold
    sentence = True  # the head reads one vector per input (the pooled one, or the BiLSTM's), not per-token states
    windows = False  # inputs are windows over a context, with their own length and size settings (`squad_*`)
    probe: str | None = None  # what a linear probe reads: a vector per "sentence" or per "token"; None: no probe

    # -- the data -----------------------------------------------------------------------------------------------

    def text_type(self, kind: pa.DataType) -> bool:
        """Whether a text column's arrow type is what this kind reads."""
        return is_text(kind)

    def label_type(self, kind: pa.DataType) -> bool:
        return is_integer(kind)

    def class_ids(self, labels: pa.ChunkedArray) -> pa.ChunkedArray | None:
        """The label column's class ids, which must lie in 0 .. num_labels - 1; None: its labels are not class ids."""
        return None

    def lines(self, task: TaskSpec, split: datasets.Dataset) -> Iterator[str]:
        """A training split's unlabelled text, a line per text column of each row (whitespace collapsed)."""
        for row in split.select_columns(list(task.text_columns)):
            for text in row.values():
                if text := " ".join(str(text).split()):
                    yield text

    # -- training -----------------------------------------------------------------------------------------------

    @abstractmethod
    def encode(self, task: TaskSpec, ds: datasets.Dataset, split: str, train: bool, how: Encoding) -> Encoded:
        """Model rows of one split (with targets when `train`) and the evaluator of predictions on them (SQuAD's
        training windows have none: their targets are token positions, not answers)."""

    def collate(self, rows: Sequence[Mapping[str, Any]], pad_id: int) -> Batch:
        """A batch of rows (`bertlab.data.encoding.pad_collate`)."""
        from bertlab.data.encoding import pad_collate

        return pad_collate(rows, pad_id)

    def head(self, size: int, num_labels: int, dropout: float) -> nn.Module:
        from bertlab.modeling.heads import LinearHead

        return LinearHead(size, num_labels, dropout)

    def forward(self, represent: Callable[[Batch], Tensor], head: nn.Module, batch: Batch) -> Any:
        """The head's output on a batch; `represent` gives what it reads (a vector per input when `sentence`, else
        per-token states)."""
        return head(represent(batch))

    @abstractmethod
    def loss(self, logits: Any, batch: Batch) -> Tensor:
        """The training loss of a batch."""

    @abstractmethod
    def predictions(self, logits: Any, batch: Batch) -> list:
        """One prediction per row of a batch, as the kind's evaluator reads it."""


def count_metric(metric: str, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, m: int) -> np.ndarray:
    """Binary or entity micro `f1`, `precision`, `recall`, or `matthews`, 0-100, from summed counts over `m` items;
    0 when undefined (seqeval's zero_division=0, and GLUE's matthews of a constant prediction or label)."""
    if metric == "matthews":
        tn = m - tp - fp - fn
        num, den = tp * tn - fp * fn, np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    else:
        num, den = {"f1": (2 * tp, 2 * tp + fp + fn), "precision": (tp, tp + fp), "recall": (tp, tp + fn)}[metric]
    return 100.0 * np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
