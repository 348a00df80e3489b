"""A fine-tuning task's splits as a `LightningDataModule`: rows of model inputs and targets, padded batches, and
the evaluator of each eval split (which scores predictions on its rows and knows the split's floor).

Rows hold `input_ids`, `token_type_ids`, the kind's targets (`label`; `start_positions` and `end_positions`;
`label_ids`) and `index`, the row's position in its split, which evaluation uses to put predictions back in order.
Large splits are subsampled by `subsample_seed` alone, so every encoder and seed sees the same examples.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import lightning.pytorch as pl
import numpy as np
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from bertlab.data.ner import encode_words
from bertlab.data.squad import encode_squad
from bertlab.data.tasks import Task, encode_pairs, pad_collate
from bertlab.errors import UserError
from bertlab.evaluate import Evaluator, GlueEvaluator, SquadEvaluator, TaggingEvaluator

log = logging.getLogger(__name__)


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


def subsample(ds: datasets.Dataset, n: int | None, seed: int) -> datasets.Dataset:
    """`n` rows drawn without replacement by `seed` (kept in memory: nothing is written next to the data)."""
    if n is None or n >= len(ds):
        return ds
    picked = np.sort(np.random.default_rng(seed).permutation(len(ds))[:n])
    return ds.select(picked.tolist(), keep_in_memory=True)


def prepare_split(
    task: Task, ds: datasets.Dataset, tokenizer: Tokenizer, lengths: Lengths, split: str, train: bool,
    n_best_size: int = 20, max_answer_length: int = 30, train_labels: list | None = None,
) -> tuple[list[dict[str, Any]], Evaluator | None]:
    """Model rows of one split (with targets when `train`) and the evaluator of predictions on them (SQuAD's
    training windows have none: their targets are token positions, not answers). `train_labels` (GLUE) are
    the labels the model trains on, which set the floor."""
    cols = task.text_columns
    if task.kind in ("classification", "regression"):
        enc = encode_pairs(tokenizer, ds[cols[0]], ds[cols[1]] if len(cols) > 1 else None, lengths.max_seq_length)
        labels = [float(y) if task.kind == "regression" else int(y) for y in ds[task.label_column]]
        rows = [
            {"input_ids": ids, "token_type_ids": types, "label": y, "index": i}
            for i, (ids, types, y) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], labels))
        ]
        return rows, GlueEvaluator(split, len(rows), task=task.name, kind=task.kind, labels=labels,
                                   train_labels=list(train_labels or []))

    if task.kind == "span":
        questions, contexts = list(ds[cols[0]]), list(ds[cols[1]])
        answers = list(ds[task.label_column])
        settings = dict(max_length=lengths.max_seq_length, doc_stride=lengths.doc_stride,
                        max_query_length=lengths.max_query_length)
        if train:  # first reference answer, as run_squad.py; unanswerable rows (none in v1.1) are skipped
            keep = [i for i, a in enumerate(answers) if a["text"]]
            feats = encode_squad(
                tokenizer, [questions[i] for i in keep], [contexts[i] for i in keep],
                [answers[i]["answer_start"][0] for i in keep], [answers[i]["text"][0] for i in keep], **settings,
            )
            rows = [
                {"input_ids": ids, "token_type_ids": types, "start_positions": s, "end_positions": e, "index": i}
                for i, (ids, types, s, e) in enumerate(zip(
                    feats["input_ids"], feats["token_type_ids"], feats["start_positions"], feats["end_positions"]))
            ]
            return rows, None
        feats = encode_squad(tokenizer, questions, contexts, **settings)
        rows = [
            {"input_ids": ids, "token_type_ids": types, "index": i}
            for i, (ids, types) in enumerate(zip(feats["input_ids"], feats["token_type_ids"]))
        ]
        refs = [list(a["text"]) for a in answers]
        return rows, SquadEvaluator(split, len(rows), features=feats, contexts=contexts, answers=refs,
                                    n_best_size=n_best_size, max_answer_length=max_answer_length)

    # tagging
    words, tags = [list(w) for w in ds[cols[0]]], [list(t) for t in ds[task.label_column]]
    enc = encode_words(tokenizer, words, tags, lengths.max_seq_length)
    rows = [
        {"input_ids": ids, "token_type_ids": types, "label_ids": labels, "index": i}
        for i, (ids, types, labels) in enumerate(zip(enc["input_ids"], enc["token_type_ids"], enc["label_ids"]))
    ]
    names = task.label_names or tuple(str(i) for i in range(task.num_labels))
    gold = [[names[t] for t in sentence] for sentence in tags]
    return rows, TaggingEvaluator(split, len(rows), word_ids=enc["word_ids"], gold=gold, label_names=names)


class TaskDataModule(pl.LightningDataModule):
    """The training split and the eval splits (`task.eval_splits`, dev sets) of a downloaded task.

    Scoring runs once, after training: pass `train_dataloader()` to `Trainer.fit` (so it validates nothing per
    epoch) and the module itself to `Trainer.validate`. After `setup`: `train_rows`, `eval_rows` and `evaluators`
    (one per eval split, in order), `train_examples` and `eval_examples` ({split: examples}; SQuAD: questions).
    """

    def __init__(
        self, task: Task, task_dir: Path, tokenizer: Tokenizer, lengths: Lengths, *, batch_size: int,
        eval_batch_size: int | None = None, num_workers: int = 0, max_train_examples: int | None = None,
        max_eval_examples: int | None = None, subsample_seed: int = 0, n_best_size: int = 20, max_answer_length: int = 30,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        self.task, self.task_dir, self.tokenizer, self.lengths = task, Path(task_dir), tokenizer, lengths
        self.batch_size, self.num_workers, self.pin_memory = batch_size, num_workers, pin_memory
        self.eval_batch_size = eval_batch_size or batch_size
        self.max_train_examples, self.max_eval_examples, self.subsample_seed = (
            max_train_examples, max_eval_examples, subsample_seed)
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
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
        train_ds = subsample(dd[task.train_split], self.max_train_examples, self.subsample_seed)
        self.train_examples = len(train_ds)
        self.train_rows, _ = prepare_split(task, train_ds, self.tokenizer, self.lengths, task.train_split, train=True)
        train_labels = [row["label"] for row in self.train_rows if "label" in row]
        for split in task.eval_splits:
            ds = subsample(dd[split], self.max_eval_examples, self.subsample_seed)
            rows, evaluator = prepare_split(task, ds, self.tokenizer, self.lengths, split, train=False,
                                            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
                                            train_labels=train_labels)
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
        return DataLoader(
            rows, batch_size=batch_size, shuffle=shuffle, num_workers=self.num_workers,
            collate_fn=functools.partial(pad_collate, pad_id=self.pad_id), persistent_workers=self.num_workers > 0,
            pin_memory=self.pin_memory,
        )
