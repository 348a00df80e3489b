"""The study's grid as DVC parses it (dvc.yaml reads conf/ablations/default.yaml's encoders as vars): two stages an
encoder, named by what they run, each depending on its own encoder alone; an edit of the declaration renames no
other stage."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.helpers import REPO

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


FIXED = {"configs", "download", "tokenizer", "pretrain_data", "ablations"}


def small_study(*encoders: str) -> dict:
    """A declaration of its own (dvc.yaml reads its encoders): each encoder pretrained with MLM."""
    return {"encoders": {name: ["objective=mlm"] for name in encoders}}


def test_each_encoder_is_two_stages_its_cells_depend_on_it_alone(tmp_path: Path) -> None:
    found = stages(small_study("a", "b"), tmp_path)
    assert set(found) == FIXED | {f"{stage}@{e}" for stage in ("pretrain", "finetune") for e in ("a", "b")}
    for encoder in ("a", "b"):
        cmd, deps, outs = found[f"finetune@{encoder}"]
        assert cmd.endswith(f"-cd data/configs/finetune/{encoder} -cn cells 'cell=glob(*)'")
        assert deps[:3] == (f"data/configs/finetune/{encoder}/keys", f"data/pretrain/{encoder}", "data/download/tasks")
        assert not [d for d in deps if d.startswith(("data/pretrain", "data/finetune")) and encoder not in d]
        assert outs == (f"data/finetune/{encoder}",)
        assert found[f"pretrain@{encoder}"][2] == (f"data/pretrain/{encoder}",)


def test_inserting_an_encoder_renames_no_other_stage(tmp_path: Path) -> None:
    """An encoder put first (where a list position would shift every name after it): the stages there before keep
    their names, commands, deps and outputs, and the new encoder adds its two."""
    before = stages(small_study("a", "b"), tmp_path / "before")
    after = stages(small_study("inserted", "a", "b"), tmp_path / "after")
    assert {name: after.get(name) for name in before} == before
    assert set(after) - set(before) == {"pretrain@inserted", "finetune@inserted"}


def test_the_live_declarations_encoders_are_the_stages(tmp_path: Path) -> None:
    declared = yaml.safe_load((REPO / DECLARATION).read_text())
    found = stages(declared, tmp_path)
    assert {n for n in found if "@" in n} == {f"{s}@{e}" for s in ("pretrain", "finetune") for e in declared["encoders"]}


def test_the_committed_lock_holds_only_stages_that_exist() -> None:
    """dvc.lock keeps a stage's entry after the stage is gone (DVC never prunes it): a stale lock grows every stage's
    bookkeeping (DVC reads and writes the whole file after each), so it is committed without them."""
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        names = {s.addressing for s in repo.index.stages}
    locked = set(yaml.safe_load((REPO / "dvc.lock").read_text())["stages"])
    assert sorted(locked - names) == []
