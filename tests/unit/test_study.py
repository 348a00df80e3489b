"""The study's grid as DVC parses it (dvc.yaml reads conf/ablations/default.yaml as vars): every cell of the
declaration is one stage named by what it runs, and an edit of a declaration (the tests' own, tests/study.yaml)
renames no other stage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from bertlab import study
from tests.helpers import REPO
from tests.report_data import study as own_study

DECLARATION = "conf/ablations/default.yaml"


def stages(declared: dict, tmp_path: Path) -> dict[str, tuple]:
    """Each stage DVC finds in dvc.yaml with `declared` as the study: name -> (command, deps, outs)."""
    from dvc.repo import Repo

    (tmp_path / DECLARATION).parent.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / DECLARATION).write_text(yaml.safe_dump(declared, sort_keys=False))
    if not (tmp_path / ".dvc").exists():
        Repo.init(str(tmp_path), no_scm=True)
    with Repo(str(tmp_path)) as repo:
        return {s.name: (s.cmd, tuple(str(d.def_path) for d in s.deps), tuple(str(o.def_path) for o in s.outs))
                for s in repo.index.stages}


@pytest.fixture(scope="module")
def declared() -> dict:
    return yaml.safe_load((REPO / DECLARATION).read_text())


def test_every_cell_is_one_stage_named_by_what_it_runs(declared: dict, tmp_path: Path) -> None:
    found = stages(declared, tmp_path)
    cells = list(study.cells(declared))
    finetune = {name for name in found if name.startswith("finetune_")}
    assert len(finetune) == len(cells) == sum(
        len(t["tasks"]) * len(t["rows"]) for t in declared["tables"].values()) * len(declared["seeds"])
    for cell in cells:
        cmd, deps, outs = found[f"finetune_{cell.table}@{cell.task}-{cell.encoder}-{cell.mode}-{cell.seed}"]
        assert cmd.endswith(f" -cn {cell.name}") and outs == (f"data/finetune/{cell.name}",)
        assert deps[:3] == (f"data/configs/finetune/{cell.name}.key.yaml", "data/pretrain",
                            f"data/download/tasks/{cell.task}")
    assert {name for name in found if name.startswith("pretrain@")} == {f"pretrain@{e}" for e in declared["encoders"]}


def test_inserting_runs_renames_no_other_stage(tmp_path: Path) -> None:
    """A row, a task and a seed put first (where a list position would shift every name after it), and an encoder
    with its row: the stages there before keep their names, commands, deps and outputs."""
    declared = own_study()
    before = stages(declared, tmp_path / "before")
    table5 = declared["tables"]["table5"]
    task = next(t for t in declared["columns"] if not any(t in spec["tasks"] for spec in declared["tables"].values()))
    assert "inserted" not in declared["encoders"] and "ltr-bilstm" in table5["rows"]
    edited = declared | {
        "encoders": {"inserted": ["objective=mlm"], **declared["encoders"]},
        "seeds": [0, *declared["seeds"]],
        "tables": declared["tables"] | {"table5": table5 | {
            "tasks": [task, *table5["tasks"]],
            "rows": {"inserted-bilstm": {"label": "ours"}, "inserted-finetune": {"label": "ours"}, **table5["rows"]}}}}
    after = stages(edited, tmp_path / "after")
    assert {name: after.get(name) for name in before} == before
    added = set(after) - set(before)
    assert {f"finetune_table5@{task}-bert-finetune-1", "finetune_table5@sst2-inserted-bilstm-2",
            "finetune_table5@qnli-inserted-finetune-0", "finetune_table7@conll2003-bert-finetune-0",
            "pretrain@inserted"} <= added
    rows, tasks, seeds = len(table5["rows"]) + 2, len(table5["tasks"]) + 1, len(declared["seeds"]) + 1
    others = sum(len(t["tasks"]) * len(t["rows"]) for name, t in declared["tables"].items() if name != "table5")
    assert len(added) == 1 + rows * tasks * seeds - len(table5["rows"]) * len(table5["tasks"]) * (seeds - 1) + others
