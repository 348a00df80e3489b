"""`bertlab.grid`'s settings: each bad one named in one line, and the executor settings the good ones make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bertlab.errors import UserError
from bertlab.grid import Plan, describe
from bertlab.grid_settings import engine, settings
from bertlab.jobs import Job


@pytest.mark.parametrize("args, message", [
    (["worker=2"], "grid: 'worker=2': expected key=value, the key one of cluster, workers, gpus_per_job"),
    (["workers"], "grid: 'workers': expected key=value"),
    (["cluster=ray"], "grid: cluster='ray': expected local or slurm"),
    (["workers=0"], "grid: workers=0: expected an integer >= 1"),
    (["gpus_per_job=true"], "grid: gpus_per_job=True: expected an integer >= 0"),
    (["time=1.5"], "grid: time=1.5: expected an integer >= 1"),
    (["cpus_per_job=0"], "grid: cpus_per_job=0: expected an integer >= 1, or null"),
    (["dry_run=yes please"], "grid: dry_run='yes please': expected true or false"),
    (["nodes=2"], "grid: nodes=2: a local worker has one node (cluster=slurm for more)"),
    (["cell_time=0"], "grid: cell_time=0: expected an integer >= 1"),
    (["requeues=-1"], "grid: requeues=-1: expected an integer >= 0"),
    (["account=[a, b]"], "grid: account=['a', 'b']: expected one value, as sbatch --account takes it"),
    (["sbatch=exclusive"], "grid: sbatch='exclusive': expected sbatch options as a mapping"),
])
def test_a_bad_setting_is_named(args: list[str], message: str) -> None:
    with pytest.raises(UserError) as err:
        settings(args)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_slurm_jobs_a_pretraining_run_a_task_a_gpu_on_its_nodes_and_a_cell_one_gpu() -> None:
    e = engine(settings(["cluster=slurm", "partition=gpu", "gpus_per_job=8", "nodes=4", "time=2880",
                         "cpus_per_job=6"]))
    assert (e.cluster, e.gpus_per_job) == ("slurm", 0)  # SLURM hands out the GPUs
    assert e.slurm == {"partition": "gpu", "cpus_per_task": 6, "additional_parameters": {"requeue": True}}
    assert e.kinds == {"pretrain": {"nodes": 4, "ntasks_per_node": 8, "gpus_per_node": 8, "time": 2880},
                       "cell": {"nodes": 1, "ntasks_per_node": 1, "gpus_per_node": 1, "time": 2880}}
    cpu = engine(settings(["cluster=slurm"]))
    assert cpu.kinds["pretrain"] == {"nodes": 1, "ntasks_per_node": 1, "time": 60} and "partition" not in cpu.slurm
    local = engine(settings(["workers=4", "gpus_per_job=2"]))
    assert (local.cluster, local.workers, local.gpus_per_job) == ("local", 4, 2)


def test_the_cluster_settings_reach_each_jobs_sbatch_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "srun").write_text("#!/bin/sh\n")  # submitit looks for it before it writes a script
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    s = settings(["cluster=slurm", "time=2880", "cell_time=30", "account=nlp", "qos=high", "mem=64G",
                  "constraint=h100", "sbatch={exclusive: true, reservation: mine}", "requeues=9"])
    e = engine(s)
    e.folder = tmp_path
    scripts = {}
    for kind in ("pretrain", "cell"):
        ex = e.executor(Job(f"a {kind}", ("true",), tmp_path / "log", kind=kind), 0)
        assert ex.max_num_timeout == 9
        scripts[kind] = ex._make_submission_file_text("true", "uid")  # the sbatch script, as submitit writes it
    for line in ("--account=nlp", "--qos=high", "--mem=64G", "--constraint=h100", "--exclusive", "--reservation=mine",
                 "--requeue"):
        assert all(f"#SBATCH {line}\n" in script for script in scripts.values()), line
    assert "#SBATCH --time=2880\n" in scripts["pretrain"] and "#SBATCH --time=30\n" in scripts["cell"]
    assert "2880 min a pretraining job, 30 a cell" in describe(Plan([], [], {}), s)
