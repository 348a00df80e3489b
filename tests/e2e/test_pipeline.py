"""End to end: `dvc repro` with the smoke profile on a copy of the repo, against ../shared/data."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.helpers import copy_env, copy_project, free_port, readme_block, readme_section, stages_run

Run = Callable[[list[str], Path], subprocess.CompletedProcess]
DECLARATION = "conf/ablations/default.yaml"  # the study: the grid dvc.yaml reads


@pytest.fixture(scope="module")
def run(shared_data: Path) -> Run:
    """Runs a command in a copy of the repo against the real data mirror (the tests are skipped without it)."""
    def run_in(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
        done = subprocess.run(cmd, cwd=cwd, env=copy_env(cwd, shared_data), capture_output=True, text=True,
                              timeout=1800)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    return run_in


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The project's files (as git sees them, committed or not) in a fresh git repo, set to the smoke profile."""
    dest = copy_project(tmp_path_factory.mktemp("e2e") / "bertlab")
    # A slice of every table (each keeps cells), two pretraining seeds (the profile runs the first) and one
    # fine-tuning seed, so the whole study runs in a few minutes.
    study = yaml.safe_load((dest / DECLARATION).read_text())
    study["encoders"] = {k: study["encoders"][k] for k in ("bert", "ltr", "scratch", "L3_H768_A12", "L12_H768_A12")}
    study["pretrain_seeds"] = [1, 2]
    study["seeds"] = [1]
    # none above the one seed declared (refused); the tasks the declaration names kept, as the README's lines set them
    study["cells"]["seeds"] = {task: 1 for task in study["cells"]["seeds"]}
    for table, tasks, rows in (("table5", ["mrpc", "squad"], ["bert-finetune", "scratch-finetune", "ltr-bilstm"]),
                               ("table6", ["mnli", "mrpc", "sst2"], ["L3_H768_A12-finetune", "L12_H768_A12-finetune"]),
                               ("table7", ["conll2003"], ["bert-finetune", "bert-last", "bert-concat_last_four"]),
                               ("probes", [], [])):
        spec = study["tables"][table]
        spec |= {"tasks": tasks, "rows": {row: spec["rows"][row] for row in rows}}
    (dest / DECLARATION).write_text(yaml.safe_dump(study, sort_keys=False))
    return dest


def test_dvc_repro_runs_the_pipeline_and_writes_the_report(repo: Path, run: Run) -> None:
    done = run(["dvc", "repro"], repo)
    assert {"configs", "download", "tokenizer", "pretrain_data", "ablations"} <= stages_run(done.stdout)
    report = (repo / "reports/ablations.md").read_text()
    assert "Profile: `smoke`" in report and "Table 5" in report
    assert re.search(r"\| \d+\.\d (± \d+\.\d )?\(\d seeds?\)", report), "no measured cell in the report"
    assert "no data" in report  # MNLI is not in the mirror
    assert list((repo / "data/wandb").glob("wandb/offline-run-*/files")), "no offline W&B run"
    # Verdicts from paired intervals, floors beside the cells, dev splits only
    assert "does not hold" not in report and "Floors: " in report and "95% interval" in report
    metrics = json.loads((repo / "reports/claims.json").read_text())
    pairs = [p for claim in metrics["claims"].values() for p in claim["pairs"].values()]
    verdicts = {"reproduced", "contradicted", "unresolved at this scale", "beyond this scale", "not measured"}
    assert pairs and {p["verdict"] for p in pairs} <= verdicts
    measured = [p for p in pairs if p["verdict"] != "not measured"]
    assert measured and all(p["low"] <= p["estimate"] <= p["high"] for p in measured)
    assert any(p["verdict"] in report for p in measured)
    cells = [c for rows in metrics["table5"].values() for c in rows.values()]
    assert any(c.get("floor") is not None and c.get("floor_status") for c in cells)
    headline = json.loads((repo / "reports/metrics.json").read_text())
    keys = {"reproduced": "reproduced", "contradicted": "contradicted", "unresolved at this scale": "unresolved",
            "beyond this scale": "beyond_scale"}
    paper = Counter(keys[p["verdict"]] for claim in metrics["claims"].values() if not claim["own"]
                    for p in claim["pairs"].values() if p["verdict"] in keys and not p["same_model"])
    assert {k: headline[k] for k in keys.values()} == {k: paper[k] for k in keys.values()}  # the paper's claims only
    for f in (repo / "data/finetune").glob("*/*/metrics.json"):
        run_ = json.loads(f.read_text())
        assert "test" not in run_["metrics"], f"{f} scores a test split"
        assert run_["status"] != "ok" or (f.parent / "items.json").exists()
    assert list((repo / "data/pretrain").glob("*/*/heldout_items.json"))
    left_out = json.loads((repo / "data/pretrain/bert/bert-2/metrics.json").read_text())  # smoke runs 1 seed
    assert (left_out["status"], left_out["encoder"], left_out["seed"]) == ("not run", "bert", 2)
    # smoke gives Table 6 bert's budget: its 12/768/12 row and that row's MRPC cell are copies, not second trainings
    for kind, a, b in (("pretrain", "bert/bert-1", "L12_H768_A12/L12_H768_A12-1"),
                       ("finetune", "bert/mrpc-bert-finetune-1-1", "L12_H768_A12/mrpc-L12_H768_A12-finetune-1-1")):
        records = [json.loads((repo / "data" / kind / name / "metrics.json").read_text()) for name in (a, b)]
        names = [Path(a).name, Path(b).name]
        assert sorted(r.get("trained_as", "") for r in records) in (["", names[0]], ["", names[1]]), records
        assert records[0]["run_key"] == records[1]["run_key"]


