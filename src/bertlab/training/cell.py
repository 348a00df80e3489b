"""One fine-tuning cell's work, once the stage (`bertlab.finetune`) has decided it must be done: fine-tune the encoder
on the task (or fit a linear probe to its frozen features) and score the dev set once, writing the cell's folder.
Its settings are read once, at the top, into a `Recipe` (`bertlab.training.recipe`): each piece takes its own part.

Apart from the stage so that a cell that trains nothing (finished already, left out by its profile, or without data)
starts in a second and a half, without Lightning and the model.
"""

from __future__ import annotations

import functools
import logging
import math
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig
from tokenizers import Tokenizer

from bertlab.data.tasks import Task
from bertlab.evaluate import items_and_floor
from bertlab.files import atomic_dir, finite, read_tokenizer, remove_tree, require, write_json
from bertlab.kinds import KINDS
from bertlab.kinds.base import Lengths
from bertlab.modeling.export import load_encoder
from bertlab.runs import run_files
from bertlab.training import probe
from bertlab.training.finetune_module import FinetuneModule
from bertlab.training.recipe import Recipe
from bertlab.training.task_datamodule import TaskDataModule
from bertlab.training.trainer import make_loggers, make_trainer, on_cuda

log = logging.getLogger(__name__)
Done = tuple[dict[str, Any], FinetuneModule | None, dict[str, Any]]  # the record, the trained module, the items


def task_data(recipe: Recipe, task: Task, tokenizer: Tokenizer, positions: int) -> TaskDataModule:
    """The task's splits, encoded within the encoder's `positions`."""
    wanted = recipe.lengths
    lengths = Lengths.capped(wanted.max_seq_length, wanted.doc_stride, wanted.max_query_length, positions)
    data = TaskDataModule(task, recipe.tasks_dir / task.name, tokenizer, lengths, recipe.data)
    data.setup("fit")
    return data


def scored(task: Task, data: TaskDataModule, objective: str | None, causal: bool,
           results: dict[str, dict[str, float | None]], floor: float | None) -> dict[str, Any]:
    """What the record of a scored cell says, however it trained: its metrics per split, headline, floor, examples."""
    return {"status": "ok", "objective": objective, "causal": causal, "metrics": results,
            "headline": results[task.eval_splits[0]].get(task.metric), "floor": {task.metric: floor},
            "train_examples": data.train_examples, "eval_examples": sum(data.eval_examples.values()),
            "eval_examples_per_split": data.eval_examples}


