"""The CUDA paths, on a real GPU: bf16 autocast + torch.compile + the mixed-precision MLM loss against the fp32 eager
loss for each objective; the pretrain stage at `impl=gpu` trained, killed and resumed across compile on/off; one
fine-tuning cell of each task kind. Skipped where torch sees no CUDA GPU (CI has none; `benchmarks/gpu/run.sh` runs
them on one)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from bertlab.finetune import finetune
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.training.pretraining import make_module
from bertlab.training.trainer import clip_gradients
from tests.helpers import KILL_AT_STEP, PINNED, checkpoint, finetune_config, gpu_settings, pretrain_patched

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

GPU = ["impl=gpu", "impl.devices=1", "impl.num_workers=0"]  # the gpu profile's speed settings, one device
ON_CUDA = "GPU available: True (cuda), used: True"  # Lightning's line when it trains on the GPU


def cuda_allocations() -> int:
    """How many CUDA allocations this process has made so far."""
    return torch.cuda.memory_stats().get("allocation.all.allocated", 0)


def batch(config: BertConfig, objective: str, rows: int = 32, seq: int = 128) -> dict:
    """Random ids; row 0 padded over its last 16 positions; MLM labels at 40% of the real positions, or the next
    token at every real position for LTR."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, config.vocab_size, (rows, seq), generator=g)
    mask = torch.ones_like(ids)
    mask[0, -16:] = 0
    if objective == "ltr":
        labels = torch.cat([ids[:, 1:], torch.full((rows, 1), -100)], 1)
    else:
        labels = ids.masked_fill(torch.rand(rows, seq, generator=g) >= 0.4, -100)
    labels = labels.masked_fill(mask == 0, -100)
    types = torch.zeros_like(ids)
    types[:, seq // 2:] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "mlm_labels": labels,
            "next_sentence_label": torch.randint(0, 2, (rows,), generator=g) if objective == "mlm_nsp" else None,
            "causal": objective == "ltr"}


def loss_and_grads(model: torch.nn.Module, b: dict, bf16: bool) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        loss = model(**b).loss
    loss.backward()  # a parameter the loss does not reach (the pooler without NSP): None eager, zeros compiled
    grads = [torch.zeros(p.numel(), device=p.device) if p.grad is None else p.grad.float().flatten()
             for p in model.parameters()]
    return loss.item(), torch.cat(grads)


@pytest.mark.parametrize("objective,positions", [("mlm_nsp", "absolute"), ("mlm_nsp", "rotary"),
                                                 ("mlm", "absolute"), ("ltr", "absolute")])
