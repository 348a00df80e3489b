"""The pretraining data as a `LightningDataModule`: seeded, resumable training batches and the held-out set with its
fixed masks (the design: `bertlab.training.pretrain_module`)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from bertlab.data.instances import InstanceDataset, Instances
from bertlab.data.masking import PretrainingCollator
from bertlab.data.sampler import SeededBatches, TaggedDataset


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
