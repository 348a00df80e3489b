"""Stage `finetune`: a task head on a pretrained encoder, trained on the task and scored on its dev set(s).

Reads `data/pretrain/<finetune.encoder>/` (the encoder, or `<out_dir>/pretrain/<finetune.encoder>/` where one was
pretrained there by hand; its `metrics.json` `objective` says whether it was pretrained left-to-right),
`data/tokenizer/tokenizer.json` and `data/download/tasks/<task>/`; writes `<out_dir>/finetune/<name>/`
(`data/finetune/` in the pipeline, `data/hand/finetune/` by hand), all or nothing: `metrics.json` (every eval
split's metrics, and the floor's headline metric), `items.json` (the headline split's per-item columns of the model
and of the floor, for paired statistics) and the training curve `metrics.csv`. A task whose data could not be
downloaded gets a `"status": "no data"` record instead, and the stage still succeeds. A cell whose run key (code,
settings, the encoder's own key, tokenizer and task data) equals a finished cell's copies its outputs, and one
finished under its own name with that key does nothing (`impl.reuse_twins`).

The pieces, in `bertlab.training`: `kinds` (what each task kind encodes, predicts and is scored by),
`task_datamodule` (splits -> batches), `finetune_module` (the LightningModule); `bertlab.evaluate` (metrics, items,
floors).
"""

from __future__ import annotations

import logging
import math
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer

from bertlab import stage
from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.evaluate import items_and_floor
from bertlab.files import atomic_dir, read_json, read_tokenizer, remove_tree, require, write_json
from bertlab.modeling.export import CONFIG, load_plain, plain_config
from bertlab.modeling.heads import feature_signature
from bertlab.modeling.model import BertEncoder
from bertlab.runs import RESULT_KEYS, cell_fields, copy_twin, find_twin, run_key, values_at
from bertlab.training.finetune_module import FinetuneModule
from bertlab.training.kinds import KINDS, Lengths
from bertlab.training.task_datamodule import TaskDataModule
from bertlab.training.trainer import fit_global_batch, make_loggers, on_cuda, progress_bar, trainer_devices

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


def missing_data_reason(data_dir: Path, task: str) -> str | None:
    """Why the task has no data (the download stage left a `NO_DATA` note), or None if its data is there."""
    task_dir = require(data_dir / "download" / "tasks" / task, "download")
    note = task_dir / "NO_DATA"
    return note.read_text().strip() if note.exists() else None


def load_tokenizer(data_dir: Path) -> tuple[Tokenizer, Path]:
    path = require(data_dir / "tokenizer" / "tokenizer.json", "tokenizer")
    return read_tokenizer(path), path


def encoder_dir(cfg: DictConfig) -> Path:
    """The folder of pretraining run `finetune.encoder`: in `out_dir` (one pretrained by hand beside this run) if it
    is there, else the pipeline's in `data_dir`."""
    own = Path(cfg.out_dir) / "pretrain" / cfg.finetune.encoder
    return own if own.exists() else Path(cfg.data_dir) / "pretrain" / cfg.finetune.encoder


def load_encoder(
    d: Path, dropout: float, tokenizer: Tokenizer, tokenizer_file: Path,
) -> tuple[BertEncoder, bool, str | None]:
    """The encoder of the pretraining run in `d` with the given dropout, whether it is causal (objective "ltr"),
    and its objective. Its vocabulary must be the tokenizer's: ids beyond it would crash the embedding lookup,
    and a smaller tokenizer would silently map text to the wrong embeddings."""
    if not (d / "model.pt").exists() or not (d / CONFIG).exists():
        raise UserError(f"encoder {d.name!r}: no pretrained model in {d} (run the pretrain stage with name={d.name})")
    vocab, tokens = plain_config(d / CONFIG).vocab_size, tokenizer.get_vocab_size()
    if vocab != tokens:
        raise UserError(f"{tokenizer_file} has {tokens} tokens but {d / CONFIG} has vocab_size {vocab}: "
                        f"the encoder was pretrained with another tokenizer (rerun pretrain with this one)")
    model, _ = load_plain(d, dropout=dropout, attention_dropout=dropout)
    objective = read_json(d / "metrics.json").get("objective") if (d / "metrics.json").exists() else None
    if objective is None:
        log.warning("%s has no metrics.json objective: treating the encoder as bidirectional", d)
    return model.encoder, objective == "ltr", objective


