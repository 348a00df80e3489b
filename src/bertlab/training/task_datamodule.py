"""A fine-tuning task's splits as a `LightningDataModule`: rows of model inputs and targets, padded batches, and
the evaluator of each eval split (which scores predictions on its rows and knows the split's floor).

Each split is encoded, and batched, by the task's kind (`bertlab.kinds`); a row's `index`, its position in its split,
puts predictions back in order. Large splits are subsampled by `subsample_seed` alone, so every encoder and seed sees
the same examples.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import numpy as np
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.kinds import KINDS
from bertlab.kinds.base import Encoding, Evaluator, Lengths
from bertlab.training.recipe import DataSettings
from bertlab.training.run_settings import loader_processes


def subsample(ds: datasets.Dataset, n: int | None, seed: int) -> datasets.Dataset:
    """`n` rows drawn without replacement by `seed` (kept in memory: nothing is written next to the data)."""
    if n is None or n >= len(ds):
        return ds
    picked = np.sort(np.random.default_rng(seed).permutation(len(ds))[:n])
    return ds.select(picked.tolist(), keep_in_memory=True)


class TaskDataModule(pl.LightningDataModule):
    """The training split and the eval splits (`task.eval_splits`, dev sets) of a downloaded task.

    Scoring runs once, after training: pass `train_dataloader()` to `Trainer.fit` (so it validates nothing per
    epoch) and `val_dataloader()` (or the module itself) to `Trainer.validate`. After `setup`: `train_rows`,
    `eval_rows` and `evaluators` (one per eval split, in order), `train_examples` and `eval_examples` ({split:
    examples}; SQuAD: questions).
    """

    def __init__(self, task: Task, task_dir: Path, tokenizer: Tokenizer, lengths: Lengths,
                 settings: DataSettings) -> None:
        super().__init__()
        self.task, self.task_dir, self.tokenizer, self.lengths = task, Path(task_dir), tokenizer, lengths
        self.settings, self.batch_size, self.pin_memory = settings, settings.batch_size, False
        self.eval_batch_size = settings.eval_batch_size or settings.batch_size
        self.pad_id = tokenizer.token_to_id("[PAD]")
        self.train_rows: list[dict[str, Any]] = []
        self.eval_rows: list[list[dict[str, Any]]] = []
        self.evaluators: list[Evaluator] = []
        self.train_examples = 0
        self.eval_examples: dict[str, int] = {}
        self.prepared = False

    def setup(self, stage: str | None = None) -> None:
        """Encode every split once (later calls, e.g. by `Trainer.validate`, keep what is there)."""
        if self.prepared:
            return
        task = self.task
        dd = datasets.load_from_disk(str(self.task_dir))
        absent = [s for s in (task.train_split, *task.eval_splits) if s not in dd]
        if absent:
            raise UserError(f"task {task.name!r}: the downloaded data lacks the split(s) {', '.join(absent)}")
        s = self.settings
        train_ds = subsample(dd[task.train_split], s.max_train_examples, s.subsample_seed)
        self.train_examples = len(train_ds)
        kind, how = KINDS[task.kind], Encoding(self.tokenizer, self.lengths, s.n_best_size, s.max_answer_length)
        self.train_rows, _ = kind.encode(task, train_ds, task.train_split, True, how)
        how.train_labels = [row["label"] for row in self.train_rows if "label" in row]
        for split in task.eval_splits:
            ds = subsample(dd[split], s.max_eval_examples, s.subsample_seed)
            rows, evaluator = kind.encode(task, ds, split, False, how)
            self.eval_rows.append(rows)
            self.evaluators.append(evaluator)
            self.eval_examples[split] = len(ds)
        self.prepared = True

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_rows, self.batch_size, shuffle=True)

    def val_dataloader(self) -> list[DataLoader]:
        """Eval rows by length, so a batch pads little (evaluation puts predictions back in order by `index`)."""
        return [self._loader(sorted(rows, key=lambda r: len(r["input_ids"])), self.eval_batch_size, shuffle=False)
                for rows in self.eval_rows]

    def _loader(self, rows: list[dict[str, Any]], batch_size: int, shuffle: bool) -> DataLoader:
        """Batches padded to their own longest row (dynamic padding)."""
        workers, collate = self.settings.num_workers, KINDS[self.task.kind].collate
        return DataLoader(
            rows, batch_size=batch_size, shuffle=shuffle, **loader_processes(workers),
            collate_fn=functools.partial(collate, pad_id=self.pad_id), persistent_workers=workers > 0,
            pin_memory=self.pin_memory,
        )
