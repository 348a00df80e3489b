"""The orchestration's cost against the grid's size: `dvc repro` of a grid whose runs train nothing.

    python benchmarks/orchestration.py                     # 50, 200 and 600 runs, the working tree's code
    python benchmarks/orchestration.py --encoders 5         # 5 encoders, the grid widened by fine-tuning seeds instead
    python benchmarks/orchestration.py --pretrain-seeds 3   # 3 pretraining runs an encoder, its cells on each
    python benchmarks/orchestration.py --runs 50 200 --rev 0b84e09   # the same at a commit (git archive)

A copy of the project (the working tree's files, or `--rev`'s) at the `smoke` profile gets a study of its own: `E`
encoders (`bert`'s recipe under new names), each pretrained at `--pretrain-seeds` seeds and one row of Table 5 on
`--tasks` tasks x those pretraining runs x `--seeds` fine-tuning seeds (or, with `--encoders E`, as many fine-tuning
seeds as make the runs), every encoder left out by the profile (`ablations.cells.skip`), so each pretraining run and
each cell writes its "not run" record and nothing trains: what is left is the orchestration. A run is a pretraining
run or a cell (the unit a stage was before stages were grouped by encoder); `E` is chosen so the runs are `--runs`.
Each stage's command runs under a wrapper that logs its process's wall time, so the table gives, per size: DVC's
stages, `dvc repro`'s wall time, the stage processes' own, DVC's overhead (the difference) per run and per DVC stage,
DVC's own CPU time (all CPU time of `dvc repro` and its children but the stage processes': what a busy machine does
not inflate) per run and per stage, and then the no-op `dvc repro` and `dvc status`. "Grid a run" is all a run costs
when it trains nothing: the pretrain and finetune stages' processes (start-up, a Hydra job a run) plus DVC's overhead,
over the runs. The data stages (download, tokenizer, pretrain_data) run for real, once per size, on
`BERTLAB_DATA_MIRROR` (default ../shared/data); their processes count as processes.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DECLARATION = "conf/ablations/default.yaml"
TASKS = ["qnli", "mrpc", "sst2", "squad", "mnli"]
WRAPPER = """#!/bin/sh
# a stage's command (`python -m bertlab.<stage> ...`): its start, end, module and CPU seconds appended to $BENCH_TIMES
s=$(date +%s.%N); "$@"; rc=$?; e=$(date +%s.%N)
times > "$BENCH_TIMES.$$"   # in this shell (a pipe would run it in a subshell): its children's user and system time
cpu=$(tail -n 1 "$BENCH_TIMES.$$" | sed 's/m/ /g; s/s//g' | awk '{print $1 * 60 + $2 + $3 * 60 + $4}')
rm -f "$BENCH_TIMES.$$"; echo "$s $e $3 $cpu" >> "$BENCH_TIMES"; exit $rc
"""


def copy_project(dest: Path, rev: str | None) -> None:
    """The project's files into `dest`: the working tree's (as git sees them) or those of commit `rev`."""
    if rev:
        tar = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
        tarfile.open(fileobj=io.BytesIO(tar)).extractall(dest, filter="data")
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest / f)


def widen(dest: Path, encoders: int, tasks: list[str], pretrain_seeds: int, seeds: int) -> None:
    """`dest`'s study: `encoders` encoders at `pretrain_seeds` pretraining seeds, one Table 5 row each on `tasks` x
    those pretraining runs x `seeds`, every one left out."""
    study = yaml.safe_load((dest / DECLARATION).read_text())
    names = [f"e{i:03d}" for i in range(encoders)]
    study["encoders"] = {n: list(study["encoders"]["bert"]) for n in names}
    study["pretrain_seeds"] = list(range(1, pretrain_seeds + 1))
    study["seeds"] = list(range(1, seeds + 1))
    for table, spec in study["tables"].items():
        spec["tasks"], spec["rows"] = (tasks, {f"{n}-finetune": {"label": n} for n in names}) if table == "table5" \
            else ([], {})
    study["claims"] = []
    study["cells"] = {"seeds": {}, "skip": {n: "the orchestration benchmark trains nothing" for n in names}}
    (dest / DECLARATION).write_text(yaml.safe_dump(study, sort_keys=False))
    params = yaml.safe_load((dest / "params.yaml").read_text())
    (dest / "params.yaml").write_text(yaml.safe_dump(params | {"profile": "smoke"}, sort_keys=False))
    profile = dest / "conf/profile/smoke.yaml"  # a profile's own `cells` would replace the study's
    profile.write_text(profile.read_text().split("\nablations:")[0])
    (dest / "timed").write_text(WRAPPER)
    (dest / "timed").chmod(0o755)
    dvc = (dest / "dvc.yaml").read_text()
    (dest / "dvc.yaml").write_text(dvc.replace("cmd: python -m", "cmd: ./timed python -m"))


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """`cmd`'s wall time, the CPU time of it and its children, and its output."""
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return time.perf_counter() - start, cpu, done.stdout


