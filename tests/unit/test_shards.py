"""Training instances built shard by shard: grouping and merging (the same output whatever the process count:
tests/e2e/test_pretrain_data.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertlab.data.instances import create_nsp_instances, save_instances
from bertlab.data.shards import merge, shard_texts


def test_shards_group_consecutive_documents_by_characters() -> None:
    texts = ["a" * n for n in (5, 3, 9, 1, 1, 4)]
    assert [[len(t) for t in shard] for shard in shard_texts(texts, 8)] == [[5, 3], [9], [1, 1, 4]]


def test_merge_concatenates_every_field(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    parts = []
    for i in range(3):
        docs = [[rng.integers(5, 100, 8) for _ in range(4)] for _ in range(10 + i)]
        parts.append(create_nsp_instances(docs, 16, dupe_factor=1, seed=i))
        save_instances(parts[-1], tmp_path / f"{i}")
    merged = merge([tmp_path / f"{i}" for i in range(3)], tmp_path / "all")
    assert isinstance(merged.input_ids, np.memmap)
    for name, column in vars(merged).items():
        if column is not None:
            assert np.array_equal(column, np.concatenate([getattr(p, name) for p in parts])), name


def test_a_profile_that_reads_its_corpus_many_times_says_so_in_one_line(caplog) -> None:
    from omegaconf import OmegaConf

    from bertlab.pretrain_data import warn_if_repeated

    cfg = OmegaConf.create({"pretrain": {"max_steps": 1000, "size_study_steps": 250, "batch_size": 32}})
    with caplog.at_level("WARNING"):
        warn_if_repeated(cfg, 8000)  # 4.0 passes: fine
        assert not caplog.records
        warn_if_repeated(cfg, 6400)  # 5 passes
    (record,) = caplog.records
    assert record.getMessage() == ("pretrain.max_steps=1000 x batch 32 reads the 6400 training instances 5 times "
                                   "(more than 4): the corpus is small for this profile")
