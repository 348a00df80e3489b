"""Stage `pretrain`: train a BERT encoder with masked LM + NSP (BERT), masked LM only, or left-to-right LM.

Reads `data/pretrain_data` and `data/tokenizer`; writes `data/pretrain/<name>/`: the model as a plain state
dict + JSON config, the same in Hugging Face `BertForPreTraining` layout (`hf/`), the training curve
(`metrics.csv`) and `metrics.json` with the held-out masked-LM perplexity ("LM (ppl)" of Table 6).
Checkpoints live in `data/checkpoints/pretrain/<name>-<settings hash>/`: a rerun resumes from `last.ckpt`.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ThroughputMonitor
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer
from torch.utils.data import DataLoader
from torchmetrics import MeanMetric

from bertlab import stage
from bertlab.configs import RESULT_KEYS, select
from bertlab.data.instances import InstanceDataset, load_instances
from bertlab.data.masking import PretrainingCollator, continuation_table
from bertlab.export import save_hf, save_plain
from bertlab.model import BertConfig, BertForPretraining, flops_per_token
from bertlab.report import tables_of

log = logging.getLogger(__name__)


class PretrainModule(pl.LightningModule):
    """BertForPretraining under one objective, with AdamW, linear warmup and linear decay."""

    def __init__(self, model: dict[str, Any], objective: dict[str, Any], optim: dict[str, Any]) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = BertForPretraining(BertConfig(**model), nsp=objective["nsp"])
        self.causal = objective["causal"]
        self.heldout_loss = MeanMetric()

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        out = self.model(**batch, causal=self.causal)
        logs = {"train/loss": out.loss, "train/mlm_loss": out.mlm_loss, "train/mlm_acc": out.mlm_accuracy}
        if out.nsp_loss is not None:
            logs |= {"train/nsp_loss": out.nsp_loss, "train/nsp_acc": out.nsp_accuracy}
        self.log_dict(logs, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return out.loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        out = self.model(**batch, causal=self.causal)
        self.heldout_loss.update(out.mlm_loss, out.mlm_count)

    def on_validation_epoch_end(self) -> None:
        loss = self.heldout_loss.compute()
        self.log_dict({"val/mlm_loss": loss, "val/ppl": loss.exp()}, prog_bar=True)
        self.heldout_loss.reset()

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.hparams.optim
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [  # no weight decay on biases and LayerNorm (the 1-d parameters)
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": o["weight_decay"]},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"],
                                fused=stage.fused_adamw(self))
        warmup = max(1, min(o["warmup_steps"], o["max_steps"] - 1))
        return {"optimizer": opt, "lr_scheduler": stage.warmup_then_decay(opt, warmup, o["max_steps"])}


def checkpoint_dir(cfg: DictConfig, inputs: list[Path]) -> Path:
    """Where this run's checkpoints live: keyed by its results-affecting settings and its input files."""
    h = hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(select(cfg, RESULT_KEYS["pretrain"]))).encode())
    for p in inputs:
        h.update(p.read_bytes())
    return Path(cfg.data_dir) / "checkpoints" / "pretrain" / f"{cfg.name}-{h.hexdigest()[:12]}"


