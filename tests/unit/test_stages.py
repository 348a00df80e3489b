"""The stages as users run them (`python -m bertlab.<stage> ...`), on the synthetic mirror, in a temp data dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from bertlab.export import load_plain

TINY = ["profile=smoke", "model=tiny", "model.num_layers=1", "model.hidden_size=32", "model.num_heads=2",
        "model.intermediate_size=64", "tokenizer.vocab_size=300", "pretrain.batch_size=8",
        "pretrain.max_steps=4", "pretrain.val_every_steps=2", "pretrain.checkpoint_every_steps=2",
        "pretrain_data.heldout_instances=16", "corpus.heldout_documents=2", "logger=csv"]


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
    assert stats["documents"] == {"train": 42, "heldout": 2}
    assert 0 < stats["instances"]["heldout_nsp"] <= 16  # capped at heldout_instances
    assert 0.3 < stats["nsp"]["not_next_ratio_multi_sentence_chunks"] < 0.7
    assert stats["heldout_unigram_ppl"]["nsp"] > 1


def test_pretrain_exports_model_and_held_out_perplexity(prepared: Path) -> None:
    done = stage("pretrain", prepared, "name=bert", "pretrain.dropout=0.0")
    assert done.returncode == 0, done.stderr[-3000:]
    out = prepared / "pretrain/bert"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["shape"]["num_layers"] == 1
    assert 1 < metrics["heldout_ppl"] < 1000
    model, config = load_plain(out)
    assert config.hidden_size == 32 and model.nsp is not None
    assert config.dropout == config.attention_dropout == 0.0  # pretrained without dropout, as asked
    assert (out / "hf/config.json").exists() and (out / "metrics.csv").exists()


def test_multirun_sweeps_a_model_setting(prepared: Path) -> None:
    done = stage("pretrain", prepared, "-m", "model.num_layers=1,2", "name=sweep_L${model.num_layers}",
                 "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "#0 : " in done.stdout + done.stderr and "#1 : " in done.stdout + done.stderr
    for layers in (1, 2):  # each job exports under its own name
        assert load_plain(prepared / f"pretrain/sweep_L{layers}")[1].num_layers == layers


def test_a_missing_input_names_the_stage_to_run(tmp_path: Path) -> None:
    done = stage("pretrain", tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: {tmp_path}/tokenizer/tokenizer.json not found: " \
                                  "run `dvc repro tokenizer` (or `python -m bertlab.tokenizer`) first"


def test_pretraining_killed_with_sigkill_resumes_from_last_ckpt(prepared: Path) -> None:
    args = ["name=resume", "pretrain.max_steps=300", "pretrain.checkpoint_every_steps=3", "pretrain.val_every_steps=300"]
    cmd = [sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", *TINY, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpts = prepared / "checkpoints/pretrain"
    deadline = time.time() + 300
    while not list(ckpts.glob("resume-*/last.ckpt")) and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(0.5)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    import torch

    (last,) = ckpts.glob("resume-*/last.ckpt")
    killed_at = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    assert 0 < killed_at < 300
    assert not (prepared / "pretrain/resume").exists()  # no half-written export
    done = stage("pretrain", prepared, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {last}" in done.stdout + done.stderr
    metrics = json.loads((prepared / "pretrain/resume/metrics.json").read_text())
    assert metrics["steps"] == 300
    steps_logged = [line.split(",") for line in (prepared / "pretrain/resume/metrics.csv").read_text().splitlines()]
    assert steps_logged  # the curve is kept


def test_gpu_profile_configures_and_starts_on_cpu(prepared: Path) -> None:
    """The paper-scale profile with its GPU `impl` (bf16 autocast, torch.compile, devices=auto) on a CPU."""
    done = subprocess.run(
        [sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", "profile=gpu", "name=gpu", "logger=csv",
         "model=tiny", "pretrain.batch_size=4", "pretrain.max_steps=2", "pretrain.val_every_steps=2"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bf16" in done.stderr and "max_steps=2` reached" in done.stderr + done.stdout
    assert json.loads((prepared / "pretrain/gpu/metrics.json").read_text())["steps"] == 2
