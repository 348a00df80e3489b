"""What makes the pretraining step fast without changing a number: one compiled graph a step at the `gpu` settings
(no host sync), gradient clipping that keeps a fused AdamW under bf16, and the training loop's throughput."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
import torch._dynamo

from bertlab.data.instances import create_nsp_instances, create_packed_instances
from bertlab.modeling.model import BertConfig
from bertlab.training.pretraining import make_module
from bertlab.training import callbacks
from bertlab.training.pretrain_datamodule import PretrainData
from bertlab.training.pretrain_module import PretrainModule
from bertlab.training.trainer import peak_of
from tests.helpers import gpu_settings

VOCAB = 200


def documents(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(5, VOCAB, int(rng.integers(2, 40))) for _ in range(int(rng.integers(1, 8)))]
            for _ in range(60)]


def training_batch(cfg, instances, rows: int = 16) -> dict:
    """A training batch as the stage's loader makes it and `PretrainData` hands it to the device."""
    o = cfg.objective
    data = PretrainData(instances, instances, {"causal": o.causal, "nsp": o.nsp, "vocab_size": VOCAB,
                                               "mlm_probability": o.mlm_probability}, batch_size=rows, seed=1,
                        checkpoint_every=1, heldout_mask_seed=0, eval_batch_size=rows, num_workers=0)
    data.trainer = type("Trainer", (), {"accumulate_grad_batches": 1, "global_step": 0, "global_rank": 0,
                                        "world_size": 1, "training": True})()
    batch = next(iter(data.train_dataloader()))
    batch = data.on_before_batch_transfer(batch, 0)
    batch.pop("batch_index"), batch.pop("tokens")
    return batch


