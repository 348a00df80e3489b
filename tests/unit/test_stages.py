"""The stages as users run them (`python -m bertlab.<stage> ...`), on the synthetic mirror, in a temp data dir
(pretrain: tests/unit/test_pretrain.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer


TINY = ["profile=smoke", "model=tiny", "model.num_layers=1", "model.hidden_size=32", "model.num_heads=2",
        "model.intermediate_size=64", "tokenizer.vocab_size=300", "pretrain.batch_size=8", "pretrain.max_steps=4",
        "pretrain.warmup_steps=1", "pretrain.val_every_steps=2", "pretrain.checkpoint_every_steps=2",
        "pretrain_data.heldout_instances=16", "corpus.heldout_documents=8", "logger=csv"]


def stage(name: str, data_dir: Path, *overrides: str, mirror: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "BERTLAB_DATA_MIRROR": str(mirror or "")}
    if mirror is None:
        env.pop("BERTLAB_DATA_MIRROR")
    flags = [o for o in overrides if o.startswith("-")]
    overrides = tuple(o for o in overrides if not o.startswith("-"))
    return subprocess.run([sys.executable, "-m", f"bertlab.{name}", *flags, f"data_dir={data_dir}", *TINY, *overrides],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def prepared(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """download -> tokenizer -> pretrain_data on the synthetic mirror."""
    data = tmp_path_factory.mktemp("data")
    for name in ("download", "tokenizer", "pretrain_data"):
        done = stage(name, data, mirror=mirror)
        assert done.returncode == 0, done.stderr[-3000:]
    return data


def test_download_writes_corpus_tasks_and_marks_missing_ones(prepared: Path) -> None:
    manifest = json.loads((prepared / "download/manifest.json").read_text())
    assert manifest["corpus"]["documents"] == 44
    assert manifest["tasks"]["sst2"] == {"status": "ok", "rows": {"train": 64, "validation": 32}}
    assert manifest["tasks"]["mnli"]["status"] == "no data"
    assert "nyu-mll/glue/mnli/train is not in the mirror" in manifest["tasks"]["mnli"]["reason"]
    assert (prepared / "download/tasks/mrpc/validation").is_dir()
    assert (prepared / "download/tasks/mnli/NO_DATA").read_text().startswith("nyu-mll/glue/mnli/train is not in")


def test_download_without_mirror_or_network_fails_fast_in_one_line(tmp_path: Path) -> None:
    start = time.perf_counter()
    done = stage("download", tmp_path)
    assert done.returncode != 0 and time.perf_counter() - start < 60
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "BERTLAB_DATA_MIRROR" in lines[0]
    assert not (tmp_path / "download").exists() and not list(tmp_path.glob("download*"))


def test_tokenizer_has_bert_special_tokens_first(prepared: Path) -> None:
    tok = Tokenizer.from_file(str(prepared / "tokenizer/tokenizer.json"))
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.get_vocab_size() <= 300
    assert tok.encode("the cat", "sat").tokens == ["[CLS]", "the", "cat", "[SEP]", "sat", "[SEP]"]


def test_pretrain_data_stats(prepared: Path) -> None:
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    assert stats["documents"] == {"train": 36, "heldout": 8, "from_task_text": 0}
    assert stats["instances"]["heldout_nsp"] == stats["instances"]["heldout_packed"] == 16  # as asked
    assert 0.3 < stats["nsp"]["not_next_ratio_multi_sentence_chunks"] < 0.7
    assert stats["heldout_unigram_ppl"]["nsp"] > 1


def test_a_missing_input_names_the_stage_to_run(tmp_path: Path) -> None:
    done = stage("pretrain", tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path}/tokenizer/tokenizer.json not found: " \
                                  "run `dvc repro tokenizer` (or `python -m bertlab.tokenizer`) first"
