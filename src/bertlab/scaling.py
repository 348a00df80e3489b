"""Stage `scaling` (outside `dvc repro`): how much compute each claim needs, pretraining tokens x fine-tuning updates.

`python -m bertlab.scaling` (the grid: `conf/scaling/<profile>.yaml`) pretrains each encoder of `scaling.encoders`
that a claim names once per budget of `scaling.pretrain_steps` (`scratch`: once, never trained); fine-tunes each
claim's cells at every budget of `scaling.finetune_budgets` (training examples, with their own learning rate where
one is given) and every seed (a claim on `ppl` compares the encoders' held-out perplexity and fine-tunes nothing); then
writes the report (`bertlab.report.scaling`), and with `logger=wandb` logs its rows and figures to one W&B run in
group "scaling". Every run is a `python -m bertlab.pretrain` or `bertlab.finetune` process, a job of `bertlab.jobs`
(submitit's local executor, `scaling.workers` at once, its output in `<work_dir>/logs/`), taking this command's
overrides (the sweep's grid axes last), with `data_dir` the sweep's `scaling.work_dir`
(`data/scaling/`): there `download`, `tokenizer` and `pretrain_data` are links to the pipeline's outputs, read only,
and `pretrain/` and `finetune/` are the sweep's own, so nothing the ablations report reads is touched and no run
collides with the pipeline's. The stages key every run (code, result settings, inputs): a rerun does nothing for a
finished run and resumes a killed pretraining run from its checkpoint, so a stopped sweep goes on where it stopped.

Each pretraining budget is a separate run, its learning rate decaying to zero at its own budget; a
warmup-stable-decay schedule, one decay branch per budget off a shared stable phase, would cost the largest budget
plus the branches, and is the better design for a longer sweep.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertlab import jobs, stage
from bertlab.errors import UserError
from bertlab.files import check_writable, require
from bertlab.kinds import KINDS
from bertlab.runs import pretrain_dir
from bertlab.report import scaling as report
from bertlab.report import scaling_rows
from bertlab.report import sweep
from bertlab.report.render import git_commit
from bertlab.report.stats import NOT_MEASURED
from bertlab.tracking import log_report

log = logging.getLogger(__name__)

INPUTS = ("download", "tokenizer", "pretrain_data")  # the pipeline's outputs the sweep reads


@dataclass(frozen=True)
class Job:
    """One run of the sweep: `python -m bertlab.<stage>` with `defaults`, the command line's and `overrides`."""

    stage: str
    name: str
    overrides: tuple[str, ...]  # the grid's: after the command line's
    defaults: tuple[str, ...] = ()  # the sweep's defaults: before the command line's, which may override them
    after: str | None = None  # the run whose outputs it reads (a cell's encoder)

    def folder(self, work_dir: Path) -> Path:
        """Where the run writes: `pretrain/<name>/<name>-<seed>` (as `bertlab.pretrain`), a cell
        `finetune/<encoder>/<name>` (as `bertlab.finetune`)."""
        if self.stage == "finetune":
            return work_dir / "finetune" / str(self.after) / self.name
        return pretrain_dir(work_dir, self.name, sweep.PRETRAIN_SEED)


