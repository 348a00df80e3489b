"""Where a pretraining step's time goes at a profile's recipe: torch.profiler over a few steps of bertlab's step
(`pretrain_throughput.py`'s runners: the stage's model, inputs, optimizer and clipping), eager and compiled, on the
stage's own batches, after warm-up. Per runner: the step's wall time; on a GPU the time its kernels ran ("busy": the
rest of the wall is the GPU waiting on the host, for launches, syncs and the Python between them) and that time by
kind of kernel (matmul, attention, optimizer, inductor's fused Triton kernels, the other elementwise and reduction
kernels), then the kernels that take most. On a CPU the ops' own times stand in for kernels. Then what stands
between the step and a target MFU: its model FLOPs (`flops_per_token`, as the stage's ledger counts them) over its
wall time against the device's peak, the rate its matmul and attention kernels alone reach (the MFU ceiling if
everything else were free), and the milliseconds the target leaves against those spent in other kernels and idle.

    python benchmarks/step_profile.py --profile gpu --data DATA_DIR --device cuda --out profile.txt
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from pretrain_throughput import (Runner, bertlab_runner, check_inputs, device_peak,  # beside this file
                                 profile_recipe, stage_batches, sync, to_device, transformers_runner)

import torch  # noqa: I001 - after pretrain_throughput, which sets the OpenMP and inductor settings first

# A kernel's kind by the first of these its lower-cased name contains (cuBLAS/CUTLASS names, SDPA's flash and
# memory-efficient kernels, the fused and foreach optimizer kernels, inductor's `triton_` kernels; aten's on a CPU).
KINDS = [("attention", ("flash", "fmha", "attention", "scaled_dot_product")),
         ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "aten::mm", "aten::addmm", "aten::bmm")),
         ("optimizer", ("adam", "multi_tensor", "foreach")), ("inductor (fused)", ("triton",))]


def kind(name: str) -> str:
    low = name.lower()
    return next((k for k, keys in KINDS if any(key in low for key in keys)), "other")


def kernel_times(prof: torch.profiler.profile, ops: list, device: str) -> Counter[str]:
    """Microseconds by kernel name (GPU kernels), or by op name of the ops' own time (CPU; `ops`: key_averages)."""
    times: Counter[str] = Counter()
    if device == "cuda":
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                times[e.name] += e.time_range.elapsed_us()
    else:
        for e in ops:
            times[e.key] += e.self_cpu_time_total
    return times


def gap(flops: float, wall: float, by_kind: Counter[str], steps: int, peak: float, target: float) -> list[str]:
    """What stands between a step of `flops` model FLOPs taking `wall` ms and `target` MFU of `peak` TFLOP/s:
    achieved rate and MFU, the matmul and attention kernels' own rate (the MFU ceiling), and the ms over target."""
    dense = (by_kind["matmul"] + by_kind["attention"]) / steps / 1e3
    rest = sum(by_kind.values()) / steps / 1e3 - dense
    achieved, goal = flops / wall / 1e9, flops / (target * peak * 1e12) * 1e3
    lines = [f"  model FLOPs {flops / 1e9:.4g} G a step: {achieved:.3g} TFLOP/s, {achieved / peak:.1%} MFU "
             f"(peak {peak:g} TFLOP/s)"]
    if dense:
        lines.append(f"  matmul + attention kernels {dense:.2f} ms at {flops / dense / 1e9:.3g} TFLOP/s: MFU "
                     f"{flops / dense / 1e9 / peak:.1%} if everything else were free")
    lines.append(f"  at {target:.0%} MFU a step takes {goal:.2f} ms: {max(wall - goal, 0):.2f} ms over, against "
                 f"{rest:.2f} ms in other kernels and {max(wall - dense - rest, 0):.2f} ms idle")
    return lines


def profile(runner: Runner, batches: list[dict], steps: int, device: str, top: int, peak: float | None,
            target: float) -> list[str]:
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        sync(device)
        start = time.perf_counter()
        for i in range(steps):
            runner.step(batches[i % len(batches)])
        sync(device)
        wall = (time.perf_counter() - start) / steps * 1e3
    ops = prof.key_averages()
    times = kernel_times(prof, ops, device)
    total = sum(times.values())
    busy = total / steps / 1e3
    what = "kernels" if device == "cuda" else "ops' own time"
    graphs = sum(e.key.startswith("## Call CompiledFxGraph") for e in ops)  # forward and backward: 2
    lines = [f"## {runner.name}: {wall:.1f} ms a step (wall, profiled), {what} {busy:.1f} ms"
             + (f" = {busy / wall:.0%} busy" if device == "cuda" else "")
             + (f"; {graphs} compiled graphs called" if graphs else "")]
    by_kind: Counter[str] = Counter()
    for name, us in times.items():
        by_kind[kind(name)] += us
    lines += [f"  {k:18s} {us / steps / 1e3:8.2f} ms {us / max(total, 1):6.1%}"
              for k, us in by_kind.most_common()]
    lines += ["  top:"] + [f"  {us / steps / 1e3:8.3f} ms  {kind(name):16s} {name[:110]}"
                           for name, us in times.most_common(top)]
    if peak:
        tokens = sum(batches[i % len(batches)]["tokens"] for i in range(steps)) / steps  # non-padding, as profiled
        lines += gap(runner.flops_per_token * tokens, wall, by_kind, steps, peak, target)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="gpu", help="the profile whose recipe is profiled")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="Hydra overrides of --profile's config")
    p.add_argument("--data", type=Path, required=True, help="a data_dir (tokenizer/, pretrain_data/)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="also profile compiled")
    p.add_argument("--transformers", action="store_true", help="also profile transformers (compiled if --compile)")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=3, help="profiled steps a runner")
    p.add_argument("--top", type=int, default=15, help="kernels listed a runner")
    p.add_argument("--peak-tflops", type=float, help="the device's dense peak for MFU (default: a CUDA device's bf16 "
                   "peak by its name, as the stage's ledger reckons it; none on a CPU)")
    p.add_argument("--target-mfu", type=float, default=0.4, help="the MFU whose gap is measured (default 0.4)")
    p.add_argument("--out", type=Path, help="also write the profile here")
    args = p.parse_args()
    check_inputs(args.device, args.data)
    recipe = profile_recipe(args.profile, args.set, args.data, args.device)
    batches = [to_device(b, args.device) for b in stage_batches(recipe, args.data, 4)]
    runners = [bertlab_runner("bertlab (eager)", recipe, device=args.device)]
    if args.compile:
        runners.append(bertlab_runner("bertlab + torch.compile", recipe, compile=True, device=args.device))
    if args.transformers:
        runners.append(transformers_runner(recipe, compile=args.compile, device=args.device))
    tokens = sum(b["tokens"] for b in batches) / len(batches)
    name = torch.cuda.get_device_name() if args.device == "cuda" else ""
    peak = args.peak_tflops or device_peak(args.device)
    where = f"cuda ({name})" if name else "cpu"
    lines = [f"# step profile: profile {args.profile} {' '.join(args.set)}; batch {recipe.batch} x {recipe.seq}, "
             f"{tokens:,.0f} non-padding tokens a batch; {where}; torch {torch.__version__}; "
             f"{args.steps} profiled steps after {args.warmup} warm-up"]
    for runner in runners:
        for i in range(args.warmup):
            runner.step(batches[i % len(batches)])
        lines += profile(runner, batches, args.steps, args.device, args.top, peak, args.target_mfu)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
