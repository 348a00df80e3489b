"""End to end: `python -m bertlab.grid` runs a smoke slice of the study as parallel jobs, on two local workers and
(slow) on a real one-node SLURM, to the outputs a sequential `dvc repro` writes, with `dvc status` clean after it; and
a pretraining job SLURM requeues resumes from its checkpoint to the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from bertlab.grid import WAITING
from bertlab.jobs import Engine, Job
from bertlab.runs import pretrain_dir
from bertlab.slurm_jobs import run_slurm_jobs
from tests.slurm import one_node as cluster  # noqa: F401 (a fixture)
from tests.helpers import TINY, copy_project, readme_section

DECLARATION = "conf/ablations/default.yaml"
TIMINGS = {"train_seconds", "eval_seconds", "throughput", "trained_as"}  # a twin copied or trained: either


def smoke_slice(dest: Path) -> Path:
    """The project's files in a fresh git repo at the smoke profile: `bert`, `scratch` and `L12_H768_A12` (at smoke
    `bert`'s twin), each at two pretraining seeds (the profile runs the first: the second's run and cells write "not
    run" records) with an MRPC cell (Tables 5, 6) on each, one fine-tuning seed; one torch thread a run (a speed
    setting: the sums' order, so the last bits, follow it)."""
    copy_project(dest)
    study = yaml.safe_load((dest / DECLARATION).read_text())
    study["encoders"] = {k: study["encoders"][k] for k in ("bert", "scratch", "L12_H768_A12")}
    study["pretrain_seeds"] = [1, 2]
    study["seeds"] = [1]
    study["cells"]["seeds"] = {"default": 1}  # none above the one seed declared (refused)
    for table, spec in study["tables"].items():
        rows = {"table5": ["bert-finetune", "scratch-finetune"], "table6": ["L12_H768_A12-finetune"]}.get(table, [])
        spec |= {"tasks": ["mrpc"] if rows else [], "rows": {row: spec["rows"][row] for row in rows}}
    (dest / DECLARATION).write_text(yaml.safe_dump(study, sort_keys=False))
    impl = dest / "conf/impl/cpu.yaml"
    impl.write_text(re.sub(r"(?m)^threads: .*$", "threads: 1", impl.read_text()))
    return dest


