"""The pretraining run's callbacks: whole checkpoints at each interval's end, the record a resumed run carries over
from its earlier processes, and the training loop's throughput (the design: `bertlab.training.pretrain_module`)."""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import CSVLogger


class EpochEndCheckpoint(pl.Callback):
    """Writes `path` at the end of each epoch (= checkpoint interval), after that step's logging and validation, and
    whole: to a temporary file renamed over the old one, so a kill mid-write keeps the previous checkpoint.

    Not Lightning's `ModelCheckpoint(every_n_train_steps=..., save_last=True)`: that one saves at a training
    batch's end, before the step's validation, so a resumed run would validate that step again; an epoch boundary is
    also where the pretraining data order restarts (`PretrainData`), which makes a resume exact."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.global_step >= trainer.max_steps:  # finished: nothing left to resume
            return
        partial = self.path.with_name(self.path.name + ".partial")
        trainer.save_checkpoint(partial, weights_only=False)  # the loops' and callbacks' state: resume needs it
        if trainer.is_global_zero:
            os.replace(partial, self.path)


class RunRecord(pl.Callback):
    """What a run's checkpoints carry across processes: the key of the settings, code and inputs it belongs to, its
    training time and its training curve so far (the curve this process logs is its `csv` logger's file)."""

    def __init__(self, key: str, csv_logger: CSVLogger) -> None:
        self.key, self.csv = key, csv_logger
        self.earlier_seconds, self.earlier_rows = 0.0, []
        self.started: float | None = None

    @classmethod
    def key_of(cls, checkpoint: dict[str, Any]) -> str | None:
        """The run key a checkpoint was saved with (None if it has none)."""
        return checkpoint.get("callbacks", {}).get(cls.__qualname__, {}).get("key")

    def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.started = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        # Batches so far, in this process's micro-batches: a run resumed with another gradient accumulation (other
        # devices x nodes at the same global batch) validates at the same optimizer steps (`val_check_interval`).
        total = trainer.fit_loop.epoch_loop.batch_progress.total
        total.ready = total.started = total.processed = total.completed = (
            trainer.global_step * trainer.accumulate_grad_batches)

    def on_train_batch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        # The loggers' step: Lightning adds one to it when it restarts from an epoch-end checkpoint (2.6), which
        # would shift every row a resumed run logs; at a batch's start it is the global step.
        trainer.fit_loop.epoch_loop._batches_that_stepped = trainer.global_step

    def train_seconds(self) -> float:
        return self.earlier_seconds + (time.perf_counter() - self.started if self.started is not None else 0.0)

    def rows(self) -> list[dict[str, str]]:
        """Every row logged so far in this run, its earlier processes' included."""
        self.csv.save()
        path = Path(self.csv.log_dir) / "metrics.csv"
        if not path.exists():
            return list(self.earlier_rows)
        with path.open(newline="") as f:
            return [*self.earlier_rows, *csv.DictReader(f)]

    def write_curve(self, path: Path) -> None:
        rows = self.rows()
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=sorted(set().union(*rows)) if rows else ["step"])
            writer.writeheader()
            writer.writerows(rows)

    def state_dict(self) -> dict[str, Any]:
        return {"key": self.key, "train_seconds": self.train_seconds(), "rows": self.rows()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.earlier_seconds, self.earlier_rows = state["train_seconds"], state["rows"]


class Throughput(pl.Callback):
    """The training loop's rate, without a host sync (Lightning's `ThroughputMonitor` waits for the GPU every step):
    the non-padding tokens of each training batch (`tokens`, counted on the host by `PretrainData`), their matmul
    FLOPs (`flops_per_token(length)` each) and the loop's seconds, from one training batch's end to the next's (the
    wait for data included; validation, checkpoints and each process's first step, where compilation happens, not).
    A GPU's queued work is timed where the host waits for it: at most one step is counted late. Carried across a
    resume; the counts are this process's (rank zero's: `summary` scales them by the world size)."""

    def __init__(self, flops_per_token: Callable[[int], float]) -> None:
        self.flops_per_token = flops_per_token
        self.tokens, self.flops, self.seconds, self.first_step_seconds = 0, 0.0, 0.0, 0.0
        self.mark = 0.0  # when the running batch's time began
        self.first = True  # this process's first step is not counted
        self.batch = (0, 0.0)  # the running batch's tokens and FLOPs

    def on_train_epoch_start(self, *_: Any) -> None:
        self.mark = time.perf_counter()

    def on_validation_end(self, *_: Any) -> None:
        self.mark = time.perf_counter()

    def on_train_batch_start(self, trainer: pl.Trainer, module: pl.LightningModule, batch: dict[str, Any],
                             *_: Any) -> None:
        tokens = batch["tokens"]
        self.batch = (tokens, tokens * self.flops_per_token(batch["input_ids"].shape[1]))

    def on_train_batch_end(self, *_: Any) -> None:
        now = time.perf_counter()
        if self.first:
            self.first_step_seconds, self.first = now - self.mark, False
        else:
            self.tokens, self.flops = self.tokens + self.batch[0], self.flops + self.batch[1]
            self.seconds += now - self.mark
        self.mark = now

    def summary(self, world_size: int, peak_tflops: float | None) -> dict[str, Any]:
        """metrics.json's `throughput`: the loop's non-padding tokens and seconds, tokens per second and model
        TFLOP/s of all processes, and MFU against `peak_tflops` (a device's dense peak; None: not known). Rates are
        None where no step was timed."""
        timed = self.seconds > 0
        tflops = self.flops / self.seconds / 1e12 if timed else None
        return {"tokens": self.tokens * world_size, "loop_seconds": round(self.seconds, 2),
                "first_step_seconds": round(self.first_step_seconds, 2),
                "tokens_per_second": round(self.tokens * world_size / self.seconds) if timed else None,
                "tflops": round(tflops * world_size, 3) if timed else None, "peak_tflops": peak_tflops,
                "mfu": round(tflops / peak_tflops, 4) if timed and peak_tflops else None}

    def state_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "flops": self.flops, "seconds": self.seconds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tokens, self.flops, self.seconds = state["tokens"], state["flops"], state["seconds"]