def whole(value: Any, lo: int) -> bool:
    """Whether `value` is an integer (not a bool) of at least `lo`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= lo


def check_grid(spec: dict[str, Any] | None, columns: dict[str, Any], profile: str) -> dict[str, Any]:
    """The `scaling` config (plain data), or a one-line UserError naming its first bad setting."""
    if spec is None:
        raise UserError(f"scaling: the profile {profile!r} has no sweep (add conf/scaling/{profile}.yaml)")
    if not spec.get("pretrain_steps") or not all(whole(s, 1) for s in spec["pretrain_steps"]):
        raise UserError(f"scaling.pretrain_steps={spec.get('pretrain_steps')!r}: expected a list of steps >= 1")
    encoders = spec.get("encoders")
    if not isinstance(encoders, dict) or not encoders or not all(
            isinstance(v, list) and all(isinstance(o, str) for o in v) for v in encoders.values()):
        raise UserError(f"scaling.encoders={encoders!r}: expected names, each with a list of overrides of "
                        "`python -m bertlab.pretrain`")
    own = spec.get("task_budgets") or {}
    for task, listed in own.items():
        if task not in columns or not isinstance(listed, list) or not listed:
            raise UserError(f"scaling.task_budgets.{task}={listed!r}: expected a task of ablations.columns and a "
                            "list of budgets")
    for b in [*(spec.get("finetune_budgets") or [None]), *(b for listed in own.values() for b in listed)]:
        if not (isinstance(b, dict) and set(b) <= {"examples", "lr"} and "examples" in b
                and (b["examples"] is None or whole(b["examples"], 1))
                and (b.get("lr") is None or (isinstance(b["lr"], float | int) and b["lr"] > 0))):
            raise UserError(f"scaling.finetune_budgets: {b!r}: expected {{examples: a count or null (all), "
                            "lr: a positive rate (optional)}")
    if not isinstance(spec.get("report_only"), bool):
        raise UserError(f"scaling.report_only={spec.get('report_only')!r}: expected true or false")
    if not whole(spec.get("workers"), 1):
        raise UserError(f"scaling.workers={spec.get('workers')!r}: expected runs at once, an integer >= 1")
    if not spec.get("seeds") or not all(whole(s, 0) for s in spec["seeds"]):
        raise UserError(f"scaling.seeds={spec.get('seeds')!r}: expected a list of integers")
    if not isinstance(spec.get("pretrain_overrides", []), list):
        raise UserError(f"scaling.pretrain_overrides={spec['pretrain_overrides']!r}: expected a list of overrides")
    for i, claim in enumerate(spec.get("claims") or []):
        ppl = claim.get("task") == report.PPL
        if not ppl and claim.get("task") not in columns:
            raise UserError(f"scaling.claims[{i}].task={claim.get('task')!r}: not {report.PPL} or a task of "
                            "ablations.columns")
        for side in ("a", "b"):
            value = claim.get(side)
            if not (isinstance(value, list) and len(value) == (1 if ppl else 2) and value[0] in encoders
                    and (ppl or value[1] in spec["modes"])):
                want = "[encoder]" if ppl else f"[encoder, mode], the mode one of {', '.join(spec['modes'])}"
                raise UserError(f"scaling.claims[{i}].{side}={value!r}: expected {want}, the encoder one of "
                                f"scaling.encoders ({', '.join(encoders)})")
    return spec


def cells(spec: dict[str, Any], claims: list[dict[str, Any]], steps: int, encoder: str) -> list[Job]:
    """The fine-tuning runs of `claims`' sides on `encoder` (its run at `steps`, or scratch): every mode, every
    fine-tuning budget of the task, every seed; each runs after its encoder."""
    run = sweep.encoder_name(encoder, steps)
    runs = []
    for claim in claims:
        if claim["task"] == report.PPL:
            continue
        modes = [side[1] for side in (claim["a"], claim["b"]) if side[0] == encoder]
        for mode, budget, seed in product(modes, sweep.budgets(spec, claim["task"]), spec["seeds"]):
            name = sweep.cell_name(claim["task"], run, mode, budget["examples"], seed)
            examples = "null" if budget["examples"] is None else budget["examples"]
            lr = [f"finetune.lr={budget['lr']}"] if budget.get("lr") is not None else []
            runs.append(Job("finetune", name, (
                f"name={name}", f"finetune.encoder={run}", f"finetune.pretrain_seed={sweep.PRETRAIN_SEED}",
                f"task={claim['task']}", f"seed={seed}",
                f"{examples_setting(claim['task'])}={examples}", *lr, *spec["modes"][mode]), after=run))
    return runs


def examples_setting(task: str) -> str:
    """The setting that caps `task`'s training examples: a kind of windows over a context (SQuAD's) counts
    questions in its own."""
    kind = KINDS[OmegaConf.load(Path(stage.CONF_DIR) / "task" / f"{task}.yaml").kind]
    return "finetune.squad_max_train_examples" if kind.windows else "finetune.max_train_examples"


def plan(spec: dict[str, Any], without: set[str] = frozenset()) -> list[Job]:
    """Every run of the sweep, budget by budget from the smallest: `scratch` first, then at each budget the encoders
    the claims name, then their cells (a worker that finds no cell ready pretrains the next budget's encoders); a cell
    two claims share runs once; nothing for the claims on tasks `without` data."""
    claims = [c for c in spec["claims"] if c["task"] not in without]
    named = list(dict.fromkeys(side[0] for c in claims for side in (c["a"], c["b"])))
    trained = [e for e in named if e != sweep.SCRATCH]

    def pretrain(encoder: str, steps: int) -> Job:
        name = sweep.encoder_name(encoder, steps)
        return Job("pretrain", name, (f"name={name}", f"seed={sweep.PRETRAIN_SEED}", f"pretrain.max_steps={steps}"),
                   (*spec["encoders"][encoder], *spec.get("pretrain_overrides", [])))

    runs = [pretrain(sweep.SCRATCH, 0)] if sweep.SCRATCH in named else []
    for steps in spec["pretrain_steps"]:
        runs += [pretrain(e, steps) for e in trained]
        runs += [run for e in named for run in cells(spec, claims, steps, e)]
    return list({run.name: run for run in runs}.values())


def link_inputs(data_dir: Path, work_dir: Path) -> None:
    """`work_dir/<input>` -> the pipeline's `data_dir/<input>` (relative links), for each of INPUTS."""
    work_dir.mkdir(parents=True, exist_ok=True)
    for name in INPUTS:
        source, link = require(data_dir / name, name), work_dir / name
        if link.is_symlink() and link.resolve() == source.resolve():
            continue
        if link.exists() or link.is_symlink():
            raise UserError(f"scaling.work_dir: {link} is in the way of a link to {source}: move it, or set "
                            "scaling.work_dir to another folder")
        link.symlink_to(os.path.relpath(source, work_dir))


def forwarded(overrides: list[str]) -> list[str]:
    """This command's overrides that each run takes too: all but where it reads and writes and the sweep's own
    (`scaling.*`)."""
    return [o for o in overrides
            if not o.lstrip("+~").startswith(("scaling.", "scaling=", "data_dir=", "out_dir=", "hydra."))]


def engine_jobs(runs: list[Job], common: list[str], work_dir: Path, workers: int) -> list[jobs.Job]:
    """The sweep's runs as the engine's jobs: `python -m bertlab.<stage>` with the sweep's defaults, the command
    line's overrides (`common`; with more than one worker, `impl.threads` first: each its share of the cores), where
    it reads and writes, and the grid's; its output in `work_dir/logs/<stage>-<name>.log`; a cell after its encoder."""
    if workers > 1:
        common = [f"impl.threads={max(1, (os.cpu_count() or 1) // workers)}", *common]  # the command line's win
    return [jobs.Job(run.name, (sys.executable, "-m", f"bertlab.{run.stage}", *run.defaults, *common,
                                f"data_dir={work_dir}", f"out_dir={work_dir}", *run.overrides),
                     work_dir / "logs" / f"{run.stage}-{run.name}.log", (run.after,) if run.after else ())
            for run in runs]


def run_all(runs: list[Job], common: list[str], work_dir: Path, workers: int) -> None:
    """The runs as jobs on `workers` local workers (`bertlab.jobs`), each once its encoder is done; with one worker
    its output shows here as it runs. A run that fails stops the sweep, once the runs in flight have ended, with one
    line naming its log (the runs waiting for it are not started)."""
    failures = jobs.run_jobs(engine_jobs(runs, common, work_dir, workers),
                             jobs.Engine("local", work_dir / "logs" / "submitit", workers), Path.cwd(),
                             follow=workers == 1)
    if failures:
        stages = {run.name: run.stage for run in runs}
        first = failures[0]
        raise UserError(f"{stages[first.job.name]} run {first}; the finished runs are kept: rerun the same command "
                        "to go on")


@stage.main(own_output=True, reads=("scaling", "logger"))  # into scaling.work_dir and .report_dir, checked here
def run(cfg: DictConfig) -> None:
    ablations = OmegaConf.to_container(cfg.ablations, resolve=True)  # the study: its columns and the paper's numbers
    grid = OmegaConf.to_container(cfg.scaling, resolve=True) if "scaling" in cfg else None
    spec = check_grid(grid, ablations["columns"], cfg.profile_name)
    papers = sweep.paper_effects(spec, ablations)
    work_dir, report_dir = Path(spec["work_dir"]), Path(spec["report_dir"])
    for folder in (work_dir, report_dir):
        check_writable(folder)
    link_inputs(Path(cfg.data_dir), work_dir)
    overrides, _ = stage.composed_overrides()
    without = {c["task"]: why for c in spec["claims"] if (why := sweep.no_data(work_dir, c["task"])) is not None}
    for task, why in without.items():
        log.info("%s: no data (%s): its cells are not measured", task, why)
    runs = plan(spec, set(without))
    if not spec["report_only"]:
        run_all(runs, forwarded(overrides), work_dir, spec["workers"])
    finished = sum((run.folder(work_dir) / "metrics.json").exists() for run in runs)
    if spec["report_only"]:
        log.info("scaling.report_only: the report of the %d of %d planned runs finished so far, starting none",
                 finished, len(runs))
    found = scaling_rows.rows(spec, work_dir, ablations["columns"], ablations["bootstrap"], papers)
    written = report.write(report_dir, spec, found, cfg.profile_name, git_commit(), (finished, len(runs)))
    if cfg.logger.kind == "wandb":  # the CSV's rows and the figures, in group "scaling"
        log_report(cfg.logger, "scaling", f"scaling-{cfg.profile_name}", spec, lambda wandb: {
            "scaling": wandb.Table(columns=list(report.FIELDS), data=report.csv_rows(found)),
            **{f"scaling/{p.stem}": wandb.Image(str(p)) for p in written if p.suffix == ".png"}})
    measured = sum(r.contrast.verdict != NOT_MEASURED for r in found)
    log.info("%d runs; %d of %d contrasts measured; report -> %s", len(runs), measured, len(found),
             report_dir / "scaling.md")


if __name__ == "__main__":
    run()
