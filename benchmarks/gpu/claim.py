"""One claim of the paper at BERT-base in one call on one GPU (`claim.sh` sets the machine up and unpacks the pack,
then runs this): the stages themselves (`python -m bertlab.pretrain`, `bertlab.finetune`) at a short-run setting of the
gpu profile's recipe, each encoder and cell with the study's own overrides (conf/ablations/default.yaml `encoders`,
`modes`). Pretrain each of the claim's encoders (`verdicts.CLAIMS`: STEPS steps of 256 x 128, WARMUP warm-up steps,
lr decaying to zero at the budget) at every pretraining seed (`--pretrain-seeds`: runs `<encoder>-<seed>`, the
pipeline's; all at once on the GPU) and fine-tune each run on the claim's tasks in its modes the moment it ends
(`scratch`'s cells beside `bert`'s pretraining), one epoch of BERT's recipe (batch 32, lr 2e-5; `BUDGET` per task),
every seed, full dev sets. The cells are the pipeline's `<task>-<encoder>-<mode>-<pretraining seed>-<seed>`.
$OUT/claim_<claim>.tar.gz brings back run.json (claim, device, commit, command, seconds, seeds), the download
manifest, every pretraining run's metrics.json and heldout_items.json, every cell's metrics.json and items.json
(per-item dev predictions) and the logs; unpacked into reports/gpu/<date>-<claim>/ and committed, `python
benchmarks/gpu/verdicts.py` renders reports/gpu.md from every such run. A run that fails or is still going at the
deadline (DEADLINE seconds after the call began) leaves its cells missing, which the verdicts name. `--encoders`
runs some of the claim's encoders only, `--base` naming the committed run (reports/gpu/) whose cells of the others
decide it with them: e.g. `scratch` again at another fine-tuning lr (`--extra finetune.lr=1e-4`) against `bert`'s cells.

    python benchmarks/gpu/claim.py b --data DIR --pretrain-seeds 1 2 3 --print    # the commands, not run
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from verdicts import CLAIMS, base_run, study, verdicts  # beside this file

from bertlab.study import cell_name, pretrain_encoder, pretrain_name

# A task's fine-tuning budget: SST-2 and QNLI 16,000 examples, SQuAD 12,000 questions, CoNLL-2003 all 14,041
# sentences, one epoch; MRPC all 3,668 pairs, three epochs (BERT's recipe: one epoch is 115 updates)
BUDGET = {"sst2": ["finetune.max_train_examples=16000"], "qnli": ["finetune.max_train_examples=16000"],
          "squad": ["finetune.squad_max_train_examples=12000"], "conll2003": ["finetune.max_train_examples=null"],
          "mrpc": ["finetune.max_train_examples=null", "finetune.epochs=3"]}
STAGE = [sys.executable, "-m"]
started = float(os.environ.get("STARTED") or time.time())


def stamp(text: str) -> None:
    print(f"== {time.time() - started:.0f} s: {text}", flush=True)


def plan(claim: str, args: argparse.Namespace) -> tuple[dict[str, list[str]], dict[str, tuple[str, list[str]]]]:
    """(pretraining commands by pretraining run `<encoder>-<seed>`, (pretraining run, fine-tuning command) by cell) of
    `claim`: the declared overrides of each encoder and mode come after the short-run settings (the last value of a key
    wins: `scratch` stays at 0 steps), `--extra` after everything."""
    spec, c = study(), CLAIMS[claim]
    common = [*args.packed, f"data_dir={args.data}", f"out_dir={args.data}", "logger=csv", "impl.devices=1",
              "impl.compile=false", "impl.reuse_twins=false"]
    steps = args.steps or c.steps
    ours = args.encoders or c.encoders
    pretrain = {pretrain_name(e, s): [
        *STAGE, "bertlab.pretrain", *common, f"name={e}", f"seed={s}", f"pretrain.max_steps={steps}",
        f"pretrain.warmup_steps={args.warmup}", f"pretrain.val_every_steps={(steps + 3) // 4}",
        f"pretrain.checkpoint_every_steps={steps * 2}", "impl.num_workers=4", *spec["encoders"][e], *args.extra]
        for e in ours for s in args.pretrain_seeds}
    finetune = {}
    for encoder in ours:
        for pretrain_seed in args.pretrain_seeds:
            for task in args.tasks or c.tasks:
                for mode in c.modes(spec):
                    for seed in args.seeds:
                        name = cell_name(task, f"{encoder}-{mode}", pretrain_seed, seed)
                        finetune[name] = pretrain_name(encoder, pretrain_seed), [
                            *STAGE, "bertlab.finetune", *common, f"name={name}", f"task={task}",
                            f"finetune.encoder={encoder}", f"finetune.pretrain_seed={pretrain_seed}", f"seed={seed}",
                            "impl.num_workers=1", "finetune.epochs=1", *BUDGET[task], *spec["modes"][mode],
                            *args.extra]
    return pretrain, finetune


def start(name: str, command: list[str], logs: Path) -> subprocess.Popen:
    """`command` in its own process group (so a stop takes its loader workers too), logging to logs/<name>.log."""
    with (logs / f"{name}.log").open("w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def run_claim(pretrain: dict[str, list[str]], finetune: dict[str, tuple[str, list[str]]], data: Path,
              deadline: float) -> list[str]:
    """Start every pretraining run (`<encoder>-<seed>`) at once; start each run's cells the moment it ends well (so
    `scratch`'s cells train beside `bert`'s pretraining and the GPU idles less); stop what is still running `deadline`
    seconds after the call began. The runs that failed or were stopped."""
    logs = data / "logs"
    procs = {f"pretrain_{r}": start(f"pretrain_{r}", c, logs) for r, c in pretrain.items()}
    waiting, failed = dict(finetune), []
    while procs:
        for name, proc in list(procs.items()):
            if proc.poll() is None:
                if time.time() - started < deadline:
                    continue
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                print(f"{name}: stopped at the {deadline:.0f} s deadline", flush=True)
            del procs[name]
            tail = (logs / f"{name}.log").read_text(errors="replace").splitlines()
            if proc.returncode:
                failed.append(name)
                print(f"{name}: exit {proc.returncode}: " + " | ".join(tail[-3:]), flush=True)
            if name.startswith("pretrain_"):
                run = name.removeprefix("pretrain_")
                done = data / "pretrain" / pretrain_encoder(run) / run / "metrics.json"  # runs.pretrain_dir's
                ready = not proc.returncode and done.exists()
                stamp(f"{run} pretrained{'' if ready else ' NOT (its cells are skipped)'}: "
                      + " ".join([line.split("] - ")[-1] for line in tail if "held-out" in line][-1:]))
                for cell, (r, command) in list(waiting.items()):
                    if r == run:
                        del waiting[cell]
                        if ready:
                            procs[f"ft_{cell}"] = start(f"ft_{cell}", command, logs)
            elif not proc.returncode:
                stamp(f"{name} done")
        time.sleep(0.5)
    return failed


def device() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"


def bring_back(data: Path, out: Path, claim: str) -> Path:
    """$OUT/claim_<claim>.tar.gz: what verdicts.py reads and the logs, paths relative to the data dir."""
    keep = ["run.json", "download/manifest.json",
            *(f"pretrain/*/*/{f}" for f in ("metrics.json", "heldout_items.json")),  # pretrain/<encoder>/<run>
            *(f"finetune/*/*/{f}" for f in ("metrics.json", "items.json")), "logs/*.log"]  # finetune/<encoder>/<cell>
    path = out / f"claim_{claim}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for pattern in keep:
            for f in sorted(data.glob(pattern)):
                tar.add(f, arcname=str(f.relative_to(data)))
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("claim", choices=sorted(CLAIMS))
    p.add_argument("--data", type=Path, required=True, help="the unpacked pack: data_dir and out_dir of every run")
    p.add_argument("--out", type=Path, default=Path("/tmp/bertlab-gpu"), help="where the tarball goes")
    p.add_argument("--steps", type=int, default=0, help="pretraining steps an encoder (0: the claim's)")
    p.add_argument("--warmup", type=int, default=250)
    p.add_argument("--pretrain-seeds", type=int, nargs="+", default=[1], help="each encoder's pretraining runs")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="fine-tuning seeds, each on every run")
    p.add_argument("--tasks", nargs="*", default=None, help="the claim's tasks if not given")
    p.add_argument("--deadline", type=float, default=540,
                   help="seconds after the call began (STARTED) at which every run still going is stopped")
    p.add_argument("--packed", nargs="*", default=[], help="the overrides pack.sh built the pack with")
    p.add_argument("--extra", nargs="*", default=[], help="overrides for every run, after the rest")
    p.add_argument("--encoders", nargs="*", default=None, help="some of the claim's encoders (default: all)")
    p.add_argument("--base", default=None, help="with --encoders: the committed run (a folder of reports/gpu/) "
                   "whose cells of the claim's other encoders decide the claim with this run's")
    p.add_argument("--commit", default="", help="the commit run.json names (the device's copy has no git history)")
    p.add_argument("--print", action="store_true", help="print the commands and stop")
    args = p.parse_args()
    claim = CLAIMS[args.claim]
    if set(args.encoders or ()) - set(claim.encoders):
        p.error(f"--encoders: claim {args.claim}'s encoders are {', '.join(claim.encoders)}")
    if bool(args.base) != (args.encoders is not None and set(args.encoders) != set(claim.encoders)):
        p.error("--base names the run holding the encoders --encoders leaves out: give both or neither")
    if args.base:
        base_run(args.data, {"claim": args.claim, "base": args.base})  # committed, of this claim: else exits
    pretrain, finetune = plan(args.claim, args)
    if args.print:
        print("\n".join(shlex.join(c) for c in [*pretrain.values(), *(c for _, c in finetune.values())]))
        return
    earlier = [name for name in ("pretrain", "finetune", "run.json") if (args.data / name).exists()]
    if earlier:  # its runs would be reused or brought back as this call's
        p.error(f"--data {args.data} holds an earlier call's runs ({', '.join(earlier)}): give a folder with the pack "
                "alone unpacked")
    logs = args.data / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp(f"claim {args.claim} ({claim.title}) on {device()}: pretrain {', '.join(pretrain)}, then {len(finetune)} "
          f"cells, each as soon as its pretraining run is ready; stop at {args.deadline:.0f} s")
    failed = run_claim(pretrain, finetune, args.data, args.deadline)
    stamp(f"done: {len(failed)} run(s) failed or stopped")
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip()
    (args.data / "run.json").write_text(json.dumps({
        "claim": args.claim, "device": device(), "commit": commit or None, "steps": args.steps or claim.steps,
        "warmup": args.warmup, "tasks": list(args.tasks or claim.tasks), "pretrain_seeds": args.pretrain_seeds,
        "seeds": args.seeds, "extra": shlex.join(args.extra), "seconds": round(time.time() - started),
        "encoders": list(args.encoders or claim.encoders), "base": args.base, "command": " ".join([
            *(f"{k}={shlex.quote(v)}" for k, v in (
                ("PRETRAIN_SEEDS", " ".join(map(str, args.pretrain_seeds)) if args.pretrain_seeds != [1] else ""),
                ("ENCODERS", " ".join(args.encoders or ())), ("BASE", args.base or ""),
                ("EXTRA", shlex.join(args.extra))) if v), f"bash benchmarks/gpu/claim.sh {args.claim}"])}, indent=1))
    print(f"brought back: {bring_back(args.data, args.out, args.claim)}")
    for row in verdicts(args.data, study())[0]:
        print(" | ".join(row[:-1]))
    stamp("end")


if __name__ == "__main__":
    main()