def test_second_repro_is_a_fast_no_op(repo: Path, run: Run) -> None:
    start = time.perf_counter()
    done = run(["dvc", "repro"], repo)
    assert time.perf_counter() - start < 15
    assert not stages_run(done.stdout)


def trained(before: dict[str, int], after: dict[str, int]) -> set[str]:
    """The fine-tuning cells that trained between two `pipeline_files` (their items.json new or rewritten)."""
    return {Path(p).parent.name for p, t in after.items()
            if Path(p).name == "items.json" and Path(p).parents[2].name == "finetune" and before.get(p) != t}


def test_a_conf_edit_reruns_exactly_the_dependent_stages(repo: Path, run: Run) -> None:
    conf = repo / "conf/objective/ltr.yaml"  # read by pretrain@ltr only; its encoder feeds the `ltr-*` rows' cells
    conf.write_text(conf.read_text() + "whole_word_masking: true\n")  # its own file's setting wins
    study = yaml.safe_load((repo / DECLARATION).read_text())
    on_ltr = {f"{task}-{row}-1-1" for spec in study["tables"].values() for row in spec["rows"]
              if row.startswith("ltr-") for task in spec["tasks"]}  # on its first pretraining run (smoke runs one)
    before = pipeline_files(repo)
    ran = stages_run(run(["dvc", "repro"], repo).stdout)
    # a cell depends on its own encoder alone: `ltr`'s stages rerun, and its cells train, nothing else
    assert ran == {"configs", "pretrain@ltr", "finetune@ltr", "ablations"}
    assert on_ltr == {"mrpc-ltr-bilstm-1-1", "squad-ltr-bilstm-1-1"}
    assert trained(before, pipeline_files(repo)) == on_ltr
    speed = repo / "conf/impl/cpu.yaml"
    speed.write_text(speed.read_text().replace("num_workers: 0", "num_workers: 1"))
    assert stages_run(run(["dvc", "repro"], repo).stdout) == {"configs"}  # speed-only: no result reruns


def status(repo: Path, run: Run) -> set[str]:
    """The stages `dvc status` names as stale."""
    return set(json.loads(run(["dvc", "status", "--json"], repo).stdout))


def test_a_new_encoder_makes_its_own_stages_stale_and_nothing_else(repo: Path, run: Run) -> None:
    """An encoder and a Table 5 row on it added to the study: `dvc status` names `configs` and the new encoder's two
    stages; once `configs` has composed its runs, the new stages and the report, nothing else."""
    declaration = repo / DECLARATION
    original = declaration.read_text()
    study = yaml.safe_load(original)
    study["encoders"]["added"] = ["objective=mlm", "model=L12_H768_A12"]
    study["tables"]["table5"]["rows"]["added-finetune"] = {"label": "added"}
    declaration.write_text(yaml.safe_dump(study, sort_keys=False))
    assert status(repo, run) == {"configs", "pretrain@added", "finetune@added"}
    run(["dvc", "repro", "--single-item", "configs"], repo)
    assert status(repo, run) == {"pretrain@added", "finetune@added", "ablations"}
    declaration.write_text(original)
    run(["dvc", "repro", "--single-item", "configs"], repo)
    assert status(repo, run) == set()