def cell_key(cfg: DictConfig) -> str | None:
    """The run key of a cell: the code, its result settings but the encoder's name, the encoder's own run key (a twin
    encoder, copied from another run, has the same), the tokenizer and the task's data. Frozen features enter as
    what they compute (`feature_signature`), and not at all when fine-tuning. None if the encoder has no key (it was
    not written by this pretrain stage)."""
    ft = cfg.finetune
    metrics = encoder_dir(cfg) / "metrics.json"
    encoder = read_json(metrics).get("run_key") if metrics.exists() else None
    if encoder is None:
        return None
    settings = values_at(cfg, RESULT_KEYS["finetune"])
    settings["finetune"] = {k: v for k, v in settings["finetune"].items() if k != "encoder"}
    num_layers = plain_config(metrics.parent / CONFIG).num_layers
    settings["finetune"]["features"] = (feature_signature(ft.features, num_layers)
                                        if ft.mode != "finetune" else None)
    data_dir = Path(cfg.data_dir)
    inputs = [data_dir / "tokenizer" / "tokenizer.json", data_dir / "download" / "tasks" / cfg.task.name]
    return run_key({"settings": settings, "encoder": encoder}, inputs)


def task_data(cfg: DictConfig, task: Task, tokenizer: Tokenizer, positions: int) -> TaskDataModule:
    """The task's splits, encoded within the encoder's `positions` (SQuAD with its own lengths and sizes)."""
    ft, span = cfg.finetune, KINDS[task.kind].windows
    lengths = Lengths.capped(ft.squad_max_seq_length if span else ft.max_seq_length, ft.doc_stride,
                             ft.max_query_length, positions)
    data = TaskDataModule(
        task, Path(cfg.data_dir) / "download" / "tasks" / task.name, tokenizer, lengths, batch_size=ft.batch_size,
        eval_batch_size=cfg.impl.eval_batch_size, num_workers=int(cfg.impl.num_workers),
        subsample_seed=ft.subsample_seed,
        max_train_examples=ft.squad_max_train_examples if span else ft.max_train_examples,
        max_eval_examples=ft.squad_max_eval_examples if span else ft.max_eval_examples,
        n_best_size=ft.n_best_size, max_answer_length=ft.max_answer_length,
    )
    data.setup("fit")
    return data


def build_module(cfg: DictConfig, task: Task, encoder: BertEncoder, causal: bool) -> FinetuneModule:
    ft = cfg.finetune
    head_lr = ft.feature_head_lr if ft.mode != "finetune" and ft.feature_head_lr is not None else ft.head_lr
    module = FinetuneModule(
        encoder, task, mode=ft.mode, features=ft.features, bilstm=ft.bilstm, bilstm_hidden=ft.bilstm_hidden,
        bilstm_layers=ft.bilstm_layers, head_dropout=ft.head_dropout, causal=causal, pooling=ft.pooling, lr=ft.lr,
        head_lr=head_lr, warmup_ratio=ft.warmup_ratio, weight_decay=ft.weight_decay, betas=tuple(ft.betas), eps=ft.eps,
    )
    if cfg.impl.compile:
        module.encoder.compile(dynamic=True)  # in place: the state dict keeps its keys
    return module


def make_trainer(cfg: DictConfig, work_dir: Path, steps_per_epoch: int) -> pl.Trainer:
    """Lightning's trainer with the loggers writing into `work_dir` (the run's files until it completes)."""
    loggers = make_loggers(cfg, "finetune", work_dir)
    return pl.Trainer(
        max_epochs=cfg.finetune.epochs, **trainer_devices(cfg.impl), gradient_clip_val=cfg.finetune.grad_clip,
        logger=loggers, log_every_n_steps=min(10, steps_per_epoch),
        callbacks=[LearningRateMonitor("step"), progress_bar()], enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=work_dir, num_sanity_val_steps=0,
    )


def finetune(cfg: DictConfig) -> Result:
    """Run the stage on `cfg` (the composed Hydra config); writes `data/finetune/<name>/` and returns its record."""
    task = task_of(cfg)
    data_dir = Path(cfg.data_dir)
    out_dir = Path(cfg.out_dir) / "finetune" / cfg.name
    record: dict[str, Any] = {"name": cfg.name, **cell_fields(cfg), "seed": cfg.seed, "headline_metric": task.metric}
    reason = missing_data_reason(data_dir, task.name)
    if reason is not None:
        return no_data(out_dir, record, reason)
    key = cell_key(cfg)
    twin = find_twin(out_dir.parent, cfg.name, key) if key and cfg.impl.reuse_twins else None
    if twin is not None:
        own = twin.name == cfg.name
        if own:
            log.info("%s is finished with this code, these settings and inputs: nothing to do", twin)
        elif rank_zero_only.rank == 0:
            copy_twin(twin, out_dir, {k: record[k] for k in ("name", "encoder", "features")})
        if rank_zero_only.rank > 0:
            return Result(record, finished_before=own)
        return Result(read_json(out_dir / "metrics.json"), items=read_json(out_dir / "items.json"),
                      finished_before=own)
    return train_and_score(cfg, task, record | {"run_key": key}, out_dir)


