"""Pretraining's parts in one process: which checkpoint resumes, the seeded batch stream and masks, per-instance
held-out losses, and checkpoints that load compiled or not (the stage's processes: tests/e2e/test_pretrain.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from bertlab.data.instances import InstanceDataset, create_nsp_instances, create_packed_instances
from bertlab.data import unigram
from bertlab.data.masking import PretrainingCollator
from bertlab.data.sampler import PhasedBatches, SeededBatches, TaggedDataset
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.data.vocab import MASK_ID
from bertlab.training.pretraining import resume_from
from bertlab.training.callbacks import RunRecord
from bertlab.training.pretrain_datamodule import PretrainData
from bertlab.training.pretrain_module import PretrainModule, heldout_losses


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


def test_phased_batches_take_the_short_stream_then_the_long_one_from_its_start() -> None:
    position = [0]
    short = SeededBatches(40, 8, seed=3, window=3, start=lambda: position[0])
    long = SeededBatches(12, 2, seed=3, window=3, start=lambda: position[0])
    phased = PhasedBatches(short, long, boundary=4, offset=40)
    stream = []
    for start in (0, 3, 6):  # windows from the restored position, across the boundary
        position[0] = start
        stream += list(phased)
    assert [len(batch) for batch in stream] == [8] * 4 + [2] * 5
    assert [batch[0][0] for batch in stream] == list(range(9))  # tags: the global batch index
    assert [[i for _, i in b] for b in stream[:4]] == [short.batch(g).tolist() for g in range(4)]
    assert [[i - 40 for _, i in b] for b in stream[4:]] == [long.batch(g).tolist() for g in range(5)]


def test_a_short_first_phase_trains_on_short_instances_with_the_same_tokens_per_batch() -> None:
    docs = documents()
    data = PretrainData(create_nsp_instances(docs, 64, dupe_factor=1), create_nsp_instances(docs, 64, dupe_factor=1),
                        {"nsp": True, "vocab_size": 200}, batch_size=4, seed=0, checkpoint_every=3,
                        heldout_mask_seed=0, eval_batch_size=8, num_workers=0,
                        short=create_nsp_instances(docs, 16, dupe_factor=1), short_steps=4)
    trainer = type("Trainer", (), {"accumulate_grad_batches": 1, "global_step": 0, "global_rank": 0,
                                   "world_size": 1})()
    data.trainer = trainer
    shapes = []
    for step in (0, 3, 6):  # three checkpoint windows, the phase boundary inside the second
        trainer.global_step = step
        shapes += [tuple(b["input_ids"].shape) for b in data.train_dataloader()]
    assert [rows for rows, _ in shapes] == [16] * 4 + [4] * 5
    assert max(n for _, n in shapes[:4]) <= 16 < max(n for _, n in shapes[4:])


def documents(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, 200, int(rng.integers(2, 20))) for _ in range(int(rng.integers(1, 8)))]
            for _ in range(60)]


def test_seeded_masks_are_a_function_of_the_batch_tag() -> None:
    data = TaggedDataset(InstanceDataset(create_packed_instances(documents(), 32)))
    collate = PretrainingCollator(200, seed=5)
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
    for nsp, causal in ((True, False), (False, True)):
        batch = PretrainingCollator(200, nsp=nsp, causal=causal, fixed_mask_seed=1)([dataset[i] for i in range(6)])
        loss_sum, count = heldout_losses(model, batch, causal, chunk=7)  # chunks smaller than the positions
        with torch.no_grad():
            out = model(**{k: v for k, v in batch.items() if k != "next_sentence_label"}, causal=causal)
        assert count.tolist() == (batch["mlm_labels"] != -100).sum(1).tolist() and int(count.sum()) == out.mlm_count
        assert float(loss_sum.sum() / count.sum()) == pytest.approx(float(out.mlm_loss), rel=1e-5)


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


class Copier(torch.nn.Module):
    """A toy encoder + MLM head that has learned nothing but word frequencies and to copy what it sees: at `[MASK]`
    the unigram distribution; at a real token, half its mass on that token (under 80/10/10 a visible token is the
    answer as often as it is a random one) and half the unigram."""

    def __init__(self, logp: np.ndarray) -> None:
        super().__init__()
        self.logp = torch.from_numpy(logp).float()

    def encoder(self, input_ids: torch.Tensor, *_: object) -> tuple[torch.Tensor]:
        return (torch.nn.functional.one_hot(input_ids, len(self.logp)).float(),)

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        visible = hidden[..., MASK_ID] == 0
        return torch.where(visible[..., None], torch.log(0.5 * hidden + 0.5 * self.logp.exp()), self.logp)


def test_the_heldout_metric_gives_copying_no_credit() -> None:
    """The held-out set shows `[MASK]` at every scored position, so a copier scores exactly its unigram floor; under
    BERT's 80/10/10 rule (the training corruption) the same copier would look far better than the unigram."""
    train = create_packed_instances(documents(1), 32)
    heldout = create_packed_instances(documents(2), 32)
    logp = unigram.log_probs(unigram.token_counts(train, 200))
    data = PretrainData(train, heldout, {"vocab_size": 200}, batch_size=4, seed=0,
                        checkpoint_every=1, heldout_mask_seed=3, eval_batch_size=16, num_workers=0)
    copier = Copier(logp)

    def ratio(batches: list[dict]) -> float:
        scored = [heldout_losses(copier, b, causal=False) for b in batches]
        model = unigram.perplexity(*(torch.cat(part).numpy() for part in zip(*scored)))
        return model / unigram.perplexity(*unigram.item_losses(batches, logp))

    assert ratio(list(data.val_dataloader())) == pytest.approx(1.0, rel=1e-5)
    shown = PretrainingCollator(200, fixed_mask_seed=3)  # the same positions, 80/10/10 inputs
    visible = DataLoader(InstanceDataset(heldout), batch_size=16, collate_fn=shown)
    assert ratio(list(visible)) < 0.75  # a tenth of the positions show their answer


def test_a_hand_runs_recipe_reaches_the_module_resolved() -> None:
    """`python -m bertlab.pretrain study=size` by hand: Table 6's budget (`max_steps: ${pretrain.size_study_steps}`)
    reaches the optimizer as a number (it was the interpolation's text: a TypeError at the first step)."""
    from hydra import compose, initialize_config_dir

    from bertlab.stage import CONF_DIR
    from bertlab.training.pretraining import make_module

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", "study=size", "pretrain.size_study_steps=7",
                                                       "pretrain.size_study_warmup_steps=2"])
    module = make_module(cfg, vocab_size=64, seq=16)
    assert (module.hparams.optim["max_steps"], module.hparams.optim["warmup_steps"]) == (7, 2)
    scheduler = module.configure_optimizers()
    assert scheduler["optimizer"].param_groups[0]["lr"] < cfg.pretrain.lr  # warming up over 2 of 7 steps
