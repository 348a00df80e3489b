"""Pretraining-step throughput: bertlab vs transformers.BertForPreTraining at the same config, batch and length.

One step = forward + backward + AdamW step on MLM (a `--masked-fraction` of positions labelled, -100 elsewhere) + NSP.
bertlab scores the MLM head only at labelled positions; transformers computes logits at all positions (its normal
behaviour) and ignores the -100 labels in the loss. All runners see the same batches (their number of labelled
positions varies, as in real training) and are timed in interleaved rounds after warm-up, in one process, to
reduce the noise of a shared machine; the reported figure is the median step time.

    python benchmarks/pretrain_throughput.py                # bertlab vs transformers, the defaults below
    python benchmarks/pretrain_throughput.py --ablations    # + one-change-at-a-time variants of bertlab
    python benchmarks/pretrain_throughput.py --compile      # + bertlab under torch.compile (compile time shown)
    python benchmarks/pretrain_throughput.py --device cuda --compile --layers 12 --hidden 768 --heads 12 \
        --intermediate 3072 --batch 256                     # BERT-base on a GPU, bf16 autocast (see README)

Achieved GFLOP/s uses `bertlab.modeling.model.flops_per_token` (matmul FLOPs only, see its docstring; for
transformers, whose MLM head scores every position, with f = 1), against a plain `torch.mm` timed in each round of the
same run: fp32 1024^3 on a CPU, bf16 8192^3 on a GPU. On a GPU each step is timed between two
`torch.cuda.synchronize()` calls, and model FLOP utilisation (MFU) is given against `--peak-tflops` (the GPU's dense
bf16 peak by its datasheet; 989 for an H100 or H200 SXM) and against the timed bf16 matmul.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Read when torch loads OpenMP and inductor, so set before importing torch (the environment overrides both).
# PASSIVE: a waiting OpenMP thread sleeps instead of spinning; on a 2-core machine shared with other jobs, spinning
# threads steal the cores and the eager step runs ~2x slower (see README). A fresh inductor cache: compile time is
# measured cold, as a stage's first run sees it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
_INDUCTOR_CACHE = tempfile.TemporaryDirectory(prefix="bertlab-bench-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _INDUCTOR_CACHE.name)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bertlab.modeling.export import config_to_hf  # noqa: E402
from bertlab.modeling.model import BertConfig, BertForPretraining, Dropout, flops_per_token  # noqa: E402

MASK_ID = 4


@dataclass
class Runner:
    name: str
    step: Callable[[dict[str, torch.Tensor]], None]
    flops_per_token: float  # matmul FLOPs this runner does per token (achieved GFLOP/s and MFU)
    warmup_seconds: float = 0.0
    times: list[float] = field(default_factory=list)


def make_batches(config: BertConfig, batch: int, seq: int, masked_fraction: float, n: int) -> list[dict]:
    """`n` random MLM+NSP batches without padding, two segments, Bernoulli(`masked_fraction`) labelled positions."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
        token_type = torch.zeros_like(ids)
        token_type[:, seq // 2:] = 1
        picked = torch.rand(batch, seq, generator=g) < masked_fraction
        out.append({
            "input_ids": ids.masked_fill(picked, MASK_ID), "token_type_ids": token_type,
            "attention_mask": torch.ones_like(ids), "labels": ids.masked_fill(~picked, -100),
            "next_sentence_label": torch.randint(0, 2, (batch,), generator=g),
        })
    return out


def autocast(device: str, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` (as Lightning's bf16-mixed), or nothing."""
    return torch.autocast(device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def adamw(params, kind: str) -> torch.optim.AdamW:
    """AdamW with the `kind` implementation: 'fused', 'foreach' or 'loop' (torch's default for CPU tensors)."""
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=kind == "fused", foreach=kind == "foreach")


def bertlab_runner(
    name: str, config: BertConfig, seq: int, masked_fraction: float, optimizer: str = "fused",
    compile: bool = False, full_head: bool = False, keep_mask: bool = False, threads: int | None = None,
    torch_dropout: bool = False, device: str = "cpu", bf16: bool = False,
) -> Runner:
    """A bertlab training step; `full_head`/`keep_mask`/`threads`/`torch_dropout` change one setting each (for the
    ablation)."""
    model = BertForPretraining(config, nsp=True).train().to(device)
    if torch_dropout:  # torch's nn.Dropout (one bernoulli_ draw per element) in place of bertlab's Dropout
        for parent in list(model.modules()):
            for attr, child in parent.named_children():
                if isinstance(child, Dropout):
                    setattr(parent, attr, torch.nn.Dropout(child.p))
    forward = torch.compile(model) if compile else model
    opt = adamw(model.parameters(), optimizer)

    def step(b: dict[str, torch.Tensor]) -> None:
        default_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        mask = b["attention_mask"]
        if keep_mask:  # one padded position forces the (B, 1, 1, S) boolean mask through attention
            mask = mask.clone()
            mask[0, -1] = 0
        opt.zero_grad(set_to_none=True)
        with autocast(device, bf16):
            if full_head:
                mlm_logits, nsp_logits = model.logits(b["input_ids"], b["token_type_ids"], mask)
                loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), b["labels"].flatten()) + F.cross_entropy(
                    nsp_logits.float(), b["next_sentence_label"])
            else:
                loss = forward(b["input_ids"], b["token_type_ids"], mask, b["labels"], b["next_sentence_label"]).loss
        loss.backward()
        opt.step()
        torch.set_num_threads(default_threads)

    return Runner(name, step, flops_per_token(config, seq, 1.0 if full_head else masked_fraction))


def transformers_runner(config: BertConfig, seq: int, device: str = "cpu", bf16: bool = False) -> Runner:
    """transformers.BertForPreTraining (sdpa attention) with torch's default AdamW on a CPU, fused on a GPU."""
    import transformers

    hf_config = transformers.BertConfig(**config_to_hf(config), attn_implementation="sdpa")
    model = transformers.BertForPreTraining(hf_config).train().to(device)
    opt = adamw(model.parameters(), "loop" if device == "cpu" else "fused")

    def step(b: dict[str, torch.Tensor]) -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(device, bf16):
            loss = model(**b).loss
        loss.backward()
        opt.step()

    return Runner("transformers BertForPreTraining (sdpa)", step, flops_per_token(config, seq, 1.0))


def mm_gflops(device: str = "cpu", reps: int = 5) -> float:
    """GFLOP/s of a plain `torch.mm`: fp32 1024^3 on a CPU, bf16 8192^3 on a GPU."""
    n, dtype = (1024, torch.float32) if device == "cpu" else (8192, torch.bfloat16)
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e9


def sync(device: str) -> None:
    """Wait for the device's queued work (a GPU runs asynchronously), so that a host clock times it."""
    if device != "cpu":
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--masked-fraction", type=float, default=0.15)
    p.add_argument("--rounds", type=int, default=6, help="timed rounds; each runs every runner `--steps` times")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per runner (compilation happens here)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--optimizer", choices=["fused", "foreach", "loop"], default="fused", help="bertlab's AdamW")
    p.add_argument("--compile", action="store_true", help="add bertlab under torch.compile")
    p.add_argument("--ablations", action="store_true", help="add bertlab variants that each drop one speed-up")
    p.add_argument("--no-transformers", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast for every runner (default: on for cuda, off for cpu)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak, for MFU")
    args = p.parse_args()
    device, bf16 = args.device, args.device == "cuda" if args.bf16 is None else args.bf16
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: torch sees no CUDA GPU")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=args.vocab, num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                        intermediate_size=args.intermediate, max_position_embeddings=max(512, args.seq))
    batches = [{k: v.to(device) for k, v in b.items()}
               for b in make_batches(config, args.batch, args.seq, args.masked_fraction, n=4)]
    common = dict(config=config, seq=args.seq, masked_fraction=args.masked_fraction, device=device, bf16=bf16)
    runners = [bertlab_runner(f"bertlab ({args.optimizer} AdamW)", optimizer=args.optimizer, **common)]
    if args.compile:
        runners.append(bertlab_runner("bertlab + torch.compile", optimizer=args.optimizer, compile=True, **common))
    if args.ablations:
        runners += [
            bertlab_runner("  ablation: full-sequence MLM head", optimizer=args.optimizer, full_head=True, **common),
            bertlab_runner("  ablation: padding mask kept", optimizer=args.optimizer, keep_mask=True, **common),
            bertlab_runner("  ablation: nn.Dropout (bernoulli_ masks)", optimizer=args.optimizer, torch_dropout=True,
                           **common),
            *[bertlab_runner(f"  ablation: {kind} AdamW", optimizer=kind, **common)
              for kind in ("foreach", "loop") if kind != args.optimizer],
        ]
        if args.threads > 1:
            runners.append(bertlab_runner("  ablation: 1 thread", optimizer=args.optimizer, threads=1, **common))
    if not args.no_transformers:
        runners.append(transformers_runner(config, args.seq, device, bf16))

    load_before = os.getloadavg()[0]
    counter = 0
    for r in runners:
        start = time.perf_counter()
        for _ in range(args.warmup):
            r.step(batches[counter % len(batches)])
            counter += 1
        sync(device)
        r.warmup_seconds = time.perf_counter() - start
    mm = []
    for round_ in range(args.rounds):
        mm.append(mm_gflops(device))
        order = runners[round_ % len(runners):] + runners[: round_ % len(runners)]  # rotate who goes first
        for r in order:
            for _ in range(args.steps):
                b = batches[counter % len(batches)]
                sync(device)
                start = time.perf_counter()
                r.step(b)
                sync(device)
                r.times.append(time.perf_counter() - start)
            counter += 1

    tokens = args.batch * args.seq
    print(f"config: L={args.layers} H={args.hidden} A={args.heads} I={args.intermediate} V={args.vocab}; "
          f"batch {args.batch} x seq {args.seq}, {args.masked_fraction:.0%} labelled; threads {args.threads}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; "
          f"torch {torch.__version__}; {args.rounds} rounds x {args.steps} step(s) after {args.warmup} warm-up")
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"device: {where}; {'bf16 autocast' if bf16 else 'fp32'}")
    print(f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs): "
          "other processes competing for the cores slow every runner, and the many-small-ops ones most")
    mm_name = "1024^3 fp32" if device == "cpu" else "8192^3 bf16"
    print(f"plain torch.mm {mm_name}: {statistics.median(mm):.1f} GFLOP/s (median; min {min(mm):.1f}, "
          f"max {max(mm):.1f})")
    reference = max(statistics.median(r.times) for r in runners)  # transformers' step, or the slowest runner's
    if not args.no_transformers:
        reference = statistics.median(runners[-1].times)
    mfu = device == "cuda"
    print(f"{'runner':42s} {'step s':>7s} {'tokens/s':>9s} {'speed-up':>8s} {'GFLOP/s':>8s} {'warm-up s':>9s}"
          + (f" {'MFU':>6s} {'of mm':>6s}" if mfu else ""))
    for r in runners:
        t = statistics.median(r.times)
        achieved = r.flops_per_token * tokens / t / 1e9
        line = f"{r.name:42s} {t:7.3f} {tokens / t:9.0f} {reference / t:7.2f}x {achieved:8.1f} {r.warmup_seconds:9.1f}"
        if mfu:
            line += f" {achieved / args.peak_tflops / 1e3:6.1%} {achieved / statistics.median(mm):6.1%}"
        print(line)
    if not args.no_transformers:
        ratio = statistics.median(runners[-1].times) / statistics.median(runners[0].times)
        print(f"bertlab / transformers tokens/s: {ratio:.2f}x")
    print("GFLOP/s counts matmul FLOPs per token = 6*L*(4H^2+2HI) + 12*L*S*H + 6*f*(H^2+HV), f = labelled fraction "
          "(1 for the full-sequence head and transformers)" + (
              f"; MFU against {args.peak_tflops:.0f} TFLOP/s dense bf16 and against the timed matmul" if mfu else ""))


if __name__ == "__main__":
    main()
