"""Fine-tuning task definitions (`conf/task/*.yaml`), sentence(-pair) encoding and batch padding."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertlab.data.vocab import IGNORE_INDEX
from bertlab.files import require
from bertlab.settings import CHOICES



@dataclass(frozen=True)
class Task:
    """One fine-tuning task, as in `conf/task/<name>.yaml`: `Task(**cfg)`.

    `num_labels` is the head's output size: classes (classification), 1 (regression), tags per token
    (tagging), 2 start/end logits per token (span). `metric` is the key, in the dict returned by the
    task's metric function in `bertlab.metrics`, of the headline number the paper's tables report.
    """

    name: str
    kind: str
    hub_id: str
    config: str
    text_columns: tuple[str, ...]
    label_column: str
    num_labels: int
    train_split: str
    eval_splits: tuple[str, ...]
    metric: str
    label_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in (kinds := CHOICES["task.kind"]):
            raise ValueError(f"task {self.name}: unknown kind {self.kind!r}; expected one of {kinds}")
        # Hydra/YAML give lists; keep the dataclass hashable and immutable.
        for key in ("text_columns", "eval_splits", "label_names"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, tuple(value))
        if self.label_names is not None and len(self.label_names) != self.num_labels:
            raise ValueError(f"task {self.name}: {len(self.label_names)} label_names but num_labels={self.num_labels}")


def missing_data(task_dir: Path) -> str | None:
    """Why the task downloaded to `task_dir` has no data (the download stage's `NO_DATA` note), or None if it has."""
    note = require(task_dir, "download") / "NO_DATA"
    return note.read_text().strip() if note.exists() else None


@contextmanager
def configured(
    tokenizer: Tokenizer, max_length: int | None = None, strategy: str = "longest_first"
) -> Iterator[Tokenizer]:
    """`tokenizer` without padding and truncated to `max_length` tokens (specials included) if given.

    Its own truncation and padding settings are restored on exit (not thread-safe; cheap, unlike a copy).
    """
    truncation, padding = tokenizer.truncation, tokenizer.padding
    tokenizer.no_padding()
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length, strategy=strategy)
    try:
        yield tokenizer
    finally:
        tokenizer.no_truncation()
        if truncation is not None:
            tokenizer.enable_truncation(**truncation)
        if padding is not None:
            tokenizer.enable_padding(**padding)


def encode_pairs(
    tokenizer: Tokenizer, texts_a: Sequence[str], texts_b: Sequence[str] | None, max_length: int
) -> dict[str, list[list[int]]]:
    """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` ids and type ids (0 for A, 1 for B), at most `max_length`.

    Over-long pairs lose tokens from the end of the longer side first (longest_first), as BERT does.
    """
    inputs = list(texts_a) if texts_b is None else list(zip(texts_a, texts_b, strict=True))
    with configured(tokenizer, max_length) as tok:
        encodings = tok.encode_batch(inputs)
    return {"input_ids": [e.ids for e in encodings], "token_type_ids": [e.type_ids for e in encodings]}


def pad_collate(examples: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Batch examples that hold only model inputs and targets, adding `attention_mask`.

    List fields are right-padded to the longest: `input_ids` with `pad_id`, `token_type_ids` with 0, any
    other (e.g. per-token `label_ids`) with -100. Scalar fields (`label`, `start_positions`, ...) are
    stacked: int64 for integers, float32 for floats (regression).
    """
    width = max(len(ex["input_ids"]) for ex in examples)
    batch: dict[str, torch.Tensor] = {}
    for key in examples[0]:
        values = [ex[key] for ex in examples]
        if np.ndim(values[0]) > 0:
            fill = {"input_ids": pad_id, "token_type_ids": 0}.get(key, IGNORE_INDEX)
            batch[key] = torch.tensor([[*map(int, v)] + [fill] * (width - len(v)) for v in values], dtype=torch.long)
        else:
            tensor = torch.tensor(values)
            batch[key] = tensor.float() if tensor.is_floating_point() else tensor.long()
    batch["attention_mask"] = torch.tensor(
        [[1] * len(ex["input_ids"]) + [0] * (width - len(ex["input_ids"])) for ex in examples], dtype=torch.long
    )
    return batch