def env_of(repo: Path, shared_data: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
            "BERTLAB_DATA_MIRROR": str(shared_data), "WANDB_MODE": "offline",
            "PYTHONPATH": str(repo / "src"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def run(cmd: list[str], repo: Path, shared_data: Path, path: Path | None = None) -> str:
    """`cmd`'s output (`path`: a folder put first on PATH)."""
    env = env_of(repo, shared_data)
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def results(repo: Path) -> dict[str, object]:
    """Every file of the training stages' outputs: its bytes, a metrics.json as data without its timings."""
    found: dict[str, object] = {}
    for path in sorted(p for kind in ("pretrain", "finetune") for p in (repo / "data" / kind).rglob("*")):
        if path.is_file():
            key = str(path.relative_to(repo))
            found[key] = ({k: v for k, v in json.loads(path.read_text()).items() if k not in TIMINGS}
                          if path.name == "metrics.json" else path.read_bytes())
    return found


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The slice after one sequential `dvc repro`, with `srun` on PATH (a fake one, as on a cluster's login node):
    not one stage prints Lightning's hint to use it (before, each training stage printed three)."""
    repo = smoke_slice(tmp_path_factory.mktemp("sequential"))
    fake = tmp_path_factory.mktemp("bin") / "srun"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    output = run(["dvc", "repro"], repo, shared_data, path=fake.parent)
    assert "Running stage 'pretrain@bert'" in output and "srun" not in output
    return repo


def check_like_sequential(repo: Path, sequential: Path, output: str, shared_data: Path) -> None:
    """The grid's output: the plan before any job, the same results as `dvc repro`, and nothing stale after it."""
    plan = output.index("grid plan on")
    assert plan < output.index("submitted ")
    shown = output[plan:output.index("submitted ")]
    # a job a pretraining run that trains or copies a twin; seed 2's runs and cells are left out: records, no job
    assert re.search(r"\n  1 pretraining job\(s\) of [^:]*: pretrain@bert/bert-1\n", shown), shown
    assert re.search(r"\n  2 pretraining job\(s\) of [^:]*copying a twin after it: pretrain@scratch/scratch-1, "
                     r"pretrain@L12_H768_A12/L12_H768_A12-1 after pretrain@bert/bert-1\n", shown), shown
    assert re.search(r"\n  3 fine-tuning cell job\(s\) of [^:]*: bert 1, scratch 1, L12_H768_A12 1\n", shown), shown
    assert '\n  6 run(s) left out by the profile: their "not run" records written here, no job\n' in shown, shown
    twin = json.loads((repo / "data/pretrain/L12_H768_A12/L12_H768_A12-1/metrics.json").read_text())
    assert twin["trained_as"] == "bert-1"  # a twin's job waits for the other's, and copies it
    left_out = json.loads((repo / "data/pretrain/bert/bert-2/metrics.json").read_text())
    reason = "pretraining seed 2: bert runs the first 1 of ablations.pretrain_seeds (ablations.cells.pretrain_seeds)"
    assert (left_out["status"], left_out["reason"]) == ("not run", f"not run at smoke: {reason}")
    ran, want = results(repo), results(sequential)
    assert sorted(ran) == sorted(want) and len(want) > 20
    assert [k for k in want if ran[k] != want[k]] == []
    assert json.loads(run(["dvc", "status", "--json"], repo, shared_data)) == {}
    assert "Running stage" not in run(["dvc", "repro"], repo, shared_data)
    assert (repo / "reports/ablations.md").read_text().count("mrpc") == (
        sequential / "reports/ablations.md").read_text().count("mrpc")


def readme_grid_lines() -> list[str]:
    """The `python -m bertlab.grid` lines of the README's "Scaling out", as written."""
    section = readme_section("Scaling out")
    return [line for block in re.findall(r"```bash\n(.*?)```", section, re.S) for line in block.splitlines()
            if line.startswith("python -m bertlab.grid")]


def test_two_local_workers_give_the_sequential_outputs(sequential: Path, tmp_path: Path, shared_data: Path) -> None:
    """The README's line, as written; a rerun finds nothing stale and submits nothing, and the README's dry run of
    the cluster's grid plans nothing more."""
    local, dry_run, _ = readme_grid_lines()
    repo = smoke_slice(tmp_path)
    output = run(["bash", "-c", local], repo, shared_data)
    check_like_sequential(repo, sequential, output, shared_data)
    assert (repo / "data/grid/logs/pretrain@bert/bert-1.log").read_text().count("held-out perplexity") == 1
    again = run(["bash", "-c", local], repo, shared_data)
    assert "0 pretraining job(s)" in again and "0 fine-tuning cell job(s)" in again and "submitted" not in again
    planned = run(["bash", "-c", dry_run], repo, shared_data)
    assert "grid plan on SLURM jobs (partition gpu, 2880 min each)" in planned and "0 pretraining job(s)" in planned


def test_a_bad_setting_is_named_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bertlab.grid", "workers=0"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert (done.returncode, done.stderr) == (2, "Error: grid: workers=0: expected an integer >= 1\n")


@pytest.mark.slow
def test_slurm_jobs_give_the_sequential_outputs(cluster: None, sequential: Path, tmp_path: Path,
                                                shared_data: Path) -> None:
    repo = smoke_slice(tmp_path)
    line = readme_grid_lines()[2]  # the README's, sized to this one-node cluster of 2 CPUs
    for old, new in (("partition=gpu ", ""), ("gpus_per_job=8", "gpus_per_job=0"), ("nodes=4", "nodes=1"),
                     ("time=2880", "time=30")):
        assert old in line
        line = line.replace(old, new)
    output = run(["bash", "-c", line], repo, shared_data)
    assert "on SLURM jobs (partition default, 30 min each)" in output
    check_like_sequential(repo, sequential, output, shared_data)


def requeue_once(name: str, checkpoints: Path, log: list[str]) -> None:
    """Once a `last.ckpt` is under `checkpoints`, `scontrol requeue` the SLURM job called `name`, and let it start
    again at once (else it waits in BeginTime for minutes)."""
    deadline = time.monotonic() + 600
    while not list(checkpoints.glob("*/last.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    [job_id] = subprocess.run(["squeue", "-h", "-o", "%i", "-n", name], capture_output=True, text=True).stdout.split()
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    log.append(job_id)
    time.sleep(2)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)


@pytest.mark.slow
def test_a_requeued_pretraining_job_resumes_to_the_uninterrupted_weights(cluster: None, prepared: Path,
                                                                          tmp_path: Path) -> None:
    """A tiny model's 400 steps, a checkpoint every 50, logged to W&B (offline) as by default: requeued once its
    first checkpoint is written, the job starts again (SLURM_RESTART_COUNT=1), says in one line from which step it
    resumes, with no traceback from the interrupted attempt, and ends with the uninterrupted run's weights."""
    settings = [f"data_dir={prepared}", *TINY, "pretrain.max_steps=400", "pretrain.checkpoint_every_steps=50",
                "pretrain.val_every_steps=200", "impl.threads=1", "name=requeued", "logger=wandb"]
    argv = (sys.executable, "-m", "bertlab.pretrain", *settings)
    whole = subprocess.run([*argv, f"out_dir={tmp_path / 'whole'}"], capture_output=True, text=True, timeout=900)
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "requeued"
    log_file = tmp_path / "logs" / "pretrain@requeued.log"
    job = Job("pretrain@requeued", (*argv, f"out_dir={out}"), log_file, kind="pretrain")
    requeued: list[str] = []
    checkpoints = out / "checkpoints" / "pretrain"
    watcher = threading.Thread(target=lambda: requeue_once(job.name, checkpoints, requeued), daemon=True)
    watcher.start()
    failures = run_slurm_jobs([job], Engine("slurm", tmp_path / "submitit", slurm={"time": 30,
                                                                            "additional_parameters": {"requeue": True}}),
                        tmp_path)
    watcher.join(timeout=60)
    text = log_file.read_text()
    assert failures == [] and requeued, text[-3000:]
    assert re.search(r"resuming requeued-1 from step [1-9]\d* \(its checkpoint: ", text), text[-3000:]
    assert "Traceback" not in text and "socket.send" not in text, text[-3000:]
    weights = [torch.load(pretrain_dir(d, "requeued", 1) / "model.pt", weights_only=True)
               for d in (out, tmp_path / "whole")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def started(repo: Path, *args: str, shared_data: Path) -> subprocess.Popen:
    """`python -m bertlab.grid <args>` in `repo`, running."""
    return subprocess.Popen([sys.executable, "-m", "bertlab.grid", *args], cwd=repo, env=env_of(repo, shared_data),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(found: Callable[[], bool], what: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.2)


def like_sequential(repo: Path, sequential: Path, shared_data: Path) -> None:
    ran, want = results(repo), results(sequential)
    assert sorted(ran) == sorted(want) and [k for k in want if ran[k] != want[k]] == []
    assert json.loads(run(["dvc", "status", "--json"], repo, shared_data)) == {}


def test_a_grid_stopped_mid_run_resumes_to_the_sequential_outputs_and_reruns_one_lost_cell_alone(
        sequential: Path, tmp_path: Path, shared_data: Path) -> None:
    """SIGTERM while pretraining: one line, its local jobs stopped; the rerun finishes to `dvc repro`'s outputs. A
    cell's output lost: the rerun submits that cell alone (the other runs are finished with their keys)."""
    repo = smoke_slice(tmp_path)
    grid = started(repo, "workers=1", shared_data=shared_data)
    wait_for(lambda: (repo / "data/checkpoints/claims/pretrain/bert-1.owner").exists(), "pretraining")
    grid.send_signal(signal.SIGTERM)
    output = grid.communicate(timeout=300)[0]
    assert grid.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert output.splitlines()[-1].startswith("Error: grid stopped by SIGTERM: ")
    run([sys.executable, "-m", "bertlab.grid", "workers=1"], repo, shared_data)
    like_sequential(repo, sequential, shared_data)
    shutil.rmtree(repo / "data/finetune/scratch/mrpc-scratch-finetune-1-1")
    again = run([sys.executable, "-m", "bertlab.grid", "workers=1"], repo, shared_data)
    assert "\n  1 fine-tuning cell job(s) of 1 process, 0 GPU(s): scratch 1\n" in again, again
    assert again.count("submitted ") == 1
    like_sequential(repo, sequential, shared_data)


def test_dvc_repro_of_a_cell_another_process_writes_is_refused_in_one_line_and_deletes_nothing(
        sequential: Path, tmp_path: Path, shared_data: Path) -> None:
    cell = "mrpc-bert-finetune-1-1"
    code = ("import sys, time; from pathlib import Path; from bertlab import owner\n"
            "with owner.claim('data', 'finetune', sys.argv[1], 0):\n    print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, cell], cwd=sequential, stdout=subprocess.PIPE, text=True,
                              env=env_of(sequential, shared_data))
    assert holder.stdout.readline().strip() == "held"
    before = results(sequential)
    try:
        done = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", "-f", "finetune@bert"], cwd=sequential,
                              env=env_of(sequential, shared_data), capture_output=True, text=True, timeout=600)
    finally:
        holder.kill()
        holder.wait()
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and len(said) == 1, done.stdout + done.stderr
    assert re.fullmatch(rf"error: {cell} is being written by process {holder.pid} on {socket.gethostname()} \(its "
                        rf"claim: \S*data/checkpoints/claims/finetune/{cell}\.owner\): wait for it to end, or stop it; "
                        "this run was not started", said[0]), said
    assert results(sequential) == before


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_slurm_grid_killed_leaves_its_jobs_and_its_rerun_adopts_them(cluster: None, sequential: Path,
                                                                      tmp_path: Path, shared_data: Path,
                                                                      stop: signal.Signals) -> None:
    repo = smoke_slice(tmp_path)
    queue = repo / "data/grid/submitit/queue.json"
    grid = started(repo, "cluster=slurm", "time=30", shared_data=shared_data)
    wait_for(lambda: queue.exists() and len(json.loads(queue.read_text())) >= 6, "submitted jobs")
    grid.send_signal(stop)
    grid.communicate(timeout=120)
    submitted = json.loads(queue.read_text())
    output = run([sys.executable, "-m", "bertlab.grid", "cluster=slurm", "time=30"], repo, shared_data)
    adopted = re.findall(r"adopted (\S+) \(job (\S+),", output)
    assert adopted and all(submitted[name] == job_id for name, job_id in adopted)
    assert "submitted " not in output  # every job was in the queue still, or finished
    like_sequential(repo, sequential, shared_data)


@pytest.mark.slow
def test_a_slurm_cell_cancelled_is_named_and_its_rerun_submits_it_alone(cluster: None, sequential: Path,
                                                                         tmp_path: Path, shared_data: Path) -> None:
    repo = smoke_slice(tmp_path)
    queue = repo / "data/grid/submitit/queue.json"
    cell = "finetune@scratch/mrpc-scratch-finetune-1-1"
    grid = started(repo, "cluster=slurm", "time=30", shared_data=shared_data)
    wait_for(lambda: queue.exists() and cell in json.loads(queue.read_text()), "the cell's job")
    subprocess.run(["scancel", json.loads(queue.read_text())[cell]], check=True)
    output = grid.communicate(timeout=1800)[0]
    assert grid.returncode == 1 and f"  {cell}: it left SLURM's queue without a result" in output, output[-3000:]
    again = run([sys.executable, "-m", "bertlab.grid", "cluster=slurm", "time=30"], repo, shared_data)
    assert "\n  1 fine-tuning cell job(s) of 1 task: scratch 1\n" in again and "0 pretraining job(s)" in again, again
    like_sequential(repo, sequential, shared_data)


@pytest.mark.slow
def test_a_slurm_grid_refuses_a_second_writer_and_waits_for_dvcs_lock(cluster: None, tmp_path: Path,
                                                                      shared_data: Path) -> None:
    """While a SLURM job pretrains `bert` (400 steps here, so it is still running), `dvc repro` of its stage is
    refused in one line naming the job's claim and deletes nothing; with DVC's lock then held (as `dvc status` holds
    it), the grid's next `dvc commit` waits, saying so in one line, and the grid finishes once it is free."""
    repo = smoke_slice(tmp_path)
    smoke = repo / "conf/profile/smoke.yaml"
    smoke.write_text(smoke.read_text().replace("max_steps: 20, size_study_steps: 20,",
                                               "max_steps: 400, size_study_steps: 400,"))
    grid = subprocess.Popen([sys.executable, "-m", "bertlab.grid", "cluster=slurm", "time=30"], cwd=repo,
                            env=env_of(repo, shared_data), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(grid.stdout), daemon=True)
    reader.start()
    wait_for(lambda: (repo / "data/checkpoints/claims/pretrain/bert-1.owner").exists(), "bert-1's job")
    before = sorted(p.relative_to(repo) for p in (repo / "data").rglob("*") if "pretrain" in p.parts)
    done = subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", "-f", "pretrain@bert"], cwd=repo,
                          env=env_of(repo, shared_data), capture_output=True, text=True, timeout=600)
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and len(said) == 1, done.stdout + done.stderr
    assert said[0].startswith("error: bert-1 is being written by process ") and "this run was not started" in said[0]
    after = sorted(p.relative_to(repo) for p in (repo / "data").rglob("*") if "pretrain" in p.parts)
    assert set(before) <= set(after)  # nothing deleted (the job goes on writing)
    code = ("import sys; from dvc.repo import Repo\nrepo = Repo('.'); repo.lock.lock(); print('held', flush=True)\n"
            "sys.stdin.readline(); repo.lock.unlock()")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=repo, env=env_of(repo, shared_data), text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "held"
    waiting = f"{WAITING}\n"
    wait_for(lambda: waiting in lines, "the grid waiting for DVC's lock")
    holder.communicate("\n", timeout=60)
    assert grid.wait(timeout=1800) == 0, "".join(lines)[-3000:]
    reader.join(timeout=60)
    assert lines.count(waiting) >= 1 and not any("Traceback" in line for line in lines), "".join(lines)[-3000:]
    assert json.loads(run(["dvc", "status", "--json"], repo, shared_data)) == {}
