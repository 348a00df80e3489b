"""`python -m bertlab.grid [key=value ...]`: what `dvc status` finds stale, as parallel jobs (`bertlab.jobs`), back in
DVC at the end. Not a stage: it drives them.

1. The stale stages upstream of the training stages (`configs`, the data stages) run here, `dvc repro`.
2. The plan is printed: a job per pretraining run (encoder x pretraining seed) of each stale `pretrain@<encoder>`
   (`python -m bertlab.pretrain -cd data/configs/pretrain/<encoder>/run -cn <encoder>-<seed>`: the stage's multirun, a
   run a job; a twin, a run of the same settings and seed under another encoder's name, after the other, whose outputs
   it copies), and a job per fine-tuning cell of each stale `finetune@<encoder>` (`python -m bertlab.finetune -cd
   data/configs/finetune/<encoder>/cell -cn <cell>`), which waits for the pretraining run it reads
   (`finetune.pretrain_seed`) where that is stale. A run finished already with its run key (a rerun after a failed
   cell) gets no job, nor does a run the profile leaves out (`not_run`): its "not run" record is written here. A run
   of 0 steps or one that copies a twin is a light job, of a cell's size. `dry_run=true` stops here.
3. The jobs run; each finished stage is recorded with `dvc commit -f <stage>` (only this process runs DVC: the jobs
   never hold its lock; it waits for DVC's lock while another DVC command holds it); then `dvc repro` runs what is
   left (the report). A failed job is named with its log, and the command stops before the report: run it again, and
   only the runs still without their result are submitted. Each run claims its name before it writes
   (`bertlab.owner`), so a second writer of it (a `dvc repro` beside the grid, a duplicate job) is refused in one line.

Settings: `bertlab.grid_settings`.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from bertlab import owner, runs, untrained
from bertlab.errors import Interrupted, UserError
from bertlab.grid_settings import FOLDER, engine, settings
from bertlab.guards import stop_on_signals
from bertlab.jobs import Job, run_jobs
from bertlab.slurm_jobs import run_slurm_jobs
from bertlab.study import pretrain_name

TRAINING = ("pretrain", "finetune")  # the stages run as jobs (foreach stages: `<stage>@<encoder>`)


@dataclass
class Plan:
    """What the grid runs: the stale stages before the jobs (here), the jobs, the stages each job group finishes."""

    upstream: list[str]
    jobs: list[Job]
    stages: dict[str, list[str]]  # stage -> the names of its jobs (committed once all are done)
    records: list[tuple[str, Path]] = field(default_factory=list)  # runs left out: (stage, config), written here
    finished: list[str] = field(default_factory=list)  # runs of a stale stage finished already: no job


WAITING = "grid: another DVC command holds DVC's lock here: waiting for it"


def dvc(*args: str, show: bool = True) -> None:
    """`dvc <args>` here, waiting for DVC's lock while another DVC command holds it (`--wait-for-lock`; its output
    not shown, the wait said in a line); its output passed through (`show`), else shown where it fails; a UserError
    naming the command where it fails."""
    def run(*wait: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dvc", *wait, *args], capture_output=not show, text=True)

    done = run("--wait-for-lock") if show else run()
    if not show and done.returncode != 0 and "Unable to acquire lock" in done.stdout + done.stderr:
        print(WAITING, file=sys.stderr, flush=True)
        done = run("--wait-for-lock")
    if done.returncode != 0:
        said = [line for line in f"{done.stdout or ''}{done.stderr or ''}".splitlines() if line.strip()]
        raise UserError(f"grid: `dvc {' '.join(args)}` failed (exit status {done.returncode}"
                        + (f"): {said[-1].strip()}" if said else "; its output above)"))


def stale() -> dict[str, Any]:
    """The stages `dvc status` finds stale, and every stage of the pipeline (by name: `stage@item` for foreach);
    waits, saying so in a line, while another DVC command holds DVC's lock."""
    from dvc.lock import LockError
    from dvc.repo import Repo

    def read(wait: bool) -> dict[str, Any]:
        with Repo(".", _wait_for_lock=wait) as repo:  # wait: what `dvc --wait-for-lock` does
            return {"stale": set(repo.status()), "stages": {s.addressing: s for s in repo.index.stages},
                    "graph": repo.index.graph}

    try:
        return read(False)
    except LockError:
        print(WAITING, file=sys.stderr, flush=True)
        return read(True)


