"""A stage's Hydra entry point: settings checked at the door, one-line errors, the process's time for the ledger."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from bertlab import settings
from bertlab.errors import UserError
from bertlab.files import check_writable, write_json

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
StageFn = Callable[[DictConfig], None]

# `${shrink:768,4}` = 192: how profiles shrink the paper's model shapes (never below 1).
OmegaConf.register_new_resolver("shrink", lambda size, by: max(1, int(size) // int(by)), replace=True)


def main(*, named_runs: bool = False, own_output: bool = False) -> Callable[[StageFn], Callable[[], None]]:
    """A stage's Hydra entry point: `python -m bertlab.<stage> key=value ...` (and `-m` for multirun).

    Settings are checked first (`bertlab.settings.check`), and the stage's output directory (`<data_dir>/<stage>`; a
    stage with `own_output` writes elsewhere and checks that itself) must be writable, before any compute is spent;
    `impl.threads` (speed only) sets torch's threads for the whole process. A UserError prints one line to stderr
    and exits with status 2. A run that completes leaves its process's time, start-up included, in
    `<data_dir>/timing/<stage>/<run>.json` for the report's budget ledger (global rank zero only; `<run>` is the
    run's `name` for a stage of `named_runs`, else the stage's).
    """
    def entry(fn: StageFn) -> Callable[[], None]:
        stage_name = Path(fn.__code__.co_filename).stem  # its module's name, also when run as __main__ (`python -m`)

        @functools.wraps(fn)
        def task(cfg: DictConfig) -> None:
            startup, began = process_age(), time.perf_counter()
            try:
                settings.check(cfg)
                if threads := OmegaConf.select(cfg, "impl.threads"):
                    import torch  # only then: the data stages need no torch

                    torch.set_num_threads(int(threads))
                if not own_output:
                    check_writable(Path(cfg.data_dir) / stage_name)
                fn(cfg)
                ranks = ("RANK", "LOCAL_RANK", "NODE_RANK")
                if startup is not None and all(os.environ.get(v, "0") == "0" for v in ranks):
                    run = cfg.name if named_runs else stage_name
                    write_json(Path(cfg.data_dir) / "timing" / stage_name / f"{run}.json", {
                        "startup_seconds": round(startup, 2),
                        "process_seconds": round(startup + time.perf_counter() - began, 2)})
            except UserError as err:
                print(f"error: {err}", file=sys.stderr)
                sys.exit(2)

        return hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)

    return entry


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), or None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time, in ticks
    except (OSError, ValueError, IndexError):
        return None
