"""End to end: a download's bytes do not depend on where the clone and the mirror sit (issue 68). Two clones at
different depths, each reading one mirror through its own `../shared/data` link as the README says, write the same
bytes under `data/download` (so `dvc.lock` records the same hashes for them) and give the same run keys."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from bertlab.runs import run_key


def download_in_clone(root: Path, mirror: Path) -> Path:
    """`python -m bertlab.download` (the stage's command) in `root/bertlab`, reading `mirror` through the link
    `root/shared/data` as `BERTLAB_DATA_MIRROR=../shared/data`; returns its `data/download`."""
    clone = root / "bertlab"
    clone.mkdir(parents=True)
    (root / "shared").mkdir()
    (root / "shared" / "data").symlink_to(mirror)
    env = {**os.environ, "BERTLAB_DATA_MIRROR": "../shared/data"}
    done = subprocess.run([sys.executable, "-m", "bertlab.download", "profile=smoke"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return clone / "data" / "download"


def tree(root: Path) -> dict[str, str]:
    """Every file under `root` and its md5, as DVC hashes an output folder."""
    return {p.relative_to(root).as_posix(): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_clones_at_different_paths_download_the_same_bytes(mirror: Path, tmp_path: Path) -> None:
    first = download_in_clone(tmp_path / "a", mirror)
    second = download_in_clone(tmp_path / "b" / "deeper" / "still", mirror)
    states = [p.relative_to(first).as_posix() for p in first.rglob("state.json")]
    assert "corpus/state.json" in states and "tasks/sst2/train/state.json" in states
    assert tree(first) == tree(second)
    for part in ["corpus", *(f"tasks/{p.name}" for p in (first / "tasks").iterdir())]:  # a cell's key holds its task
        assert run_key({}, [first / part]) == run_key({}, [second / part]), part
