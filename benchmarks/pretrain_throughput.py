"""Pretraining-step throughput: bertlab's training step vs transformers at the same config, recipe and batches.

One step = forward + backward + gradient clipping + AdamW step, the pretrain stage's: `PretrainModule`'s model,
inputs (`model_inputs`: a fixed number of scored positions per row where the stage runs without host syncs, i.e.
compiled or on CUDA) and optimizer (fused AdamW over BERT's decay groups), clipped by norm as the stage clips.
transformers is used the normal way: `BertForPreTraining` (sdpa, absolute positions: its rotary RoFormer has no
SDPA attention), logits at every position with -100 labels ignored, torch's AdamW (fused on a GPU) and the same
clipping. All runners see the same batches (their number of labelled positions and padding vary, as in training)
and are timed in interleaved rounds after warm-up, in one process; figures are median step times, tokens/s counts
non-padding tokens.

    python benchmarks/pretrain_throughput.py                # bertlab vs transformers, the shape flags' defaults
    python benchmarks/pretrain_throughput.py --ablations    # + one-change-at-a-time variants of bertlab
    python benchmarks/pretrain_throughput.py --compile      # + both under torch.compile (compile time shown)
    python benchmarks/pretrain_throughput.py --profile gpu --data DATA_DIR --device cuda --compile
        # the gpu profile's recipe (shape, batch, masking rate, positions, dropout, clipping, bf16) on real batches
        # of DATA_DIR/pretrain_data as the stage's loader makes them (NSP pairs with their padding)
    python benchmarks/pretrain_throughput.py --profile gpu --set model.num_layers=1 model.hidden_size=32 \
        model.num_heads=2 model.intermediate_size=64 pretrain.batch_size=8 --data DATA_DIR   # the same on a CPU

Without `--data`, batches are random ids without padding, two segments, Bernoulli(masking rate) labelled positions.
Achieved FLOP/s uses `bertlab.modeling.model.flops_per_token` per non-padding token (matmul FLOPs only, see its
docstring; for transformers, whose MLM head scores every position, with f = 1), against a plain `torch.mm` timed
in each round of the same run: fp32 1024^3 on a CPU, bf16 8192^3 on a GPU. On a GPU each step is timed between two
`torch.cuda.synchronize()` calls, and model FLOP utilisation (MFU) is given against `--peak-tflops` (the GPU's dense
bf16 peak by its datasheet; by default the device's by its name from the stage's table, `PEAK_TFLOPS`: 989 for an
H100 SXM or H200, 756 for an H100 PCIe) and against the timed bf16 matmul.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
from bertlab.modeling.model import BertConfig, Dropout, flops_per_token  # noqa: E402
from bertlab.training.pretrain_module import PretrainModule  # noqa: E402
from bertlab.training.trainer import clip_gradients, decay_groups, peak_of  # noqa: E402

MASK_ID = 4


@dataclass
class Recipe:
    """What a step trains: the encoder, its objective (the stage's dict), optimizer settings, clipping, batch."""

    config: BertConfig
    objective: dict[str, Any]
    optim: dict[str, Any]
    batch: int
    seq: int
    bf16: bool


@dataclass
class Runner:
    name: str
    step: Callable[[dict[str, Any]], None]
    flops_per_token: float  # matmul FLOPs this runner does per non-padding token (achieved FLOP/s and MFU)
    warmup_seconds: float = 0.0
    times: list[float] = field(default_factory=list)


def autocast(device: str, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` (as Lightning's bf16-mixed), or nothing."""
    return torch.autocast(device, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def random_batches(recipe: Recipe, n: int) -> list[dict[str, Any]]:
    """`n` random MLM+NSP batches without padding, two segments, Bernoulli(masking rate) labelled positions."""
    g = torch.Generator().manual_seed(0)
    b, s, rate = recipe.batch, recipe.seq, recipe.objective["mlm_probability"]
    out = []
    for _ in range(n):
        ids = torch.randint(5, recipe.config.vocab_size, (b, s), generator=g)
        token_type = torch.zeros_like(ids)
        token_type[:, s // 2:] = 1
        picked = torch.rand(b, s, generator=g) < rate
        out.append({"input_ids": ids.masked_fill(picked, MASK_ID), "token_type_ids": token_type,
                    "attention_mask": torch.ones_like(ids), "mlm_labels": ids.masked_fill(~picked, -100),
                    "next_sentence_label": torch.randint(0, 2, (b,), generator=g), "padded": False, "tokens": b * s})
    return out


def stage_batches(recipe: Recipe, data_dir: Path, n: int) -> list[dict[str, Any]]:
    """The first `n` training batches of `data_dir` as the pretrain stage's loader makes them (its seeded order and
    masks, NSP pairs or packed rows with their padding) and hands them to the device (`padded`, `tokens`)."""
    from bertlab.data.instances import load_instances
    from bertlab.training.pretrain_datamodule import PretrainData

    o = recipe.objective
    train = load_instances(data_dir / "pretrain_data" / f"train_{o['data']}")
    collate = {"causal": o["causal"], "nsp": o["nsp"], "vocab_size": recipe.config.vocab_size, "mlm_probability": o["mlm_probability"],
               "mask_replace_prob": o["mask_replace_prob"], "random_replace_prob": o["random_replace_prob"]}
    data = PretrainData(train, train, collate, batch_size=recipe.batch, seed=1, checkpoint_every=n,
                        heldout_mask_seed=0, eval_batch_size=recipe.batch, num_workers=0)
    data.trainer = type("Trainer", (), {"accumulate_grad_batches": 1, "global_step": 0, "global_rank": 0,
                                        "world_size": 1, "training": True})()
    batches = []
    for batch in data.train_dataloader():
        batch.pop("batch_index")
        batches.append(data.on_before_batch_transfer(batch, 0))
        if len(batches) == n:
            return batches
    raise SystemExit(f"error: {data_dir}/pretrain_data holds fewer than {n} batches of {recipe.batch}")


def adamw(params: list[torch.nn.Parameter], optim: dict[str, Any], kind: str) -> torch.optim.AdamW:
    """The stage's AdamW (BERT's decay groups, its lr, betas, eps) in the `kind` implementation."""
    return torch.optim.AdamW(decay_groups(params, optim["weight_decay"]), lr=optim["lr"], betas=tuple(optim["betas"]),
                             eps=optim["eps"], fused=kind == "fused", foreach=kind == "foreach")


def bertlab_runner(
    name: str, recipe: Recipe, optimizer: str = "fused", compile: bool = False, full_head: bool = False,
    keep_mask: bool = False, threads: int | None = None, torch_dropout: bool = False, device: str = "cpu",
) -> Runner:
    """The pretrain stage's step; `full_head`/`keep_mask`/`threads`/`torch_dropout` change one setting each (for the
    ablation)."""
    module = PretrainModule(model=vars(recipe.config), objective=recipe.objective, optim=recipe.optim, seed=0)
    model = module.model.train().to(device)
    module.fixed_shapes = compile or device != "cpu"  # as the stage sets it
    if torch_dropout:  # torch's nn.Dropout (one bernoulli_ draw per element) in place of bertlab's Dropout
        for parent in list(model.modules()):
            for attr, child in parent.named_children():
                if isinstance(child, Dropout):
                    setattr(parent, attr, torch.nn.Dropout(child.p))
    if compile:
        model.compile()  # in place, as the stage compiles
    opt = adamw([p for p in model.parameters() if p.requires_grad], recipe.optim, optimizer)

    def step(b: dict[str, Any]) -> None:
        default_threads = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        opt.zero_grad(set_to_none=True)
        with autocast(device, recipe.bf16):
            if full_head:
                mlm_logits, nsp_logits = model.logits(b["input_ids"], b["token_type_ids"], b["attention_mask"])
                loss = F.cross_entropy(mlm_logits.flatten(0, 1).float(), b["mlm_labels"].flatten()) + F.cross_entropy(
                    nsp_logits.float(), b["next_sentence_label"])
            else:
                inputs = module.model_inputs({k: v for k, v in b.items() if k != "tokens"})
                if keep_mask:  # the (B, 1, 1, S) boolean mask through attention, padding or not
                    inputs["padded"] = True
                loss = model(**inputs).loss
        loss.backward()
        clip_gradients(opt, recipe.optim["grad_clip"])
        opt.step()
        torch.set_num_threads(default_threads)

    scored = 1.0 if full_head or recipe.objective["causal"] else recipe.objective["mlm_probability"]
    return Runner(name, step, flops_per_token(recipe.config, recipe.seq, scored))


def transformers_runner(recipe: Recipe, compile: bool = False, device: str = "cpu") -> Runner:
    """transformers' BertForPreTraining (sdpa) at the recipe's shape and dropout, with the same clipping and torch's
    default AdamW (a per-tensor loop on a CPU, fused on a GPU); absolute positions whatever the recipe's (its rotary
    RoFormer has no SDPA attention, only a slower eager one)."""
    optimizer = "loop" if device == "cpu" else "fused"
    import transformers

    hf = {**config_to_hf(replace(recipe.config, positions="absolute")), "attn_implementation": "sdpa"}
    model = transformers.BertForPreTraining(transformers.BertConfig(**hf)).train().to(device)
    forward = torch.compile(model) if compile else model
    opt = adamw([p for p in model.parameters() if p.requires_grad], recipe.optim, optimizer)

    def step(b: dict[str, Any]) -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(device, recipe.bf16):
            loss = forward(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                           attention_mask=b["attention_mask"], labels=b["mlm_labels"],
                           next_sentence_label=b["next_sentence_label"]).loss
        loss.backward()
        clip_gradients(opt, recipe.optim["grad_clip"])
        opt.step()

    name = "transformers BertForPreTraining (sdpa)" + (" + torch.compile" if compile else "")
    return Runner(name, step, flops_per_token(recipe.config, recipe.seq, 1.0))


def profile_recipe(profile: str, overrides: list[str], data_dir: Path | None, device: str) -> Recipe:
    """The recipe the pretrain stage trains at `profile` (+ Hydra `overrides`): its encoder (the vocabulary and
    length of `data_dir`'s tokenizer and instances where given), objective, optimizer, clipping, global batch and
    precision (bf16 where `impl.precision` says so, on a GPU)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from bertlab.training.pretraining import make_module
    from bertlab.stage import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"profile={profile}", *overrides])
    vocab, seq = cfg.tokenizer.vocab_size, cfg.pretrain_data.max_seq_length
    if data_dir is not None:
        from bertlab.data.instances import load_instances
        from bertlab.files import read_tokenizer

        vocab = read_tokenizer(data_dir / "tokenizer" / "tokenizer.json").get_vocab_size()
        seq = load_instances(data_dir / "pretrain_data" / f"train_{cfg.objective.data}").input_ids.shape[1]
    module = make_module(cfg, vocab, seq)
    return Recipe(module.model.config, OmegaConf.to_container(cfg.objective), OmegaConf.to_container(cfg.pretrain),
                  cfg.pretrain.batch_size, seq, device != "cpu" and "bf16" in str(cfg.impl.precision))


def flag_recipe(args: argparse.Namespace, bf16: bool) -> Recipe:
    """The recipe of the shape flags: MLM + NSP at `--masked-fraction`, BERT's optimizer settings, no clipping."""
    config = BertConfig(vocab_size=args.vocab, num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                        intermediate_size=args.intermediate, max_position_embeddings=max(512, args.seq))
    objective = {"name": "mlm_nsp", "data": "nsp", "nsp": True, "causal": False, "whole_word_masking": False,
                 "mlm_probability": args.masked_fraction, "mask_replace_prob": 0.8, "random_replace_prob": 0.1}
    optim = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "grad_clip": None}
    return Recipe(config, objective, optim, args.batch, args.seq, bf16)


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


def check_inputs(device: str, data: Path | None) -> None:
    """Exit with one line if `--device cuda` has no GPU or `--data` holds no pretrain_data/."""
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: torch sees no CUDA GPU")
    if data is not None and not (data / "pretrain_data").is_dir():
        raise SystemExit(f"error: --data {data}: no pretrain_data/ there (a data_dir the stages wrote)")


def device_peak(device: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of a CUDA device by its name, from the stage's table (`PEAK_TFLOPS`), for MFU;
    None on a CPU or a device not in the table."""
    return peak_of(torch.cuda.get_device_name() if device == "cuda" else "")


def sync(device: str) -> None:
    """Wait for the device's queued work (a GPU runs asynchronously), so that a host clock times it."""
    if device != "cpu":
        torch.cuda.synchronize()


def to_device(batch: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", help="time this profile's recipe (its shape, batch, objective, optimizer, clipping, "
                   "precision); the shape flags below are then ignored")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="Hydra overrides of --profile's config")
    p.add_argument("--data", type=Path, help="a data_dir (tokenizer/, pretrain_data/): the stage's own batches")
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
    p.add_argument("--compile", action="store_true", help="add bertlab and transformers under torch.compile")
    p.add_argument("--ablations", action="store_true", help="add bertlab variants that each drop one speed-up")
    p.add_argument("--no-transformers", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast for every runner (default: the profile's precision on cuda, else on for cuda)")
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak, for MFU (default: the device's by "
                   "its name from training.trainer.PEAK_TFLOPS; none if it is not there)")
    p.add_argument("--json", type=Path, help="also write each runner's figures here")
    args = p.parse_args(argv)
    device = args.device
    check_inputs(device, args.data)
    recipe = (profile_recipe(args.profile, args.set, args.data, device) if args.profile
              else flag_recipe(args, device == "cuda"))
    if args.bf16 is not None:
        recipe.bf16 = args.bf16

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batches = stage_batches(recipe, args.data, 4) if args.data else random_batches(recipe, 4)
    batches = [to_device(b, device) for b in batches]
    runners = [bertlab_runner(f"bertlab ({args.optimizer} AdamW)", recipe, args.optimizer, device=device)]
    if args.compile:
        runners.append(bertlab_runner("bertlab + torch.compile", recipe, args.optimizer, compile=True, device=device))
    if args.ablations:
        runners += [
            bertlab_runner("  ablation: full-sequence MLM head", recipe, args.optimizer, full_head=True,
                           device=device),
            bertlab_runner("  ablation: padding mask kept", recipe, args.optimizer, keep_mask=True, device=device),
            bertlab_runner("  ablation: nn.Dropout (bernoulli_ masks)", recipe, args.optimizer, torch_dropout=True,
                           device=device),
            *[bertlab_runner(f"  ablation: {kind} AdamW", recipe, kind, device=device)
              for kind in ("foreach", "loop") if kind != args.optimizer],
        ]
        if args.threads > 1:
            runners.append(bertlab_runner("  ablation: 1 thread", recipe, args.optimizer, threads=1, device=device))
    reference = None
    if not args.no_transformers:
        reference = transformers_runner(recipe, device=device)
        runners.append(reference)
        if args.compile:
            runners.append(transformers_runner(recipe, compile=True, device=device))

    load_before = os.getloadavg()[0]
    counter = 0
    for r in runners:
        start = time.perf_counter()
        for _ in range(args.warmup):
            r.step(batches[counter % len(batches)])
            counter += 1
        sync(device)
        r.warmup_seconds = time.perf_counter() - start
    mm, tokens = [], []
    for round_ in range(args.rounds):
        mm.append(mm_gflops(device))
        b = batches[round_ % len(batches)]  # every runner steps on the same batches
        tokens.append(b["tokens"])
        order = runners[round_ % len(runners):] + runners[: round_ % len(runners)]  # rotate who goes first
        for r in order:
            for _ in range(args.steps):
                sync(device)
                start = time.perf_counter()
                r.step(b)
                sync(device)
                r.times.append(time.perf_counter() - start)
    report(args, recipe, runners, reference, mm, statistics.mean(tokens), load_before)


def report(args: argparse.Namespace, recipe: Recipe, runners: list[Runner], reference: Runner | None,
           mm: list[float], tokens: float, load_before: float) -> None:
    """The run's settings, then a line per runner: median step, non-padding tokens/s, speed-up over transformers
    eager, achieved FLOP/s (and MFU on a GPU), warm-up."""
    c, o, device = recipe.config, recipe.objective, args.device
    padding = 1 - tokens / (recipe.batch * recipe.seq)
    source = f"the stage's batches of {args.data}" if args.data else "random batches"
    print(f"recipe: {f'profile {args.profile}' if args.profile else 'flags'} {' '.join(args.set)}; "
          f"L={c.num_layers} H={c.hidden_size} A={c.num_heads} I={c.intermediate_size} V={c.vocab_size}, "
          f"{c.positions} positions, dropout {c.dropout}; {o['name']} at {o['mlm_probability']:.0%} masking; "
          f"batch {recipe.batch} x seq {recipe.seq} ({source}, {padding:.1%} padding); clip "
          f"{recipe.optim.get('grad_clip')}; threads {args.threads}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; "
          f"torch {torch.__version__}; {args.rounds} rounds x {args.steps} step(s) after {args.warmup} warm-up")
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    peak = args.peak_tflops or device_peak(device)
    print(f"device: {where}; {'bf16 autocast' if recipe.bf16 else 'fp32'}")
    print(f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} CPUs): "
          "other processes competing for the cores slow every runner, and the many-small-ops ones most")
    mm_name = "1024^3 fp32" if device == "cpu" else "8192^3 bf16"
    print(f"plain torch.mm {mm_name}: {statistics.median(mm):.1f} GFLOP/s (median; min {min(mm):.1f}, "
          f"max {max(mm):.1f})")
    ref = statistics.median((reference or max(runners, key=lambda r: statistics.median(r.times))).times)
    mfu = device == "cuda"
    figures = {}
    print(f"{'runner':56s} {'step s':>7s} {'tokens/s':>9s} {'speed-up':>8s} {'GFLOP/s':>8s} {'warm-up s':>9s}"
          + (f" {'MFU':>6s} {'of mm':>6s}" if mfu else ""))
    for r in runners:
        t = statistics.median(r.times)
        achieved = r.flops_per_token * tokens / t / 1e9
        line = f"{r.name:56s} {t:7.3f} {tokens / t:9.0f} {ref / t:7.2f}x {achieved:8.1f} {r.warmup_seconds:9.1f}"
        if mfu:
            line += (f" {achieved / peak / 1e3:6.1%}" if peak else f" {'n/a':>6s}") + \
                f" {achieved / statistics.median(mm):6.1%}"
        print(line)
        figures[r.name] = {"step_seconds": round(t, 4), "tokens_per_second": round(tokens / t),
                           "tflops": round(achieved / 1e3, 2), "warmup_seconds": round(r.warmup_seconds, 1),
                           "mfu": round(achieved / peak / 1e3, 4) if mfu and peak else None}
    if reference is not None:
        for r in runners[: 1 + args.compile]:
            against = [reference, *runners[-1:]] if args.compile else [reference]
            print(f"{r.name} / " + ", ".join(f"{h.name}: {statistics.median(h.times) / statistics.median(r.times):.2f}x"
                                             for h in against) + " (tokens/s)")
    if args.json:
        args.json.write_text(json.dumps({"device": where, "bf16": recipe.bf16, "tokens_per_batch": tokens,
                                         "padding": padding, "runners": figures}, indent=1))
    print("GFLOP/s counts matmul FLOPs per non-padding token = 6*L*(4H^2+2HI) + 12*L*S*H + 6*f*(H^2+HV), f = labelled "
          "fraction (1 for the full-sequence head and transformers)" + (
              f"; MFU against {f'{peak:.0f} TFLOP/s dense bf16' if peak else 'no known peak (--peak-tflops)'} and "
              "against the timed matmul" if mfu else ""))


if __name__ == "__main__":
    main()