def test_bf16_compiled_loss_and_gradients_match_fp32_eager(objective: str, positions: str) -> None:
    """Loss within 1% and gradients within 5% (relative L2 norm) of fp32 eager without TF32: the bf16 operands'
    rounding (1e-3 to 1e-2), nothing more; fp32 eager scores MLM with the fused `DecoderCrossEntropy` at exactly the
    labelled positions, compiled bf16 with `F.cross_entropy` at a fixed number a row (the stage's step without host
    syncs), so the two paths are checked against each other too."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, num_layers=2, hidden_size=256, num_heads=4, intermediate_size=1024,
                        max_position_embeddings=128, dropout=0.0, attention_dropout=0.0, positions=positions)
    model = BertForPretraining(config, nsp=objective == "mlm_nsp").cuda().train()
    b = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in batch(config, objective).items()}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_loss, ref_grads = loss_and_grads(model, b, bf16=False)
    fast = torch.compile(copy.deepcopy(model))
    fixed = {**b, "padded": True, "scored_per_row": int(b["mlm_labels"].ne(-100).sum(1).max())}  # as the stage runs
    for _ in range(2):  # the second call runs the compiled code, not the tracing
        loss, grads = loss_and_grads(fast, fixed, bf16=True)
    assert math.isfinite(loss) and abs(loss / ref_loss - 1) < 0.01, (loss, ref_loss)
    assert ((grads - ref_grads).norm() / ref_grads.norm()).item() < 0.05


def test_pretraining_on_the_gpu_killed_uncompiled_resumes_compiled(prepared: Path, tmp_path: Path) -> None:
    """bf16-mixed on CUDA: an uninterrupted compiled run, and one killed at step 6 uncompiled then resumed compiled,
    end at the same step with held-out perplexities within 2% (other kernels, bf16 rounding)."""
    whole = pretrain_patched(prepared, tmp_path, "name=gpu_whole", *GPU)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert ON_CUDA in whole.stderr and "bfloat16 Automatic Mixed Precision" in whole.stderr
    killed = pretrain_patched(prepared, tmp_path, "name=gpu_resumed", *GPU, "impl.compile=false",
                              kill_at=KILL_AT_STEP, code_hash=PINNED)
    assert killed.returncode == -9, killed.stderr[-3000:]
    last = checkpoint(prepared, "gpu_resumed")
    done = pretrain_patched(prepared, tmp_path, "name=gpu_resumed", *GPU, code_hash=PINNED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"(its checkpoint: {last})" in done.stdout + done.stderr
    a, b = (json.loads((prepared / "pretrain" / n / "metrics.json").read_text()) for n in ("gpu_whole", "gpu_resumed"))
    assert a["steps"] == b["steps"] == 12 and math.isfinite(a["heldout_ppl"])
    assert abs(b["heldout_ppl"] / a["heldout_ppl"] - 1) < 0.02


@pytest.mark.parametrize("objective", ["mlm_nsp", "ltr"])
def test_the_compiled_training_step_at_the_gpu_settings_never_waits_for_the_gpu(objective: str) -> None:
    """The stage's step at the gpu settings (bf16 autocast, compiled, a padded batch, fused AdamW, clipping) queues
    its work without a host sync: torch's sync debug mode raises on one (a `.item()`, a `nonzero`, a bool of a
    tensor)."""
    module = make_module(gpu_settings(f"objective={objective}"), 30522, 128)
    module.fixed_shapes = True
    model = module.model.cuda().train()
    model.compile()
    opt = module.configure_optimizers()["optimizer"]
    b = batch(model.config, objective)
    b = {k: v.cuda() for k, v in b.items() if isinstance(v, torch.Tensor)} | {"padded": True}

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**module.model_inputs(b)).loss
        loss.backward()
        clip_gradients(opt, 0.5)
        opt.step()

    for _ in range(2):  # compiles
        step()
    torch.cuda.synchronize()
    assert opt.defaults["fused"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


CELLS = {  # task kind: (task, overrides, the least headline a trained cell reaches on the synthetic task, if any)
    "classification": ("sst2", ["finetune.epochs=3", "finetune.lr=1e-3", "finetune.head_lr=1e-2"], 95.0),
    "regression + BiLSTM": ("stsb", ["finetune.bilstm=true"], None),
    "tagging": ("conll2003", ["finetune.epochs=3", "finetune.lr=1e-3", "finetune.head_lr=1e-2"], 50.0),
    "span": ("squad", ["finetune.epochs=2"], None),
    "feature-based": ("conll2003", ["finetune.mode=feature_based", "finetune.features=concat_last_four",
                                    "finetune.max_train_examples=48"], None),  # BiLSTM on frozen features
}


@pytest.mark.parametrize("kind", CELLS)
def test_a_finetuning_cell_of_each_kind_trains_on_the_gpu(finetune_data: Path, kind: str) -> None:
    task, overrides, least = CELLS[kind]
    name = "gpu_" + kind.split()[0].replace("-", "_")
    before = cuda_allocations()
    record = finetune(finetune_config(finetune_data, f"name={name}", f"task={task}", *GPU, *overrides)).record
    assert cuda_allocations() > before + 100  # it trained on the GPU
    assert record["status"] == "ok" and math.isfinite(record["headline"])
    if least is not None:
        assert record["headline"] >= least, record["metrics"]