@stage.main
def run(cfg: DictConfig) -> None:
    data_dir = Path(cfg.data_dir)
    tokenizer_file = stage.require(data_dir / "tokenizer" / "tokenizer.json", "tokenizer")
    instances_dir = stage.require(data_dir / "pretrain_data", "pretrain_data")
    stage.apply_impl(cfg.impl)
    pl.seed_everything(cfg.seed, workers=True)
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    fmt = cfg.objective.data
    train = load_instances(instances_dir / f"train_{fmt}")
    heldout = load_instances(instances_dir / f"heldout_{fmt}")
    seq = train.input_ids.shape[1]
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(), num_layers=cfg.model.num_layers, hidden_size=cfg.model.hidden_size,
        num_heads=cfg.model.num_heads, intermediate_size=cfg.model.intermediate_size, max_position_embeddings=seq,
        dropout=cfg.pretrain.dropout, attention_dropout=cfg.pretrain.dropout,
    )
    module = PretrainModule(
        model=vars(config), objective=OmegaConf.to_container(cfg.objective),
        optim=OmegaConf.to_container(cfg.pretrain),
    )
    # for ThroughputMonitor's FLOP/s: full batches, the labelled fraction predicted (all positions for LTR)
    module.flops_per_batch = cfg.pretrain.batch_size * seq * flops_per_token(
        config, seq, 1.0 if cfg.objective.causal else cfg.objective.mlm_probability)
    n_params = module.model.num_parameters()
    log.info("%s: %s, %s parameters", cfg.name, config, n_params)
    if cfg.impl.compile:
        module.model = torch.compile(module.model)

    collate = dict(
        objective=cfg.objective.name, vocab_size=config.vocab_size, mlm_probability=cfg.objective.mlm_probability,
        continuation=continuation_table(tokenizer) if cfg.objective.whole_word_masking else None,
    )
    train_loader = DataLoader(
        InstanceDataset(train), batch_size=cfg.pretrain.batch_size, shuffle=True, drop_last=True,
        collate_fn=PretrainingCollator(**collate), num_workers=cfg.impl.num_workers,
    )
    heldout_loader = DataLoader(
        InstanceDataset(heldout), batch_size=cfg.pretrain.batch_size,
        collate_fn=PretrainingCollator(**collate, fixed_mask_seed=cfg.pretrain_data.seed),
    )

    ckpt_dir = checkpoint_dir(cfg, [tokenizer_file, instances_dir / "stats.json"])
    ckpt = ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0,
                           every_n_train_steps=cfg.pretrain.checkpoint_every_steps)
    loggers = stage.make_loggers(cfg, "pretrain", ckpt_dir, tables_of(OmegaConf.to_container(cfg.ablations),
                                                                        {"encoder": cfg.name}))
    trainer = pl.Trainer(
        max_steps=cfg.pretrain.max_steps, max_epochs=-1,
        accelerator=cfg.impl.accelerator, devices=cfg.impl.devices, strategy=cfg.impl.strategy,
        precision=cfg.impl.precision, gradient_clip_val=cfg.pretrain.grad_clip,
        accumulate_grad_batches=cfg.pretrain.accumulate_grad_batches,
        val_check_interval=cfg.pretrain.val_every_steps, check_val_every_n_epoch=None,
        logger=loggers, log_every_n_steps=10,
        callbacks=[
            ckpt, LearningRateMonitor("step"), stage.progress_bar(),
            ThroughputMonitor(batch_size_fn=lambda b: b["input_ids"].shape[0],
                              length_fn=lambda b: int(b["attention_mask"].sum())),
        ],
        default_root_dir=ckpt_dir, num_sanity_val_steps=0,
    )
    start = time.perf_counter()
    if cfg.pretrain.max_steps > 0:
        resume = ckpt_dir / "last.ckpt"
        if resume.exists():
            log.info("resuming from %s", resume)
        trainer.fit(module, train_loader, heldout_loader, ckpt_path=str(resume) if resume.exists() else None)
    seconds = time.perf_counter() - start
    final = trainer.validate(module, heldout_loader, verbose=False)[0]

    model = module.model._orig_mod if cfg.impl.compile else module.model
    with stage.atomic_dir(data_dir / "pretrain" / cfg.name) as out:
        save_plain(model, config, out)
        save_hf(model, config, out / "hf", causal=cfg.objective.causal)
        if (ckpt_dir / "metrics.csv").exists():
            shutil.copy(ckpt_dir / "metrics.csv", out / "metrics.csv")
        stage.write_json(out / "metrics.json", {
            "name": cfg.name, "objective": cfg.objective.name, "nsp": cfg.objective.nsp,
            "shape": {"num_layers": config.num_layers, "hidden_size": config.hidden_size,
                      "num_heads": config.num_heads, "intermediate_size": config.intermediate_size},
            "preset": cfg.model.name, "parameters": n_params,
            "steps": trainer.global_step, "train_seconds": round(seconds, 1),
            "heldout_mlm_loss": final["val/mlm_loss"], "heldout_ppl": final["val/ppl"],
            "heldout_kind": "next-token" if cfg.objective.causal else "masked-token",
        })
    log.info("held-out perplexity %.2f after %d steps", final["val/ppl"], trainer.global_step)


if __name__ == "__main__":
    run()
