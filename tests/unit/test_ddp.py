"""Lightning DDP with 2 CPU processes over gloo: every objective and task kind trains with plain `ddp` (no unused
parameters), writes its output once, and scores as a 1-process run at the same global batch (evaluation alone:
exactly; after training: within the tolerances below, measured on these tiny runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bertlab.data.sampler import SeededBatches
from bertlab.data.tasks import Task
from bertlab.finetune_model import FinetuneModule
from bertlab.model import BertConfig, BertEncoder
from bertlab.pretrain_module import PretrainModule
from tests.unit.test_finetune import ENV, config, data_dir  # noqa: F401  (data_dir: fine-tuning's fixture)
from tests.unit.test_stages import TINY, prepared, stage  # noqa: F401  (prepared: the stages' shared fixture)

DDP = ["impl.accelerator=cpu", "impl.devices=2", "impl.strategy=ddp", "impl.threads=1"]
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
    two = pretrain(prepared, f"ddp_{objective}", f"objective={objective}", "pretrain.batch_size=4", *DDP)
    assert two["steps"] == one["steps"] == 4
    assert two["heldout_unigram_ppl"] == one["heldout_unigram_ppl"]  # the same held-out positions, each once
    assert abs(two["heldout_ppl"] / one["heldout_ppl"] - 1) < PPL_TOLERANCE
    assert two["heldout_ppl"] != one["heldout_ppl"]  # per-rank masks and dropout: not the 1-process draws


@pytest.mark.slow
def test_pretraining_evaluation_alone_under_ddp_is_exact(prepared: Path) -> None:  # noqa: F811
    one = pretrain(prepared, "eval_one", "pretrain.max_steps=0")
    two = pretrain(prepared, "eval_ddp", "pretrain.max_steps=0", *DDP)
    assert two["heldout_ppl"] == one["heldout_ppl"] and two["steps"] == 0


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
    two = finetune_ddp(data_dir, f"ddp_{kind}", *CELLS[kind], "finetune.batch_size=8")
    assert two["eval_examples"] == one["eval_examples"] and two["steps"] == one["steps"]
    assert abs(two["headline"] - one["headline"]) <= METRIC_TOLERANCE


@pytest.mark.parametrize("kind", [pytest.param(k, marks=[] if k == "span" else pytest.mark.slow)
                                  for k in ("span", "tagging", "classification")])
def test_finetuning_evaluation_alone_under_ddp_is_exact(data_dir: Path, kind: str) -> None:  # noqa: F811
    # lr 1e-30: the training steps run but change no weight (every update is below float32's resolution)
    one = finetune_one(data_dir, f"eval_one_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=16")
    two = finetune_ddp(data_dir, f"eval_ddp_{kind}", *CELLS[kind], "finetune.lr=1e-30", "finetune.batch_size=8")
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
    module.loss(module(b), b).backward()
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
