"""Where a stage run's settings go: the bertlab functions that receive them, in call order, and the rooms (modules)
they enter (issue 57's measure for a fine-tuning cell).

    python benchmarks/settings_walk.py bertlab.finetune -cd data/configs/finetune -cn sst2-bert-finetune-1

runs the stage in this process under a profiler hook and lists every bertlab function, once, that is called with
settings among its arguments: the composed config or a part of it (a `DictConfig`), or one of the typed settings of
`bertlab.training.recipe`. A call from another module enters a room ("->"); a stop is such an entry (consecutive
entries into one room are one, as `walk.py` counts them), and a room entered again after another is a return.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from walk import run_profiled  # benchmarks/, this script's folder


def settings_of(value: Any) -> str | None:
    """What kind of settings `value` is, or None."""
    from omegaconf import DictConfig

    if isinstance(value, DictConfig):
        return "DictConfig"
    if dataclasses.is_dataclass(value) and type(value).__module__ in ("bertlab.training.recipe",
                                                                       "bertlab.training.run_settings"):
        return type(value).__name__
    return None


def walk(module: str, argv: list[str]) -> list[tuple[str, str, list[str], bool]]:
    """(room, function, its settings arguments, whether the call entered the room) of `python -m module *argv`."""
    import bertlab

    root = Path(bertlab.__file__).resolve().parent
    calls: list[tuple[str, str, list[str], bool]] = []
    met: set[Any] = set()

    def room(path: str) -> str | None:
        return Path(path).relative_to(root).with_suffix("").as_posix() if path.startswith(str(root)) else None

    def hook(frame: FrameType, event: str, _: Any) -> None:
        code = frame.f_code
        if event != "call" or code in met or not code.co_flags & inspect.CO_NEWLOCALS:
            return
        if (name := room(code.co_filename)) is None:
            return
        arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        got = [f"{a}: {kind}" for a in arguments if a != "self" and (kind := settings_of(frame.f_locals.get(a)))]
        if got:
            met.add(code)
            caller = room(frame.f_back.f_code.co_filename) if frame.f_back else None
            calls.append((name, code.co_qualname, got, caller != name))

    run_profiled(module, argv, hook)
    return calls


def main() -> None:
    module, argv = sys.argv[1], sys.argv[2:]
    stops: list[str] = []
    for name, function, got, entering in walk(module, argv):
        print(f"  {'->' if entering else '  '} {name}.{function}({', '.join(got)})")
        if entering and (not stops or stops[-1] != name):
            stops.append(name)
    rooms = len(set(stops))
    print(f"settings: {' -> '.join(stops)}")
    print(f"settings: {len(stops)} stops in {rooms} rooms, {len(stops) - rooms} returns")


if __name__ == "__main__":
    main()