def upstream_of_training(found: dict[str, Any]) -> list[str]:
    """The stale stages the training stages depend on, directly or not (DVC's graph points to dependencies)."""
    import networkx as nx

    graph, by_stage = found["graph"], {s: name for name, s in found["stages"].items()}
    training = [s for s, name in by_stage.items() if name.split("@")[0] in TRAINING]
    ups = {by_stage[u] for s in training for u in nx.descendants(graph, s)}
    return [name for name in found["stages"] if name in ups and name in found["stale"]
            and name.split("@")[0] not in TRAINING]


def command(stage: Any) -> tuple[str, ...]:
    """A stage's command line, with this interpreter for a leading `python`."""
    argv = shlex.split(stage.cmd)
    return (sys.executable, *argv[1:]) if argv[0] == "python" else tuple(argv)


def pretraining(config: Path) -> tuple[str, bool]:
    """What decides a composed pretraining run beside its inputs (its run key's settings, its seed among them), and
    whether it trains at all (`scratch`: 0 steps). A twin, equal in these, copies the other's outputs once they are
    there (`impl.reuse_twins`): its job waits for the other's."""
    cfg = OmegaConf.load(config)
    settings = runs.values_at(cfg, [*runs.RESULT_KEYS["pretrain"], "pretrain_data.seed"])
    return json.dumps(settings, sort_keys=True, default=str), cfg.pretrain.max_steps > 0


def finished(config: Path, stage: str) -> bool:
    """Whether the composed run `config` of training stage `stage` is finished with its run key (the code, its
    settings and its inputs as they are now; a cell's: its encoder's too) and its files are the bytes it recorded: its
    job would do nothing."""
    cfg = OmegaConf.load(config)
    out = runs.pretrain_dir(cfg.out_dir, cfg.name, cfg.seed) if stage == "pretrain" else untrained.cell_dir(cfg)
    if not (out / "metrics.json").exists():
        return False
    try:
        if stage == "pretrain":
            key = runs.pretrain_key(cfg, runs.pretrain_inputs(cfg))
        else:
            from bertlab.modeling.export import CONFIG, PLAIN_WEIGHTS  # torch: only once a cell may be finished

            key = runs.cell_key(cfg, untrained.encoder_dir(cfg), (PLAIN_WEIGHTS, CONFIG))
    except UserError:  # an input is missing, or not what its run wrote: the job says so
        return False
    record = json.loads((out / "metrics.json").read_text())
    return key is not None and record.get("run_key") == key and runs.unaltered(out, record)


