"""A stage run's walk through the code: the bertlab modules it enters, in order, to a call depth.

    python benchmarks/walk.py [--depth 2] bertlab.finetune -cd data/configs/finetune -cn sst2-bert-finetune-1

runs the stage in this process under a profiler hook and records each call into a bertlab function made at bertlab
call depth <= `--depth` (counting bertlab frames only: library frames in between, such as Hydra's or Lightning's,
and module bodies run by an import do not count). Consecutive calls into the same module are one stop; a room is a module; a return is a stop in a room
visited before (returns = stops - rooms). Prints the walk and the three counts (issue 26's measure: a reader
following the recipe leaves and re-enters a module once per return).
"""

from __future__ import annotations

import argparse
import runpy
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any


def walk(module: str, argv: list[str], depth: int) -> list[str]:
    """The stops (module names, consecutive repeats collapsed) of `python -m module *argv`."""
    import bertlab

    root = str(Path(bertlab.__file__).resolve().parent)
    stops: list[str] = []
    level = 0

    def room(frame: FrameType) -> str | None:
        path = frame.f_code.co_filename
        return None if not path.startswith(root) else Path(path).relative_to(root).with_suffix("").as_posix()

    def hook(frame: FrameType, event: str, _: Any) -> None:
        nonlocal level
        if event not in ("call", "return") or frame.f_code.co_name == "<module>" or (name := room(frame)) is None:
            return  # an import's module body is not a call
        if event == "return":
            level -= 1
            return
        level += 1
        if level <= depth and (not stops or stops[-1] != name):
            stops.append(name)

    sys.argv = [module, *argv]
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("module")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    stops = walk(args.module, args.argv, args.depth)
    rooms = len(set(stops))
    print(" -> ".join(stops))
    print(f"depth {args.depth}: {len(stops)} stops in {rooms} rooms, {len(stops) - rooms} returns")


if __name__ == "__main__":
    main()
