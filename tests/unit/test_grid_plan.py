"""`bertlab.grid`'s plan from the configs `configs` composed: a job per pretraining run of a stale `pretrain@<encoder>`
(twins of one settings and seed trained once, a run of 0 steps a light job, a run left out no job but its record), a
job per cell of a stale `finetune@<encoder>`, each waiting for the pretraining run it reads."""

from __future__ import annotations

import sys
from pathlib import Path

import networkx as nx
import pytest
import yaml

from bertlab.grid import describe, plan
from bertlab.grid_settings import settings


class Stage:
    """What the plan reads of a DVC stage: its command."""

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd


def compose_run(encoder: str, seed: int, *, steps: int = 20, layers: int = 2, not_run: str | None = None) -> None:
    """A pretraining run's config as `configs` writes it (the part the plan reads)."""
    path = Path(f"data/configs/pretrain/{encoder}/run/{encoder}-{seed}.yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = {"model": {"num_layers": layers}, "objective": {"name": "mlm_nsp"}, "pretrain": {"max_steps": steps},
           "pretrain_data": {"seed": 0}, "name": encoder, "seed": seed, "not_run": not_run, "out_dir": "data"}
    path.write_text("# @package _global_\n" + yaml.safe_dump(cfg))


def compose_cell(encoder: str, pretrain_seed: int, seed: int = 1) -> str:
    """An MRPC cell's config and key file on `encoder`'s run at `pretrain_seed`; its name."""
    name = f"mrpc-{encoder}-finetune-{pretrain_seed}-{seed}"
    folder = Path(f"data/configs/finetune/{encoder}")
    for sub in ("cell", "keys"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub / f"{name}.yaml").write_text(yaml.safe_dump(
            {"finetune": {"encoder": encoder, "pretrain_seed": pretrain_seed}, "seed": seed, "name": name,
             "out_dir": "data"}))
    return name


def found(stale: set[str], encoders: list[str]) -> dict[str, object]:
    """`grid.stale()`'s answer for a pipeline of `encoders`, `stale` its stale stages."""
    stages = {f"{stage}@{e}": Stage(f"python -m bertlab.{stage} -m -cd data/configs/{stage}/{e}")
              for e in encoders for stage in ("pretrain", "finetune")}
    graph = nx.DiGraph()
    graph.add_nodes_from(stages.values())
    return {"stale": stale, "stages": stages, "graph": graph}