@pytest.mark.parametrize("objective,padded", [("mlm_nsp", True), ("mlm", False), ("ltr", False)])
def test_the_compiled_training_step_at_the_gpu_settings_is_one_graph(objective: str, padded: bool) -> None:
    """`torch._dynamo.explain` of the step the stage compiles (bf16 autocast, as bf16-mixed runs it), on a batch
    of the stage's own loader: one graph and no break, with padding (NSP pairs) and without (packed rows)."""
    cfg = gpu_settings(f"objective={objective}")
    module = make_module(cfg, VOCAB, 128)
    module.fixed_shapes = True  # as the stage sets it under impl.compile
    make = create_nsp_instances if cfg.objective.data == "nsp" else create_packed_instances
    instances = make(documents(), 128, **({"dupe_factor": 1} if cfg.objective.data == "nsp" else {}))
    batch = training_batch(cfg, instances)
    assert batch["padded"] is padded and batch["padded"] == (not bool(batch["attention_mask"].all()))
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(module.model)(**module.model_inputs(batch))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_a_training_batch_on_the_host_says_whether_it_is_padded_and_counts_its_tokens() -> None:
    instances = create_packed_instances(documents(), 16)
    data = PretrainData(instances, instances, {"vocab_size": VOCAB}, batch_size=2, seed=1,
                        checkpoint_every=1, heldout_mask_seed=0, eval_batch_size=2, num_workers=0)
    data.trainer = type("Trainer", (), {"training": True})()
    padded = data.on_before_batch_transfer({"attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}, 0)
    full = data.on_before_batch_transfer({"attention_mask": torch.ones(2, 3, dtype=torch.long)}, 0)
    assert (padded["padded"], padded["tokens"], full["padded"], full["tokens"]) == (True, 5, False, 6)
    data.trainer.training = False  # held-out batches go as they are
    assert data.on_before_batch_transfer({"attention_mask": torch.ones(2, 3)}, 0).keys() == {"attention_mask"}


def tiny_module(clip_like: str = "ours") -> PretrainModule:
    """A tiny MLM + NSP module; `clip_like="lightning"` clips through Lightning's own hook (its precision plugin)."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                        max_position_embeddings=32, dropout=0.0, attention_dropout=0.0)
    optim = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "warmup_steps": 1, "max_steps": 3}
    objective = {"name": "mlm_nsp", "nsp": True, "causal": False, "mlm_probability": 0.4, "whole_word_masking": False}
    module = PretrainModule(model=vars(config), objective=objective, optim=optim, seed=0)
    if clip_like == "lightning":
        module.configure_gradient_clipping = lambda *a, **k: pl.LightningModule.configure_gradient_clipping(
            module, *a, **k)
    return module


def trained(module: PretrainModule, precision: str, clip: float = 0.01) -> tuple[dict, torch.optim.Optimizer]:
    instances = create_nsp_instances(documents(), 32, dupe_factor=1)
    data = PretrainData(instances, instances, {"nsp": True, "vocab_size": VOCAB, "mlm_probability": 0.4},
                        batch_size=8, seed=1, checkpoint_every=3, heldout_mask_seed=0, eval_batch_size=8,
                        num_workers=0)
    trainer = pl.Trainer(accelerator="cpu", devices=1, precision=precision, max_steps=3, gradient_clip_val=clip,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, datamodule=data)
    return {k: v.detach().clone() for k, v in module.state_dict().items()}, trainer.optimizers[0]


def test_clipping_is_lightnings_own_under_fp32_and_keeps_the_fused_adamw_under_bf16() -> None:
    ours, opt = trained(tiny_module(), "32-true")
    theirs, _ = trained(tiny_module("lightning"), "32-true")
    unclipped, _ = trained(tiny_module(), "32-true", clip=0.0)
    assert opt.defaults["fused"]
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)  # the same numbers as Lightning's clipping
    assert not all(torch.equal(ours[k], unclipped[k]) for k in ours)  # and it clips
    bf16, opt = trained(tiny_module(), "bf16-mixed")
    assert opt.defaults["fused"]
    with pytest.raises(RuntimeError, match="does not allow for gradient clipping"):  # what Lightning's would do
        trained(tiny_module("lightning"), "bf16-mixed")
    for k in ours:  # bf16 autocast: near the fp32 run
        torch.testing.assert_close(bf16[k], ours[k], atol=2e-3, rtol=0.05)


def test_the_loops_throughput_counts_steps_not_compilation_validation_or_checkpoints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 5.0, 6.0, 10.0, 12.0, 20.0, 21.0, 100.0, 130.0, 132.0])
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: next(clock))
    rate = callbacks.Throughput(lambda length: 1e12 * length)  # 1e12 FLOPs a token per position

    def step(tokens: int, length: int = 8) -> None:
        rate.on_train_batch_start(None, None, {"tokens": tokens, "input_ids": torch.zeros(2, length)}, 0)
        rate.on_train_batch_end(None, None, None, None, 0)

    rate.on_train_epoch_start()  # t = 0
    step(100)  # t = 5: the process's first step (compilation): not counted
    step(10)  # t = 6: 1 s
    rate.on_validation_end()  # t = 10
    step(20, length=4)  # t = 12: 2 s
    rate.on_train_epoch_start()  # t = 20, after a checkpoint
    step(30)  # t = 21: 1 s
    summary = rate.summary(world_size=2, peak_tflops=100.0)
    flops = (10 * 8 + 20 * 4 + 30 * 8) * 1e12
    assert summary == {"tokens": 120, "loop_seconds": 4.0, "first_step_seconds": 5.0, "tokens_per_second": 30,
                       "tflops": round(2 * flops / 4 / 1e12, 3), "peak_tflops": 100.0,
                       "mfu": round(flops / 4 / 1e12 / 100.0, 4)}
    resumed = callbacks.Throughput(lambda length: 1e12 * length)  # a later process, from the checkpoint
    resumed.load_state_dict(rate.state_dict())
    resumed.on_train_epoch_start()  # t = 100
    rate = resumed
    step(50)  # t = 130: its first step, not counted
    step(10)  # t = 132: 2 s
    assert rate.summary(1, None) == {"tokens": 70, "loop_seconds": 6.0, "first_step_seconds": 30.0,
                                     "tokens_per_second": 12, "tflops": 80.0, "peak_tflops": None, "mfu": None}
    assert callbacks.Throughput(len).summary(1, 989.0)["tokens_per_second"] is None  # nothing timed


def test_a_devices_peak_is_its_own_by_name_and_none_where_not_known() -> None:
    """MFU's denominator: the dense bf16 peak of the device CUDA names (an H100 PCIe's is not an SXM H100's)."""
    assert [peak_of(name) for name in ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H200",
                                       "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", "")] == [
        756.0, 989.0, 989.0, 312.0, None, None]
