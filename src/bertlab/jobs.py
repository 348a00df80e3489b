"""Runs as scheduler jobs through submitit: `N` local workers (`LocalExecutor`, each job a process with its own GPUs)
or SLURM jobs (`SlurmExecutor`: sbatch, srun, job arrays; `bertlab.slurm_jobs`, where the waits are SLURM's own and a
stopped driver leaves its jobs running). The grid (`bertlab.grid`) and the scaling sweep (`bertlab.scaling`) hand it
their runs as `Job`s, each a command line that may wait for others.

A job is a `Command`, which submitit requeues after a preemption or its time limit (`Checkpointable`: SLURM's signal
before the kill) and which SLURM reruns after `scontrol requeue`: the command is run again, and a stage run again
resumes from its own checkpoint (pretraining) or finds itself finished. A job that fails is reported with its log;
the jobs waiting for it are skipped, the others go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import submitit

log = logging.getLogger(__name__)

POLL_S = {"local": 0.5, "slurm": 5.0}  # how often the pool looks at its jobs


class CommandFailed(Exception):
    """A job's command exited with a non-zero status: the job fails too, so the jobs SLURM holds for it (`afterok`)
    never start."""


class Command(submitit.helpers.Checkpointable):
    """`argv` run in `cwd`, its output into `log_file` (a rank above 0 of a multi-task job: `<log>.rank<N>`); returns
    0, and raises CommandFailed where it exits with another status. Preempted or timed out, submitit requeues it as it
    is. Stopped by SLURM (SIGTERM: `scontrol requeue`, a preemption, `scancel`), it waits for SLURM's kill instead of
    returning the stopped command's status: a job SLURM stops leaves no result, so a requeued one is waited for and a
    cancelled one is reported as gone. Stopped locally (SIGTERM from its controller), it passes the signal on."""

    def __call__(self, argv: Sequence[str], cwd: str, log_file: str) -> int:
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        path = Path(log_file if rank == 0 else f"{log_file}.rank{rank}")
        path.parent.mkdir(parents=True, exist_ok=True)
        stopped: list[bool] = []
        children: list[subprocess.Popen] = []
        if "SLURM_JOB_ID" in os.environ:  # SLURM signals the command itself, and kills the job after
            signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
        else:  # a local driver stopped: its controller passes SIGTERM here, and the command stops in one line
            signal.signal(signal.SIGTERM, lambda *_: [c.send_signal(signal.SIGTERM) for c in children])
        with path.open("a") as out:
            children.append(subprocess.Popen(list(argv), cwd=cwd, stdout=out, stderr=subprocess.STDOUT))
            code = children[0].wait()
        while stopped:
            signal.pause()
        if code != 0:
            raise CommandFailed(f"exit status {code}")
        return code


@dataclass(frozen=True)
class Job:
    """One command line to run as a job: `name` (unique), `argv`, its log, the jobs it waits for (`after`), and its
    `kind` (the executor settings it takes: `Engine.kinds`)."""

    name: str
    argv: tuple[str, ...]
    log_file: Path
    after: tuple[str, ...] = ()
    kind: str = "default"


@dataclass
class Engine:
    """Where jobs run. `cluster`: "local" (`workers` jobs at once, each with `gpus_per_job` GPUs of its own: worker
    i has GPUs i*g .. i*g+g-1) or "slurm" (every ready job submitted at once; `kinds` maps a job's kind to sbatch
    settings: partition, time, nodes, gpus, tasks). `folder`: submitit's files (pickles, its own logs)."""

    cluster: str
    folder: Path
    workers: int = 1
    gpus_per_job: int = 0
    slurm: dict[str, Any] = field(default_factory=dict)  # the settings every SLURM job takes
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)  # ... and a kind's own
    requeues: int = 3  # how many times submitit requeues a SLURM job that reached its time limit

    def executor(self, job: Job, slot: int) -> submitit.Executor:
        """The executor for `job` (local: on worker `slot`; SLURM: named as the job)."""
        if self.cluster == "slurm":
            ex = submitit.SlurmExecutor(folder=self.folder / "%j", max_num_timeout=self.requeues)
            ex.update_parameters(job_name=job.name, **{**self.slurm, **self.kinds.get(job.kind, {})})
            return ex
        # A local job's files go in a folder of its own, made here: under "%j" its controller would open its log in a
        # folder that submitit makes only once the controller's process id is known, a race it loses under load.
        ex = submitit.LocalExecutor(folder=self.folder / job.name)
        g = self.gpus_per_job
        ex.update_parameters(timeout_min=7 * 24 * 60, gpus_per_node=g,
                             visible_gpus=list(range(slot * g, slot * g + g)))
        return ex


