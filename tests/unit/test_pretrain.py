"""The pretrain stage: its exports, per-instance held-out losses with their unigram floor, and its checkpoints: a
SIGKILLed run resumed ends as the uninterrupted one, also with its global batch split otherwise or compiled; a code
change, a finished run or an unreadable checkpoint trains from scratch."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertlab.data.instances import InstanceDataset, create_nsp_instances, create_packed_instances
from bertlab.data.masking import PretrainingCollator
from bertlab.data.sampler import SeededBatches, TaggedDataset
from bertlab.export import load_plain
from bertlab.model import BertConfig, BertForPretraining
from bertlab.pretrain import resume_from
from bertlab.pretrain_module import PretrainModule, RunRecord, heldout_losses
from tests.unit.test_stages import TINY, prepared, stage  # noqa: F401  (prepared: the stages' shared fixture)

# 12 steps, a checkpoint and a validation every 4, dropout 0.1 (the default): the kill lands between checkpoints.
RUN = ["pretrain.max_steps=12", "pretrain.checkpoint_every_steps=4", "pretrain.val_every_steps=4"]
THROUGHPUT = {"train/time", "train/batches", "train/samples", "train/lengths"}
KILL_AT_STEP = 6  # after the step-4 checkpoint: steps 5-6 are lost and must be redone, not double-logged
PINNED = "1" * 64  # a code hash for a kill and its resume: an edit of the package between them changes no key

# Runs `python -m bertlab.pretrain` after a patch: SIGKILL itself at the start of step KILL_AT (a real kill: no
# cleanup, no flush), and/or a changed code hash.
SCRIPT = """
import os, signal, sys
import bertlab.pretrain, bertlab.pretrain_module as m, bertlab.stage
kill_at = os.environ.get("KILL_AT")
if kill_at:
    step = m.PretrainModule.training_step
    def training_step(self, batch, i):
        if self.global_step == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        return step(self, batch, i)
    m.PretrainModule.training_step = training_step
if os.environ.get("CODE_HASH"):
    bertlab.stage.code_hash = lambda: os.environ["CODE_HASH"]
bertlab.pretrain.run()
"""


def pretrain(data: Path, tmp: Path, *args: str, kill_at: int | None = None,
             code_hash: str | None = None) -> subprocess.CompletedProcess:
    script = tmp / "pretrain_patched.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "KILL_AT": str(kill_at or ""), "CODE_HASH": code_hash or ""}
    # The runs here share settings on purpose: each must train, unless a test asks for twin reuse.
    twins = [] if any(a.startswith("impl.reuse_twins=") for a in args) else ["impl.reuse_twins=false"]
    return subprocess.run([sys.executable, str(script), f"data_dir={data}", *TINY, *RUN, *twins, *args],
                          capture_output=True, text=True, env=env, timeout=600)


def metrics(data: Path, name: str) -> dict:
    return json.loads((data / "pretrain" / name / "metrics.json").read_text())


def curve(data: Path, name: str) -> list[tuple]:
    """The logged rows of metrics.csv, without the throughput monitor's (its time and counts since its process began)."""
    with (data / "pretrain" / name / "metrics.csv").open(newline="") as f:
        return [tuple((k, v) for k, v in sorted(row.items()) if k not in THROUGHPUT) for row in csv.DictReader(f)]


def checkpoint(data: Path, name: str) -> Path:
    (last,) = (data / "checkpoints/pretrain").glob(f"{name}-*/last.ckpt")
    return last


