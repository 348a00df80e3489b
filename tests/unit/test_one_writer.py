"""One writer a run, and no job for a run that would do nothing: a run's claim refuses a second writer in one line and
passes to the next writer once its owner is gone; the grid writes the "not run" records itself (no job) and
submits no job for a cell finished with its run key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from bertlab import grid, owner, runs
from bertlab.errors import UserError
from bertlab.finetune import finetune
from bertlab.grid import plan, write_records
from bertlab.modeling.export import CONFIG, PLAIN_WEIGHTS
from bertlab.untrained import cell_dir, encoder_dir
from tests.helpers import finetune_config

CELL = "sst2-tiny-finetune-1-1"


def hold(path: Path) -> subprocess.Popen:
    """Another process that claims `path` and keeps it until killed."""
    code = ("import sys, time; from pathlib import Path; from bertlab import owner\n"
            "with owner.claimed(Path(sys.argv[1]), 'run'):\n    print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_claimed_run_refuses_a_second_writer_naming_the_first_and_passes_on_once_it_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints" / "finetune" / "cell.owner"
    holder = hold(path)
    try:
        with pytest.raises(UserError, match=rf"cell is being written by process {holder.pid} on .*{path}"):
            with owner.claimed(path, "cell"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with owner.claimed(path, "cell"):  # its owner is gone (killed): the claim is taken over, nothing to clean
        assert path.read_text().startswith(f"process {os.getpid()} ")
    with owner.claim(tmp_path, "finetune", "cell", rank=1):  # a distributed run's other ranks: its owner's
        with owner.claim(tmp_path, "finetune", "cell", rank=1):
            pass


@pytest.fixture
def data(finetune_data: Path, tmp_path: Path) -> Path:
    """A copy of the fine-tuning data dir, whose `tiny` encoder has a run key, as a pretraining run leaves it."""
    d = Path(shutil.copytree(finetune_data, tmp_path / "data"))
    record = d / "pretrain" / "tiny" / "tiny-1" / "metrics.json"
    record.write_text(json.dumps(json.loads(record.read_text()) | {"run_key": "k1"}))
    return d


def cell_config(data: Path, *overrides: str) -> DictConfig:
    return finetune_config(data, f"name={CELL}", "task=sst2", "finetune.pretrain_seed=1", *overrides)


def test_a_second_writer_of_a_cell_is_refused_and_deletes_nothing(data: Path) -> None:
    cfg = cell_config(data)
    out = cell_dir(cfg)
    out.mkdir(parents=True)
    (out / "metrics.json").write_text("{}")  # another writer's files
    holder = hold(owner.claim_path(cfg.out_dir, "finetune", CELL))
    try:
        with pytest.raises(UserError, match=f"{CELL} is being written by process {holder.pid}"):
            finetune(cfg)
    finally:
        holder.kill()
        holder.wait()
    assert (out / "metrics.json").read_text() == "{}"


def compose_cell(data: Path, cfg: DictConfig) -> Path:
    """`cfg` as `configs` writes a cell's config and key file; the config's path."""
    folder = data.parent / "data" / "configs" / "finetune" / "tiny"
    for sub in ("cell", "keys"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    config = folder / "cell" / f"{cfg.name}.yaml"
    config.write_text(yaml.safe_dump(OmegaConf.to_container(cfg, resolve=True)))
    key = {"finetune": {"encoder": "tiny", "pretrain_seed": 1}, **({"not_run": cfg.not_run} if cfg.not_run else {})}
    (folder / "keys" / f"{cfg.name}.yaml").write_text(yaml.safe_dump(key))
    return config


def found_stale() -> dict[str, object]:
    """`grid.stale()`'s answer: `finetune@tiny` stale, its pretraining current."""
    class Stage:
        cmd = "python -m bertlab.finetune"
    stages = {"pretrain@tiny": Stage(), "finetune@tiny": Stage()}
    graph = nx.DiGraph()
    graph.add_nodes_from(stages.values())
    return {"stale": {"finetune@tiny"}, "stages": stages, "graph": graph}


def test_a_cell_finished_with_its_run_key_gets_no_job_and_one_whose_encoder_changed_does(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(data.parent)
    cfg = cell_config(data)
    compose_cell(data, cfg)
    assert [j.name for j in plan(found_stale()).jobs] == [f"finetune@tiny/{CELL}"]  # no result yet
    out, encoder = cell_dir(cfg), encoder_dir(cfg)
    out.mkdir(parents=True)
    (out / "items.json").write_text("{}")
    key = runs.cell_key(cfg, encoder, (PLAIN_WEIGHTS, CONFIG))
    (out / "metrics.json").write_text(json.dumps({"run_key": key, "files": runs.run_files(out)}))
    p = plan(found_stale())
    assert (p.jobs, p.stages, p.finished) == ([], {"finetune@tiny": []}, [f"finetune@tiny/{CELL}"])
    (out / "items.json").write_text("{ }")  # its files are not what it recorded: it runs again
    assert [j.name for j in plan(found_stale()).jobs] == [f"finetune@tiny/{CELL}"]
    (out / "items.json").write_text("{}")
    record = encoder / "metrics.json"
    record.write_text(json.dumps(json.loads(record.read_text()) | {"run_key": "k2"}))  # its encoder retrained
    assert [j.name for j in plan(found_stale()).jobs] == [f"finetune@tiny/{CELL}"]


def test_a_cell_the_profile_leaves_out_is_no_job_its_record_written_by_the_grid_as_its_stage_writes_it(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(data.parent)
    cfg = cell_config(data, "not_run='seed 1: left out'", "profile_name=smoke")
    compose_cell(data, cfg)
    p = plan(found_stale())
    assert (p.jobs, p.stages, [c.name for _, c in p.records]) == ([], {"finetune@tiny": []}, [f"{CELL}.yaml"])
    began = time.perf_counter()
    write_records(p)
    assert time.perf_counter() - began < 5  # no process, no Lightning
    written = json.loads((cell_dir(cfg) / "metrics.json").read_text())
    shutil.rmtree(cell_dir(cfg))
    assert finetune(cfg).record == written
    assert written["status"] == "not run" and written["reason"] == "not run at smoke: seed 1: left out"


def test_the_grid_waits_for_dvcs_lock_and_shows_dvcs_own_message_when_a_command_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], check=True)
    code = ("import time; from dvc.repo import Repo\nrepo = Repo('.'); repo.lock.lock(); print('held', flush=True)\n"
            "time.sleep(7); repo.lock.unlock()")  # as `dvc status` holds it, for 7 s (DVC itself retries ~3 s)
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    began = time.monotonic()
    grid.dvc("commit", "-f", show=False)
    assert time.monotonic() - began > 5  # it waited for the lock, and then committed
    assert capfd.readouterr().err.splitlines() == [grid.WAITING]  # saying so in a line
    holder.wait()
    with pytest.raises(UserError, match=r"^grid: `dvc commit -f nosuch` failed \(exit status 1\): ERROR: failed to "
                                        r"commit nosuch - 'nosuch' does not exist"):
        grid.dvc("commit", "-f", "nosuch", show=False)
