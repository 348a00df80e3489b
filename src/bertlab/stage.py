"""A stage's Hydra entry point: settings checked at the door, one-line errors, the process's time for the ledger."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from bertlab import settings
from bertlab.errors import SourceError, UserError
from bertlab.files import check_writable, write_json

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
log = logging.getLogger(__name__)

# `${shrink:768,4}` = 192: how profiles shrink the paper's model shapes (never below 1).
OmegaConf.register_new_resolver("shrink", lambda size, by: max(1, int(size) // int(by)), replace=True)


def main(fn: Callable[[DictConfig], None]) -> Callable[[], None]:
    """A stage's Hydra entry point: `python -m bertlab.<stage> key=value ...` (and `-m` for multirun).

    Settings are checked first (`bertlab.settings.check`), and the stage's output directory
    (`<data_dir>/<stage>`) must be writable, before any compute is spent. Known failures (UserError,
    SourceError) print one line to stderr and exit with status 2. A run that completes leaves its process's
    time, start-up included, in `<data_dir>/timing/<stage>/<run>.json` for the report's budget ledger (global
    rank zero only; `<run>` is the run's name for the training stages, else the stage's).
    """
    stage_name = Path(fn.__code__.co_filename).stem  # its module's name, also when run as __main__ (`python -m`)

    @functools.wraps(fn)
    def task(cfg: DictConfig) -> None:
        startup, began = process_age(), time.perf_counter()
        try:
            settings.check(cfg)
            if stage_name != "ablations":  # which writes into ablations.report_dir, checked there
                check_writable(Path(cfg.data_dir) / stage_name)
            fn(cfg)
            if startup is not None and all(os.environ.get(v, "0") == "0" for v in ("RANK", "LOCAL_RANK", "NODE_RANK")):
                run = cfg.name if stage_name in ("pretrain", "finetune") else stage_name
                write_json(Path(cfg.data_dir) / "timing" / stage_name / f"{run}.json", {
                    "startup_seconds": round(startup, 2),
                    "process_seconds": round(startup + time.perf_counter() - began, 2)})
        except (UserError, SourceError) as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)


def process_age() -> float | None:
    """Seconds since this process started (Linux's /proc), or None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: start time, in ticks
    except (OSError, ValueError, IndexError):
        return None
