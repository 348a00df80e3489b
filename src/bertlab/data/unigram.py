"""The unigram floor of held-out language modelling: add-one-smoothed training token counts, scored on exactly the
positions a model is scored on (the `mlm_labels` of the held-out batches: fixed masks, or next tokens for LTR)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from bertlab.data.instances import Instances
from bertlab.data.vocab import IGNORE_INDEX, PAD_ID

FLOOR_NAME = "unigram (add-one smoothed training counts) on the same positions"


def token_counts(instances: Instances, vocab_size: int, pad_id: int = PAD_ID) -> np.ndarray:
    """How often each token id occurs in `instances` (padding excluded): the training text as a model reads it."""
    ids = np.asarray(instances.input_ids).astype(np.int64).ravel()
    return np.bincount(ids[ids != pad_id], minlength=vocab_size).astype(np.int64)


def log_probs(counts: np.ndarray) -> np.ndarray:
    """Add-one-smoothed unigram log-probabilities (nats) of every token id."""
    return np.log((counts + 1.0) / (counts.sum() + len(counts)))


def item_losses(batches: Iterable[dict[str, torch.Tensor]], logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per example, in order: the unigram NLL summed over its scored positions (labels != -100) and their count."""
    sums, counts = [], []
    for batch in batches:
        labels = batch["mlm_labels"].numpy()
        scored = labels != IGNORE_INDEX
        sums.append(np.where(scored, -logp[np.where(scored, labels, 0)], 0.0).sum(1))
        counts.append(scored.sum(1))
    return np.concatenate(sums), np.concatenate(counts).astype(np.int64)


def perplexity(loss_sum: np.ndarray, count: np.ndarray) -> float:
    """exp(total NLL / total scored positions); NaN when nothing is scored."""
    total = int(np.sum(count))
    return float(np.exp(np.sum(loss_sum) / total)) if total else float("nan")