def measure(runs: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    """One grid of about `runs` runs: widened by encoders (`args.seeds` seeds a cell), or, with `args.encoders`, by
    fine-tuning seeds (that many encoders); `args.pretrain_seeds` pretraining runs an encoder either way."""
    p = args.pretrain_seeds
    seeds = max(1, round((runs / args.encoders / p - 1) / len(args.tasks))) if args.encoders else args.seeds
    per_encoder = p * (1 + len(args.tasks) * seeds)
    encoders = args.encoders or max(1, round(runs / per_encoder))
    dest = work / f"grid{runs}"
    copy_project(dest, args.rev)
    widen(dest, encoders, args.tasks, p, seeds)
    times = dest / "stage_times.txt"
    env = {**os.environ, "BERTLAB_DATA_MIRROR": str(args.mirror), "WANDB_MODE": "offline", "BENCH_TIMES": str(times),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(dest / "src")}
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    wall, cpu, out = timed(["dvc", "repro"], dest, env)
    stages = out.count("Running stage '")
    spans = [(module, float(end) - float(start), float(used))
             for start, end, module, used in (line.split() for line in times.read_text().splitlines())]
    processes = sum(t for _, t, _ in spans)
    grid = sum(t for module, t, _ in spans if module in ("bertlab.pretrain", "bertlab.finetune"))
    dvc_cpu = cpu - sum(used for _, _, used in spans)  # DVC's own CPU time: the same on a busy machine
    noop, _, out = timed(["dvc", "repro"], dest, env)
    if "Running stage" in out:
        sys.exit(f"the second `dvc repro` at {runs} runs was no no-op:\n{out[-2000:]}")
    status, _, _ = timed(["dvc", "status"], dest, env)
    lock_kb = (dest / "dvc.lock").stat().st_size / 1e3
    if not args.keep:
        shutil.rmtree(dest)
    overhead, n = wall - processes, encoders * per_encoder
    return {"runs": n, "stages": stages, "wall": wall, "processes": processes, "per_run": overhead / n,
            "per_stage": overhead / stages, "grid_per_run": (grid + overhead) / n, "dvc_cpu_per_run": dvc_cpu / n,
            "dvc_cpu_per_stage": dvc_cpu / stages, "noop": noop, "status": status, "lock_kb": lock_kb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[50, 200, 600], help="grid sizes, in runs")
    parser.add_argument("--tasks", nargs="+", default=TASKS, help="Table 5's tasks in the widened study")
    parser.add_argument("--pretrain-seeds", type=int, default=1, help="pretraining seeds (runs) an encoder")
    parser.add_argument("--seeds", type=int, default=2, help="fine-tuning seeds a cell")
    parser.add_argument("--encoders", type=int,
                        help="this many encoders, the grid widened by fine-tuning seeds instead")
    parser.add_argument("--rev", help="benchmark this commit's code (default: the working tree)")
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("BERTLAB_DATA_MIRROR",
                                                                          REPO.parent / "shared" / "data")))
    parser.add_argument("--keep", action="store_true", help="keep each grid's copy (under the temp dir)")
    args = parser.parse_args()
    if not args.mirror.is_dir():
        sys.exit(f"--mirror {args.mirror}: no such folder (the data mirror, ../shared/data on our machines)")
    widened = f"{args.encoders} encoders, widened by fine-tuning seeds" if args.encoders else \
        f"widened by encoders, {args.seeds} seeds a cell"
    widened += f", {args.pretrain_seeds} pretraining run(s) an encoder"
    print(f"code: {args.rev or 'working tree'}; a run: a pretraining run or a cell ({len(args.tasks)} tasks; "
          f"{widened}); overhead = dvc repro's wall time - its stage processes' own")
    print("| runs | DVC stages | dvc repro (s) | processes (s) | overhead a run (s) | overhead a stage (s) | "
          "DVC CPU a run (s) | DVC CPU a stage (s) | grid a run (s) | no-op repro (s) | dvc status (s) | "
          "dvc.lock (KB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bertlab-orchestration-") as tmp:
        for runs in args.runs:
            m = measure(runs, args, Path(tmp))
            print(f"| {m['runs']} | {m['stages']} | {m['wall']:.1f} | {m['processes']:.1f} | {m['per_run']:.3f} | "
                  f"{m['per_stage']:.2f} | {m['dvc_cpu_per_run']:.3f} | {m['dvc_cpu_per_stage']:.2f} | "
                  f"{m['grid_per_run']:.2f} | {m['noop']:.1f} | {m['status']:.1f} | "
                  f"{m['lock_kb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
