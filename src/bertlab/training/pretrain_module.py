"""The pretraining run in Lightning: the module, its data, and what makes a resumed run the uninterrupted one.

Everything random is a function of (seed, batch tag), the tag being global batch index x world size + rank (in a
1-process run, the batch index; in DDP each rank draws its own): the data order and shard (`SeededBatches`), the MLM
masks (`PretrainingCollator(seed=...)`) and dropout (the global RNG reseeded before each training batch).
Lightning's epochs are checkpoint intervals and a checkpoint is written whole at each interval's end
(`EpochEndCheckpoint`), after that step's logging and validation, so a rerun after a kill repeats nothing and misses
nothing. `RunRecord` keeps in the checkpoint what the earlier processes of a run contributed: the training time and
the training curve. Under DDP only global rank zero writes checkpoints and outputs. A checkpoint resumes under any
speed-only setting: compiled or not, on other devices x nodes at the same global batch.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader

from bertlab.data.instances import InstanceDataset, Instances
from bertlab.data.masking import PretrainingCollator, derive_seed
from bertlab.data.sampler import SeededBatches, TaggedDataset
from bertlab.data.vocab import IGNORE_INDEX
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.training.trainer import fused_adamw, warmup_then_decay

DROPOUT_STREAM = 1  # seeds dropout as (seed, DROPOUT_STREAM, batch tag): apart from the masks' (seed, batch tag)


class PretrainModule(pl.LightningModule):
    """BertForPretraining under one objective, with AdamW, linear warmup and linear decay.

    Validation scores every held-out instance (`heldout_losses`); after an epoch `heldout` holds the per-instance
    NLL sums and scored-position counts, and `val/mlm_loss`, `val/ppl` are logged from them.
    """

    def __init__(self, model: dict[str, Any], objective: dict[str, Any], optim: dict[str, Any], seed: int) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = BertForPretraining(BertConfig(**model), nsp=objective["nsp"])
        if not objective["nsp"]:  # only NSP reads the pooler: frozen, so DDP finds no unused parameter (exported
            self.model.encoder.pooler.requires_grad_(False)  # as initialised, as it was before)
        self.causal = objective["causal"]
        self.seed = seed
        self.heldout: tuple[np.ndarray, np.ndarray] | None = None
        self._heldout_parts: list[tuple[torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch: dict[str, Any], _: int) -> torch.Tensor:
        torch.manual_seed(derive_seed(self.seed, DROPOUT_STREAM, batch.pop("batch_index")))
        out = self.model(**batch, causal=self.causal)
        logs = {"train/loss": out.loss, "train/mlm_loss": out.mlm_loss, "train/mlm_acc": out.mlm_accuracy}
        if out.nsp_loss is not None:
            logs |= {"train/nsp_loss": out.nsp_loss, "train/nsp_acc": out.nsp_accuracy}
        self.log_dict(logs, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return out.loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self._heldout_parts.append(tuple(t.cpu() for t in heldout_losses(self.model, batch, self.causal)))

    def on_validation_epoch_end(self) -> None:
        loss_sum, count = (torch.cat(part).numpy() for part in zip(*self._heldout_parts))
        self._heldout_parts.clear()
        self.heldout = (loss_sum, count)
        loss = float(loss_sum.sum() / max(count.sum(), 1))
        self.log_dict({"val/mlm_loss": loss, "val/ppl": float(np.exp(loss))}, prog_bar=True)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A checkpoint of a `torch.compile`d model (keys with `_orig_mod.`) loads into a plain one, and vice versa:
        compiling in place (`nn.Module.compile`) keeps the plain keys."""
        checkpoint["state_dict"] = plain_state_dict(checkpoint["state_dict"])

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.hparams.optim
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [  # no weight decay on biases and LayerNorm (the 1-d parameters)
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": o["weight_decay"]},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                fused=fused_adamw(self))
        warmup = max(1, min(o["warmup_steps"], o["max_steps"] - 1))
        return {"optimizer": opt, "lr_scheduler": warmup_then_decay(opt, warmup, o["max_steps"])}


def plain_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with torch.compile's wrapper (`_orig_mod.`) removed from its keys."""
    return {key.replace("_orig_mod.", ""): value for key, value in state.items()}


@torch.no_grad()
def heldout_losses(model: BertForPretraining, batch: dict[str, torch.Tensor], causal: bool,
                   chunk: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of `batch`: the summed NLL (nats, float64) of its labelled positions and how many there are. The
    vocabulary logits are formed only there, `chunk` positions at a time (LTR labels every position)."""
    hidden = model.encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], causal)[0]
    labels = batch["mlm_labels"]
    rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
    targets = labels[rows, cols]
    nll = [F.cross_entropy(model.mlm_logits(h).float(), t, reduction="none")
           for h, t in zip(hidden[rows, cols].split(chunk), targets.split(chunk))]
    loss_sum = torch.zeros(len(labels), dtype=torch.float64, device=labels.device)
    if nll:
        loss_sum.index_add_(0, rows, torch.cat(nll).double())
    return loss_sum, torch.bincount(rows, minlength=len(labels))


class PretrainData(pl.LightningDataModule):
    """Training batches of `batch_size` per device from `SeededBatches` (Lightning's epoch = `checkpoint_every`
    optimizer steps, from the trainer's global step, sharded by its rank) masked per batch tag; the held-out instances
    in order with their fixed masks (at `heldout_mlm_probability`; None: the training rate), `eval_batch_size` at a
    time (every rank scores all of them, so rank zero's perplexity counts each instance once, and its batches are the
    same on any number of devices)."""

    def __init__(self, train: Instances, heldout: Instances, collate: dict[str, Any], *, batch_size: int, seed: int,
                 checkpoint_every: int, heldout_mask_seed: int, eval_batch_size: int, num_workers: int,
                 pin_memory: bool = False, heldout_mlm_probability: float | None = None) -> None:
        super().__init__()
        self.train, self.heldout, self.collate = train, heldout, collate
        self.batch_size, self.seed, self.checkpoint_every = batch_size, seed, checkpoint_every
        self.heldout_mask_seed, self.eval_batch_size = heldout_mask_seed, eval_batch_size
        self.heldout_collate = collate if heldout_mlm_probability is None else {
            **collate, "mlm_probability": heldout_mlm_probability}
        self.loader = {"num_workers": num_workers, "pin_memory": pin_memory}

    def train_dataloader(self) -> DataLoader:
        trainer, acc = self.trainer, self.trainer.accumulate_grad_batches
        sampler = SeededBatches(len(self.train), self.batch_size, self.seed, self.checkpoint_every * acc,
                                lambda: trainer.global_step * acc, trainer.global_rank, trainer.world_size, acc)
        return DataLoader(TaggedDataset(InstanceDataset(self.train)), sampler=sampler, batch_size=None,
                          collate_fn=PretrainingCollator(**self.collate, seed=self.seed), **self.loader)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(InstanceDataset(self.heldout), batch_size=self.eval_batch_size,
                          collate_fn=PretrainingCollator(**self.heldout_collate,
                                                         fixed_mask_seed=self.heldout_mask_seed),
                          pin_memory=self.loader["pin_memory"])


class EpochEndCheckpoint(pl.Callback):
    """Writes `path` at the end of each epoch (= checkpoint interval), after that step's logging and validation, and
    whole: to a temporary file renamed over the old one, so a kill mid-write keeps the previous checkpoint."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.global_step >= trainer.max_steps:  # finished: nothing left to resume
            return
        partial = self.path.with_name(self.path.name + ".partial")
        trainer.save_checkpoint(partial)
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
