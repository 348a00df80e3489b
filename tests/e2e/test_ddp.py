"""Lightning DDP with 2 CPU processes over gloo: every objective and task kind trains with plain `ddp` (no unused
parameters: unit/test_parallel.py), writes its output once, and scores as a 1-process run at the same global batch
(the batch settings are global: each process takes half; evaluation alone: exactly; after training: within the
tolerances below, measured on these tiny runs). A run resumes on another number of processes; two torchrun "nodes"
on this machine train as one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertlab.runs import pretrain_dir
from tests.helpers import (
    ENV, KILL_AT_STEP, PINNED, RUN, TINY, cell_dir, checkpoint, finetune_config, free_port, pretrain_patched, stage,
    validated_steps,
)

# the 2-process run has the 1-process run's key (the same global batch): it must train, not copy that twin
DDP = ["impl.accelerator=cpu", "impl.devices=2", "impl.strategy=ddp", "impl.threads=1", "impl.reuse_twins=false"]
PPL_TOLERANCE = 0.02  # relative held-out perplexity gap after 4 steps (measured: 0.04% ltr, 0.09% mlm, 0.6% mlm_nsp)
METRIC_TOLERANCE = 15.0  # dev metric points after 1 epoch on tiny data (another data order, other dropout draws)


def outputs(root: Path, name: str) -> list[Path]:
    """Every output directory (and leftover scratch copy) named `name` under `root`."""
    return sorted(p for p in root.rglob(f"{name}*") if p.is_dir())


# -- pretraining ------------------------------------------------------------------------------------------------

def pretrain(data: Path, name: str, *args: str) -> dict:
    done = stage("pretrain", data, f"name={name}", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    run = pretrain_dir(data, name, 1)
    assert outputs(data / "pretrain", name) == [run.parent, run]  # once (the encoder's folder, its run's), no scratch
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.parametrize("objective", [
    "mlm",
    pytest.param("mlm_nsp", marks=pytest.mark.slow),
    pytest.param("ltr", marks=pytest.mark.slow),
])
def test_pretraining_under_ddp_matches_one_process(prepared: Path, objective: str) -> None:
    one = pretrain(prepared, f"one_{objective}", f"objective={objective}", "pretrain.batch_size=8")
    two = pretrain(prepared, f"ddp_{objective}", f"objective={objective}", "pretrain.batch_size=8", *DDP)
    assert two["steps"] == one["steps"] == 4 and two["global_batch"] == one["global_batch"] == 8
    assert two["heldout_unigram_ppl"] == one["heldout_unigram_ppl"]  # the same held-out positions, each once
    assert abs(two["heldout_ppl"] / one["heldout_ppl"] - 1) < PPL_TOLERANCE
    assert two["heldout_ppl"] != one["heldout_ppl"]  # per-rank masks and dropout: not the 1-process draws


@pytest.mark.slow
def test_pretraining_evaluation_alone_under_ddp_is_exact(prepared: Path) -> None:
    one = pretrain(prepared, "eval_one", "pretrain.max_steps=0")
    two = pretrain(prepared, "eval_ddp", "pretrain.max_steps=0", *DDP)
    assert two["heldout_ppl"] == one["heldout_ppl"] and two["steps"] == 0


def test_a_global_batch_the_processes_cannot_share_is_refused_before_training(prepared: Path) -> None:
    done = stage("pretrain", prepared, "name=odd", "pretrain.batch_size=7", *DDP)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("error: pretrain.batch_size=7 (the global batch) is not divisible "
                                                    "by the 2 processes present (devices x nodes)")
    assert not (prepared / "pretrain" / "odd").exists()


@pytest.mark.slow
def test_a_run_killed_on_one_process_resumes_on_two(prepared: Path, tmp_path: Path) -> None:
    """The same global batch on 2 processes: the same key, so the checkpoint resumes; the same steps and validations."""
    killed = pretrain_patched(prepared, tmp_path, "name=moved", kill_at=KILL_AT_STEP, code_hash=PINNED)
    assert killed.returncode == -9, killed.stderr[-3000:]
    last = checkpoint(prepared, "moved")
    done = pretrain_patched(prepared, tmp_path, "name=moved", *DDP, code_hash=PINNED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"(its checkpoint: {last})" in done.stdout + done.stderr
    whole = pretrain(prepared, "moved_whole", *RUN, "impl.reuse_twins=false")
    moved = json.loads((pretrain_dir(prepared, "moved", 1) / "metrics.json").read_text())
    assert moved["steps"] == whole["steps"] == 12 and moved["global_batch"] == 8
    assert validated_steps(prepared, "moved") == validated_steps(prepared, "moved_whole")
    assert abs(moved["heldout_ppl"] / whole["heldout_ppl"] - 1) < PPL_TOLERANCE


def test_two_torchrun_nodes_train_one_run(prepared: Path) -> None:
    """`torchrun --nnodes 2 --nproc-per-node 1` twice on this machine (node ranks 0 and 1): Lightning's DDP over both,
    `impl.num_nodes` null (torchrun's), the outputs written once by global rank zero."""
    port, env = free_port(), {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank",
         str(rank), "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "bertlab.pretrain",
         f"data_dir={prepared}", *TINY, "name=nodes", "impl.accelerator=cpu", "impl.devices=1", "impl.strategy=ddp",
         "impl.num_nodes=null", "impl.threads=1", "impl.reuse_twins=false"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for rank in (0, 1)]
    done = [node.communicate(timeout=600) for node in nodes]
    for node, (out, err) in zip(nodes, done):
        assert node.returncode == 0, err[-3000:]
        assert "pretrain.batch_size=8: 4 x 1 device(s) x 2 node(s) x 1 accumulation step(s)" in out + err
    run = pretrain_dir(prepared, "nodes", 1)
    assert outputs(prepared / "pretrain", "nodes") == [run.parent, run]
    result = json.loads((run / "metrics.json").read_text())
    assert result["steps"] == 4 and result["global_batch"] == 8 and 1 < result["heldout_ppl"] < 1000
    assert sorted(p.name for p in (prepared / "timing" / "pretrain").glob("nodes*")) == ["nodes-1.json"]


# -- fine-tuning ------------------------------------------------------------------------------------------------

CELLS = {  # name: overrides (each a cell of one task kind)
    "classification": ["task=sst2"],
    "regression": ["task=stsb"],
    "span": ["task=squad"],
    "tagging": ["task=conll2003", "finetune.max_train_examples=96"],
    "feature_based": ["task=conll2003", "finetune.mode=feature_based", "finetune.features=sum_last_four",
                      "finetune.max_train_examples=96", "finetune.lr=1e-3"],
    "bilstm": ["task=sst2", "finetune.bilstm=true"],
}
SHARED = ["profile=smoke", "out_dir=${data_dir}", "logger=csv", "finetune.encoder=tiny",
          "finetune.max_train_examples=null", "finetune.max_eval_examples=null", "finetune.epochs=1"]


def finetune_ddp(data: Path, name: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "bertlab.finetune", f"data_dir={data}", f"name={name}", *SHARED,
                           *args, *DDP], capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert outputs(data / "finetune", name) == [data / "finetune" / "tiny" / name]
    assert sorted(p.name for p in cell_dir(data, name).iterdir()) == ["items.json", "metrics.csv", "metrics.json"]
    return json.loads((cell_dir(data, name) / "metrics.json").read_text())


def finetune_one(data: Path, name: str, *args: str) -> dict:
    """The cell in this process, on one thread as the 2-process run's `impl.threads=1` (which its stage's door
    applies) gives each of its processes."""
    from bertlab.finetune import finetune

    torch.set_num_threads(1)
    return finetune(finetune_config(data, f"name={name}", *SHARED, *args)).record


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k == "classification" else pytest.mark.slow)
                                  for k in CELLS])
def test_finetuning_under_ddp_matches_one_process(finetune_data: Path, kind: str) -> None:
    one = finetune_one(finetune_data, f"one_{kind}", *CELLS[kind], "finetune.batch_size=16")
    two = finetune_ddp(finetune_data, f"ddp_{kind}", *CELLS[kind], "finetune.batch_size=16")
    assert two["eval_examples"] == one["eval_examples"] and two["steps"] == one["steps"]
    assert abs(two["headline"] - one["headline"]) <= METRIC_TOLERANCE


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k == "span" else pytest.mark.slow)
                                  for k in ("span", "tagging", "classification")])
def test_finetuning_evaluation_alone_under_ddp_is_exact(finetune_data: Path, kind: str) -> None:
    # lr 1e-30: the training steps run but change no weight (every update is below float32's resolution)
    one = finetune_one(finetune_data, f"eval_one_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=16")
    two = finetune_ddp(finetune_data, f"eval_ddp_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=16")
    assert two["metrics"] == one["metrics"]
    items = [json.loads((cell_dir(finetune_data, n) / "items.json").read_text())
             for n in (f"eval_one_{kind}", f"eval_ddp_{kind}")]
    assert items[0] == items[1]  # each dev item once, in order
