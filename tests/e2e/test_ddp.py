"""Lightning DDP with 2 CPU processes over gloo: every objective and task kind trains with plain `ddp` (no unused
parameters), writes its output once, and scores as a 1-process run at the same global batch (the batch settings are
global: each process takes half; evaluation alone: exactly; after training: within the tolerances below, measured on
these tiny runs). A run resumes on another number of processes; two torchrun "nodes" on this machine train as one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertlab.data.sampler import SeededBatches
from bertlab.data.tasks import Task
from bertlab.training.finetune_module import FinetuneModule
from bertlab.modeling.model import BertConfig, BertEncoder
from bertlab.training.pretrain_module import PretrainModule
from tests.unit.test_finetune import ENV, config, data_dir  # noqa: F401  (data_dir: fine-tuning's fixture)
from tests.e2e.test_pretrain import KILL_AT_STEP, PINNED, RUN, checkpoint, validated_steps
from tests.e2e.test_pretrain import pretrain as pretrain_patched
from tests.e2e.test_stages import TINY, prepared, stage  # noqa: F401  (prepared: the stages' shared fixture)

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
    assert outputs(data / "pretrain", name) == [data / "pretrain" / name]  # once, no scratch left behind
    return json.loads((data / "pretrain" / name / "metrics.json").read_text())


@pytest.mark.parametrize("objective", [
    "mlm",
    pytest.param("mlm_nsp", marks=pytest.mark.slow),
    pytest.param("ltr", marks=pytest.mark.slow),
])
def test_pretraining_under_ddp_matches_one_process(prepared: Path, objective: str) -> None:  # noqa: F811
    one = pretrain(prepared, f"one_{objective}", f"objective={objective}", "pretrain.batch_size=8")
    two = pretrain(prepared, f"ddp_{objective}", f"objective={objective}", "pretrain.batch_size=8", *DDP)
    assert two["steps"] == one["steps"] == 4 and two["global_batch"] == one["global_batch"] == 8
    assert two["heldout_unigram_ppl"] == one["heldout_unigram_ppl"]  # the same held-out positions, each once
    assert abs(two["heldout_ppl"] / one["heldout_ppl"] - 1) < PPL_TOLERANCE
    assert two["heldout_ppl"] != one["heldout_ppl"]  # per-rank masks and dropout: not the 1-process draws


@pytest.mark.slow
def test_pretraining_evaluation_alone_under_ddp_is_exact(prepared: Path) -> None:  # noqa: F811
    one = pretrain(prepared, "eval_one", "pretrain.max_steps=0")
    two = pretrain(prepared, "eval_ddp", "pretrain.max_steps=0", *DDP)
    assert two["heldout_ppl"] == one["heldout_ppl"] and two["steps"] == 0


def test_a_global_batch_the_processes_cannot_share_is_refused_before_training(prepared: Path) -> None:  # noqa: F811
    done = stage("pretrain", prepared, "name=odd", "pretrain.batch_size=7", *DDP)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("error: pretrain.batch_size=7 (the global batch) is not divisible "
                                                    "by the 2 processes present (devices x nodes)")
    assert not (prepared / "pretrain" / "odd").exists()


@pytest.mark.slow
def test_a_run_killed_on_one_process_resumes_on_two(prepared: Path, tmp_path: Path) -> None:  # noqa: F811
    """The same global batch on 2 processes: the same key, so the checkpoint resumes; the same steps and validations."""
    killed = pretrain_patched(prepared, tmp_path, "name=moved", kill_at=KILL_AT_STEP, code_hash=PINNED)
    assert killed.returncode == -9, killed.stderr[-3000:]
    last = checkpoint(prepared, "moved")
    done = pretrain_patched(prepared, tmp_path, "name=moved", *DDP, code_hash=PINNED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {last}" in done.stdout + done.stderr
    whole = pretrain(prepared, "moved_whole", *RUN, "impl.reuse_twins=false")
    moved = json.loads((prepared / "pretrain" / "moved" / "metrics.json").read_text())
    assert moved["steps"] == whole["steps"] == 12 and moved["global_batch"] == 8
    assert validated_steps(prepared, "moved") == validated_steps(prepared, "moved_whole")
    assert abs(moved["heldout_ppl"] / whole["heldout_ppl"] - 1) < PPL_TOLERANCE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_nodes_train_one_run(prepared: Path) -> None:  # noqa: F811
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
    assert outputs(prepared / "pretrain", "nodes") == [prepared / "pretrain" / "nodes"]
    result = json.loads((prepared / "pretrain" / "nodes" / "metrics.json").read_text())
    assert result["steps"] == 4 and result["global_batch"] == 8 and 1 < result["heldout_ppl"] < 1000
    assert sorted(p.name for p in (prepared / "timing" / "pretrain").glob("nodes*")) == ["nodes.json"]


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
SHARED = ["profile=smoke", "logger=csv", "finetune.encoder=tiny", "finetune.max_train_examples=null",
          "finetune.max_eval_examples=null", "finetune.epochs=1"]


def finetune_ddp(data: Path, name: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "bertlab.finetune", f"data_dir={data}", f"name={name}", *SHARED,
                           *args, *DDP], capture_output=True, text=True, env=ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert outputs(data / "finetune", name) == [data / "finetune" / name]
    assert sorted(p.name for p in (data / "finetune" / name).iterdir()) == ["items.json", "metrics.csv",
                                                                               "metrics.json"]
    return json.loads((data / "finetune" / name / "metrics.json").read_text())


def finetune_one(data: Path, name: str, *args: str) -> dict:
    from bertlab.finetune import finetune

    return finetune(config(data, f"name={name}", *SHARED, *args)).record


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k == "classification" else pytest.mark.slow)
                                  for k in CELLS])
def test_finetuning_under_ddp_matches_one_process(data_dir: Path, kind: str) -> None:  # noqa: F811
    one = finetune_one(data_dir, f"one_{kind}", *CELLS[kind], "finetune.batch_size=16")
    two = finetune_ddp(data_dir, f"ddp_{kind}", *CELLS[kind], "finetune.batch_size=16")
    assert two["eval_examples"] == one["eval_examples"] and two["steps"] == one["steps"]
    assert abs(two["headline"] - one["headline"]) <= METRIC_TOLERANCE


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k == "span" else pytest.mark.slow)
                                  for k in ("span", "tagging", "classification")])
def test_finetuning_evaluation_alone_under_ddp_is_exact(data_dir: Path, kind: str) -> None:  # noqa: F811
    # lr 1e-30: the training steps run but change no weight (every update is below float32's resolution)
    one = finetune_one(data_dir, f"eval_one_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=16")
    two = finetune_ddp(data_dir, f"eval_ddp_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=16")
    assert two["metrics"] == one["metrics"]
    items = [json.loads((data_dir / "finetune" / n / "items.json").read_text())
             for n in (f"eval_one_{kind}", f"eval_ddp_{kind}")]
    assert items[0] == items[1]  # each dev item once, in order


# -- no unused parameters (what lets plain DDP run), checked without processes ----------------------------------

TINY_CONFIG = BertConfig(vocab_size=50, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
                         max_position_embeddings=16)


def toy_task(kind: str, num_labels: int) -> Task:
    return Task(name="t", kind=kind, hub_id="t", config="t", text_columns=("a",), label_column="label",
                num_labels=num_labels, train_split="train", eval_splits=("validation",), metric="accuracy")


def batch(kind: str) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 50, (3, 8), generator=torch.Generator().manual_seed(0))
    out = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    targets = {"classification": {"label": torch.tensor([0, 1, 0])}, "regression": {"label": torch.ones(3)},
               "span": {"start_positions": torch.tensor([1, 2, 3]), "end_positions": torch.tensor([2, 3, 4])},
               "tagging": {"label_ids": torch.randint(0, 3, (3, 8))}}
    return out | targets[kind]


def untouched(module: torch.nn.Module) -> list[str]:
    """Trainable parameters the last backward gave no gradient."""
    return [n for n, p in module.named_parameters() if p.requires_grad and p.grad is None]


@pytest.mark.parametrize("objective,nsp,causal", [("mlm_nsp", True, False), ("mlm", False, False),
                                                  ("ltr", False, True)])
def test_pretraining_trains_exactly_the_parameters_in_its_loss(objective: str, nsp: bool, causal: bool) -> None:
    module = PretrainModule(model=vars(TINY_CONFIG), objective={"nsp": nsp, "causal": causal}, optim={}, seed=0)
    b = batch("classification")
    labels = b["input_ids"].clone()
    extra = {"next_sentence_label": b.pop("label")} if nsp else {}
    b.pop("label", None)
    module.model(**b, mlm_labels=labels, causal=causal, **extra).loss.backward()
    assert untouched(module) == []
    assert module.model.encoder.pooler.weight.requires_grad is nsp  # still in the export, as initialised


@pytest.mark.parametrize("kind,mode,bilstm,causal", [
    ("classification", "finetune", False, False), ("classification", "finetune", False, True),
    ("regression", "finetune", False, False), ("span", "finetune", False, False),
    ("tagging", "finetune", False, False), ("classification", "finetune", True, False),
    ("span", "finetune", True, True), ("tagging", "feature_based", False, False),
    ("classification", "feature_based", False, False),
])
def test_finetuning_trains_exactly_the_parameters_in_its_loss(kind: str, mode: str, bilstm: bool,
                                                              causal: bool) -> None:
    labels = {"classification": 2, "regression": 1, "span": 2, "tagging": 3}[kind]
    module = FinetuneModule(BertEncoder(TINY_CONFIG), toy_task(kind, labels), mode=mode, bilstm=bilstm, causal=causal,
                            features="sum_all")
    module.train()
    b = batch(kind)
    module.kind.loss(module(b), b).backward()
    assert untouched(module) == []
    trained = {n.split(".")[0] for n, p in module.named_parameters() if p.requires_grad}
    if mode == "feature_based":
        assert trained == {"features", "bilstm", "head"}  # the head alone trains


# -- per-rank randomness ----------------------------------------------------------------------------------------

def test_ranks_take_disjoint_shards_of_the_one_process_batch_and_their_own_tags() -> None:
    one = SeededBatches(50, 8, seed=3, window=12, start=lambda: 0)
    ranks = [SeededBatches(50, 4, seed=3, window=12, start=lambda: 0, rank=r, world_size=2) for r in (0, 1)]
    for (whole,), *parts in zip(([b] for b in one), *ranks):
        assert sorted(i for part in parts for _, i in part) == sorted(i for _, i in whole)  # same examples, once
        tags = [{t for t, _ in part} for part in parts]
        assert tags[0] != tags[1]  # masks and dropout are seeded by the tag: they differ between ranks
    assert [t for t, _ in next(iter(one))] == [0] * 8  # 1 process: the tag is the batch index, as before


def test_an_optimizer_step_sees_the_same_examples_however_its_batch_is_split() -> None:
    """Global batch 8 over 22 examples (2 steps per data epoch): 1 x 8, 2 processes x 4, 2 processes x 2 x 2
    accumulation steps; 6 optimizer steps, across data epochs."""
    def steps(micro: int, world: int, acc: int) -> list[list[int]]:
        ranks = [list(SeededBatches(22, micro, seed=3, window=6 * acc, start=lambda: 0, rank=r, world_size=world,
                                    accumulate=acc)) for r in range(world)]
        return [sorted(i for rank in ranks for batch in rank[s * acc:(s + 1) * acc] for _, i in batch)
                for s in range(6)]

    whole = steps(8, 1, 1)
    assert steps(4, 2, 1) == steps(2, 2, 2) == steps(4, 1, 2) == whole
    assert all(len(set(step)) == 8 for step in whole) and whole[:2] != whole[2:4]


@pytest.mark.parametrize("world_size", [1, 2])
def test_finetuning_dropout_differs_between_ranks_and_one_process_keeps_its_seed(world_size: int) -> None:
    draws = []
    for rank in range(world_size):
        torch.manual_seed(7)
        module = FinetuneModule(BertEncoder(TINY_CONFIG), toy_task("classification", 2))
        torch.manual_seed(7)
        module._trainer = SimpleNamespace(world_size=world_size, global_rank=rank)
        module.on_train_start()
        draws.append(torch.rand(4))
    torch.manual_seed(7)
    if world_size == 1:
        assert torch.equal(draws[0], torch.rand(4))  # untouched
    else:
        assert not torch.equal(draws[0], draws[1])
