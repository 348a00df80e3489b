"""What lets plain DDP run and what differs between its ranks, checked in one process: every trainable parameter is in
the loss, the ranks shard the one-process batch, and their dropout differs (DDP's processes: tests/e2e/test_ddp.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bertlab.data.sampler import SeededBatches
from bertlab.data.tasks import Task
from bertlab.modeling.model import BertConfig, BertEncoder
from bertlab.training.finetune_module import FinetuneModule
from bertlab.training.recipe import ModuleSettings
from bertlab.training.pretrain_module import PretrainModule

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
    module = FinetuneModule(BertEncoder(TINY_CONFIG), toy_task(kind, labels),
                            ModuleSettings(mode=mode, bilstm=bilstm, features="sum_all"), causal=causal)
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
