"""`bertlab.slurm_jobs` on a real one-node SLURM (slow): every job submitted at once, its waits SLURM's
(`afterok`), the jobs of one kind waiting for the same jobs as one array, so `sbatch` calls grow with the groups and
not the jobs; a driver killed leaves its jobs running and a rerun adopts them (no job submitted twice); a job whose
dependency failed leaves the queue, named as not run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertlab.jobs import Engine, Job
from bertlab.slurm_jobs import recorded, run_slurm_jobs
from tests.slurm import one_node as cluster  # noqa: F401 (a fixture)

# Sleeps `seconds`, then appends "<name>" to `ran` (a line per time the job's command ran) and exits with `code`.
SCRIPT = ("import sys, time, pathlib; time.sleep(float(sys.argv[2])); "
          "open(pathlib.Path(sys.argv[4]), 'a').write(sys.argv[1] + '\\n'); sys.exit(int(sys.argv[3]))")


def job(tmp: Path, name: str, seconds: float = 1, code: int = 0, after: tuple[str, ...] = (),
        kind: str = "cell") -> Job:
    return Job(name, (sys.executable, "-c", SCRIPT, name, str(seconds), str(code), str(tmp / "ran")),
               tmp / "logs" / f"{name}.log", after, kind)


def engine(tmp: Path) -> Engine:
    return Engine("slurm", tmp / "submitit", slurm={"time": 10, "cpus_per_task": 1})


def ran(tmp: Path) -> list[str]:
    return sorted((tmp / "ran").read_text().split()) if (tmp / "ran").exists() else []


def arrays(tmp: Path) -> set[str]:
    """The SLURM ids of the sbatch submissions recorded (an array's tasks share one)."""
    return {job_id.split("_")[0] for job_id in recorded(engine(tmp)).values()}


@pytest.mark.slow
def test_all_jobs_at_once_their_waits_in_slurm_an_array_a_group(cluster: None, tmp_path: Path) -> None:
    jobs = [job(tmp_path, "pre-1", 3, kind="pretrain"), job(tmp_path, "pre-2", 3, code=1, kind="pretrain"),
            *[job(tmp_path, f"cell-1-{i}", after=("pre-1",)) for i in range(3)],
            *[job(tmp_path, f"cell-2-{i}", after=("pre-2",)) for i in range(3)]]
    done: list[str] = []
    failures = run_slurm_jobs(jobs, engine(tmp_path), tmp_path, on_done=lambda j: done.append(j.name))
    assert len(arrays(tmp_path)) == 3  # the pretraining runs, the cells on each: 3 sbatch for 8 jobs
    assert sorted(done) == ["cell-1-0", "cell-1-1", "cell-1-2", "pre-1"]
    assert {f.job.name: f.why for f in failures} == {"pre-2": "exit status 1",
                                                      **{f"cell-2-{i}": "not run: a job it waits for failed"
                                                         for i in range(3)}}
    assert ran(tmp_path) == ["cell-1-0", "cell-1-1", "cell-1-2", "pre-1", "pre-2"]  # cell-2-*: never started


DRIVER = """
import sys, logging
from pathlib import Path
from bertlab.jobs import Engine, Job
from bertlab.slurm_jobs import run_slurm_jobs
tmp = Path(sys.argv[1])
logging.basicConfig(level=logging.INFO)
script = {script!r}
jobs = [Job("pre", (sys.executable, "-c", script, "pre", "8", "0", str(tmp / "ran")), tmp / "logs/pre.log", (), "pretrain"),
        *[Job(f"cell-{{i}}", (sys.executable, "-c", script, f"cell-{{i}}", "1", "0", str(tmp / "ran")),
              tmp / f"logs/cell-{{i}}.log", ("pre",), "cell") for i in range(2)]]
print("failures:", run_slurm_jobs(jobs, Engine("slurm", tmp / "submitit", slurm={{"time": 10, "cpus_per_task": 1}}), tmp),
      flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_driver_stopped_leaves_its_jobs_running_and_its_rerun_adopts_them(cluster: None, tmp_path: Path,
                                                                            stop: signal.Signals) -> None:
    driver = [sys.executable, "-c", DRIVER.format(script=SCRIPT), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    first = subprocess.Popen(driver, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while len(recorded(engine(tmp_path))) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    first.send_signal(stop)
    first.wait(timeout=30)
    ids = recorded(engine(tmp_path))
    queued = subprocess.run(["squeue", "-h", "-r", "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert set(ids.values()) <= set(queued)  # the jobs go on without their driver
    again = subprocess.run(driver, env=env, capture_output=True, text=True, timeout=300)
    assert "failures: []" in again.stdout, again.stdout + again.stderr
    assert recorded(engine(tmp_path)) == ids and "adopted pre" in again.stderr  # nothing submitted twice
    assert ran(tmp_path) == ["cell-0", "cell-1", "pre"]  # each ran once


@pytest.mark.slow
def test_a_cancelled_job_is_named_and_its_rerun_submits_it_alone(cluster: None, tmp_path: Path) -> None:
    jobs = [job(tmp_path, "a", 1), job(tmp_path, "b", 60)]
    e = engine(tmp_path)

    def cancel_b() -> None:
        deadline = time.monotonic() + 60
        while "b" not in recorded(e) and time.monotonic() < deadline:
            time.sleep(0.2)
        subprocess.run(["scancel", recorded(e)["b"]], check=True)

    import threading
    threading.Thread(target=cancel_b, daemon=True).start()
    failures = run_slurm_jobs(jobs, e, tmp_path)
    assert [(f.job.name, f.why.split(" (")[0]) for f in failures] == [("b", "it left SLURM's queue without a result")]
    before = json.loads((tmp_path / "submitit" / "queue.json").read_text())
    assert run_slurm_jobs([job(tmp_path, "b", 1)], e, tmp_path) == []  # the rerun: the one job still without its result
    after = recorded(e)
    assert after["a"] == before["a"] and after["b"] != before["b"]
    assert ran(tmp_path) == ["a", "b"]