def test_a_tasks_seed_count_runs_its_new_seeds_only(repo: Path, run: Run) -> None:
    """A second seed in the grid with SQuAD's count raised to 2: SQuAD's new cells train; every other new cell is one
    the study's `cells` leave out (the slice runs 1 seed a task: "not run", in seconds); no earlier cell reruns. (The
    slow tests below build on these seeds.)"""
    study = yaml.safe_load((repo / DECLARATION).read_text())
    study["seeds"] = [1, 2]
    study["cells"]["seeds"]["squad"] = 2
    (repo / DECLARATION).write_text(yaml.safe_dump(study, sort_keys=False))
    before = pipeline_files(repo)
    ran = stages_run(run(["dvc", "repro"], repo).stdout)
    encoders = {row.split("-")[0] for spec in study["tables"].values() if spec["tasks"] for row in spec["rows"]}
    assert ran == {"configs", "ablations", *(f"finetune@{e}" for e in encoders)}
    two = {f"{task}-{row}-1-2" for spec in study["tables"].values() for task in spec["tasks"] for row in spec["rows"]
           if task == "squad"}  # on the first pretraining run: the second is left out
    assert trained(before, pipeline_files(repo)) == two
    left_out = json.loads((repo / "data/finetune/bert/mrpc-bert-finetune-1-2/metrics.json").read_text())
    assert (left_out["status"], left_out["reason"]) == (
        "not run", "not run at smoke: seed 2: mrpc runs the first 1 of ablations.seeds (ablations.cells.seeds)")
    assert "(2 seeds)" in (repo / "reports/ablations.md").read_text()


def test_a_profile_leaves_an_encoder_out_with_the_reason_the_report_prints(repo: Path, run: Run) -> None:
    """`ablations.cells.skip` set by a profile (conf/profile/smoke.yaml, the declaration as it was): the encoder's
    pretraining and its cells write "not run" records instead of training, and the report says why. (The stages on
    the encoder and the report, by name: what a full `dvc repro` reruns after an edit is the conf-edit test's.)"""
    profile = repo / "conf/profile/smoke.yaml"
    skip = "ablations: {cells: {skip: {L3_H768_A12: too small to tell here}}}\n"
    profile.write_text(profile.read_text() + skip)
    study = yaml.safe_load((repo / DECLARATION).read_text())
    before = pipeline_files(repo)
    stages = ["configs", "pretrain@L3_H768_A12", "finetune@L3_H768_A12", "ablations"]
    assert stages_run(run(["dvc", "repro", "--single-item", *stages], repo).stdout) == set(stages)
    assert not trained(before, pipeline_files(repo))
    for seed in study["pretrain_seeds"]:  # each run, and the cells on it
        record = json.loads((repo / f"data/pretrain/L3_H768_A12/L3_H768_A12-{seed}/metrics.json").read_text())
        assert record == {"name": f"L3_H768_A12-{seed}", "encoder": "L3_H768_A12", "seed": seed, "status": "not run",
                          "reason": "not run at smoke: L3_H768_A12: too small to tell here"}
        for task in study["tables"]["table6"]["tasks"]:
            cell = json.loads((repo / f"data/finetune/L3_H768_A12/{task}-L3_H768_A12-finetune-{seed}-1/metrics.json")
                              .read_text())
            assert (cell["status"], cell["reason"]) == ("not run", record["reason"])
    assert "\nNot run at smoke: L3_H768_A12: too small to tell here.\n" in (repo / "reports/ablations.md").read_text()
    profile.write_text(profile.read_text().replace(skip, ""))


