"""Stage `download`: the pretraining corpus and every task's data, loaded by hub id (or from a mirror).

Writes `data/download/corpus` (one `text` column, one row per document), `data/download/tasks/<task>`
(a DatasetDict per task; for a task whose data could not be had, a `NO_DATA` file saying why) and
`data/download/manifest.json` (row counts, sources, known deviations, and
the tasks whose data could not be had, which the tables then mark "no data").
Each saved dataset's fingerprint (its `state.json`) is one of its contents (`settled`), not the one `datasets`
derives from the paths it read: the bytes are the same wherever the clone and the mirror sit.
The arrow copies `datasets` makes of a mirror's files (and of the streamed corpus) live in the stage's scratch
directory and are removed with it: the Hugging Face cache gains nothing from a mirror, and from the hub only its
downloads (one copy of each file, reused by the next run).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from omegaconf import DictConfig

from bertlab.data.sources import hub_error, load_split, mirror_files, split_key
from bertlab.errors import SourceError, UnreadableFile, UserError
from bertlab.files import atomic_dir, write_json
from bertlab.kinds import KINDS
from bertlab.local import resolve
from bertlab.stage import main

log = logging.getLogger(__name__)

CACHE = ".datasets"  # in the stage's scratch directory: `datasets`' arrow copies, removed before it is published


def load_corpus(sources: list[DictConfig], mirror: str | None, scratch: Path) -> datasets.Dataset:
    """All corpus sources as one dataset with columns `text` and `source`; a missing source is an error.
    From the hub the sources are streamed into `scratch` a batch at a time (BERT-scale corpora never sit in RAM);
    `datasets`' arrow copies go to `scratch / CACHE`."""
    if mirror is None:
        return stream_corpus(sources, scratch / "corpus.parquet", scratch / CACHE)
    parts = []
    for src in sources:
        ds = load_split(src.hub_id, src.config, src.split, mirror, scratch / CACHE)
        ds = ds.select_columns([src.text_column])
        if src.text_column != "text":
            ds = ds.rename_column(src.text_column, "text")
        ds = ds.filter(lambda batch: [bool(t and t.strip()) for t in batch["text"]], batched=True)
        parts.append(ds.add_column("source", [src.hub_id] * len(ds)))
        log.info("corpus source %s: %d documents", split_key(src.hub_id, src.config, src.split), len(ds))
    return datasets.concatenate_datasets(parts)


def stream_corpus(sources: list[DictConfig], path: Path, cache_dir: Path, batch_size: int = 1000
                  ) -> datasets.Dataset:
    """The hub's corpus sources streamed into one parquet file (non-blank texts only), then memory-mapped from its
    arrow copy in `cache_dir`."""
    writer = None
    for src in sources:
        key = split_key(src.hub_id, src.config, src.split)
        try:
            stream = datasets.load_dataset(src.hub_id, src.config, split=src.split, streaming=True)
            count = 0
            for batch in stream.select_columns([src.text_column]).iter(batch_size):
                texts = [t for t in batch[src.text_column] if t and t.strip()]
                table = pa.table({"text": texts, "source": [src.hub_id] * len(texts)})
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
                count += len(texts)
        except Exception as err:  # datasets raises many types for "offline", "not found", "no such split"
            raise hub_error(key, err) from err
        log.info("corpus source %s: %d documents", key, count)
    if writer is None:
        raise UserError("corpus.sources is empty: name at least one corpus source")
    writer.close()
    return datasets.load_dataset("parquet", data_files=[str(path)], split="train", cache_dir=str(cache_dir))


LONG_LINE = 100_000  # characters; the mirror's longest line of text is 6,193


def warn_long_lines(corpus: datasets.Dataset, limit: int = LONG_LINE) -> None:
    """One warning line when corpus documents hold a line of over `limit` characters (a book without line breaks):
    their sentences are found at punctuation only, and `corpus.max_chars` or `tokenizer.max_chars` may cut them."""
    lengths = pc.utf8_length(corpus.data.table.column("text")).to_numpy()
    lines = [(max(map(len, corpus[int(i)]["text"].splitlines())), int(i)) for i in np.flatnonzero(lengths > limit)]
    over = sorted(line for line in lines if line[0] > limit)
    if over:
        longest, index = over[-1]
        log.warning("%d corpus document(s) hold a line of over %s characters (the longest, %s characters, in document "
                    "%d from %s): their sentences are split at punctuation only, and corpus.max_chars or "
                    "tokenizer.max_chars may cut them", len(over), f"{limit:,}", f"{longest:,}", index,
                    corpus[index]["source"])


def load_task(task: DictConfig, mirror: str | None, cache_dir: Path | None = None) -> datasets.DatasetDict:
    """A task's train and evaluation splits (a mirror's arrow copies in `cache_dir`)."""
    splits = [task.train_split, *task.eval_splits]
    return datasets.DatasetDict({s: load_split(task.hub_id, task.config, s, mirror, cache_dir) for s in splits})


