"""Training instances shard by shard, so that memory is bounded by a shard rather than the corpus.

As google-research/bert runs `create_pretraining_data.py` once per input shard: consecutive documents of about
`pretrain_data.shard_chars` characters make a shard; each is tokenized and turned into instances on its own (NSP's
random next segments come from its own documents; shard i uses seed + i, so one shard is the unsharded build), by
up to `impl.data_processes` worker processes, and written to disk. The shards' arrays are then concatenated into
one memory-mappable set per format, a shard at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bertlab.data.instances import Instances, load_instances, save_instances

log = logging.getLogger(__name__)


def shard_texts(texts: Iterable[str], shard_chars: int) -> Iterator[list[str]]:
    """Consecutive documents, grouped into shards of at least `shard_chars` characters (the last may be smaller)."""
    shard: list[str] = []
    size = 0
    for text in texts:
        shard.append(text)
        size += len(text)
        if size >= shard_chars:
            yield shard
            shard, size = [], 0
    if shard:
        yield shard


def map_shards(build: Callable[[int, list[str]], dict[str, Any]], shards: Iterable[list[str]],
               processes: int) -> Iterator[dict[str, Any]]:
    """`build(index, texts)` for every shard, in order; with several processes at most that many shards are in
    flight, so the shards still to come are never all in memory."""
    if processes <= 1:
        for index, texts in enumerate(shards):
            yield build(index, texts)
        return
    pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
    try:
        pending: list[Future] = []
        for index, texts in enumerate(shards):
            pending.append(pool.submit(build, index, texts))
            if len(pending) >= processes:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()
    except BaseException:  # an error or a stop (SIGTERM, SIGINT): the workers end now, not after their shards
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def merge(parts: list[Path], out: Path) -> Instances:
    """Concatenate the instances saved in `parts` into `out` (one field, and one shard, in memory at a time)."""
    if len(parts) == 1:
        parts[0].rename(out)
        return load_instances(out)
    out.mkdir(parents=True)
    shards = [load_instances(part) for part in parts]  # memory-mapped: nothing is read yet
    for field in dataclasses.fields(Instances):
        columns = [getattr(shard, field.name) for shard in shards]
        if columns[0] is None:
            continue
        merged = np.lib.format.open_memmap(out / f"{field.name}.npy", mode="w+", dtype=columns[0].dtype,
                                           shape=(sum(map(len, columns)), *columns[0].shape[1:]))
        start = 0
        for column in columns:
            merged[start : start + len(column)] = column
            start += len(column)
        merged.flush()
        del merged
    return load_instances(out)


def save_shard(sets: dict[str, Instances], directory: Path) -> dict[str, int]:
    """Save a shard's instance sets under `directory/<name>`; their sizes."""
    for name, instances in sets.items():
        save_instances(instances, directory / name)
    return {name: len(instances) for name, instances in sets.items()}
