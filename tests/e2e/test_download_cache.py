"""The download stage leaves no copy of the mirror in the Hugging Face datasets cache (issue 58: ~246 MB per mirror
path there, none ever removed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import stage


def files_under(root: Path) -> dict[str, int]:
    """Every file under `root` (relative path -> bytes)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_download_twice_from_two_mirror_paths_leaves_the_hf_cache_empty(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(hf_home / "datasets"))
    moved = shutil.copytree(mirror, tmp_path / "mirror-copy")  # the same files at another path: a new cache key
    data = tmp_path / "data"
    for source in (mirror, moved):
        done = stage("download", data, mirror=source)
        assert done.returncode == 0, done.stderr[-3000:]
        assert files_under(hf_home) == {}  # not one byte outside the project, the first time or the second
        manifest = json.loads((data / "download/manifest.json").read_text())
        assert manifest["source"] == str(source) and manifest["corpus"]["documents"] == 44
        assert manifest["tasks"]["sst2"]["rows"] == {"train": 64, "validation": 32}
    assert sorted(p.name for p in (data / "download").iterdir()) == ["corpus", "manifest.json", "tasks"]
    assert not (data / ".partial").exists()  # the scratch copies went with the scratch directory