def check_task(name: str, task: DictConfig, data: datasets.DatasetDict, mirror: str | None) -> None:
    """A UserError naming the file (or hub split) of the first split of `task` that fine-tuning could not read as
    `conf/task/<name>.yaml` says: no rows, a column it reads missing or of another type (text that is not UTF-8 is
    not a string column), a label outside 0 .. num_labels - 1, text that is not valid UTF-8."""
    for split, ds in data.items():
        files = mirror_files(mirror, task.hub_id, task.config, split) if mirror else []
        where = ", ".join(map(str, files)) or f"{split_key(task.hub_id, task.config, split)} (the hub)"
        if len(ds) == 0:
            raise UserError(f"{where} has no rows (task {name}, split {split})")
        table = ds.data.table
        kind = KINDS[task.kind]
        for column, (expected, holds) in _task_columns(task).items():
            if column not in table.column_names:
                raise UserError(f"{where} has no column {column!r}, which task {name} reads (conf/task/{name}.yaml); "
                                f"its columns: {', '.join(table.column_names)}")
            arrow_type = table.schema.field(column).type
            if not expected(arrow_type):
                raise UserError(f"{where}: column {column!r} is {arrow_type}, not what task {name} reads ({holds})")
            try:
                table.column(column).validate(full=True)
            except pa.ArrowInvalid as err:
                raise UserError(f"{where}: column {column!r} is not valid UTF-8 text ({err})") from err
        labels = kind.class_ids(table.column(task.label_column))
        if labels is not None:
            low, high = pc.min_max(labels).values()
            if low.is_valid and (low.as_py() < 0 or high.as_py() >= task.num_labels):
                bad = low.as_py() if low.as_py() < 0 else high.as_py()
                raise UserError(f"{where}: column {task.label_column!r} holds the label {bad}, outside 0 .. "
                                f"{task.num_labels - 1} (task {name} has num_labels={task.num_labels})")


def _task_columns(task: DictConfig) -> dict[str, tuple[Callable[[pa.DataType], bool], str]]:
    """Each column the task reads: the test its arrow type must pass, and what it must hold."""
    kind = KINDS[task.kind]
    text, label = kind.holds
    return {**{c: (kind.text_type, text) for c in task.text_columns}, task.label_column: (kind.label_type, label)}


def settled(ds: datasets.Dataset, batch_size: int = 10_000) -> datasets.Dataset:
    """`ds` with a fingerprint of its contents (its rows, as Arrow's stream format writes them) in place of the one
    `datasets` derives from the paths of the files it read, which `save_to_disk` writes into `state.json`."""
    h = hashlib.blake2b(digest_size=8)
    for batch in ds.with_format("arrow").iter(batch_size):
        batch = batch.replace_schema_metadata(None)  # `datasets`' own, a fingerprint among it
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_table(batch)
        h.update(sink.getvalue())
    return ds.flatten_indices(new_fingerprint=h.hexdigest())  # save_to_disk's own flattening: a random fingerprint


def deviations_for(keys: list[str], known: DictConfig) -> dict[str, str]:
    """The known mirror deviations that apply to the given `hub_id/config/split` keys."""
    return {k: known[k] for k in keys if k in known}


@main()
def run(cfg: DictConfig) -> None:
    out = Path(cfg.data_dir) / "download"
    mirror = str(resolve(cfg.mirror)) if cfg.mirror else None  # a relative one: from the project's root
    datasets.disable_progress_bars()  # two bars a split saved in well under a second: a log's longest part
    log.info("reading %s", f"the mirror {mirror}" if mirror else "the Hugging Face hub")
    with atomic_dir(out) as tmp:
        corpus = load_corpus(cfg.corpus.sources, mirror, tmp)
        if len(corpus) == 0:
            raise UserError("the corpus sources (corpus.sources) hold no non-blank document: "
                            + ", ".join(split_key(s.hub_id, s.config, s.split) for s in cfg.corpus.sources))
        warn_long_lines(corpus)
        settled(corpus).save_to_disk(str(tmp / "corpus"))
        (tmp / "corpus.parquet").unlink(missing_ok=True)
        used = [split_key(s.hub_id, s.config, s.split) for s in cfg.corpus.sources]
        tasks: dict[str, dict] = {}
        for name, task in cfg.download.tasks.items():
            try:
                dd = load_task(task, mirror, tmp / CACHE)
            except UnreadableFile:
                raise
            except SourceError as err:
                print(f"{name}: no data ({err})")
                tasks[name] = {"status": "no data", "reason": str(err)}
                (tmp / "tasks" / name).mkdir(parents=True)  # a directory for DVC to depend on, all the same
                (tmp / "tasks" / name / "NO_DATA").write_text(f"{err}\n")
                continue
            check_task(name, task, dd, mirror)
            datasets.DatasetDict({s: settled(d) for s, d in dd.items()}).save_to_disk(str(tmp / "tasks" / name))
            tasks[name] = {"status": "ok", "rows": {s: len(d) for s, d in dd.items()}}
            used += [split_key(task.hub_id, task.config, s) for s in dd]
            log.info("task %s: %s", name, tasks[name]["rows"])
        shutil.rmtree(tmp / CACHE, ignore_errors=True)  # absent when nothing was read through it
        write_json(
            tmp / "manifest.json",
            {
                "source": cfg.mirror or "hub",  # as set (`../shared/data`): the same bytes in any clone
                "corpus": {"documents": len(corpus), "sources": [dict(s) for s in cfg.corpus.sources]},
                "tasks": tasks,
                "deviations": deviations_for(used, cfg.download.mirror_deviations) if mirror else {},
            },
        )


if __name__ == "__main__":
    run()
