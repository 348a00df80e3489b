"""Model inputs of text: a tokenizer's settings for a call, sentence(-pair) encoding, and batches padded to their
longest row."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertlab.data.vocab import IGNORE_INDEX


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