@pytest.mark.slow
def test_a_queued_experiment_reruns_only_what_its_params_change(repo: Path, run: Run) -> None:
    run(["dvc", "repro"], repo)  # the baseline (a no-op after the tests above)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "baseline"], cwd=repo,
                   check=True)
    run(["dvc", "exp", "run", "--queue", "-n", "mrpc-seeds", "-S", f"{DECLARATION}:++cells.seeds.mrpc=2"], repo)
    run(["dvc", "queue", "start"], repo)
    deadline = time.monotonic() + 900
    while "Queued" in (status := run(["dvc", "queue", "status"], repo).stdout) or "Running" in status:
        assert time.monotonic() < deadline, status
        time.sleep(5)
    assert "Success" in status, status
    log = run(["dvc", "queue", "logs", "mrpc-seeds"], repo).stdout
    tables = yaml.safe_load((repo / DECLARATION).read_text())["tables"]
    on_mrpc = {f"finetune@{row.split('-')[0]}" for t in ("table5", "table6") for row in tables[t]["rows"]}
    assert stages_run(log) == {"configs", *on_mrpc, "ablations"}, log[-3000:]  # the encoders with seed-2 MRPC cells
    shown = run(["dvc", "exp", "show", "--json"], repo).stdout
    assert "mrpc-seeds" in shown


def pipeline_files(repo: Path) -> dict[str, int]:
    """Every pipeline output file under the copy's data/ (not runs by hand, logs or W&B) with its mtime."""
    return {str(p): p.stat().st_mtime_ns for p in (repo / "data").rglob("*")
            if p.is_file() and p.relative_to(repo / "data").parts[0] not in ("hand", "hydra", "wandb")}


def wait_for_queue(repo: Path, run: Run) -> str:
    deadline = time.monotonic() + 1200
    while "Queued" in (status := run(["dvc", "queue", "status"], repo).stdout) or "Running" in status:
        assert time.monotonic() < deadline, status
        time.sleep(5)
    return status


@pytest.mark.slow
def test_the_readmes_experiment_commands_run_as_written(repo: Path, run: Run) -> None:
    """Every line of the README's Experiments section, verbatim, on the smoke slice (its `params.yaml` profile)."""
    run(["dvc", "repro"], repo)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base", "--allow-empty"],
                   cwd=repo, check=True)
    wandb_runs = len(list((repo / "data/wandb/wandb").glob("offline-run-*")))
    sweep, finetune = readme_block("Experiments", 0)
    pipeline = pipeline_files(repo)
    done = run(["bash", "-c", sweep], repo)
    assert "profile=smoke (params.yaml's" in done.stdout
    for name in ("sweep_L3_H768_A12", "sweep_L6_H768_A12"):
        assert json.loads((repo / f"data/hand/pretrain/{name}/{name}-1/metrics.json").read_text())["steps"] == 20
    run(["bash", "-c", finetune], repo)
    assert json.loads((repo / "data/hand/finetune/sweep_L3_H768_A12/sst2-sweep_L3/metrics.json").read_text())[
        "status"] == "ok"
    assert pipeline == pipeline_files(repo)
    assert "up to date" in run(["dvc", "status"], repo).stdout

    here, queue_sst2, queue_lr, start, show, views = readme_block("Experiments", 1)
    study = yaml.safe_load((repo / DECLARATION).read_text())
    cells = {(t, task, row) for t, spec in study["tables"].items() for task in spec["tasks"] for row in spec["rows"]}
    assert study["seeds"] == [1, 2] and study["cells"]["seeds"].get("mrpc", 1) == 1  # as the tests above left it
    ran = stages_run(run(["bash", "-c", here], repo).stdout)
    assert ran == {"configs", "ablations", *(f"finetune@{row.split('-')[0]}" for t, task, row in cells if task == "mrpc")}
    run(["bash", "-c", queue_sst2], repo)
    run(["bash", "-c", queue_lr], repo)
    run(["bash", "-c", start], repo)
    status = wait_for_queue(repo, run)  # beside the earlier test's queued experiment
    assert all(re.search(rf"{name} .* Success", status) for name in ("sst2-3seeds", "lr5e-4")), status
    assert stages_run(run(["dvc", "queue", "logs", "sst2-3seeds"], repo).stdout) == {
        "configs", "ablations", *(f"finetune@{row.split('-')[0]}" for t, task, row in cells)}  # SST-2's train
    lr_log = run(["dvc", "queue", "logs", "lr5e-4"], repo).stdout
    assert {"pretrain@bert", "finetune@bert"} <= stages_run(lr_log)
    assert len(list((repo / "data/wandb/wandb").glob("offline-run-*"))) > wandb_runs  # the queued runs' kept
    shown = run(["bash", "-c", show], repo).stdout
    assert "sst2-3seeds" in shown and "lr5e-4" in shown
    assert "cells.seeds.sst2" in run(["dvc", "params", "diff"], repo).stdout  # applied: the workspace's study
    done = run(["bash", "-c", views], repo)
    metrics_lines = [line for line in done.stdout.splitlines() if "metrics.json" in line]
    assert metrics_lines and max(map(len, done.stdout.splitlines()[:3])) < 160, done.stdout[:2000]
    assert (repo / "dvc_plots/index.html").exists()


