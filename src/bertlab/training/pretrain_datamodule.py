"""The pretraining data as a `LightningDataModule`: seeded, resumable training batches and the held-out set with its
fixed masks (the design: `bertlab.training.pretrain_module`)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from torch.utils.data import ConcatDataset, DataLoader

from bertlab.data.instances import InstanceDataset, Instances
from bertlab.data.masking import PretrainingCollator
from bertlab.data.sampler import PhasedBatches, SeededBatches, TaggedDataset
from bertlab.training.run_settings import loader_processes


class PretrainData(pl.LightningDataModule):
    """Training batches of `batch_size` per device from `SeededBatches` (Lightning's epoch = `checkpoint_every`
    optimizer steps, from the trainer's global step, sharded by its rank) masked per batch tag; the held-out instances
    in order with their fixed masks (at `heldout_mlm_probability`; None: the training rate), every scored position
    shown as `[MASK]` (so a model earns nothing for copying a visible answer), `eval_batch_size` at a time (every rank
    scores all of them, so rank zero's perplexity counts each instance once, and its batches are the same on any
    number of devices). With `short` instances and `short_steps`, the first `short_steps` optimizer steps
    train on them, `batch_size` x (their length ratio) per batch: the same tokens per step."""

    def __init__(self, train: Instances, heldout: Instances, collate: dict[str, Any], *, batch_size: int, seed: int,
                 checkpoint_every: int, heldout_mask_seed: int, eval_batch_size: int, num_workers: int,
                 pin_memory: bool = False, heldout_mlm_probability: float | None = None,
                 short: Instances | None = None, short_steps: int = 0) -> None:
        super().__init__()
        self.train, self.heldout, self.collate = train, heldout, collate
        self.short, self.short_steps = (short, short_steps) if short is not None and short_steps > 0 else (None, 0)
        self.batch_size, self.seed, self.checkpoint_every = batch_size, seed, checkpoint_every
        self.heldout_mask_seed, self.eval_batch_size = heldout_mask_seed, eval_batch_size
        self.heldout_collate = {**collate, "mask_every_target": True} | (
            {} if heldout_mlm_probability is None else {"mlm_probability": heldout_mlm_probability})
        self.loader = {**loader_processes(num_workers), "pin_memory": pin_memory}

    def train_dataloader(self) -> DataLoader:
        trainer, acc = self.trainer, self.trainer.accumulate_grad_batches

        def stream(instances: Instances, batch_size: int) -> SeededBatches:
            return SeededBatches(len(instances), batch_size, self.seed, self.checkpoint_every * acc,
                                 lambda: trainer.global_step * acc, trainer.global_rank, trainer.world_size, acc)

        sampler, dataset = stream(self.train, self.batch_size), InstanceDataset(self.train)
        if self.short is not None:
            ratio = self.train.input_ids.shape[1] // self.short.input_ids.shape[1]
            sampler = PhasedBatches(stream(self.short, self.batch_size * ratio), sampler, self.short_steps * acc,
                                    offset=len(self.short))
            dataset = ConcatDataset([InstanceDataset(self.short), dataset])
        return DataLoader(TaggedDataset(dataset), sampler=sampler, batch_size=None,
                          collate_fn=PretrainingCollator(**self.collate, seed=self.seed), **self.loader)

    def on_before_batch_transfer(self, batch: dict[str, Any], dataloader_idx: int) -> dict[str, Any]:
        """A training batch, still on the host, gets `padded` (whether a row is shorter than the batch: the model
        then need not look on the device, a host sync) and `tokens` (its non-padding tokens, for the throughput)."""
        if self.trainer.training:
            real = int(batch["attention_mask"].sum())
            batch |= {"padded": real < batch["attention_mask"].numel(), "tokens": real}
        return batch

    def val_dataloader(self) -> DataLoader:
        return DataLoader(InstanceDataset(self.heldout), batch_size=self.eval_batch_size,
                          collate_fn=PretrainingCollator(**self.heldout_collate,
                                                         fixed_mask_seed=self.heldout_mask_seed),
                          pin_memory=self.loader["pin_memory"])