def plan(found: dict[str, Any]) -> Plan:
    """The jobs of the stale training stages (see the module's docstring)."""
    names = [n for n in found["stages"] if n in found["stale"] and n.split("@")[0] in TRAINING]
    p, trains = Plan([], [], {}), {}
    for name in [n for n in names if n.startswith("pretrain@")]:
        folder = Path(f"data/configs/pretrain/{name.split('@', 1)[1]}/run")
        configs = sorted(folder.glob("*.yaml"))
        p.stages[name] = []
        if not configs:  # a dry run before `configs` has composed the runs: the stage's multirun, one job
            p.jobs.append(Job(name, command(found["stages"][name]), FOLDER / "logs" / f"{name}.log", kind="pretrain"))
            p.stages[name] = [name]
            continue
        for config in configs:
            job = f"{name}/{config.stem}"
            if OmegaConf.load(config).not_run:
                p.records.append(("pretrain", config))
                continue
            if finished(config, "pretrain"):
                p.finished.append(job)
                continue
            settings, trains_at_all = pretraining(config)
            first = trains.setdefault(settings, job)
            light = first != job or not trains_at_all  # a twin's copy, an untrained export
            p.stages[name].append(job)
            p.jobs.append(Job(job, (sys.executable, "-m", "bertlab.pretrain", "-cd", str(folder), "-cn", config.stem),
                              FOLDER / "logs" / name / f"{config.stem}.log", () if first == job else (first,),
                              kind="cell" if light else "pretrain"))
    planned = {j.name for j in p.jobs}
    for encoder in dict.fromkeys(n.split("@", 1)[1] for n in names):
        name, pretraining_stage = f"finetune@{encoder}", f"pretrain@{encoder}"
        if name not in found["stages"] or (name not in names and pretraining_stage not in p.stages):
            continue  # a stale encoder's pretraining: its cells run after it (a finished one does nothing)
        folder = Path(f"data/configs/finetune/{encoder}")
        p.stages[name] = []
        for cell in sorted(c.stem for c in (folder / "cell").glob("*.yaml")):
            job, config = f"{name}/{cell}", folder / "cell" / f"{cell}.yaml"
            key = yaml.safe_load((folder / "keys" / f"{cell}.yaml").read_text())
            if key.get("not_run"):
                p.records.append(("finetune", config))
                continue
            run = f"{pretraining_stage}/{pretrain_name(encoder, key['finetune'].get('pretrain_seed'))}"
            after = next(((j,) for j in (run, pretraining_stage) if j in planned), ())  # its run, else its whole stage
            if not after and finished(config, "finetune"):
                p.finished.append(job)
                continue
            p.stages[name].append(job)
            p.jobs.append(Job(job, (sys.executable, "-m", "bertlab.finetune", "-cd", str(folder / "cell"), "-cn",
                                    cell), FOLDER / "logs" / name / f"{cell}.log", after, kind="cell"))
    p.upstream = upstream_of_training(found)
    return p


def write_records(p: Plan) -> None:
    """The "not run" records of the runs the profile leaves out, written here: no process, no job, for a run that
    trains nothing (each under its run's claim, as its stage would)."""
    for stage, config in p.records:
        cfg = OmegaConf.load(config)
        run = pretrain_name(cfg.name, cfg.seed) if stage == "pretrain" else cfg.name
        with owner.claim(cfg.out_dir, stage, run, 0):
            (untrained.run_not_run if stage == "pretrain" else untrained.cell_not_run)(cfg)


def describe(p: Plan, s: dict[str, Any]) -> str:
    """The plan in a few lines: what runs here first, how many jobs of what size, then what re-enters DVC."""
    pretrain = [j for j in p.jobs if j.kind == "pretrain"]
    light = [j for j in p.jobs if j.kind == "cell" and j.name.startswith("pretrain@")]
    cells = [j for j in p.jobs if j.kind == "cell" and j not in light]
    g = s["gpus_per_job"]
    if s["cluster"] == "slurm":
        limits = f"{s['time']} min each" if s["time"] == s["cell_time"] else \
            f"{s['time']} min a pretraining job, {s['cell_time']} a cell"
        where = f"SLURM jobs (partition {s['partition'] or 'default'}, {limits})"
        size = (f"{s['nodes']} node(s) x {g} GPU(s), a task a GPU" if g else f"{s['nodes']} node(s) x 1 task",
                "1 task, 1 GPU" if g else "1 task")
    else:
        where = f"{s['workers']} local worker(s)"
        size = (f"1 process, {g} GPU(s)",) * 2
    per_encoder = {n.split("@")[1]: len(jobs) for n, jobs in p.stages.items() if n.startswith("finetune@")}
    first = f"dvc repro {' '.join(p.upstream)}" if p.upstream else "nothing (the inputs are current)"
    lines = [f"grid plan on {where}:", f"  here first: {first}",
             f"  {len(pretrain)} pretraining job(s) of {size[0]}: {', '.join(j.name for j in pretrain) or '-'}",
             *([f"  {len(light)} pretraining job(s) of {size[1]}, training nothing (0 steps) or copying a twin after "
                "it: " + ", ".join(j.name + (f" after {j.after[0]}" if j.after else "") for j in light)] if light else []),
             f"  {len(cells)} fine-tuning cell job(s) of {size[1]}: "
             + (", ".join(f"{e} {n}" for e, n in per_encoder.items() if n) or "-"),
             *([f"  {len(p.records)} run(s) left out by the profile: their \"not run\" records written here, no job"]
               if p.records else []),
             *([f"  {len(p.finished)} run(s) of a stale stage finished already with their run keys: no job"]
               if p.finished else []),
             f"  then: dvc commit -f each of the {len(p.stages)} stage(s) as its jobs finish, and dvc repro"]
    return "\n".join(lines)


