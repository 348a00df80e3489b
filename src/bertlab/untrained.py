"""What the training stages write for a run that trains nothing, and where a cell's folders are: the "not run"
record of a run the profile leaves out (`not_run`, set by the configs stage), written by its stage or by the grid
(`bertlab.grid`, with no process of its own), and a cell's "no data" record. Without Lightning, the model or the
tasks' code: the pretraining stage imports it too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from bertlab.files import atomic_dir, write_json
from bertlab.runs import cell_fields, pretrain_dir
from bertlab.study import NOT_RUN, pretrain_name


def encoder_dir(cfg: DictConfig) -> Path:
    """The folder of encoder `finetune.encoder`'s pretraining run at seed `finetune.pretrain_seed`: in `out_dir` (one
    pretrained by hand beside this run) if it is there, else the pipeline's in `data_dir`."""
    ft = cfg.finetune
    own = pretrain_dir(cfg.out_dir, ft.encoder, ft.pretrain_seed)
    return own if own.exists() else pretrain_dir(cfg.data_dir, ft.encoder, ft.pretrain_seed)


def cell_dir(cfg: DictConfig) -> Path:
    """The cell's folder, `<out_dir>/finetune/<encoder>/<name>`: a pipeline encoder's cells are its stage's output."""
    return Path(cfg.out_dir) / "finetune" / cfg.finetune.encoder / cfg.name


def first_record(cfg: DictConfig) -> dict[str, Any]:
    """What a cell's record says before it runs: what the cell is."""
    return {"name": cfg.name, **cell_fields(cfg), "seed": cfg.seed, "headline_metric": cfg.task.metric}


def cell_not_run(cfg: DictConfig) -> dict[str, Any]:
    """Writes the "not run" record of a cell the profile leaves out, with why; the record."""
    return untrained(cell_dir(cfg), first_record(cfg), NOT_RUN, f"not run at {cfg.profile_name}: {cfg.not_run}")


def untrained(out_dir: Path, record: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
    """The record of a cell that trains nothing, `status` "no data" (its task's data could not be had) or "not run"
    (the profile leaves it out), with the reason: the tables say so, and the stage succeeds."""
    record |= {"status": status, "reason": reason, "metrics": {}, "headline": None, "floor": None,
               "train_examples": None, "eval_examples": None, "train_seconds": None, "eval_seconds": None}
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / "metrics.json", record)
    return record


def run_not_run(cfg: DictConfig) -> str:
    """Writes the "not run" record of a pretraining run the profile leaves out; why, in words."""
    reason = f"not run at {cfg.profile_name}: {cfg.not_run}"
    with atomic_dir(pretrain_dir(cfg.out_dir, cfg.name, cfg.seed)) as out:
        write_json(out / "metrics.json", {"name": pretrain_name(cfg.name, cfg.seed), "encoder": cfg.name,
                                          "seed": cfg.seed, "status": NOT_RUN, "reason": reason})
    return reason
