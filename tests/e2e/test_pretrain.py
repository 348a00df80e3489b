"""The pretrain stage: its exports, per-instance held-out losses with their unigram floor, and its checkpoints: a
SIGKILLed run resumed ends as the uninterrupted one, also with its global batch split otherwise or compiled; a code
change, a finished run or an unreadable checkpoint trains from scratch."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertlab.modeling.export import load_plain
from bertlab.runs import pretrain_dir
from bertlab.study import pretrain_encoder
from bertlab.training.callbacks import RunRecord
from tests.helpers import KILL_AT_STEP, PINNED, RUN, TINY, checkpoint, pretrain_patched, stage, validated_steps

def metrics(data: Path, name: str) -> dict:
    """The record of run `name` (by hand: at seed 1)."""
    return json.loads((pretrain_dir(data, name, 1) / "metrics.json").read_text())


def curve(data: Path, name: str) -> list[tuple]:
    """The logged rows of metrics.csv (no timings: those are metrics.json's `throughput`)."""
    with (pretrain_dir(data, name, 1) / "metrics.csv").open(newline="") as f:
        return [tuple(sorted(row.items())) for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def whole(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The uninterrupted run."""
    done = pretrain_patched(prepared, tmp_path_factory.mktemp("whole"), "name=whole")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    return metrics(prepared, "whole")


def test_pretrain_exports_model_and_held_out_perplexity(prepared: Path) -> None:
    done = stage("pretrain", prepared, "name=bert", "pretrain.dropout=0.0")
    assert done.returncode == 0, done.stderr[-3000:]
    out = pretrain_dir(prepared, "bert", 1)
    result = json.loads((out / "metrics.json").read_text())
    assert result["steps"] == 4 and result["shape"]["num_layers"] == 1
    assert 1 < result["heldout_ppl"] < 1000
    rate = result["throughput"]  # steps 2-4 of 8 x 64 positions timed (the first compiles), no peak on a CPU
    assert 0 < rate["tokens"] <= 3 * 512 and rate["tokens_per_second"] > 0 and rate["mfu"] is None
    model, config = load_plain(out)
    assert config.hidden_size == 32 and model.nsp is not None
    assert config.dropout == config.attention_dropout == 0.0  # pretrained without dropout, as asked
    assert (out / "hf/config.json").exists() and (out / "metrics.csv").exists()
    assert (out / "hf/tokenizer.json").read_bytes() == (prepared / "tokenizer/tokenizer.json").read_bytes()
    card = (out / "hf/README.md").read_text()
    assert (f"{result['heldout_ppl']:.1f}, against {result['heldout_unigram_ppl']:.1f} for a unigram model" in card
            and "4 steps of 512 tokens" in card)
    assert not list((prepared / "checkpoints/pretrain").glob("bert-*"))  # removed once the outputs are written


@pytest.mark.parametrize(("objective", "stats_key"), [("mlm_nsp", "nsp"), ("ltr", "packed_next_token")])
def test_heldout_items_recompute_the_perplexity_and_its_unigram_floor(
        prepared: Path, objective: str, stats_key: str) -> None:
    name = f"items_{objective}"
    done = stage("pretrain", prepared, f"name={name}", f"objective={objective}", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = metrics(prepared, name)
    items = json.loads((pretrain_dir(prepared, name, 1) / "heldout_items.json").read_text())
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


def test_an_objective_variant_is_its_properties_under_its_own_name(prepared: Path) -> None:
    """A masked LM that shows every chosen token as [MASK], named for itself: it trains on packed text without NSP
    as `mlm` does, and its name is in its record and model card (the report groups curves by it)."""
    done = stage("pretrain", prepared, "name=variant", "objective=mlm", "objective.name=mlm_mask_only",
                 "objective.mask_replace_prob=1.0", "objective.random_replace_prob=0.0", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    result = metrics(prepared, "variant")
    assert (result["objective"], result["nsp"], result["causal"], result["heldout_kind"]) == (
        "mlm_mask_only", False, False, "masked-token")
    assert "A bertlab encoder: `mlm_mask_only`" in (pretrain_dir(prepared, "variant", 1) / "hf/README.md").read_text()
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    assert result["heldout_unigram_ppl"] == pytest.approx(stats["heldout_unigram_ppl"]["packed"], rel=1e-12)


def test_heldout_positions_are_masked_at_15_percent_whatever_rate_trains(prepared: Path) -> None:
    done = stage("pretrain", prepared, "name=rate40", "objective.mlm_probability=0.4", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    items = json.loads((pretrain_dir(prepared, "rate40", 1) / "heldout_items.json").read_text())
    floor = items["floor"]
    heldout = np.load(prepared / "pretrain_data/heldout_nsp/input_ids.npy")
    assert 0.1 < sum(floor["count"]) / int((heldout >= 5).sum()) < 0.2   # not ~40%
    stats = json.loads((prepared / "pretrain_data/stats.json").read_text())
    floor_ppl = math.exp(sum(floor["loss_sum"]) / sum(floor["count"]))
    assert floor_ppl == pytest.approx(stats["heldout_unigram_ppl"]["nsp"], rel=1e-12)   # the 15% run's positions


def test_unigram_counts_are_the_training_tokens(prepared: Path) -> None:
    counts = np.load(prepared / "pretrain_data/unigram_counts.npy")
    train = np.load(prepared / "pretrain_data/train_packed/input_ids.npy")
    assert counts.sum() == int((train != 0).sum()) and counts[0] == 0
    assert counts[3] == len(train) + json.loads((prepared / "pretrain_data/stats.json").read_text())[
        "documents"]["train"] - 1  # [SEP]: one per instance, one between documents


def test_sigkill_then_rerun_equals_the_uninterrupted_run(prepared: Path, whole: dict, tmp_path: Path) -> None:
    killed = pretrain_patched(prepared, tmp_path, "name=killed", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9, killed.stderr[-3000:]  # SIGKILL
    assert not (prepared / "pretrain/killed").exists()  # no half-written export
    last = checkpoint(prepared, "killed")
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == 4
    done = pretrain_patched(prepared, tmp_path, "name=killed")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming killed-1 from step 4 (its checkpoint: {last})" in done.stdout + done.stderr
    resumed = metrics(prepared, "killed")
    print(f"held-out ppl: uninterrupted {whole['heldout_ppl']!r}, killed + resumed {resumed['heldout_ppl']!r}, "
          f"relative difference {abs(resumed['heldout_ppl'] / whole['heldout_ppl'] - 1):.3g}")
    assert resumed["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert resumed["steps"] == whole["steps"] == 12
    assert resumed["train_seconds"] >= round(state["callbacks"]["RunRecord"]["train_seconds"], 1) > 0
    # the loop's non-padding tokens: the earlier process's, carried over, then every step but this one's first
    assert 0 < state["callbacks"]["Throughput"]["tokens"] < resumed["throughput"]["tokens"] < whole["throughput"][
        "tokens"]
    assert curve(prepared, "killed") == curve(prepared, "whole")  # every step logged once, the same numbers
    steps = [int(r["step"]) for r in csv.DictReader((pretrain_dir(prepared, "killed", 1) / "metrics.csv").open())
             if r["train/loss"]]
    assert steps == [9]  # log_every_n_steps=10 over 12 steps: one training row, not lost to the kill
    items = [json.loads((pretrain_dir(prepared, n, 1) / "heldout_items.json").read_text()) for n in ("killed", "whole")]
    np.testing.assert_allclose(items[0]["model"]["loss_sum"], items[1]["model"]["loss_sum"], rtol=1e-6)


def test_a_code_change_trains_from_scratch(prepared: Path, whole: dict, tmp_path: Path) -> None:
    killed = pretrain_patched(prepared, tmp_path, "name=code", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    old = checkpoint(prepared, "code")
    done = pretrain_patched(prepared, tmp_path, "name=code", code_hash="0" * 64)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    assert old.exists()  # another key's directory: left alone, never used
    assert metrics(prepared, "code")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert metrics(prepared, "code")["steps"] == 12


def test_a_finished_run_rerun_trains_from_scratch(prepared: Path, whole: dict, tmp_path: Path) -> None:
    done = pretrain_patched(prepared, tmp_path, "name=whole")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" not in done.stderr + done.stdout
    again = metrics(prepared, "whole")
    assert again["steps"] == 12 and again["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert len(curve(prepared, "whole")) > 3


def test_an_unreadable_checkpoint_is_moved_aside_and_the_run_starts_afresh(
        prepared: Path, whole: dict, tmp_path: Path) -> None:
    killed = pretrain_patched(prepared, tmp_path, "name=corrupt", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last = checkpoint(prepared, "corrupt")
    last.write_bytes(last.read_bytes()[:1000])  # truncated, as by a full disk
    done = pretrain_patched(prepared, tmp_path, "name=corrupt")
    assert done.returncode == 0, done.stderr[-3000:]
    aside = last.parent.with_name(f"{last.parent.name}.unreadable.ckpt")
    log = done.stdout + done.stderr
    assert aside.exists() and f"{last} is unreadable" in log and f"moved to {aside}" in log
    assert "resuming" not in log
    assert metrics(prepared, "corrupt")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)


def test_a_short_phase_needs_its_instances(prepared: Path, tmp_path: Path) -> None:
    missing = stage("pretrain", prepared, "name=nophase", "pretrain.short_seq_fraction=0.5")
    assert missing.returncode == 2 and "set pretrain_data.short_seq_length" in missing.stderr.strip().splitlines()[-1]
    for part in ("download", "tokenizer"):
        shutil.copytree(prepared / part, tmp_path / part)
    done = stage("pretrain_data", tmp_path, "pretrain_data.short_seq_length=16")
    assert done.returncode == 0, done.stderr[-3000:]
    assert np.load(tmp_path / "pretrain_data/train_nsp_short/input_ids.npy").shape[1] == 16
    done = stage("pretrain", tmp_path, "name=phased", "pretrain.short_seq_fraction=0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(tmp_path, "phased")["max_seq_length"] == 64


def test_multirun_sweeps_a_model_setting(prepared: Path) -> None:
    done = stage("pretrain", prepared, "-m", "model.num_layers=1,2", "name=sweep_L${model.num_layers}",
                 "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "#0 : " in done.stdout + done.stderr and "#1 : " in done.stdout + done.stderr
    for layers in (1, 2):  # each job exports under its own name
        assert load_plain(pretrain_dir(prepared, f"sweep_L{layers}", 1))[1].num_layers == layers


def test_runs_at_once_count_each_processs_start_up_once(prepared: Path) -> None:
    """Four runs, two at once (Hydra's joblib launcher: two worker processes): a process's first run records its
    start-up, its later runs none (not the time of the runs before them)."""
    done = stage("pretrain", prepared, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2,3,4",
                 "name=workers", "pretrain.max_steps=2")
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(f.read_text()) for f in (prepared / "timing" / "pretrain").glob("workers-*.json")]
    assert len(records) == 4 and 1 <= sum(r["startup_seconds"] > 0 for r in records) <= 2  # (a worker may run 3)


def test_runs_at_once_beside_ddp_are_refused_before_any_step(prepared: Path) -> None:
    """A multirun whose jobs run at once (Hydra's joblib launcher), each asking for DDP: refused in its one line before
    any step (the launcher may stop the other job at the first's error), exit 2, no run folder."""
    done = stage("pretrain", prepared, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "impl.devices=2",
                 "seed=1,2", "name=at_once")
    errors = {line for line in done.stderr.splitlines() if line.startswith("error: ")}  # a job's (the launcher may
    assert done.returncode == 2 and errors == {  # stop the other at the first)
        "error: hydra.launcher.n_jobs=2: runs at once share one device; with impl.devices=2 (several: DDP) set "
        "hydra.launcher.n_jobs=1"}, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith("error: ")
    assert not (prepared / "pretrain" / "at_once").exists()


def test_gpu_profile_configures_and_starts_on_cpu(prepared: Path) -> None:
    """The paper-scale profile with its GPU `impl` (bf16 autocast, torch.compile, devices=auto) on a CPU."""
    done = subprocess.run(
        [sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", "out_dir=${data_dir}", "profile=gpu",
         "name=gpu", "logger=csv",
         "model=tiny", "pretrain.batch_size=4", "pretrain.max_steps=2", "pretrain.warmup_steps=1",
         "pretrain.val_every_steps=2"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Using bfloat16 Automatic Mixed Precision" in done.stderr
    assert metrics(prepared, "gpu")["steps"] == 2


def test_a_run_identical_to_a_finished_one_copies_it(prepared: Path, whole: dict, tmp_path: Path) -> None:
    """Same settings, code and inputs under another name: a finished run's outputs, nothing trained."""
    done = pretrain_patched(prepared, tmp_path, "name=twin", "impl.reuse_twins=true")
    assert done.returncode == 0, done.stderr[-3000:]
    twin = metrics(prepared, "twin")
    trained = prepared / "pretrain" / pretrain_encoder(twin["trained_as"]) / twin["trained_as"]  # "whole-1", or
    source = json.loads((trained / "metrics.json").read_text())  # another finished run of these settings
    assert (twin["name"], twin["encoder"], twin["seed"]) == ("twin-1", "twin", 1)
    assert source["run_key"] == whole["run_key"] == twin["run_key"]
    assert {k: v for k, v in twin.items() if k not in ("name", "encoder", "trained_as")} == {
        k: v for k, v in source.items() if k not in ("name", "encoder")}
    assert (pretrain_dir(prepared, "twin", 1) / "model.pt").read_bytes() == (trained / "model.pt").read_bytes()
    assert not list((prepared / "checkpoints" / "pretrain").glob("twin-*"))  # nothing trained, nothing resumed


def kill_then_resume(data: Path, tmp: Path, name: str, *resume_args: str) -> tuple[str, subprocess.CompletedProcess]:
    """Kill run `name` at KILL_AT_STEP, rerun it with `resume_args`; the checkpoint's key and the finished rerun,
    which resumed from that checkpoint."""
    killed = pretrain_patched(data, tmp, f"name={name}", kill_at=KILL_AT_STEP, code_hash=PINNED)
    assert killed.returncode == -9, killed.stderr[-3000:]
    last = checkpoint(data, name)
    key = RunRecord.key_of(torch.load(last, map_location="cpu", weights_only=False))
    done = pretrain_patched(data, tmp, f"name={name}", *resume_args, code_hash=PINNED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"(its checkpoint: {last})" in done.stdout + done.stderr
    return key, done


def test_a_run_resumes_with_its_global_batch_split_into_accumulation_steps(
        prepared: Path, whole: dict, tmp_path: Path) -> None:
    """Killed at batch 8 x 1, resumed as 4 x 2 (impl.max_device_batch=4): the same run key, optimizer steps and
    validations; the numbers within what other mask and dropout draws move them (not bit-identical)."""
    key, done = kill_then_resume(prepared, tmp_path, "split", "impl.max_device_batch=4")
    assert "pretrain.batch_size=8: 4 x 1 device(s) x 1 node(s) x 2 accumulation step(s)" in done.stdout + done.stderr
    resumed = metrics(prepared, "split")
    assert resumed["run_key"] == key and resumed["global_batch"] == whole["global_batch"] == 8
    assert resumed["steps"] == 12 and validated_steps(prepared, "split") == validated_steps(prepared, "whole")
    assert abs(resumed["heldout_ppl"] / whole["heldout_ppl"] - 1) < 0.02


@pytest.mark.slow
def test_a_run_resumes_compiled_after_a_kill_uncompiled(
        prepared: Path, whole: dict, tmp_path: Path) -> None:
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


def test_a_checkpoint_that_would_run_code_is_refused_in_one_line(prepared: Path, tmp_path: Path) -> None:
    """It ran (`weights_only=False`) on the next `python -m bertlab.pretrain` of the same run, exit 0."""
    killed = pretrain_patched(prepared, tmp_path, "name=evil", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last, marker = checkpoint(prepared, "evil"), tmp_path / "PWNED"
    torch.save({"global_step": 4, "payload": RunsCode(marker)}, last)
    before = last.read_bytes()
    done = pretrain_patched(prepared, tmp_path, "name=evil")
    assert done.returncode == 2 and not marker.exists()
    line = one_error_line(done)
    assert str(last) in line and "refusing to resume" in line and "system" in line
    assert last.read_bytes() == before and not (prepared / "pretrain/evil").exists()


def test_lightnings_own_load_of_the_checkpoint_runs_no_code(prepared: Path, tmp_path: Path) -> None:
    """`trainer.fit(ckpt_path=...)` loads the checkpoint a second time: with weights only, too (here the stage's own
    check is skipped, as if the file were swapped between the two loads), even where the environment would make
    torch's default unpickle anything (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: only an explicit `weights_only` resists it)."""
    killed = pretrain_patched(prepared, tmp_path, "name=swap", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last, marker = checkpoint(prepared, "swap"), tmp_path / "PWNED"
    state = torch.load(last, map_location="cpu", weights_only=True)
    torch.save({**state, "payload": RunsCode(marker)}, last)
    script = tmp_path / "unchecked.py"
    script.write_text("import bertlab.pretrain as p, bertlab.training.pretraining as t\n"
                      "t.resume_from = lambda d, *a: d / 'last.ckpt'\np.run()\n")
    done = subprocess.run([sys.executable, str(script), f"data_dir={prepared}", *TINY, *RUN, "name=swap",
                           "impl.reuse_twins=false"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert done.returncode != 0 and not marker.exists(), done.stderr[-3000:]
    assert "Weights only load failed" in done.stderr


def test_a_checkpoint_of_another_model_size_under_the_run_key_is_named(prepared: Path, tmp_path: Path) -> None:
    killed = pretrain_patched(prepared, tmp_path, "name=other_size", kill_at=KILL_AT_STEP)
    assert killed.returncode == -9
    last = checkpoint(prepared, "other_size")
    state = torch.load(last, map_location="cpu", weights_only=True)
    name = "model.encoder.embeddings.word_embeddings.weight"
    shape = tuple(state["state_dict"][name].shape)
    state["state_dict"][name] = torch.zeros(shape[0], 2 * shape[1])
    torch.save(state, last)
    before = last.read_bytes()
    done = pretrain_patched(prepared, tmp_path, "name=other_size")
    assert done.returncode == 2
    line = one_error_line(done)
    assert str(last) in line and name in line and f"({shape[0]}, {2 * shape[1]})" in line and f"{shape}" in line
    assert last.read_bytes() == before


# The pretraining run slowed to 0.3 s a step from step READY_AT on, which it announces on stdout with its pid: time
# to send a signal while it trains, after its step-4 checkpoint.
SLOW_SCRIPT = """
import os, sys, time
import bertlab.pretrain, bertlab.training.pretrain_module as m
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
                  env: dict | None = None, extra: tuple[str, ...] = (),
                  new_session: bool = False) -> tuple[subprocess.Popen, int]:
    """The slowed run started (through `launcher`, e.g. a stand-in for DVC; in a process group of its own with
    `new_session`), once it is training past step READY_AT: the process started and the pretraining process's pid."""
    script = tmp / "slow.py"
    script.write_text(SLOW_SCRIPT)
    cmd = [sys.executable, str(script), f"data_dir={data}", *TINY, *RUN, "impl.reuse_twins=false", f"name={name}",
           *extra]
    proc = subprocess.Popen([*(launcher or []), *cmd], stdout=subprocess.PIPE, stderr=stderr.open("w"), text=True,
                            env={**os.environ, "READY_AT": "5", **(env or {})}, start_new_session=new_session)
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
        signum: int, prepared: Path, tmp_path: Path) -> None:
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


def test_a_signal_to_its_process_group_stops_a_run_with_loader_workers_in_one_line(
        prepared: Path, tmp_path: Path) -> None:
    """Ctrl-C and `timeout` signal the whole process group: the data loader's workers die of it too, and the loader's
    error about them ("DataLoader worker ... is killed by signal") must not replace the one-line stop."""
    proc, pid = slow_pretrain(prepared, tmp_path, "stop_group", tmp_path / "stderr", extra=("impl.num_workers=2",),
                              new_session=True)
    os.killpg(os.getpgid(pid), signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    line = one_error_line(subprocess.CompletedProcess([], proc.returncode, "", (tmp_path / "stderr").read_text()))
    assert line.startswith("error: stopped by SIGTERM")


def test_a_watched_parent_that_dies_stops_its_stage(tmp_path: Path) -> None:
    """`watch_parent` alone: the stage's parent (a shell under a stand-in for DVC) is SIGTERMed; within seconds the
    stage raises `Interrupted` (here it prints the signal)."""
    child = ("import os, time, bertlab.guards as g, bertlab.errors as e\n"
             "try:\n    g.stop_on_signals(); print('READY', os.getpid(), flush=True); time.sleep(60)\n"
             "except e.Interrupted as stop:\n    open(os.environ['OUT'], 'w').write(str(stop.signum))\n")
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
        prepared: Path, whole: dict, tmp_path: Path) -> None:
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
    done = pretrain_patched(prepared, tmp_path, "name=orphan")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming orphan-1 from step " in done.stdout + done.stderr
    assert metrics(prepared, "orphan")["heldout_ppl"] == pytest.approx(whole["heldout_ppl"], rel=1e-6)
    assert curve(prepared, "orphan") == curve(prepared, "whole")


@pytest.mark.parametrize("allocation", [{}, {"SLURM_JOB_ID": "7"}], ids=["outside", "inside"])
def test_srun_on_path_gives_no_slurm_hint_outside_an_allocation(prepared: Path, tmp_path: Path,
                                                                allocation: dict[str, str]) -> None:
    """A login node has `srun` (here a fake one): a run SLURM did not start prints none of Lightning's hints to use
    it (it gave three a run); inside an allocation (`SLURM_JOB_ID`), where a missing srun is a mistake, it does."""
    fake = tmp_path / "bin" / "srun"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "BERTLAB_DATA_MIRROR"}
    env |= allocation | {"PATH": f"{fake.parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "bertlab.pretrain", f"data_dir={prepared}", *TINY,
                           f"out_dir={tmp_path}", "name=quiet", "pretrain.max_steps=2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("`srun` command is available" in done.stdout + done.stderr) == bool(allocation), done.stderr[-3000:]