@dataclass
class Failure:
    """A job that did not finish: why, and where its output is."""

    job: Job
    why: str

    def __str__(self) -> str:
        return f"{self.job.name}: {self.why} (its log: {self.job.log_file})"


def run_jobs(jobs: Sequence[Job], engine: Engine, cwd: Path, follow: bool = False,
             on_done: Callable[[Job], None] | None = None) -> list[Failure]:
    """Runs `jobs` on local workers, each once the jobs it waits for have finished, at most `engine.workers` at once
    (SLURM's: `bertlab.slurm_jobs.run_slurm_jobs`); calls `on_done(job)` as each finishes. Returns the failures, and
    the jobs skipped for them. `follow`: copy the running jobs' logs to stdout as they grow (one worker: its output as
    if it ran here). Interrupted, it cancels its jobs (their checkpoints stay)."""
    check(jobs)
    if engine.cluster != "local":
        raise ValueError(f"run_jobs runs local jobs, not {engine.cluster}'s (bertlab.slurm_jobs)")
    pending, running, done, failures = list(jobs), {}, set(), []
    free = list(range(engine.workers))
    offsets: dict[Path, int] = {}
    try:
        while pending or running:
            for job in [j for j in pending if set(j.after) & {f.job.name for f in failures}]:
                pending.remove(job)
                failures.append(Failure(job, "not run: a job it waits for failed"))
            for job in [j for j in pending if set(j.after) <= done]:
                if not free:
                    break
                pending.remove(job)
                slot = free.pop(0)
                job.log_file.parent.mkdir(parents=True, exist_ok=True)
                job.log_file.write_text("")  # this run's output only
                handle = engine.executor(job, slot).submit(Command(), job.argv, str(cwd), str(job.log_file))
                log.info("submitted %s (job %s)", job.name, handle.job_id)
                running[job.name] = (job, handle, slot, time.monotonic())
            time.sleep(POLL_S[engine.cluster])
            for name, (job, handle, slot, began) in list(running.items()):
                if follow:
                    offsets[job.log_file] = copy_new(job.log_file, offsets.get(job.log_file, 0))
                if not handle.done():
                    continue
                del running[name]
                free.append(slot)
                if (why := failure_of(handle)) is not None:
                    failures.append(Failure(job, why))
                    log.error("failed: %s", failures[-1])
                    continue
                done.add(name)
                log.info("done: %s (%s)", name, timedelta(seconds=round(time.monotonic() - began)))
                if on_done is not None:
                    on_done(job)
    finally:
        stop([handle for _, handle, _, _ in running.values()])
    return failures


def stop(handles: Sequence[submitit.Job], wait_s: float = 60) -> None:
    """Stops local jobs: SIGTERM to each job's controller (submitit's `cancel` sends SIGINT, whose traceback the
    controller would print here), which passes it to the command; waits for them to end."""
    for handle in handles:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(handle.job_id), signal.SIGTERM)  # a local job's id is its controller's process id
    deadline = time.monotonic() + wait_s
    while any(not h.done() for h in handles) and time.monotonic() < deadline:
        time.sleep(0.1)


def check(jobs: Sequence[Job]) -> None:
    """A ValueError where a job waits for a job not among `jobs`."""
    if unknown := {a for j in jobs for a in j.after} - {j.name for j in jobs}:
        raise ValueError(f"jobs wait for jobs not given: {sorted(unknown)}")


def failure_of(handle: submitit.Job) -> str | None:
    """None for a job that succeeded, else why it failed, in one line."""
    if isinstance(handle, submitit.SlurmJob) and not handle.paths.result_pickle.exists():
        return "it left SLURM's queue without a result (cancelled, or out of memory or time?)"
    if (err := handle.exception()) is None:
        return None
    if found := re.search(r"CommandFailed: (exit status -?\d+)", str(err)):
        return found.group(1)
    return f"the job failed before its command ended (see {handle.paths.stderr})"  # submitit's log: the traceback


def copy_new(path: Path, offset: int) -> int:
    """Writes what `path` holds past `offset` to stdout; the new offset."""
    if not path.exists():
        return offset
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return offset + len(data)
