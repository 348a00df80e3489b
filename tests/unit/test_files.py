"""bertlab.files: outputs replaced all or nothing, deletions confined, JSON always valid, unwritable places named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bertlab.errors import UserError
from bertlab.files import atomic_dir, check_writable, remove_tree, write_json


def test_atomic_dir_replaces_the_output_only_when_the_block_completes(tmp_path: Path) -> None:
    out = tmp_path / "pretrain" / "bert"
    out.mkdir(parents=True)
    (out / "old.txt").write_text("old")
    with pytest.raises(ValueError), atomic_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
        raise ValueError("killed half way")
    assert [p.name for p in out.iterdir()] == ["old.txt"]
    with atomic_dir(out) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in (tmp_path / "pretrain").iterdir()) == ["bert"]  # no scratch left


def test_a_killed_runs_scratch_is_cleared_by_the_next_run(tmp_path: Path) -> None:
    debris = tmp_path / "finetune" / ".partial" / "cell"
    debris.mkdir(parents=True)
    (debris / "metrics.json").write_text("{}")
    with atomic_dir(tmp_path / "finetune" / "cell") as tmp:
        (tmp / "metrics.json").write_text('{"ok": 1}')
    assert not (tmp_path / "finetune" / ".partial").exists()
    assert list((tmp_path / "finetune").glob("*/metrics.json")) == [tmp_path / "finetune" / "cell" / "metrics.json"]


@pytest.mark.parametrize("name", ["..", "x/../.."])  # "." and "" vanish in a Path: check_name refuses them
def test_atomic_dir_refuses_paths_that_do_not_end_in_a_name(tmp_path: Path, name: str) -> None:
    (tmp_path / "data" / "finetune").mkdir(parents=True)
    (tmp_path / "data" / "keep.txt").write_text("keep")
    with pytest.raises(RuntimeError, match="refusing"), atomic_dir(Path(f"{tmp_path}/data/finetune/{name}")):
        pass
    assert (tmp_path / "data" / "keep.txt").read_text() == "keep"


def test_remove_tree_refuses_anything_outside_its_root(tmp_path: Path) -> None:
    (tmp_path / "root" / "a").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="not inside"):
        remove_tree(tmp_path / "root" / "..", tmp_path / "root")
    with pytest.raises(RuntimeError, match="not inside"):
        remove_tree(tmp_path / "root", tmp_path / "root")
    remove_tree(tmp_path / "root" / "a", tmp_path / "root")
    assert not (tmp_path / "root" / "a").exists() and (tmp_path / "root").exists()


def test_write_json_writes_null_for_non_finite_numbers(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"ratio": math.nan, "ppl": [1.5, math.inf], "n": 3})
    assert json.loads((tmp_path / "m.json").read_text()) == {"ratio": None, "ppl": [1.5, None], "n": 3}
    assert "NaN" not in (tmp_path / "m.json").read_text()


def test_check_writable_names_the_directory(tmp_path: Path) -> None:
    check_writable(tmp_path / "new" / "deep")  # creatable: fine, and nothing is created
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match=f"{tmp_path}/file/out"):
        check_writable(tmp_path / "file" / "out")
