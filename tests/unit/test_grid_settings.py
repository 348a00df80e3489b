"""`bertlab.grid`'s settings: each bad one named in one line, and the executor settings the good ones make."""

from __future__ import annotations

import pytest

from bertlab.errors import UserError
from bertlab.grid import engine, settings


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
])
def test_a_bad_setting_is_named(args: list[str], message: str) -> None:
    with pytest.raises(UserError) as err:
        settings(args)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_slurm_jobs_a_pretraining_run_a_task_a_gpu_on_its_nodes_and_a_cell_one_gpu() -> None:
    e = engine(settings(["cluster=slurm", "partition=gpu", "gpus_per_job=8", "nodes=4", "time=2880",
                         "cpus_per_job=6"]))
    assert (e.cluster, e.gpus_per_job) == ("slurm", 0)  # SLURM hands out the GPUs
    assert e.slurm == {"time": 2880, "partition": "gpu", "cpus_per_task": 6, "additional_parameters": {"requeue": True}}
    assert e.kinds == {"pretrain": {"nodes": 4, "ntasks_per_node": 8, "gpus_per_node": 8},
                       "cell": {"nodes": 1, "ntasks_per_node": 1, "gpus_per_node": 1}}
    cpu = engine(settings(["cluster=slurm"]))
    assert cpu.kinds["pretrain"] == {"nodes": 1, "ntasks_per_node": 1} and "partition" not in cpu.slurm
    local = engine(settings(["workers=4", "gpus_per_job=2"]))
    assert (local.cluster, local.workers, local.gpus_per_job) == ("local", 4, 2)
