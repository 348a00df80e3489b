"""Jobs on SLURM with the study's progress in SLURM's queue and in files, not in the process that submits them.

Every job is submitted at once, each waiting in SLURM's queue for the jobs it waits for (`--dependency=afterok:<ids>`
with `--kill-on-invalid-dep=yes`: a job whose dependency failed leaves the queue instead of pending for ever). Jobs of
one kind that wait for the same jobs go as one job array, one `sbatch` (submitit's `batch()`): the cells on one
pretraining run, the pretraining runs that wait for nothing; so `sbatch` calls grow with the pretraining runs and
the stages, not with the cells. Each job's SLURM id is recorded in `<engine.folder>/queue.json` as soon as `sbatch`
gives it. So the study goes on while no driver runs: stopped in any way (SIGTERM, SIGHUP, Ctrl-C, SIGKILL, its node
lost), the driver leaves its jobs in the queue, and a rerun adopts each recorded job still queued or running instead of
submitting it again (a job of the same run submitted twice anyway is refused by the run's claim, `bertlab.owner`).
A job that left the queue without its result is failed only after `GONE_S` (a shared file system may show its result
late). An `sbatch` refused (a per-user submit limit) stops the submitting, in one line; what was submitted goes on.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import submitit

from bertlab.errors import UserError
from bertlab.jobs import POLL_S, Command, Engine, Failure, Job, check, copy_new, failure_of

log = logging.getLogger(__name__)
GONE_S = 60.0  # how long a job may be out of the queue without its result before it is failed


def state_file(engine: Engine) -> Path:
    """Where the ids of the jobs submitted from `engine.folder` are recorded."""
    return engine.folder / "queue.json"


def recorded(engine: Engine) -> dict[str, str]:
    """{job name: SLURM id} of the jobs submitted before (none if nothing was)."""
    path = state_file(engine)
    return json.loads(path.read_text()) if path.exists() else {}


def record(engine: Engine, ids: dict[str, str]) -> None:
    """Records `ids` (job name -> SLURM id) over what is recorded, whole (a new file moved into place)."""
    path = state_file(engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(recorded(engine) | ids, indent=1, sort_keys=True))
    tmp.replace(path)


def in_queue(ids: Sequence[str]) -> set[str]:
    """Those of `ids` (SLURM job ids, an array's task `<array>_<task>`) still in SLURM's queue: pending, running,
    requeued. squeue, not submitit's sacct, which a cluster without accounting storage does not have."""
    if not ids:
        return set()
    done = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(ids)], capture_output=True, text=True)
    return set(done.stdout.split()) if done.returncode == 0 else set(ids)  # unknown: still there


def handle(engine: Engine, job_id: str) -> submitit.SlurmJob:
    """The submitit handle of SLURM job `job_id` submitted from `engine.folder`."""
    return submitit.SlurmJob(folder=engine.folder / "%j", job_id=job_id)


def submit(jobs: Sequence[Job], engine: Engine, cwd: Path, handles: dict[str, submitit.SlurmJob]) -> None:
    """Submits `jobs` (those of them not in `handles`), every one now: an array for each kind and set of jobs waited
    for, in the order the waits allow; adds each to `handles` and records its id."""
    pending = [j for j in jobs if j.name not in handles]
    while pending:
        groups: dict[tuple[str, tuple[str, ...]], list[Job]] = {}
        for job in pending:
            if all(a in handles for a in job.after):
                groups.setdefault((job.kind, tuple(sorted(job.after))), []).append(job)
        for (kind, after), group in groups.items():
            ex = engine.executor(group[0], 0)
            ex.update_parameters(job_name=group[0].name if len(group) == 1 else f"{group[0].name} +{len(group) - 1}")
            if after:
                deps = ":".join(handles[a].job_id for a in after)
                ex.update_parameters(dependency=f"afterok:{deps}",
                                     additional_parameters={**engine.slurm.get("additional_parameters", {}),
                                                            "kill-on-invalid-dep": "yes"})
            for job in group:
                job.log_file.parent.mkdir(parents=True, exist_ok=True)
                job.log_file.write_text("")  # this run's output only
            try:
                with ex.batch():
                    submitted = [ex.submit(Command(), j.argv, str(cwd), str(j.log_file)) for j in group]
            except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError, OSError) as err:
                said = str(err).strip().splitlines()
                raise UserError(f"sbatch refused {len(group)} job(s) ({group[0].name}, ...): "
                                f"{said[-1] if said else err!r}; the {len(handles)} job(s) submitted go on: rerun to "
                                "submit the rest") from err
            handles.update({j.name: h for j, h in zip(group, submitted)})
            record(engine, {j.name: h.job_id for j, h in zip(group, submitted)})
            log.info("submitted %s (job %s)", group[0].name if len(group) == 1 else f"{len(group)} jobs as an array "
                     f"({group[0].name}, ...)", submitted[0].job_id.split("_")[0])
        pending = [j for j in pending if j.name not in handles]


def run_slurm_jobs(jobs: Sequence[Job], engine: Engine, cwd: Path, follow: bool = False,
                   on_done: Callable[[Job], None] | None = None) -> list[Failure]:
    """`jobs.run_jobs` on SLURM (see the module's docstring): adopts the recorded jobs still in the queue, submits
    the rest, and follows them to their ends, calling `on_done(job)` as each finishes. Returns the failures, and the
    jobs not run for them. Stopped, it leaves every job in the queue."""
    check(jobs)
    before = recorded(engine)
    queued = in_queue([before[j.name] for j in jobs if j.name in before])
    handles = {j.name: handle(engine, before[j.name]) for j in jobs if before.get(j.name) in queued}
    for name, h in handles.items():
        log.info("adopted %s (job %s, still in SLURM's queue)", name, h.job_id)
    submit(jobs, engine, cwd, handles)
    by_name, ended, failures, gone, offsets = {j.name: j for j in jobs}, set(), [], {}, {}
    while len(ended) < len(jobs):
        time.sleep(POLL_S["slurm"])
        live = [n for n in handles if n not in ended]
        queued = in_queue([handles[n].job_id for n in live])
        for name in live:
            job, h = by_name[name], handles[name]
            if follow:
                offsets[job.log_file] = copy_new(job.log_file, offsets.get(job.log_file, 0))
            if not h.paths.result_pickle.exists():
                if h.job_id in queued:
                    gone.pop(name, None)
                    continue
                if time.monotonic() - gone.setdefault(name, time.monotonic()) < GONE_S:
                    continue
            ended.add(name)
            waited_failed = {a for a in job.after} & {f.job.name for f in failures}
            why = "not run: a job it waits for failed" if waited_failed else failure_of(h)
            if why is not None:
                failures.append(Failure(job, why))
                log.error("failed: %s", failures[-1])
            elif on_done is not None:
                log.info("done: %s", name)
                on_done(job)
    return failures
