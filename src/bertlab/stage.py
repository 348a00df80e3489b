"""What every stage shares: its Hydra entry point, one-line errors, all-or-nothing outputs, loggers."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")

# `${shrink:768,4}` = 192: how profiles shrink the paper's model shapes (never below 1).
OmegaConf.register_new_resolver("shrink", lambda size, by: max(1, int(size) // int(by)), replace=True)


class UserError(RuntimeError):
    """Bad input or missing data: reported as one line, exit status 2."""


def main(fn: Callable[[DictConfig], None]) -> Callable[[], None]:
    """A stage's Hydra entry point: `python -m bertlab.<stage> key=value ...` (and `-m` for multirun).

    Known failures (UserError, SourceError) print one line to stderr and exit with status 2.
    """
    from bertlab.data.sources import SourceError

    @functools.wraps(fn)
    def task(cfg: DictConfig) -> None:
        try:
            fn(cfg)
        except (UserError, SourceError) as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    return hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(task)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces `path` only if the block completes: no half-written outputs."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def require(path: str | Path, stage: str) -> Path:
    """`path`, which stage `stage` writes; a UserError naming that stage when it is missing."""
    if not Path(path).exists():
        raise UserError(f"{path} not found: run `dvc repro {stage}` (or `python -m bertlab.{stage}`) first")
    return Path(path)


def write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as indented JSON (creating parent directories)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def apply_impl(impl: DictConfig) -> None:
    """Speed-only process settings."""
    if impl.threads:
        torch.set_num_threads(int(impl.threads))


def progress_bar():
    """Lightning's tqdm bar: unlike the rich one it also reports progress when output is a log, not a terminal."""
    from lightning.pytorch.callbacks import TQDMProgressBar

    return TQDMProgressBar(refresh_rate=10)


def fused_adamw(module: Any) -> bool:
    """Whether a LightningModule may use a fused AdamW (one kernel for all parameters: faster). Not under mixed
    precision, where Lightning cannot clip a fused optimizer's gradients."""
    trainer = getattr(module, "_trainer", None)
    return trainer is None or str(trainer.precision).startswith("32")


def warmup_then_decay(opt: torch.optim.Optimizer, warmup: int, total: int) -> dict[str, Any]:
    """Lightning's scheduler config for BERT's schedule: linear warmup over `warmup` steps, then linear decay to 0
    at step `total` (torch's LinearLR, stepped every optimizer step)."""
    decay = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, total_iters=max(1, total - warmup))
    sched: torch.optim.lr_scheduler.LRScheduler = decay
    if warmup > 0:
        ramp = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [ramp, decay], milestones=[warmup])
    return {"scheduler": sched, "interval": "step"}


def make_loggers(cfg: DictConfig, job_type: str, save_dir: str | Path, tables: list[str]) -> list:
    """Lightning loggers: always a CSVLogger into `save_dir` (the report reads it) plus the chosen one. A W&B run is
    grouped by the first of the ablation `tables` that use it (else by `job_type`) and tagged with all of them."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    loggers: list = [CSVLogger(save_dir=str(save_dir), name="", version="")]
    if cfg.logger.kind == "wandb":
        Path(cfg.logger.save_dir).mkdir(parents=True, exist_ok=True)
        loggers.append(
            WandbLogger(
                project=cfg.logger.project, name=cfg.name, group=tables[0] if tables else job_type,
                job_type=job_type, tags=tables, save_dir=cfg.logger.save_dir, offline=cfg.logger.offline,
                config=OmegaConf.to_container(cfg, resolve=True),
            )
        )
    elif cfg.logger.kind == "csv":
        loggers.append(CSVLogger(save_dir=cfg.logger.save_dir, name=job_type, version=cfg.name))
    return loggers