def train_and_score(cfg: DictConfig, task: Task, encoder_dir: Path, record: dict[str, Any],
                    out_dir: Path) -> Done:
    """Fine-tune the encoder on the task, score the dev set once, write metrics.json, items.json, the curve."""
    recipe = Recipe.of(cfg, task)  # what each piece below takes: none reads `cfg`
    work_dir = recipe.work_dir
    if rank_zero_only.rank == 0:  # DDP re-runs this script in every rank: only the first one cleans up
        remove_tree(work_dir, work_dir.parent)
    tokenizer = read_tokenizer(require(recipe.tokenizer_file, "tokenizer"))
    pl.seed_everything(recipe.seed, workers=True, verbose=False)
    encoder, objective, causal = load_encoder(encoder_dir, recipe.dropout, tokenizer.get_vocab_size(),
                                              recipe.tokenizer_file)
    data = task_data(recipe, task, tokenizer, encoder.config.max_position_embeddings)
    log.debug("%s on %s (%s, causal=%s): %d training examples (%d rows), eval %s", recipe.name, task.name,
              objective, causal, data.train_examples, len(data.train_rows), data.eval_examples)
    module = FinetuneModule(encoder, task, recipe.module, causal=causal)
    if recipe.compile:
        module.encoder.compile(dynamic=True)  # in place: the state dict keeps its keys
    module.evaluators = data.evaluators

    batch = recipe.data.batch_size
    steps_per_epoch = max(1, math.ceil(len(data.train_rows) / batch))
    # finetune.batch_size is the global batch: each process loads its share (Lightning's distributed sampler)
    trainer, data.batch_size = make_trainer(
        recipe.devices, make_loggers(recipe.logs.with_encoder(encoder_dir), "finetune", work_dir), work_dir, ("finetune.batch_size", batch),
        max_epochs=recipe.epochs, gradient_clip_val=recipe.grad_clip, log_every_n_steps=min(10, steps_per_epoch))
    data.pin_memory = on_cuda(trainer)
    train, evals = data.train_dataloader(), data.val_dataloader()
    start = time.perf_counter()
    with warnings.catch_warnings():  # evaluation runs once, after training, by `validate`
        warnings.filterwarnings("ignore", message=".*no `val_dataloader`.*")
        warnings.filterwarnings("ignore", message=".*module\\(s\\) in eval mode.*")  # a frozen encoder, on purpose
        trainer.fit(module, train_dataloaders=train)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    trainer.validate(module, dataloaders=evals, verbose=False)
    eval_seconds = time.perf_counter() - start

    first, lengths = task.eval_splits[0], data.lengths
    items, floor = items_and_floor(task, data.evaluators[0], module.evaluations[first])
    record |= {
        **scored(task, data, objective, causal, module.results, floor),
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
            write_json(tmp / "items.json", items)
            record["files"] = run_files(tmp)
            write_json(tmp / "metrics.json", record)
        remove_tree(work_dir, work_dir.parent)
    log.info("%s: %s = %s (%s; floor %s) after %d updates on %d training examples, in %.1f s + %.1f s eval",
             recipe.name, task.metric, record["headline"], first, floor, trainer.global_step, data.train_examples,
             train_seconds, eval_seconds)
    return record, module, items


def probe_and_score(cfg: DictConfig, task: Task, encoder_dir: Path, record: dict[str, Any],
                    out_dir: Path) -> Done:
    """A linear probe (`bertlab.training.probe`): the frozen encoder's features of the training and dev examples,
    a logistic regression fitted to convergence on the training ones, the dev set scored once; writes metrics.json,
    items.json and the cross-validation curve (metrics.csv: the mean held-out log-loss per C)."""
    recipe = Recipe.of(cfg, task)
    fit = recipe.probe
    tokenizer = read_tokenizer(require(recipe.tokenizer_file, "tokenizer"))
    encoder, objective, causal = load_encoder(encoder_dir, 0.0, tokenizer.get_vocab_size(), recipe.tokenizer_file)
    data = task_data(recipe, task, tokenizer, encoder.config.max_position_embeddings)
    device = torch.device("cuda" if recipe.devices.accelerator != "cpu" and torch.cuda.is_available() else "cpu")
    extract = functools.partial(probe.features, encoder, kind=task.kind, strategy=recipe.module.features,
                                causal=causal, pad_id=data.pad_id, batch_size=int(data.eval_batch_size), device=device)
    start = time.perf_counter()
    train = extract(data.train_rows)
    fitted = probe.fit(train, cs=fit.cs, folds=fit.folds, seed=recipe.seed, tol=fit.tol, cv_tol=fit.cv_tol,
                       max_iter=fit.max_iter, grouped=KINDS[task.kind].probe == "token")
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    evaluations = {}
    for rows, evaluator in zip(data.eval_rows, data.evaluators, strict=True):
        found = probe.predictions(fitted, extract(rows), rows, task.kind, getattr(evaluator, "outside", 0))
        evaluations[evaluator.split] = evaluator.evaluate(found)
    eval_seconds = time.perf_counter() - start
    first = task.eval_splits[0]
    items, floor = items_and_floor(task, data.evaluators[0], evaluations[first])
    record |= {
        **scored(task, data, objective, causal, {split: finite(e.metrics) for split, e in evaluations.items()}, floor),
        "train_seconds": round(train_seconds, 1), "eval_seconds": round(eval_seconds, 1),
        "steps": None,  # no optimizer updates: the solver's own iterations are in `probe`
        "probe": fitted.record(fit.folds, fit.tol, fit.cv_tol, fit.max_iter, len(train.x)),
        "lengths": {"max_seq_length": data.lengths.max_seq_length},
    }
    if rank_zero_only.rank == 0:
        with atomic_dir(out_dir) as tmp:
            write_json(tmp / "items.json", items)
            fitted.write_curve(tmp / "metrics.csv")
            record["files"] = run_files(tmp)
            write_json(tmp / "metrics.json", record)
    log.info("%s: %s = %s (%s; floor %s) by a probe at C=%g (%d-fold CV of %d training examples; %d iterations, %s)"
             ", in %.1f s + %.1f s eval", recipe.name, task.metric, record["headline"], first, floor, fitted.c,
             fit.folds, data.train_examples, fitted.iterations,
             "converged" if fitted.converged else "NOT converged", train_seconds, eval_seconds)
    return record, None, items