def slurm_task(repo: Path, rank: int, tasks: int, port: int, cmd: list[str], shared_data: Path) -> subprocess.Popen:
    """What `srun` starts as task `rank` of `tasks` on one node (the variables Lightning's SLURMEnvironment reads)."""
    env = {**copy_env(repo, shared_data), "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bertlab",
           "SLURM_NTASKS": str(tasks), "SLURM_NTASKS_PER_NODE": str(tasks), "SLURM_NNODES": "1", "SLURM_NODEID": "0",
           "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NODELIST": "localhost",
           "SLURM_SUBMIT_DIR": str(repo), "MASTER_PORT": str(port)}
    return subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_the_readmes_hand_run_and_cluster_commands_run_as_written(repo: Path, run: Run, shared_data: Path) -> None:
    """The pipeline section's run by hand, verbatim; Scaling out's one-node line, verbatim (the run is finished: it
    does nothing); its SLURM script's `srun` line as two SLURM tasks on this machine (devices and workers scaled to
    it), then `dvc commit`, after which DVC takes the stage as done."""
    run(["dvc", "repro"], repo)
    hand = re.search(r"`(python -m bertlab\.pretrain [^`]*name=[^`]*)`", readme_section("The pipeline")).group(1)
    pipeline = pipeline_files(repo)
    run(["bash", "-c", hand], repo)
    name = re.search(r"name=(\S+)", hand).group(1)
    record = json.loads((repo / "data/hand/pretrain" / name / f"{name}-1" / "metrics.json").read_text())
    assert record["objective"] == "mlm" and record["steps"] > 0
    assert pipeline == pipeline_files(repo)

    scaling_out = readme_section("Scaling out")
    one_node = re.search(r"`(python -m bertlab\.pretrain -cd data/configs/pretrain/bert/run -cn bert-1 "
                         r"impl\.devices=\d+)`", scaling_out).group(1)
    done = run(["bash", "-c", one_node], repo)
    assert "nothing to do" in done.stdout + done.stderr
    srun = next(line.strip() for line in readme_block("Scaling out", 0) if line.strip().startswith("srun "))
    cmd = [re.sub(r"^impl\.devices=\d+$", "impl.devices=2", re.sub(r"^impl\.num_workers=\d+$", "impl.num_workers=0",
                                                                    arg)) for arg in shlex.split(srun)[1:]]
    assert cmd[:2] == ["python", "-m"] and "impl.devices=2" in cmd
    for name in ("bert", "L12_H768_A12"):  # stale, and its twin (at smoke, Table 6's row) gone: the job retrains it
        shutil.rmtree(repo / "data/pretrain" / name / f"{name}-1")
    port = free_port()
    tasks = [slurm_task(repo, rank, 2, port, cmd, shared_data) for rank in (0, 1)]
    for task, (out, err) in zip(tasks, [t.communicate(timeout=900) for t in tasks]):
        assert task.returncode == 0, err[-3000:]
        assert "2 device(s) x 1 node(s)" in out + err
    assert json.loads((repo / "data/pretrain/bert/bert-1/metrics.json").read_text())["global_batch"] > 0
    assert "pretrain@bert" in run(["dvc", "status", "pretrain@bert"], repo).stdout
    run(["dvc", "commit", "-f", "pretrain@bert"], repo)
    assert "pretrain@bert" not in run(["dvc", "status", "pretrain@bert"], repo).stdout