@pytest.fixture
def composed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bert` at seeds 1-3 (the profile runs 1 and 2), `twin` its twin (the same settings; the profile runs seed 1),
    `scratch` (0 steps, seed 1), and a cell on each run."""
    monkeypatch.chdir(tmp_path)
    for encoder, seeds, runs in (("bert", 3, 2), ("twin", 2, 1), ("scratch", 2, 1)):
        for seed in range(1, seeds + 1):
            compose_run(encoder, seed, steps=0 if encoder == "scratch" else 20,
                        not_run=None if seed <= runs else f"pretraining seed {seed}: left out")
            compose_cell(encoder, seed)


def test_a_job_a_pretraining_run_and_each_cell_after_the_run_it_reads(composed: None) -> None:
    p = plan(found({"pretrain@bert", "finetune@bert", "pretrain@twin", "finetune@twin", "pretrain@scratch",
                    "finetune@scratch"}, ["bert", "twin", "scratch"]))
    jobs = {j.name: (j.kind, j.after) for j in p.jobs}
    assert jobs == {
        "pretrain@bert/bert-1": ("pretrain", ()),
        "pretrain@bert/bert-2": ("pretrain", ()),  # another seed: another training, not a twin
        "pretrain@twin/twin-1": ("cell", ("pretrain@bert/bert-1",)),  # bert-1's settings and seed: a copy, after it
        "pretrain@scratch/scratch-1": ("cell", ()),  # 0 steps
        **{f"finetune@{e}/mrpc-{e}-finetune-{s}-1": ("cell", (f"pretrain@{e}/{e}-{s}",) if s <= runs else ())
           for e, seeds, runs in (("bert", 3, 2), ("twin", 2, 1), ("scratch", 2, 1)) for s in range(1, seeds + 1)}}
    # the runs left out: no job, their "not run" records written by the grid itself
    assert [(stage, c.as_posix()) for stage, c in p.records] == [
        ("pretrain", f"data/configs/pretrain/{e}/run/{e}-{s}.yaml") for e, s in (("bert", 3), ("twin", 2), ("scratch", 2))]
    run = next(j for j in p.jobs if j.name == "pretrain@bert/bert-2")
    assert run.argv == (sys.executable, "-m", "bertlab.pretrain", "-cd", "data/configs/pretrain/bert/run", "-cn",
                        "bert-2")
    assert run.log_file == Path("data/grid/logs/pretrain@bert/bert-2.log")
    cell = next(j for j in p.jobs if j.name.startswith("finetune@twin/"))
    assert cell.argv == (sys.executable, "-m", "bertlab.finetune", "-cd", "data/configs/finetune/twin/cell", "-cn",
                         "mrpc-twin-finetune-1-1")
    assert p.stages["pretrain@bert"] == ["pretrain@bert/bert-1", "pretrain@bert/bert-2"]
    assert p.stages["finetune@scratch"] == ["finetune@scratch/mrpc-scratch-finetune-1-1",
                                            "finetune@scratch/mrpc-scratch-finetune-2-1"]
    assert describe(p, settings(["workers=2"])).splitlines()[2:] == [
        "  2 pretraining job(s) of 1 process, 0 GPU(s): pretrain@bert/bert-1, pretrain@bert/bert-2",
        "  2 pretraining job(s) of 1 process, 0 GPU(s), training nothing (0 steps) or copying a twin after it: "
        "pretrain@twin/twin-1 after pretrain@bert/bert-1, pretrain@scratch/scratch-1",
        "  7 fine-tuning cell job(s) of 1 process, 0 GPU(s): bert 3, twin 2, scratch 2",
        '  3 run(s) left out by the profile: their "not run" records written here, no job',
        "  then: dvc commit -f each of the 6 stage(s) as its jobs finish, and dvc repro"]


def test_cells_on_a_stale_encoder_wait_for_its_runs_and_cells_on_a_current_one_for_nothing(composed: None) -> None:
    p = plan(found({"pretrain@bert", "finetune@twin"}, ["bert", "twin", "scratch"]))
    jobs = {j.name: (j.kind, j.after) for j in p.jobs}
    assert jobs == {"pretrain@bert/bert-1": ("pretrain", ()), "pretrain@bert/bert-2": ("pretrain", ()),
                    **{f"finetune@bert/mrpc-bert-finetune-{s}-1": ("cell", (f"pretrain@bert/bert-{s}",))
                       for s in (1, 2)},  # current, but its encoder's runs are not: they rerun after them
                    "finetune@bert/mrpc-bert-finetune-3-1": ("cell", ()),  # on a run left out (no job to wait for)
                    **{f"finetune@twin/mrpc-twin-finetune-{s}-1": ("cell", ()) for s in (1, 2)}}
    assert set(p.stages) == {"pretrain@bert", "finetune@bert", "finetune@twin"}


def test_a_dry_run_before_configs_plans_a_stale_pretraining_stage_as_one_job(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    f = found({"pretrain@bert", "finetune@bert"}, ["bert"])
    p = plan(f)
    [job] = p.jobs  # no cells composed yet
    assert (job.name, job.kind, job.argv[1:]) == ("pretrain@bert", "pretrain",
                                                  ("-m", "bertlab.pretrain", "-m", "-cd", "data/configs/pretrain/bert"))
    assert p.stages == {"pretrain@bert": ["pretrain@bert"], "finetune@bert": []}