def expected(found: dict[str, Any]) -> dict[str, Any]:
    """`found` with every training stage that depends on a stale stage stale too: it reruns once they have."""
    import networkx as nx

    graph, by_stage = found["graph"], {s: name for name, s in found["stages"].items()}
    after = {by_stage[d] for name in found["stale"] if name in found["stages"]
             for d in nx.ancestors(graph, found["stages"][name])}
    return found | {"stale": found["stale"] | {n for n in after if n.split("@")[0] in TRAINING}}


def run(args: list[str]) -> int:
    """The command: 0 when every stale stage ran and the pipeline is current, 1 when a job failed. The whole plan is
    printed before anything long runs: only `configs` first (the runs' composed configs, which the plan reads)."""
    s = settings(args)
    found = stale()
    if "configs" in found["stale"]:
        dvc("repro", "configs")
        found = stale()
    p = plan(expected(found))
    print(describe(p, s), flush=True)
    if s["dry_run"]:
        return 0
    if p.upstream:
        dvc("repro", *p.upstream)
        jobs = {j.name for j in p.jobs}
        p = plan(stale())
        if {j.name for j in p.jobs} != jobs:  # a data stage rerun to the same outputs: fewer runs are stale
            print("the plan, once the data stages ran:\n" + describe(p, s), flush=True)
    write_records(p)
    left = {name: set(jobs) for name, jobs in p.stages.items()}

    def commit_when_done(job: Job) -> None:
        for name, waiting in left.items():
            if job.name in waiting:
                waiting.discard(job.name)
                if not waiting:
                    dvc("commit", "-f", name, show=False)

    runner = run_slurm_jobs if s["cluster"] == "slurm" else run_jobs
    failures = runner(p.jobs, engine(s), Path.cwd(), on_done=commit_when_done)
    for stage in [n for n, jobs in left.items() if not jobs and not p.stages[n]]:
        dvc("commit", "-f", stage, show=False)  # a stage with no job: its output recorded as it is
    if failures:
        print(f"{len(failures)} job(s) did not finish; rerun this command to submit what is still stale:",
              file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    dvc("repro")
    return 0


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("submitit").propagate = False  # it has its own handlers: once is enough
    stop_on_signals()
    signal.signal(signal.SIGHUP, signal.getsignal(signal.SIGTERM))  # its terminal closed: as SIGTERM
    try:
        sys.exit(run(sys.argv[1:]))
    except UserError as err:
        print(f"Error: {err}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as stop:
        print(f"Error: grid stopped by {signal.Signals(stop.signum).name}: its SLURM jobs go on in the queue (rerun "
              "the same command to follow them and commit what finished); local jobs stopped, their checkpoints "
              "kept (rerun to resume)", file=sys.stderr)
        sys.exit(128 + stop.signum)


if __name__ == "__main__":
    main()
