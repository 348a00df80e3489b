"""Stage `scaling` (outside `dvc repro`): how much compute each claim needs, pretraining tokens x fine-tuning updates.

`python -m bertlab.scaling` (the grid: `conf/scaling/<profile>.yaml`) pretrains `scaling.encoder` once per budget of
`scaling.pretrain_steps`, and a never-pretrained `scratch`; fine-tunes each claim's cells at every budget of
`scaling.finetune_budgets` (training examples, with their own learning rate where one is given) and every seed; then
writes the report (`bertlab.report.scaling`). Every run is a `python -m bertlab.pretrain` or `bertlab.finetune`
process taking this command's overrides (the sweep's grid axes last), with `data_dir` the sweep's `scaling.work_dir`
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
import subprocess
import sys
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertlab import stage
from bertlab.errors import UserError
from bertlab.files import check_writable, require
from bertlab.report import scaling as report
from bertlab.report.render import git_commit
from bertlab.report.stats import NOT_MEASURED

log = logging.getLogger(__name__)

INPUTS = ("download", "tokenizer", "pretrain_data")  # the pipeline's outputs the sweep reads


@dataclass(frozen=True)
class Job:
    """One run of the sweep: `python -m bertlab.<stage>` with `defaults`, the command line's and `overrides`."""

    stage: str
    name: str
    overrides: tuple[str, ...]  # the grid's: after the command line's
    defaults: tuple[str, ...] = ()  # the sweep's defaults: before the command line's, which may override them


def whole(value: Any, lo: int) -> bool:
    """Whether `value` is an integer (not a bool) of at least `lo`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= lo


def check_grid(spec: dict[str, Any] | None, columns: dict[str, Any], profile: str) -> dict[str, Any]:
    """The `scaling` config (plain data), or a one-line UserError naming its first bad setting."""
    if spec is None:
        raise UserError(f"scaling: the profile {profile!r} has no sweep (add conf/scaling/{profile}.yaml)")
    if not spec.get("pretrain_steps") or not all(whole(s, 1) for s in spec["pretrain_steps"]):
        raise UserError(f"scaling.pretrain_steps={spec.get('pretrain_steps')!r}: expected a list of steps >= 1")
    for b in spec.get("finetune_budgets") or [None]:
        if not (isinstance(b, dict) and set(b) <= {"examples", "lr"} and "examples" in b
                and (b["examples"] is None or whole(b["examples"], 1))
                and (b.get("lr") is None or (isinstance(b["lr"], float | int) and b["lr"] > 0))):
            raise UserError(f"scaling.finetune_budgets: {b!r}: expected {{examples: a count or null (all), "
                            "lr: a positive rate (optional)}")
    if not spec.get("seeds") or not all(whole(s, 0) for s in spec["seeds"]):
        raise UserError(f"scaling.seeds={spec.get('seeds')!r}: expected a list of integers")
    for i, claim in enumerate(spec.get("claims") or []):
        for side in ("a", "b"):
            value = claim.get(side)
            if not (isinstance(value, list) and len(value) == 2 and value[0] in (report.PRETRAINED, report.SCRATCH)
                    and value[1] in spec["modes"]):
                raise UserError(f"scaling.claims[{i}].{side}={value!r}: expected [encoder, mode], the encoder "
                                f"{report.PRETRAINED} or {report.SCRATCH}, the mode one of {', '.join(spec['modes'])}")
        if claim.get("task") not in columns:
            raise UserError(f"scaling.claims[{i}].task={claim.get('task')!r}: not a task of ablations.columns")
    return spec


def plan(spec: dict[str, Any], without: set[str] = frozenset()) -> list[Job]:
    """Every run of the sweep, pretraining first: `scratch` and one encoder per budget; then each claim side's cells
    at every budget pair and seed (a cell two claims share runs once), but for the tasks `without` data."""
    recipe = tuple(spec["encoder"])
    jobs = [Job("pretrain", report.SCRATCH, (f"name={report.SCRATCH}", "pretrain.max_steps=0"), recipe)]
    for steps in spec["pretrain_steps"]:
        name = report.encoder_name(report.PRETRAINED, steps)
        jobs.append(Job("pretrain", name, (f"name={name}", f"pretrain.max_steps={steps}"), recipe))
    cells: dict[str, Job] = {}
    for claim in (c for c in spec["claims"] if c["task"] not in without):
        for (encoder, mode), steps, budget, seed in product(
                (claim["a"], claim["b"]), spec["pretrain_steps"], spec["finetune_budgets"], spec["seeds"]):
            run = report.encoder_name(encoder, steps)
            name = report.cell_name(claim["task"], run, mode, budget["examples"], seed)
            examples = "null" if budget["examples"] is None else budget["examples"]
            lr = [f"finetune.lr={budget['lr']}"] if budget.get("lr") is not None else []
            cells[name] = Job("finetune", name, (
                f"name={name}", f"finetune.encoder={run}", f"task={claim['task']}", f"seed={seed}",
                f"finetune.max_train_examples={examples}", *lr, *spec["modes"][mode]))
    return jobs + list(cells.values())


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


def run_all(jobs: list[Job], common: list[str], work_dir: Path) -> None:
    """Each job as its own process, in order; the first to fail stops the sweep with one line (its own above)."""
    for i, job in enumerate(jobs, 1):
        log.info("[%d/%d] %s %s", i, len(jobs), job.stage, job.name)
        overrides = [*job.defaults, *common, f"data_dir={work_dir}", f"out_dir={work_dir}", *job.overrides]
        proc = subprocess.Popen([sys.executable, "-m", f"bertlab.{job.stage}", *overrides])
        try:
            code = proc.wait()
        finally:  # a stop signal here stops the run too, which keeps its checkpoint
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        if code != 0:
            raise UserError(f"{job.stage} run {job.name} stopped with exit status {code} (its error above); the "
                            "finished runs are kept: rerun the same command to go on")


@stage.main(own_output=True)  # into scaling.work_dir and scaling.report_dir, checked here
def run(cfg: DictConfig) -> None:
    columns = OmegaConf.to_container(cfg.ablations.columns, resolve=True)
    grid = OmegaConf.to_container(cfg.scaling, resolve=True) if "scaling" in cfg else None
    spec = check_grid(grid, columns, cfg.profile_name)
    work_dir, report_dir = Path(spec["work_dir"]), Path(spec["report_dir"])
    for folder in (work_dir, report_dir):
        check_writable(folder)
    link_inputs(Path(cfg.data_dir), work_dir)
    overrides, _ = stage.composed_overrides()
    without = {c["task"]: why for c in spec["claims"] if (why := report.no_data(work_dir, c["task"])) is not None}
    for task, why in without.items():
        log.info("%s: no data (%s): its cells are not measured", task, why)
    jobs = plan(spec, set(without))
    run_all(jobs, forwarded(overrides), work_dir)
    found = report.rows(spec, work_dir, columns, OmegaConf.to_container(cfg.ablations.bootstrap, resolve=True))
    report.write(report_dir, spec, found, cfg.profile_name, git_commit())
    measured = sum(r.contrast.verdict != NOT_MEASURED for r in found)
    log.info("%d runs; %d of %d contrasts measured; report -> %s", len(jobs), measured, len(found),
             report_dir / "scaling.md")


if __name__ == "__main__":
    run()
