"""The grid's settings (`python -m bertlab.grid key=value ...`), checked, and the job engine they make.

Settings: `cluster` (`local`: `workers` jobs at once, each with `gpus_per_job` GPUs; `slurm`: sbatch jobs on
`partition` for `time` minutes a pretraining job and `cell_time` a cell (default: `time`), a pretraining job on `nodes`
nodes of `gpus_per_job` GPUs, one task a GPU as `srun` starts them, a cell on one GPU where `gpus_per_job` > 0;
`cpus_per_job` CPUs a task; `account`, `qos`, `mem`, `constraint` as sbatch takes them, `sbatch` any other options as
a mapping, `requeues` how many times submitit requeues a job that reached its time limit). A SLURM job that reaches
its time limit or is preempted is requeued (submitit, on SLURM's signal 90 s before) and so is one `scontrol requeue`
stops: run again, a pretraining run resumes from its last checkpoint, a finished cell does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bertlab.errors import UserError
from bertlab.jobs import Engine

FOLDER = Path("data/grid")  # the jobs' logs (`logs/`) and submitit's files (`submitit/`)
DEFAULTS: dict[str, Any] = {"cluster": "local", "workers": 1, "gpus_per_job": 0, "nodes": 1, "cpus_per_job": None,
                            "partition": None, "time": 60, "cell_time": None, "account": None, "qos": None,
                            "mem": None, "constraint": None, "sbatch": {}, "requeues": 3, "dry_run": False}


def settings(args: list[str]) -> dict[str, Any]:
    """The command line's `key=value` settings over DEFAULTS; a one-line UserError naming a bad one."""
    given = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or key not in DEFAULTS:
            raise UserError(f"grid: {arg!r}: expected key=value, the key one of {', '.join(DEFAULTS)}")
        given[key] = yaml.safe_load(value) if value else None  # as YAML reads it: 2, true, null, a name
    s = DEFAULTS | given
    if s["cluster"] not in ("local", "slurm"):
        raise UserError(f"grid: cluster={s['cluster']!r}: expected local or slurm")
    s["cell_time"] = s["time"] if s["cell_time"] is None else s["cell_time"]
    for key, lo in (("workers", 1), ("gpus_per_job", 0), ("nodes", 1), ("time", 1), ("cell_time", 1), ("requeues", 0)):
        if not (isinstance(s[key], int) and not isinstance(s[key], bool) and s[key] >= lo):
            raise UserError(f"grid: {key}={s[key]!r}: expected an integer >= {lo}")
    for key in ("account", "qos", "mem", "constraint"):
        if s[key] is not None and not isinstance(s[key], (str, int)):
            raise UserError(f"grid: {key}={s[key]!r}: expected one value, as sbatch --{key} takes it")
    if not isinstance(s["sbatch"], dict):
        raise UserError(f"grid: sbatch={s['sbatch']!r}: expected sbatch options as a mapping, e.g. "
                        "'sbatch={exclusive: true, reservation: mine}'")
    if s["cpus_per_job"] is not None and not (isinstance(s["cpus_per_job"], int) and s["cpus_per_job"] >= 1):
        raise UserError(f"grid: cpus_per_job={s['cpus_per_job']!r}: expected an integer >= 1, or null")
    if not isinstance(s["dry_run"], bool):
        raise UserError(f"grid: dry_run={s['dry_run']!r}: expected true or false")
    if s["cluster"] == "local" and s["nodes"] != 1:
        raise UserError(f"grid: nodes={s['nodes']}: a local worker has one node (cluster=slurm for more)")
    return s


def engine(s: dict[str, Any]) -> Engine:
    """The executor settings of `s`: SLURM's for every job and for the `pretrain` and `cell` kinds (each its time)."""
    common = {"additional_parameters": {"requeue": True, **s["sbatch"]}}
    common |= {k: v for k, v in (("partition", s["partition"]), ("cpus_per_task", s["cpus_per_job"]),
                                 ("account", s["account"]), ("qos", s["qos"]), ("mem", s["mem"]),
                                 ("constraint", s["constraint"])) if v}
    g = s["gpus_per_job"]
    kinds = {"pretrain": {"nodes": s["nodes"], "ntasks_per_node": max(1, g), "time": s["time"],
                          **({"gpus_per_node": g} if g else {})},
             "cell": {"nodes": 1, "ntasks_per_node": 1, "time": s["cell_time"], **({"gpus_per_node": 1} if g else {})}}
    return Engine(s["cluster"], FOLDER / "submitit", s["workers"], g if s["cluster"] == "local" else 0, common, kinds,
                  s["requeues"])
