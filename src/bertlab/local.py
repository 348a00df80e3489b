"""Where the data come from, remembered: `python -m bertlab.local mirror=<folder>` once writes `local.yaml` at the
project's root (uncommitted: it is this machine's), which every later command reads, in any shell;
`BERTLAB_DATA_MIRROR` overrides it for one command (set empty: no mirror). Relative paths are the project root's,
also in a copy DVC runs an experiment in (`files.lasting_dir`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from bertlab.errors import UserError
from bertlab.files import lasting_dir

MIRROR_ENV = "BERTLAB_DATA_MIRROR"
LOCAL = Path("local.yaml")  # at the project's root; .gitignore keeps it out of the repository


def local_file() -> Path:
    """The project's `local.yaml` (in a queued or `--temp` experiment's copy: the project's own, which DVC does
    not copy)."""
    return lasting_dir(LOCAL)


def mirror_setting() -> tuple[str | None, str]:
    """The data mirror's folder as set (None: the hub), and where that was said."""
    if MIRROR_ENV in os.environ:
        return os.environ[MIRROR_ENV] or None, MIRROR_ENV
    path = local_file()
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return None, f"no {MIRROR_ENV}, no {LOCAL}"
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"cannot read {path} ({err}): write it again with python -m bertlab.local mirror=...") from err
    return (saved.get("mirror") if isinstance(saved, dict) else None), str(LOCAL)


def resolve(mirror: str) -> Path:
    """The folder `mirror` names, a relative one from the project's root."""
    return lasting_dir(mirror)


def main(argv: list[str]) -> int:
    """`mirror=<folder>` (or `mirror=null`): remember it in `local.yaml`; no argument: say what is set."""
    if not argv:
        mirror, where = mirror_setting()
        print(f"mirror: {mirror or 'none (the Hugging Face hub)'} ({where})")
        return 0
    if len(argv) != 1 or not argv[0].startswith("mirror="):
        print("error: usage: python -m bertlab.local mirror=<folder> (or mirror=null)", file=sys.stderr)
        return 2
    mirror = argv[0].split("=", 1)[1]
    mirror = None if mirror in ("", "null", "none") else mirror
    if mirror is not None and not resolve(mirror).is_dir():
        print(f"error: mirror={mirror}: {resolve(mirror)} is not a directory", file=sys.stderr)
        return 2
    local_file().write_text(yaml.safe_dump({"mirror": mirror}))
    print(f"mirror: {mirror or 'none (the Hugging Face hub)'}, in {LOCAL} for every later command "
          f"({MIRROR_ENV} overrides it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
