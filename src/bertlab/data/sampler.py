"""Training batches as a pure function of (seed, global batch index), so a resumed run sees the same data stream.

The training stream is data epoch 0's permutation, then epoch 1's, ... (each drawn from (seed, epoch)); global batch
`g` takes the next `batch_size * world_size` examples of it, and rank `r` its `r`-th slice; `accumulate` consecutive
global batches make one optimizer step, and a data epoch's incomplete last step is dropped. So an optimizer step sees
the same examples however its batch is split into processes and accumulation steps. Each iteration yields `window`
consecutive global batches from the index `start()` returns when it begins (for Lightning: the trainer's global step
x gradient accumulation, which a resumed trainer restores), so a run resumed from a checkpoint at a window's end
continues at exactly the next batch, without Lightning having to resume a dataloader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache

import numpy as np
from torch.utils.data import Dataset, Sampler

Tagged = list[tuple[int, int]]  # one batch: (g * world_size + rank, example index) per example


class SeededBatches(Sampler[Tagged]):
    """Yields batches of (global batch index, example index) pairs; use with `TaggedDataset` and `batch_size=None`."""

    def __init__(self, num_examples: int, batch_size: int, seed: int, window: int, start: Callable[[], int],
                 rank: int = 0, world_size: int = 1, accumulate: int = 1) -> None:
        step = batch_size * world_size * accumulate
        if num_examples < step:
            raise ValueError(f"{num_examples} examples do not fill one batch of {batch_size} x {world_size} x "
                             f"{accumulate}")
        self.num_examples, self.batch_size, self.seed, self.window = num_examples, batch_size, seed, window
        self.start, self.rank, self.world_size = start, rank, world_size
        self.per_epoch = num_examples // step * accumulate  # global batches per data epoch: whole optimizer steps

    def __len__(self) -> int:
        return self.window

    def __iter__(self) -> Iterator[Tagged]:
        first = self.start()
        for g in range(first, first + self.window):
            tag = g * self.world_size + self.rank  # this rank's batch's place among all ranks' batches
            yield [(tag, int(i)) for i in self.batch(g)]

    def batch(self, g: int) -> np.ndarray:
        """This rank's example indices in global batch `g`."""
        epoch, position = divmod(g, self.per_epoch)
        start = (position * self.world_size + self.rank) * self.batch_size
        return self._permutation(epoch)[start : start + self.batch_size]

    @lru_cache(maxsize=2)
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)


class PhasedBatches(Sampler[Tagged]):
    """Two seeded streams one after the other: global batches before `boundary` are `first`'s, later ones are
    `second`'s batch g - boundary with example indices shifted by `offset` (both streams index one ConcatDataset,
    `first`'s examples first). Windows, start and tags are `second`'s: a tag stays the global batch index."""

    def __init__(self, first: SeededBatches, second: SeededBatches, boundary: int, offset: int) -> None:
        self.first, self.second, self.boundary, self.offset = first, second, boundary, offset

    def __len__(self) -> int:
        return self.second.window

    def __iter__(self) -> Iterator[Tagged]:
        s = self.second
        first = s.start()
        for g in range(first, first + s.window):
            batch = self.first.batch(g) if g < self.boundary else self.second.batch(g - self.boundary) + self.offset
            yield [(g * s.world_size + s.rank, int(i)) for i in batch]


class TaggedDataset(Dataset):
    """`dataset`'s examples for a `SeededBatches` batch, each dict with its batch's tag under "batch"."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, batch: Tagged) -> list[dict]:
        return [{**self.dataset[i], "batch": g} for g, i in batch]
