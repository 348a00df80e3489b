"""The pretraining run in Lightning: the module (its data: `pretrain_datamodule`; its callbacks: `callbacks`), and
what makes a resumed run the uninterrupted one.

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

from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F

from bertlab.data.masking import derive_seed, max_labels
from bertlab.data.vocab import IGNORE_INDEX
from bertlab.modeling.model import BertConfig, BertForPretraining
from bertlab.training.trainer import adamw, clip_gradients, decay_groups

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
        self.fixed_shapes = False  # no host sync in a step (the stage sets it when compiled or on a GPU)
        self.seed = seed
        self.heldout: tuple[np.ndarray, np.ndarray] | None = None
        self._heldout_parts: list[tuple[torch.Tensor, torch.Tensor]] = []

    def model_inputs(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments for a training batch (its tensors, `padded`), with `scored_per_row` where the step
        must not sync with the host (`fixed_shapes`)."""
        o = self.hparams.objective
        scored = max_labels(batch["mlm_labels"].shape[1], o["mlm_probability"], o["whole_word_masking"], o["causal"])
        return {**batch, "causal": self.causal, "scored_per_row": scored if self.fixed_shapes else None}

    def training_step(self, batch: dict[str, Any], _: int) -> torch.Tensor:
        torch.manual_seed(derive_seed(self.seed, DROPOUT_STREAM, batch.pop("batch_index")))
        batch.pop("tokens", None)  # counted before the batch reached the device (`PretrainData`)
        out = self.model(**self.model_inputs(batch))
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
        groups = decay_groups((p for p in self.parameters() if p.requires_grad), o["weight_decay"])
        warmup = max(1, min(o["warmup_steps"], o["max_steps"] - 1))
        return adamw(self, groups, o["lr"], o["betas"], o["eps"], warmup, o["max_steps"])

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        clip_gradients(optimizer, gradient_clip_val)  # by norm, also for a fused AdamW under bf16


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
