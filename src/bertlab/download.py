"""Stage `download`: the pretraining corpus and every task's data, loaded by hub id (or from a mirror).

Writes `data/download/corpus` (one `text` column, one row per document), `data/download/tasks/<task>`
(a DatasetDict per task; for a task whose data could not be had, a `NO_DATA` file saying why) and
`data/download/manifest.json` (row counts, sources, known deviations, and
the tasks whose data could not be had, which the tables then mark "no data").
"""

from __future__ import annotations

import logging
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import DictConfig

from bertlab.data.sources import hub_error, load_split, split_key
from bertlab.errors import SourceError, UnreadableFile, UserError
from bertlab.files import atomic_dir, write_json
from bertlab.stage import main

log = logging.getLogger(__name__)


def load_corpus(sources: list[DictConfig], mirror: str | None, scratch: Path) -> datasets.Dataset:
    """All corpus sources as one dataset with columns `text` and `source`; a missing source is an error.
    From the hub the sources are streamed into `scratch` a batch at a time (BERT-scale corpora never sit in RAM)."""
    if mirror is None:
        return stream_corpus(sources, scratch / "corpus.parquet")
    parts = []
    for src in sources:
        ds = load_split(src.hub_id, src.config, src.split, mirror)
        ds = ds.select_columns([src.text_column])
        if src.text_column != "text":
            ds = ds.rename_column(src.text_column, "text")
        ds = ds.filter(lambda batch: [bool(t and t.strip()) for t in batch["text"]], batched=True)
        parts.append(ds.add_column("source", [src.hub_id] * len(ds)))
        log.info("corpus source %s: %d documents", split_key(src.hub_id, src.config, src.split), len(ds))
    return datasets.concatenate_datasets(parts)


def stream_corpus(sources: list[DictConfig], path: Path, batch_size: int = 1000) -> datasets.Dataset:
    """The hub's corpus sources streamed into one parquet file (non-blank texts only), then memory-mapped."""
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
    return datasets.load_dataset("parquet", data_files=[str(path)], split="train")


def load_task(task: DictConfig, mirror: str | None) -> datasets.DatasetDict:
    """A task's train and evaluation splits."""
    splits = [task.train_split, *task.eval_splits]
    return datasets.DatasetDict({s: load_split(task.hub_id, task.config, s, mirror) for s in splits})


def deviations_for(keys: list[str], known: DictConfig) -> dict[str, str]:
    """The known mirror deviations that apply to the given `hub_id/config/split` keys."""
    return {k: known[k] for k in keys if k in known}


@main()
def run(cfg: DictConfig) -> None:
    out = Path(cfg.data_dir) / "download"
    mirror = cfg.mirror
    log.info("reading %s", f"the mirror {mirror}" if mirror else "the Hugging Face hub")
    with atomic_dir(out) as tmp:
        corpus = load_corpus(cfg.corpus.sources, mirror, tmp)
        if len(corpus) == 0:
            raise UserError("the corpus sources (corpus.sources) hold no non-blank document: "
                            + ", ".join(split_key(s.hub_id, s.config, s.split) for s in cfg.corpus.sources))
        corpus.save_to_disk(str(tmp / "corpus"))
        (tmp / "corpus.parquet").unlink(missing_ok=True)
        used = [split_key(s.hub_id, s.config, s.split) for s in cfg.corpus.sources]
        tasks: dict[str, dict] = {}
        for name, task in cfg.download.tasks.items():
            try:
                dd = load_task(task, mirror)
            except UnreadableFile:
                raise
            except SourceError as err:
                print(f"{name}: no data ({err})")
                tasks[name] = {"status": "no data", "reason": str(err)}
                (tmp / "tasks" / name).mkdir(parents=True)  # a directory for DVC to depend on, all the same
                (tmp / "tasks" / name / "NO_DATA").write_text(f"{err}\n")
                continue
            dd.save_to_disk(str(tmp / "tasks" / name))
            tasks[name] = {"status": "ok", "rows": {s: len(d) for s, d in dd.items()}}
            used += [split_key(task.hub_id, task.config, s) for s in dd]
            log.info("task %s: %s", name, tasks[name]["rows"])
        write_json(
            tmp / "manifest.json",
            {
                "source": mirror or "hub",
                "corpus": {"documents": len(corpus), "sources": [dict(s) for s in cfg.corpus.sources]},
                "tasks": tasks,
                "deviations": deviations_for(used, cfg.download.mirror_deviations) if mirror else {},
            },
        )


if __name__ == "__main__":
    run()