def no_data(out_dir: Path, record: dict[str, Any], reason: str) -> Result:
    """The record of a cell whose task has no data: the tables say so, and the stage succeeds."""
    print(f"{record['task']}: no data ({reason})")
    record |= {"status": "no data", "reason": reason, "metrics": {}, "headline": None, "floor": None,
               "train_examples": None, "eval_examples": None, "train_seconds": None, "eval_seconds": None}
    with atomic_dir(out_dir) as tmp:
        write_json(tmp / "metrics.json", record)
    return Result(record)


def train_and_score(cfg: DictConfig, task: Task, record: dict[str, Any], out_dir: Path) -> Result:
    """Fine-tune the encoder on the task, score the dev set once, write metrics.json, items.json, the curve."""
    ft, data_dir = cfg.finetune, Path(cfg.data_dir)
    tokenizer, tokenizer_file = load_tokenizer(data_dir)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    encoder, causal, objective = load_encoder(encoder_dir(cfg), ft.dropout, tokenizer, tokenizer_file)
    data = task_data(cfg, task, tokenizer, encoder.config.max_position_embeddings)
    log.debug("%s on %s (%s, causal=%s): %d training examples (%d rows), eval %s", cfg.name, task.name, objective,
             causal, data.train_examples, len(data.train_rows), data.eval_examples)
    module = build_module(cfg, task, encoder, causal)
    module.evaluators = data.evaluators

    work_root = Path(cfg.out_dir) / "checkpoints" / "finetune"
    work_dir = work_root / cfg.name
    if rank_zero_only.rank == 0:  # DDP re-runs this script in every rank: only the first one cleans up
        remove_tree(work_dir, work_root)
    trainer = make_trainer(cfg, work_dir, max(1, math.ceil(len(data.train_rows) / ft.batch_size)))
    # finetune.batch_size is the global batch: each process loads its share (Lightning's distributed sampler)
    data.batch_size = fit_global_batch(trainer, ft.batch_size, cfg.impl.max_device_batch, "finetune.batch_size")
    data.pin_memory = on_cuda(trainer)
    start = time.perf_counter()
    with warnings.catch_warnings():  # evaluation runs once, after training, by `validate`
        warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
        warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")  # a frozen encoder, on purpose
        trainer.fit(module, train_dataloaders=data.train_dataloader())
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    trainer.validate(module, datamodule=data, verbose=False)
    eval_seconds = time.perf_counter() - start

    first, lengths = task.eval_splits[0], data.lengths
    items, floor = items_and_floor(task, data.evaluators[0], module.evaluations[first])
    record |= {
        "status": "ok", "objective": objective, "causal": causal, "metrics": module.results,
        "headline": module.results[first].get(task.metric), "floor": {task.metric: floor},
        "train_examples": data.train_examples, "eval_examples": sum(data.eval_examples.values()),
        "eval_examples_per_split": data.eval_examples,
        "train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
        "steps": trainer.global_step,
        "lengths": {"max_seq_length": lengths.max_seq_length, **(
            {"doc_stride": lengths.doc_stride, "max_query_length": lengths.max_query_length}
            if KINDS[task.kind].windows else {})},
    }
    if trainer.is_global_zero:
        with atomic_dir(out_dir) as tmp:
            if (work_dir / "metrics.csv").exists():
                shutil.copy(work_dir / "metrics.csv", tmp / "metrics.csv")
            write_json(tmp / "metrics.json", record)
            write_json(tmp / "items.json", items)
        remove_tree(work_dir, work_root)
    log.info("%s: %s = %s (%s; floor %s) after %d updates on %d training examples, in %.1f s + %.1f s eval",
             cfg.name, task.metric, record["headline"], first, floor, trainer.global_step, data.train_examples,
             train_seconds, eval_seconds)
    return Result(record, module, items)


@stage.main(named_runs=True)
def run(cfg: DictConfig) -> bool:
    """Fine-tune and score; True when this very cell was finished already and nothing was done."""
    return finetune(cfg).finished_before


if __name__ == "__main__":
    run()