@pytest.fixture(scope="module")
def whole(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:  # noqa: F811
    """The uninterrupted run."""
    done = pretrain(prepared, tmp_path_factory.mktemp("whole"), "name=whole")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    return metrics(prepared, "whole")


def test_pretrain_exports_model_and_held_out_perplexity(prepared: Path) -> None:  # noqa: F811
    done = stage("pretrain", prepared, "name=bert", "pretrain.dropout=0.0")
    assert done.returncode == 0, done.stderr[-3000:]
    out = prepared / "pretrain/bert"
    result = json.loads((out / "metrics.json").read_text())
    assert result["steps"] == 4 and result["shape"]["num_layers"] == 1
    assert 1 < result["heldout_ppl"] < 1000
    model, config = load_plain(out)
    assert config.hidden_size == 32 and model.nsp is not None
    assert config.dropout == config.attention_dropout == 0.0  # pretrained without dropout, as asked
    assert (out / "hf/config.json").exists() and (out / "metrics.csv").exists()
    assert not list((prepared / "checkpoints/pretrain").glob("bert-*"))  # removed once the outputs are written


@pytest.mark.parametrize(("objective", "stats_key"), [("mlm_nsp", "nsp"), ("ltr", "packed_next_token")])
def test_heldout_items_recompute_the_perplexity_and_its_unigram_floor(
        prepared: Path, objective: str, stats_key: str) -> None:  # noqa: F811
    name = f"items_{objective}"
    done = stage("pretrain", prepared, f"name={name}", f"objective={objective}", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = metrics(prepared, name)
    items = json.loads((prepared / "pretrain" / name / "heldout_items.json").read_text())
    fmt = "nsp" if objective == "mlm_nsp" else "packed"
    heldout = np.load(prepared / f"pretrain_data/heldout_{fmt}/input_ids.npy")
    assert items["format"] == fmt and items["kind"] == result["heldout_kind"] and items["n"] == len(heldout)
    model, floor = items["model"], items["floor"]
    assert len(model["loss_sum"]) == len(model["count"]) == len(floor["loss_sum"]) == len(heldout)
    assert model["count"] == floor["count"] and min(model["count"]) > 0  # the floor on the same positions
    ppl = math.exp(sum(model["loss_sum"]) / sum(model["count"]))
    assert ppl == pytest.approx(result["heldout_ppl"], rel=1e-12)
    assert result["heldout_mlm_loss"] == pytest.approx(math.log(ppl), rel=1e-12)
    floor_ppl = math.exp(sum(floor["loss_sum"]) / sum(floor["count"]))
    assert floor_ppl == pytest.approx(result["heldout_unigram_ppl"], rel=1e-12)
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    assert floor_ppl == pytest.approx(stats["heldout_unigram_ppl"][stats_key], rel=1e-12)  # same masks, same counts
    if objective == "ltr":  # every next token of every row is scored
        assert model["count"] == [int((row != 0).sum()) - 1 for row in heldout]
    else:  # ~15% of the non-special tokens
        assert 0.1 < sum(model["count"]) / int((heldout >= 5).sum()) < 0.2


def test_heldout_positions_are_masked_at_15_percent_whatever_rate_trains(prepared: Path) -> None:  # noqa: F811
    done = stage("pretrain", prepared, "name=rate40", "objective.mlm_probability=0.4", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads((prepared / "pretrain/rate40/heldout_items.json").read_text())
    floor = items["floor"]
    heldout = np.load(prepared / "pretrain_data/heldout_nsp/input_ids.npy")
    assert 0.1 < sum(floor["count"]) / int((heldout >= 5).sum()) < 0.2   # not ~40%
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    floor_ppl = math.exp(sum(floor["loss_sum"]) / sum(floor["count"]))
    assert floor_ppl == pytest.approx(stats["heldout_unigram_ppl"]["nsp"], rel=1e-12)   # the 15% run's positions


def test_unigram_counts_are_the_training_tokens(prepared: Path) -> None:  # noqa: F811
    counts = np.load(prepared / "pretrain_data/unigram_counts.npy")
    train = np.load(prepared / "pretrain_data/train_packed/input_ids.npy")
    assert counts.sum() == int((train != 0).sum()) and counts[0] == 0
    assert counts[3] == len(train) + json.loads((prepared / "pretrain_data/stats.json").read_text())[
        "documents"]["train"] - 1  # [SEP]: one per instance, one between documents


def test_sigkill_then_rerun_equals_the_uninterrupted_run(prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    killed = pretrain(prepared, tmp_path, "name=killed", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9, killed.stderr[-3000:]  # SIGKILL
    assert not (prepared / "pretrain/killed").exists()  # no half-written export
    last = checkpoint(prepared, "killed")
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == 4
    done = pretrain(prepared, tmp_path, "name=killed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {last}" in done.stdout + done.stderr
    resumed = metrics(prepared, "killed")
    print(f"held-out ppl: uninterrupted {whole['heldout_ppl']!r}, killed + resumed {resumed['heldout_ppl']!r}, "
          f"relative difference {abs(resumed['heldout_ppl'] / whole['heldout_ppl'] - 1):.3g}")
    assert resumed["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert resumed["steps"] == whole["steps"] == 12
    assert resumed["train_seconds"] >= round(state["callbacks"]["RunRecord"]["train_seconds"], 1) > 0
    assert curve(prepared, "killed") == curve(prepared, "whole")  # every step logged once, the same numbers
    steps = [int(r["step"]) for r in csv.DictReader((prepared / "pretrain/killed/metrics.csv").open())
             if r["train/loss"]]
    assert steps == [9]  # log_every_n_steps=10 over 12 steps: one training row, not lost to the kill
    items = [json.loads((prepared / f"pretrain/{n}/heldout_items.json").read_text()) for n in ("killed", "whole")]
    np.testing.assert_allclose(items[0]["model"]["loss_sum"], items[1]["model"]["loss_sum"], rtol=1e-6)


def test_a_code_change_trains_from_scratch(prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    killed = pretrain(prepared, tmp_path, "name=code", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    old = checkpoint(prepared, "code")
    done = pretrain(prepared, tmp_path, "name=code", code_hash="0" * 64)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    assert old.exists()  # another key's directory: left alone, never used
    assert metrics(prepared, "code")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert metrics(prepared, "code")["steps"] == 12


def test_a_finished_run_rerun_trains_from_scratch(prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    done = pretrain(prepared, tmp_path, "name=whole")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    again = metrics(prepared, "whole")
    assert again["steps"] == 12 and again["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert len(curve(prepared, "whole")) > 3


def test_an_unreadable_checkpoint_is_moved_aside_and_the_run_starts_afresh(
        prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    killed = pretrain(prepared, tmp_path, "name=corrupt", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last = checkpoint(prepared, "corrupt")
    last.write_bytes(last.read_bytes()[:1000])  # truncated, as by a full disk
    done = pretrain(prepared, tmp_path, "name=corrupt")
    assert done.returncode == 0, done.stderr[-3000:]
    aside = last.parent.with_name(f"{last.parent.name}.unreadable.ckpt")
    log = done.stdout + done.stderr
    assert aside.exists() and f"{last} is unreadable" in log and f"moved to {aside}" in log
    assert "resuming" not in log
    assert metrics(prepared, "corrupt")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)


def fake_checkpoint(path: Path, key: str, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step, "callbacks": {RunRecord.__qualname__: {"key": key}}}, path)


def test_resume_only_a_part_way_run_of_the_same_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run = tmp_path / "run-abc"
    fake_checkpoint(run / "last.ckpt", "abc", 4)
    assert resume_from(run, "abc", max_steps=12) == run / "last.ckpt"
    for key, step, why in (("abc", 12, "a finished run"), ("other", 4, "other settings, code or inputs")):
        fake_checkpoint(run / "last.ckpt", key, step)
        with caplog.at_level(logging.INFO):
            assert resume_from(run, "abc", max_steps=12) is None
        assert why in caplog.text and not run.exists()  # cleared: the fresh run starts from nothing
    run.mkdir()
    (run / "last.ckpt").write_bytes(b"not a checkpoint")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert resume_from(run, "abc", max_steps=12) is None
    assert (tmp_path / "run-abc.unreadable.ckpt").read_bytes() == b"not a checkpoint"
    assert len(caplog.records) == 1 and str(run / "last.ckpt") in caplog.text


def test_seeded_batches_are_one_stream_across_windows_ranks_and_data_epochs() -> None:
    n, b = 23, 4  # 5 full batches per data epoch, 3 examples dropped
    whole = SeededBatches(n, b, seed=3, window=12, start=lambda: 0)
    stream = list(whole)
    assert [tag for batch in stream for tag, _ in batch] == [g for g in range(12) for _ in range(b)]
    position = [0]
    windows = SeededBatches(n, b, seed=3, window=4, start=lambda: position[0])
    resumed = []
    for start in (0, 4, 8):  # each window from the (restored) position: one stream
        position[0] = start
        resumed += list(windows)
    assert resumed == stream
    indices = [[i for _, i in batch] for batch in stream]
    for epoch in range(2):  # each data epoch: distinct examples, a new order
        assert len(set(sum(indices[5 * epoch : 5 * epoch + 5], []))) == 20
    assert indices[:5] != indices[5:10]
    assert SeededBatches(n, b, seed=4, window=12, start=lambda: 0).batch(0).tolist() != indices[0]
    ranks = [SeededBatches(n, 2, seed=3, window=12, start=lambda: 0, rank=r, world_size=2) for r in range(2)]
    for g in range(5):  # the ranks split the single-process batch of 4
        assert sorted(np.concatenate([r.batch(g) for r in ranks]).tolist()) == sorted(whole.batch(g).tolist())
    assert [tag for tag, _ in next(iter(ranks[1]))] == [1, 1]  # tags: g * world_size + rank
    with pytest.raises(ValueError, match="do not fill one batch"):
        SeededBatches(3, 4, seed=0, window=1, start=lambda: 0)


def documents(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 200, int(rng.integers(2, 20))) for _ in range(int(rng.integers(1, 8)))]
            for _ in range(60)]


def test_seeded_masks_are_a_function_of_the_batch_tag() -> None:
    data = TaggedDataset(InstanceDataset(create_packed_instances(documents(), 32)))
    collate = PretrainingCollator("mlm", 200, seed=5)
    first, again, other = (collate(data[[(tag, i) for i in range(8)]]) for tag in (7, 7, 8))
    assert first["batch_index"] == 7 and torch.equal(first["mlm_labels"], again["mlm_labels"])
    assert not torch.equal(first["mlm_labels"], other["mlm_labels"])
    with pytest.raises(ValueError, match="tagged"):
        collate([data.dataset[0]])


def test_heldout_losses_sum_to_the_models_loss() -> None:
    torch.manual_seed(0)
    model = BertForPretraining(BertConfig(vocab_size=200, num_layers=1, hidden_size=32, num_heads=2,
                                          intermediate_size=64, max_position_embeddings=64)).eval()
    dataset = InstanceDataset(create_nsp_instances(documents(), 48, dupe_factor=1))
    for objective, causal in (("mlm_nsp", False), ("ltr", True)):
        batch = PretrainingCollator(objective, 200, fixed_mask_seed=1)([dataset[i] for i in range(6)])
        loss_sum, count = heldout_losses(model, batch, causal, chunk=7)  # chunks smaller than the positions
        with torch.no_grad():
            out = model(**{k: v for k, v in batch.items() if k != "next_sentence_label"}, causal=causal)
        assert count.tolist() == (batch["mlm_labels"] != -100).sum(1).tolist() and int(count.sum()) == out.mlm_count
        assert float(loss_sum.sum() / count.sum()) == pytest.approx(float(out.mlm_loss), rel=1e-5)


def test_multirun_sweeps_a_model_setting(prepared: Path) -> None:  # noqa: F811
    done = stage("pretrain", prepared, "-m", "model.num_layers=1,2", "name=sweep_L${model.num_layers}",
                 "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "#0 : " in done.stdout + done.stderr and "#1 : " in done.stdout + done.stderr
    for layers in (1, 2):  # each job exports under its own name
        assert load_plain(prepared / f"pretrain/sweep_L{layers}")[1].num_layers == layers


def test_gpu_profile_configures_and_starts_on_cpu(prepared: Path) -> None:  # noqa: F811
    """The paper-scale profile with its GPU `impl` (bf16 autocast, torch.compile, devices=auto) on a CPU."""
    done = subprocess.run(
        [sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", "profile=gpu", "name=gpu", "logger=csv",
         "model=tiny", "pretrain.batch_size=4", "pretrain.max_steps=2", "pretrain.warmup_steps=1",
         "pretrain.val_every_steps=2"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "bf16" in done.stderr and "max_steps=2` reached" in done.stderr + done.stdout
    assert json.loads((prepared / "pretrain/gpu/metrics.json").read_text())["steps"] == 2


def test_a_run_identical_to_a_finished_one_copies_it(prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    """Same settings, code and inputs under another name: a finished run's outputs, nothing trained."""
    done = pretrain(prepared, tmp_path, "name=twin", "impl.reuse_twins=true")
    assert done.returncode == 0, done.stderr[-3000:]
    twin = metrics(prepared, "twin")
    source = metrics(prepared, twin["trained_as"])  # "whole", or another finished run of these settings
    assert twin["name"] == "twin" and source["run_key"] == whole["run_key"] == twin["run_key"]
    assert {k: v for k, v in twin.items() if k not in ("name", "trained_as")} == {
        k: v for k, v in source.items() if k != "name"}
    model = (prepared / "pretrain" / twin["trained_as"] / "model.pt").read_bytes()
    assert (prepared / "pretrain/twin/model.pt").read_bytes() == model
    assert not list((prepared / "checkpoints" / "pretrain").glob("twin-*"))  # nothing trained, nothing resumed


def validated_steps(data: Path, name: str) -> list[int]:
    with (data / "pretrain" / name / "metrics.csv").open(newline="") as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("val/ppl")]


def kill_then_resume(data: Path, tmp: Path, name: str, *resume_args: str) -> tuple[str, subprocess.CompletedProcess]:
    """Kill run `name` at KILL_AT_STEP, rerun it with `resume_args`; the checkpoint's key and the finished rerun,
    which resumed from that checkpoint."""
    killed = pretrain(data, tmp, f"name={name}", kill_at=KILL_AT_STEP, code_hash=PINNED)
    assert killed.returncode == -9, killed.stderr[-3000:]
    last = checkpoint(data, name)
    key = RunRecord.key_of(torch.load(last, map_location="cpu", weights_only=False))
    done = pretrain(data, tmp, f"name={name}", *resume_args, code_hash=PINNED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {last}" in done.stdout + done.stderr
    return key, done


def test_a_run_resumes_with_its_global_batch_split_into_accumulation_steps(
        prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    """Killed at batch 8 x 1, resumed as 4 x 2 (impl.max_device_batch=4): the same run key, optimizer steps and
    validations; the numbers within what other mask and dropout draws move them (not bit-identical)."""
    key, done = kill_then_resume(prepared, tmp_path, "split", "impl.max_device_batch=4")
    assert "pretrain.batch_size=8: 4 x 1 device(s) x 1 node(s) x 2 accumulation step(s)" in done.stdout + done.stderr
    resumed = metrics(prepared, "split")
    assert resumed["run_key"] == key and resumed["global_batch"] == whole["global_batch"] == 8
    assert resumed["steps"] == 12 and validated_steps(prepared, "split") == validated_steps(prepared, "whole")
    assert abs(resumed["heldout_ppl"] / whole["heldout_ppl"] - 1) < 0.02


def test_a_checkpoint_loads_whether_or_not_either_model_was_compiled() -> None:
    config = BertConfig(vocab_size=50, num_layers=1, hidden_size=16, num_heads=2, intermediate_size=32,
                        max_position_embeddings=16)

    def module() -> PretrainModule:
        return PretrainModule(model=vars(config), objective={"nsp": True, "causal": False}, optim={}, seed=0)

    torch.manual_seed(0)
    saved = module()
    plain = saved.state_dict()
    saved.model = torch.compile(saved.model)  # a wrapper: its keys gain `_orig_mod.`
    wrapped = saved.state_dict()
    assert all(k.startswith("model._orig_mod.") for k in wrapped)
    for state in (plain, wrapped):
        for compiled in (False, True):
            fresh = module()
            if compiled:
                fresh.model.compile()  # how impl.compile compiles: in place, the keys stay plain
            assert fresh.state_dict().keys() == plain.keys()
            ckpt = {"state_dict": dict(state)}
            fresh.on_load_checkpoint(ckpt)
            fresh.load_state_dict(ckpt["state_dict"])  # strict: every key matches
            assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in plain.items())


@pytest.mark.slow
def test_a_run_resumes_compiled_after_a_kill_uncompiled(
        prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    key, _ = kill_then_resume(prepared, tmp_path, "compiled", "impl.compile=true")
    resumed = metrics(prepared, "compiled")
    assert resumed["run_key"] == key and resumed["steps"] == 12
    assert resumed["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-3)  # compiled kernels round otherwise


# ---------------------------------------------------------------- issue 29: checkpoints run no code; stops


class RunsCode:
    """What a malicious last.ckpt holds: unpickling it calls os.system, which creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and lines[-1].startswith("error: "), done.stderr[-3000:]
    assert sum(line.startswith("error: ") for line in lines) == 1
    return lines[-1]


def test_a_checkpoint_that_would_run_code_is_refused_in_one_line(prepared: Path, tmp_path: Path) -> None:  # noqa: F811
    """It ran (`weights_only=False`) on the next `python -m bertlab.pretrain` of the same run, exit 0."""
    killed = pretrain(prepared, tmp_path, "name=evil", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last, marker = checkpoint(prepared, "evil"), tmp_path / "PWNED"
    torch.save({"global_step": 4, "payload": RunsCode(marker)}, last)
    before = last.read_bytes()
    done = pretrain(prepared, tmp_path, "name=evil")
    assert done.returncode == 2 and not marker.exists()
    line = one_error_line(done)
    assert str(last) in line and "refusing to resume" in line and "system" in line
    assert last.read_bytes() == before and not (prepared / "pretrain/evil").exists()


def test_lightnings_own_load_of_the_checkpoint_runs_no_code(prepared: Path, tmp_path: Path) -> None:  # noqa: F811
    """`trainer.fit(ckpt_path=...)` loads the checkpoint a second time: with weights only, too (here the stage's own
    check is skipped, as if the file were swapped between the two loads), even where the environment would make
    torch's default unpickle anything (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: only an explicit `weights_only` resists it)."""
    killed = pretrain(prepared, tmp_path, "name=swap", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last, marker = checkpoint(prepared, "swap"), tmp_path / "PWNED"
    state = torch.load(last, map_location="cpu", weights_only=True)
    torch.save({**state, "payload": RunsCode(marker)}, last)
    script = tmp_path / "unchecked.py"
    script.write_text("import bertlab.pretrain as p\np.resume_from = lambda d, *a: d / 'last.ckpt'\np.run()\n")
    done = subprocess.run([sys.executable, str(script), f"data_dir={prepared}", *TINY, *RUN, "name=swap",
                           "impl.reuse_twins=false"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert done.returncode != 0 and not marker.exists(), done.stderr[-3000:]
    assert "Weights only load failed" in done.stderr


def test_a_checkpoint_of_another_model_size_under_the_run_key_is_named(prepared: Path, tmp_path: Path) -> None:  # noqa: F811
    killed = pretrain(prepared, tmp_path, "name=other_size", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last = checkpoint(prepared, "other_size")
    state = torch.load(last, map_location="cpu", weights_only=True)
    name = "model.encoder.embeddings.word_embeddings.weight"
    shape = tuple(state["state_dict"][name].shape)
    state["state_dict"][name] = torch.zeros(shape[0], 2 * shape[1])
    torch.save(state, last)
    before = last.read_bytes()
    done = pretrain(prepared, tmp_path, "name=other_size")
    assert done.returncode == 2
    line = one_error_line(done)
    assert str(last) in line and name in line and f"({shape[0]}, {2 * shape[1]})" in line and f"{shape}" in line
    assert last.read_bytes() == before


# The pretraining run slowed to 0.3 s a step from step READY_AT on, which it announces on stdout with its pid: time
# to send a signal while it trains, after its step-4 checkpoint.
SLOW_SCRIPT = """
import os, sys, time
import bertlab.pretrain, bertlab.pretrain_module as m
step = m.PretrainModule.training_step
def training_step(self, batch, i):
    if self.global_step >= int(os.environ["READY_AT"]):
        if self.global_step == int(os.environ["READY_AT"]):
            print("READY", os.getpid(), flush=True)
        time.sleep(0.3)
    return step(self, batch, i)
m.PretrainModule.training_step = training_step
bertlab.pretrain.run()
"""


def slow_pretrain(data: Path, tmp: Path, name: str, stderr: Path, launcher: list[str] | None = None,
                  env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """The slowed run started (through `launcher`, e.g. a stand-in for DVC), once it is training past step READY_AT:
    the process started and the pretraining process's pid."""
    script = tmp / "slow.py"
    script.write_text(SLOW_SCRIPT)
    cmd = [sys.executable, str(script), f"data_dir={data}", *TINY, *RUN, "impl.reuse_twins=false", f"name={name}"]
    proc = subprocess.Popen([*(launcher or []), *cmd], stdout=subprocess.PIPE, stderr=stderr.open("w"), text=True,
                            env={**os.environ, "READY_AT": "5", **(env or {})})
    for line in proc.stdout:  # the progress bar writes there too, without line ends
        if "READY " in line:
            return proc, int(line.split("READY ")[1].split()[0])
    raise AssertionError(f"the run ended before step 5:\n{stderr.read_text()[-3000:]}")


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_pretraining_in_seconds_in_one_line_and_keeps_its_checkpoint(
        signum: int, prepared: Path, tmp_path: Path) -> None:  # noqa: F811
    proc, pid = slow_pretrain(prepared, tmp_path, f"stop_{signum}", tmp_path / "stderr")
    start = time.perf_counter()
    os.kill(pid, signum)
    proc.wait(timeout=60)
    stopped = time.perf_counter() - start
    print(f"{signal.Signals(signum).name}: stopped {stopped:.2f} s after the signal")
    assert stopped < 30 and proc.returncode == 128 + signum  # one step; under heavy load, seconds
    line = one_error_line(subprocess.CompletedProcess([], proc.returncode, "", (tmp_path / "stderr").read_text()))
    assert line.startswith(f"error: stopped by {signal.Signals(signum).name}")
    assert torch.load(checkpoint(prepared, f"stop_{signum}"), weights_only=True)["global_step"] == 4
    assert not (prepared / f"pretrain/stop_{signum}").exists()


def test_a_watched_parent_that_dies_stops_its_stage(tmp_path: Path) -> None:
    """`watch_parent` alone: the stage's parent (a shell under a stand-in for DVC) is SIGTERMed; within seconds the
    stage raises `Interrupted` (here it prints the signal)."""
    child = ("import os, time, bertlab.stage as s\n"
             "try:\n    s.stop_on_signals(); print('READY', os.getpid(), flush=True); time.sleep(60)\n"
             "except s.Interrupted as stop:\n    open(os.environ['OUT'], 'w').write(str(stop.signum))\n")
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                               "/bin/sh", "-c", f"{sys.executable} -c \"$0\"; true", child],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "DVC_STAGE": "stand-in", "OUT": str(tmp_path / "out")})
    pid = int(parent.stdout.readline().split()[1])
    parent.send_signal(signal.SIGTERM)
    parent.wait(timeout=10)
    deadline = time.perf_counter() + 10
    while not gone(pid) and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert gone(pid) and (tmp_path / "out").read_text() == str(int(signal.SIGTERM))


@pytest.mark.slow
def test_a_dvc_stop_leaves_no_orphan_and_the_rerun_equals_the_uninterrupted_run(
        prepared: Path, whole: dict, tmp_path: Path) -> None:  # noqa: F811
    """SIGTERM to `dvc repro` ended DVC at once and left `python -m bertlab.pretrain` training as an orphan."""
    shell = ["python3", "-c", "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)",
             "/bin/sh", "-c", '"$0" "$@"']
    proc, pid = slow_pretrain(prepared, tmp_path, "orphan", tmp_path / "stderr", launcher=shell,
                              env={"DVC_STAGE": "pretrain@orphan"})
    start = time.perf_counter()
    proc.send_signal(signal.SIGTERM)  # the stand-in for DVC dies of it, its shell and the stage live on
    proc.wait(timeout=10)
    while not gone(pid) and time.perf_counter() - start < 30:
        time.sleep(0.1)
    print(f"the orphaned stage ended {time.perf_counter() - start:.2f} s after its parent's SIGTERM")
    assert gone(pid) and time.perf_counter() - start < 15
    assert (tmp_path / "stderr").read_text().strip().splitlines()[-1].startswith("error: stopped by SIGTERM")
    assert not (prepared / "pretrain/orphan").exists()
    done = pretrain(prepared, tmp_path, "name=orphan")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stdout + done.stderr
    assert metrics(prepared, "orphan")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert curve(prepared, "orphan") == curve(prepared, "whole")
