"""Files every stage writes and reads: all-or-nothing output directories, safe deletion, JSON."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bertlab.errors import UserError


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: where a directory not yet created would be made."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_writable(directory: Path) -> None:
    """A UserError naming `directory` unless files can be created in it (or where it would be created)."""
    probe = nearest_existing(directory)
    try:
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a directory")
        tempfile.TemporaryFile(dir=probe).close()
    except OSError as err:
        raise UserError(f"cannot write the output directory {directory} ({err})") from err


def remove_tree(path: Path, root: Path) -> None:
    """`shutil.rmtree(path)` for a `path` strictly inside `root`; anything else is refused (a bug, not bad input)."""
    path, root = Path(path).resolve(), Path(root).resolve()
    if root not in path.parents:
        raise RuntimeError(f"refusing to delete {path}: it is not inside {root}")
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces `path` only if the block completes: no half-written outputs.

    The scratch directory is `<parent>/.partial/<name>`, where no stage or report looks for outputs; a killed
    run's leftover is removed by the next run of the same output. `path` must end in a plain name (not `.`
    or `..`): only it and its scratch copy are ever deleted.
    """
    path = Path(path)
    if path.name in ("", ".", "..") or path.resolve().parent != path.parent.resolve():
        raise RuntimeError(f"refusing to replace {path}: not a plain directory name")
    scratch_root = path.parent / ".partial"
    tmp = scratch_root / path.name
    remove_tree(tmp, scratch_root)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        remove_tree(path, path.parent)
        tmp.rename(path)
    finally:
        remove_tree(tmp, scratch_root)
        with suppress(OSError):
            scratch_root.rmdir()  # only when no other run is writing there


def require(path: str | Path, stage: str) -> Path:
    """`path`, which stage `stage` writes; a UserError naming that stage when it is missing."""
    if not Path(path).exists():
        raise UserError(f"{path} not found: run `dvc repro {stage}` (or `python -m bertlab.{stage}`) first")
    return Path(path)


def finite(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None: JSON has no literal for them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """`obj` as `write_json` writes it: indented, valid JSON (non-finite numbers as null)."""
    return json.dumps(finite(obj), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as `to_json` gives it, creating parent directories."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(to_json(obj))


def read_json(path: str | Path) -> Any:
    """The JSON in `path`; a UserError naming it when it is not JSON (garbage, truncated)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:  # json.JSONDecodeError is a ValueError
        raise UserError(f"{path} is not valid JSON ({err})") from err


def read_tokenizer(path: str | Path) -> Any:
    """The `tokenizers.Tokenizer` saved in `path` (the tokenizer stage's); a UserError naming the file when it is
    not one (garbage, truncated)."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exceptions
        raise UserError(f"{path} is not a readable tokenizer ({str(err).splitlines()[0] if str(err) else err!r}): "
                        "rerun `dvc repro tokenizer` (or `python -m bertlab.tokenizer`)") from err


MIN_FREE_BYTES = 64 << 20  # every stage writes logs, a timing record and its outputs


def check_free_space(directory: Path, needed: int, what: str) -> None:
    """A UserError unless the filesystem of `directory` (or where it would be created) has `needed` bytes free."""
    try:
        free = shutil.disk_usage(nearest_existing(directory)).free
    except OSError:
        return  # not measurable: writing will tell
    if free < needed:
        raise UserError(f"{directory}: {free / 2**20:,.0f} MiB free on its device, {what} needs about "
                        f"{needed / 2**20:,.0f} MiB: free some space first")


def lasting_dir(save_dir: str | Path, cwd: Path | None = None) -> Path:
    """`save_dir`; in a queued or `--temp` DVC experiment, which runs in a copy of the repository under
    `<repo>/.dvc/tmp/exps/` that DVC deletes when it ends, the same (relative) folder in the repository itself, so its
    W&B runs outlast the copy."""
    save_dir, parts = Path(save_dir), (cwd or Path.cwd()).resolve().parts
    if save_dir.is_absolute():
        return save_dir
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i]) / save_dir
    return save_dir
