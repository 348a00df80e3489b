"""Stage `finetune`: a task head on a pretrained encoder, trained on the task and scored on its dev set(s).

Reads the encoder's pretraining run at `finetune.pretrain_seed`, `data/pretrain/<encoder>/<encoder>-<pretrain_seed>/`
(or `<out_dir>/pretrain/...` where one was pretrained there by hand; its `metrics.json` says whether it was pretrained left-to-right, `causal`),
`data/tokenizer/tokenizer.json` and `data/download/tasks/<task>/`; writes `<out_dir>/finetune/<encoder>/<name>/`
(`data/finetune/` in the pipeline, `data/hand/finetune/` by hand), all or nothing: `metrics.json` (every eval
split's metrics, and the floor's headline metric), `items.json` (the headline split's per-item columns of the model
and of the floor, for paired statistics) and the training curve `metrics.csv`. A task whose data could not be
downloaded gets a `"status": "no data"` record instead, and the stage still succeeds; so does a cell the profile leaves
out (`not_run`, set by the configs stage), with a `"status": "not run"` record. A cell whose run key (code,
settings, the encoder's own key and the bytes of its weights and config, tokenizer and task data) equals a finished
cell's copies its outputs, and one finished under its own name with that key does nothing (`impl.reuse_twins`);
an encoder whose weights or config are not the bytes its pretraining recorded (damaged, replaced, deleted) stops the
stage with one line naming the file.

A linear probe (`finetune.mode=probe`) trains no module: a logistic regression is fitted to convergence on the frozen
encoder's features (`bertlab.training.probe`), and its cell writes the same files (`metrics.csv`: its
cross-validation curve, log-loss per C; `steps` null, the solver's iterations in `probe`).

The pieces, in `bertlab.training`: `cell` (the training and scoring, imported only by a cell that trains: one that
does not starts without Lightning), `task_datamodule` (splits -> batches), `finetune_module` (the LightningModule),
`probe`; `bertlab.kinds` (what each task kind reads, encodes, batches, predicts and is scored by, its floor
included); `bertlab.evaluate` (the items and the floor of a cell).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from bertlab import kinds, owner, stage
from bertlab.data.tasks import Task, missing_data
from bertlab.errors import UserError
from bertlab.files import read_json
from bertlab.modeling.export import CONFIG, PLAIN_WEIGHTS
from bertlab.runs import cell_key, pretrain_dir, reuse
from bertlab.tracking import one_run_per_job
from bertlab.untrained import cell_dir, cell_not_run, encoder_dir, first_record, untrained

if TYPE_CHECKING:
    from bertlab.training.finetune_module import FinetuneModule

log = logging.getLogger(__name__)


@dataclass
class Result:
    record: dict[str, Any]  # what metrics.json holds
    module: FinetuneModule | None = None  # the trained module (None when there was no data)
    items: dict[str, Any] | None = None  # what items.json holds
    finished_before: bool = False  # this very cell was finished already (same run key): nothing was done


def task_of(cfg: DictConfig) -> Task:
    """The task `cfg.task` defines (its choice settings were checked at the door, `bertlab.settings`)."""
    try:
        return Task(**OmegaConf.to_container(cfg.task, resolve=True))
    except (TypeError, ValueError) as err:
        raise UserError(f"task: {err}") from err


def missing_encoder(cfg: DictConfig) -> str:
    """The one line for an encoder not pretrained yet: every folder looked in, and how to pretrain it (by hand; in
    the pipeline only for an encoder of the study, which has a stage `pretrain@<encoder>`)."""
    ft = cfg.finetune
    roots = (cfg.out_dir, cfg.data_dir)  # a run by hand's, then the pipeline's (one where they are the same)
    folders = dict.fromkeys(str(pretrain_dir(root, ft.encoder, ft.pretrain_seed)) for root in roots)
    how = f"`python -m bertlab.pretrain name={ft.encoder} seed={ft.pretrain_seed}` (and its model=..., objective=...)"
    if ft.encoder in (OmegaConf.select(cfg, "ablations.encoders") or {}):
        how += f", or in the pipeline `dvc repro pretrain@{ft.encoder}`"
    return (f"encoder {ft.encoder!r} at pretraining seed {ft.pretrain_seed}: no pretrained model in "
            f"{' nor in '.join(folders)}; pretrain it first: {how}")


def finetune(cfg: DictConfig) -> Result:
    """Run the stage on `cfg` (the composed Hydra config) under the cell's claim (`bertlab.owner`: one writer a
    cell); writes `cell_dir(cfg)` and returns its record."""
    kinds.check(cfg)
    with owner.claim(cfg.out_dir, "finetune", cfg.name, stage.global_rank()):
        if cfg.not_run:  # the profile leaves this cell of the grid out (the configs stage says why)
            record = cell_not_run(cfg)
            print(f"{cfg.name}: {record['reason']}")
            return Result(record, finished_before=True)
        return cell_result(cfg)


def cell_result(cfg: DictConfig) -> Result:
    """The cell's result: no data, finished already (by itself or a twin), or trained and scored now."""
    task = task_of(cfg)
    out_dir = cell_dir(cfg)
    reason = missing_data(Path(cfg.data_dir) / "download" / "tasks" / task.name)
    record = first_record(cfg)
    if reason is not None:
        print(f"{task.name}: no data ({reason})")
        return Result(untrained(out_dir, record, "no data", reason))
    ft, encoder = cfg.finetune, encoder_dir(cfg)
    if not (encoder / CONFIG).exists():
        raise UserError(missing_encoder(cfg))
    key = cell_key(cfg, encoder, (PLAIN_WEIGHTS, CONFIG))
    fields = {k: record[k] for k in ("name", "encoder", "features")}  # what a copied twin's record takes from this
    rank = stage.global_rank()
    if key and cfg.impl.reuse_twins and (twin := reuse(out_dir, key, fields, rank == 0, depth=2)):
        own = twin == out_dir
        if rank > 0:
            return Result(record, finished_before=own)
        return Result(read_json(out_dir / "metrics.json"), items=read_json(out_dir / "items.json"),
                      finished_before=own)
    from bertlab.training import cell  # Lightning and the model: imported by a cell that trains, and only then

    work = cell.probe_and_score if cfg.finetune.mode == "probe" else cell.train_and_score
    with one_run_per_job():
        return Result(*work(cfg, task, encoder, record | {"run_key": key}, out_dir))


@stage.main(named_runs=True, reads=("name", "impl", "logger"))
def run(cfg: DictConfig) -> bool:
    """Fine-tune and score; True when this very cell was finished already and nothing was done."""
    return finetune(cfg).finished_before


if __name__ == "__main__":
    run()
