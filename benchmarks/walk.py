"""A stage run's walk through the code: the bertlab modules it enters, in order, to a call depth.

    python benchmarks/walk.py [--depth 3] bertlab.finetune -cd data/configs/finetune -cn sst2-bert-finetune-1

runs the stage in this process under a profiler hook and records where the run enters a bertlab module: a call from
another module (coming back to the caller is not entering it), of a function not met before (a reader reads each
function once, however often the run calls it: each training step), at room depth <= `--depth`. Room depth counts
the modules on the way, bertlab frames only (library frames between, such as Hydra's or Lightning's, do not count,
nor does what importing the modules runs, class bodies included): the stage's toolkit `stage` is depth 1, the
stage's recipe 2, what the recipe calls 3. A stop is such an entry (consecutive entries into one module are one), a
room a module, a return a stop in a room entered before (returns = stops - rooms). Prints the walk and the three
counts (issue 26's measure) twice:

- in call order: every stop as the run makes it;
- as read: a library's calls back into bertlab (Lightning's hooks and callbacks, a log filter, a collate function:
  a function whose caller is library code) enter each room once per recipe frame that handed them to the library,
  as a reader reads `trainer.fit(module, ...)`: the module's hooks together, not in the order Lightning interleaves
  them with the progress bar's and the data module's.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import runpy
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any


def walk(module: str, argv: list[str], depth: int) -> tuple[list[str], list[str]]:
    """The stops of `python -m module *argv` in call order and as read: the modules of its functions in the order
    the run first calls each (consecutive repeats collapsed)."""
    import bertlab

    root = str(Path(bertlab.__file__).resolve().parent)
    stops: list[str] = []
    read: list[str] = []
    handed: set[tuple[int, str]] = set()  # (recipe frame's serial number, room) a library has called back into
    serial = itertools.count()
    met: set[Any] = set()  # the functions met so far: a reader reads each once, however often the run calls it
    stack: list[tuple[str, int, int]] = []  # the bertlab frames: (module, room depth, serial number)

    def room(frame: FrameType) -> str | None:
        path = frame.f_code.co_filename
        return None if not path.startswith(root) else Path(path).relative_to(root).with_suffix("").as_posix()

    def hook(frame: FrameType, event: str, _: Any) -> None:
        if (event not in ("call", "return") or not frame.f_code.co_flags & inspect.CO_NEWLOCALS
                or (name := room(frame)) is None):
            return  # a module's or class's body (run by an import) is not a call
        if event == "return":
            stack.pop()
            return
        entering = not stack or name != stack[-1][0]  # a call from another module (coming back to it is not)
        level = 1 if not stack else stack[-1][1] + entering
        stack.append((name, level, next(serial)))
        if level <= depth and frame.f_code not in met:
            met.add(frame.f_code)
            if entering and (not stops or stops[-1] != name):
                stops.append(name)
            callback = stack[:-1] and room(frame.f_back) is None  # called by library code
            if entering and callback and (stack[-2][2], name) in handed:
                return
            if callback:
                handed.add((stack[-2][2], name))
            if entering and (not read or read[-1] != name):
                read.append(name)

    run_profiled(module, argv, hook)
    return stops, read


def run_profiled(module: str, argv: list[str], hook: Callable[[FrameType, str, Any], None]) -> None:
    """`python -m <module> <argv>` in this process with `hook` as the profiler of every thread; its imports first,
    unrecorded (a class body run by an import is not a call)."""
    importlib.import_module(module)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("module")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    for how, stops in zip(("in call order", "as read"), walk(args.module, args.argv, args.depth)):
        rooms = len(set(stops))
        print(f"{how}: {' -> '.join(stops)}")
        print(f"{how}, depth {args.depth}: {len(stops)} stops in {rooms} rooms, {len(stops) - rooms} returns")


if __name__ == "__main__":
    main()
