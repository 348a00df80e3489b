"""The files `dvc exp run -S` edits (`params.yaml`, the study's declaration), as the `configs` stage last composed
them: kept beside the configs it wrote, and put back when an experiment's `-S` set them to something it refuses, so a
misspelt `dvc exp run -S profile=smok` leaves the workspace as it was (DVC writes the files before any stage runs,
and keeps `data/configs`: its output is `persist`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

KEPT = "composed_from"  # under data/configs: the files as composed, by their paths in the project
EXPERIMENT_ENV = "DVC_EXP_NAME"  # set by `dvc exp run` for the stages of an experiment


def _kept(path: Path, configs: Path) -> Path | None:
    """Where `path`'s copy is kept: by its path in the project (the working directory); None for a file outside it
    (a params file named on the command line, which no experiment edits)."""
    inside = Path(os.path.relpath(path.resolve(), Path.cwd().resolve()))
    return None if inside.parts[:1] == ("..",) else configs / KEPT / inside


def keep(files: list[Path], configs: Path) -> None:
    """Copy each of `files` that is in the project under `configs/KEPT/`."""
    for path in files:
        if (target := _kept(path, configs)) is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def restore(files: list[Path], configs: Path) -> list[str]:
    """Under `dvc exp run` only, put back each of `files` that differs from its kept copy; returns their names (none
    by hand: an edit of the user's own is theirs to fix, and the error names it)."""
    if not os.environ.get(EXPERIMENT_ENV):
        return []
    restored = []
    for path in files:
        kept = _kept(path, configs)
        if kept is not None and kept.is_file() and (not path.is_file() or path.read_bytes() != kept.read_bytes()):
            shutil.copyfile(kept, path)
            restored.append(str(path))
    return restored
