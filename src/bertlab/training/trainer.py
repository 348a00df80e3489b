"""The Trainer set-up both training stages share (`make_trainer`): devices and nodes, the global batch's split,
loggers, the progress bar, and the optimizer: AdamW's parameter groups and fused form, BERT's learning-rate
schedule."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from bertlab.errors import UserError
from bertlab.files import lasting_dir
from bertlab.tracking import start_wandb, sweep_group, wandb_settings
from bertlab.training.run_settings import Devices, LogSettings

log = logging.getLogger(__name__)


def num_nodes(setting: int | None) -> int:
    """`impl.num_nodes` (`setting`), or when it is null the launcher's node count, else 1; Lightning checks it against
    the processes the launcher started. Launchers in Lightning's order of detection: torchrun (`GROUP_WORLD_SIZE`, its
    number of nodes, else `WORLD_SIZE / LOCAL_WORLD_SIZE`), then SLURM (`SLURM_NNODES`)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if setting is not None:
        return int(setting)
    env = os.environ
    if TorchElasticEnvironment.detect():
        if "GROUP_WORLD_SIZE" in env:
            return int(env["GROUP_WORLD_SIZE"])
        return max(1, int(env["WORLD_SIZE"]) // int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])))
    if SLURMEnvironment.detect() and "SLURM_NNODES" in env:
        return int(env["SLURM_NNODES"])
    return 1


def trainer_devices(devices: Devices) -> dict[str, Any]:
    """The Trainer's accelerator, devices, num_nodes, strategy and precision (both training stages). Every
    parameter a run trains is in its loss (the code freezes the rest), so plain DDP needs no unused-parameter
    search."""
    return {"accelerator": devices.accelerator, "devices": devices.devices, "num_nodes": num_nodes(devices.num_nodes),
            "strategy": devices.strategy, "precision": devices.precision}


def make_trainer(devices: Devices, loggers: list, work_dir: Path, batch: tuple[str, int],
                 callbacks: Sequence[Any] = (), **options: Any) -> tuple[Any, int]:
    """A training stage's Lightning Trainer and its per-device micro-batch: on `devices`,
    `loggers`, `callbacks` then the learning rate logged each step and the run's progress bar; no sanity validation,
    model summary or Lightning checkpoint (`options`: the stage's own Trainer arguments). The global batch `batch`
    (its setting's name, its size) is split over the devices, with gradient accumulation (`fit_global_batch`)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import LearningRateMonitor

    quiet_outside_slurm()
    trainer = pl.Trainer(
        **trainer_devices(devices), logger=loggers, default_root_dir=work_dir,
        callbacks=[*callbacks, LearningRateMonitor("step"), progress_bar()], enable_checkpointing=False,
        enable_model_summary=False, num_sanity_val_steps=0, **options,
    )
    setting, size = batch
    return trainer, fit_global_batch(trainer, size, devices.max_device_batch, setting)


SRUN_HINT = "The `srun` command is available on your system but is not used"  # Lightning's, from SLURMEnvironment


def quiet_outside_slurm() -> None:
    """Outside any SLURM allocation (no `SLURM_JOB_ID`), Lightning's hint to prepend `srun`, which it gives wherever
    `srun` is on PATH (a login node) each time it looks for SLURM (three times a run), is ignored: a process SLURM did
    not start is not one that forgot srun. Inside an allocation the hint stays, and SLURM's launch is unchanged."""
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message=re.escape(SRUN_HINT))


def split_batch(global_batch: int, world_size: int, max_device_batch: int | None, setting: str) -> tuple[int, int]:
    """(per-device micro-batch, gradient accumulation) giving the result setting `setting`=`global_batch` on
    `world_size` processes: the fewest accumulation steps that keep the micro-batch within `max_device_batch`
    (`impl.max_device_batch`, speed only; None: no limit). A UserError unless the processes share it evenly."""
    if global_batch % world_size:
        raise UserError(f"{setting}={global_batch} (the global batch) is not divisible by the {world_size} "
                        "processes present (devices x nodes)")
    per_process = global_batch // world_size
    limit = max_device_batch or per_process
    accumulate = next(a for a in range(1, per_process + 1) if per_process % a == 0 and per_process // a <= limit)
    return per_process // accumulate, accumulate


def fit_global_batch(trainer: Any, global_batch: int, max_device_batch: int | None, setting: str) -> int:
    """The per-device micro-batch of `global_batch` on the trainer's devices x nodes; sets the trainer's gradient
    accumulation to match (as Lightning's GradientAccumulationScheduler does), before `fit`."""
    micro, accumulate = split_batch(global_batch, trainer.num_devices * trainer.num_nodes, max_device_batch, setting)
    trainer.accumulate_grad_batches = accumulate
    log.log(logging.INFO if trainer.num_devices * trainer.num_nodes * accumulate > 1 else logging.DEBUG,
            "%s=%d: %d x %d device(s) x %d node(s) x %d accumulation step(s)", setting, global_batch, micro,
            trainer.num_devices, trainer.num_nodes, accumulate)
    return micro


def on_cuda(trainer: Any) -> bool:
    """Whether the trainer runs on CUDA devices (pinned host memory, no host syncs in training steps)."""
    return trainer.strategy.root_device.type == "cuda"


def progress_bar(log_every_s: float = 60.0) -> Any:
    """One tqdm bar for the whole run, in optimizer steps with its ETA (Lightning's counts the batches of each epoch,
    and pretraining's epochs are checkpoint intervals). Where output is not a terminal (a log file, CI, `dvc repro
    > log`), no bar, whose redraws pile up in a file: a log line of steps, metrics and ETA every `log_every_s`."""
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

    class RunProgressBar(TQDMProgressBar):
        terminal = sys.stdout.isatty()  # where Lightning's bar writes

        def init_train_tqdm(self) -> Any:
            return super().init_train_tqdm() if self.terminal else Tqdm(disable=True)

        def on_train_start(self, trainer: Any, module: Any) -> None:
            super().on_train_start(trainer, module)
            self.train_progress_bar.reset(total=trainer.estimated_stepping_batches)
            self.train_progress_bar.set_description("steps")
            self.train_progress_bar.update(trainer.global_step)  # a resumed run starts where it stopped
            self.started, self.first_step, self.logged = time.monotonic(), trainer.global_step, time.monotonic()

        def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
            pass  # one bar for all epochs

        def on_train_batch_end(self, trainer: Any, module: Any, *_: Any) -> None:
            bar, step, now = self.train_progress_bar, trainer.global_step, time.monotonic()
            if self.terminal and (step - bar.n >= self.refresh_rate or step == bar.total):
                bar.update(step - bar.n)
                bar.set_postfix(self.get_metrics(trainer, module))
            elif not self.terminal and now - self.logged >= log_every_s and step > self.first_step:
                self.logged, total = now, trainer.estimated_stepping_batches
                eta = (now - self.started) / (step - self.first_step) * (total - step)
                metrics = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in self.get_metrics(trainer, module).items())
                log.info("step %d/%d (%s left)%s", step, total, timedelta(seconds=round(eta)),
                         f": {metrics}" if metrics else "")

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            pass

        def init_validation_tqdm(self) -> Any:  # validation is short: its bar would be a log's longest part
            return Tqdm(disable=True)

        def get_metrics(self, trainer: Any, module: Any) -> dict[str, Any]:
            return {k: v for k, v in super().get_metrics(trainer, module).items() if k != "v_num"}

    return RunProgressBar(refresh_rate=10)


def decay_groups(params: Iterable[torch.nn.Parameter], weight_decay: float, name: str | None = None,
                 **options: Any) -> list[dict[str, Any]]:
    """AdamW parameter groups as BERT's: `weight_decay` on matrices, none on 1-d tensors (biases, LayerNorm, scalar-mix
    weights); an empty group is left out. `name` (the second group's with `_no_decay`) and `options` (e.g. its `lr`)
    go into both."""
    params = list(params)
    groups = []
    for suffix, chosen, decay in (("", [p for p in params if p.ndim >= 2], weight_decay),
                                  ("_no_decay", [p for p in params if p.ndim < 2], 0.0)):
        if chosen:
            named = {"name": name + suffix} if name else {}
            groups.append({**named, "params": chosen, "weight_decay": decay, **options})
    return groups


def adamw(module: Any, groups: list[dict[str, Any]], lr: float, betas: Sequence[float], eps: float, warmup: int,
          total: int) -> dict[str, Any]:
    """A LightningModule's optimizer config: AdamW over `groups` (fused where it may be) and BERT's schedule."""
    opt = torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, fused=fused_adamw(module))
    return {"optimizer": opt, "lr_scheduler": warmup_then_decay(opt, warmup, total)}


def fused_adamw(module: Any) -> bool:
    """Whether a LightningModule may use a fused AdamW (one kernel for all parameters: faster): not under fp16's
    loss scaling, where a fused step unscales the gradients itself, after they would have been clipped."""
    trainer = getattr(module, "_trainer", None)
    return trainer is None or not str(trainer.precision).startswith("16")


def clip_gradients(optimizer: torch.optim.Optimizer, max_norm: float | None) -> None:
    """Lightning's gradient clipping by norm (`torch.nn.utils.clip_grad_norm_` over the optimizer's parameters, in
    their order, as its precision plugins call it: the same numbers), which its mixed-precision plugin refuses for a
    fused optimizer even under bf16, which has no loss scale to undo: a LightningModule's
    `configure_gradient_clipping` calls this instead."""
    if max_norm:
        torch.nn.utils.clip_grad_norm_([p for group in optimizer.param_groups for p in group["params"]], max_norm)


# Dense bf16 peaks by datasheet (TFLOP/s), by a part of a CUDA device's name (the first that matches)
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0))


def peak_tflops(impl: DictConfig, trainer: Any) -> float | None:
    """The peak that model FLOP utilisation is reckoned against: `impl.peak_tflops`, else a CUDA device's dense bf16
    peak (`PEAK_TFLOPS`) where the run computes in bf16, else None (not known)."""
    if impl.get("peak_tflops"):
        return float(impl.peak_tflops)
    if not on_cuda(trainer) or "bf16" not in str(trainer.precision):
        return None
    return peak_of(torch.cuda.get_device_name(trainer.strategy.root_device))


def peak_of(name: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of the CUDA device called `name` (`PEAK_TFLOPS`), None where not known."""
    return next((peak for part, peak in PEAK_TFLOPS if name and part in name), None)


def warmup_then_decay(opt: torch.optim.Optimizer, warmup: int, total: int) -> dict[str, Any]:
    """Lightning's scheduler config for BERT's schedule: linear warmup over `warmup` steps, then linear decay to 0
    at step `total` (torch's LinearLR, stepped every optimizer step)."""
    decay = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.0, total_iters=max(1, total - warmup))
    sched: torch.optim.lr_scheduler.LRScheduler = decay
    if warmup > 0:
        ramp = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, total_iters=warmup)
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [ramp, decay], milestones=[warmup])
    return {"scheduler": sched, "interval": "step"}


def make_loggers(logs: LogSettings, job_type: str, save_dir: str | Path) -> list:
    """Lightning loggers: always a CSVLogger into `save_dir` (the report reads it) plus the chosen one. A W&B run is
    tagged with `logger.tags` (the ablation tables that use it, which the `configs` stage writes into each run's
    config) and grouped by its Hydra multirun (`sweep_group`), else by the first tag, else by `job_type`; the stage
    finishes it at the job's end (`tracking.one_run_per_job`)."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    loggers: list = [CSVLogger(save_dir=str(save_dir), name="", version="")]
    if logs.kind == "wandb":
        tables, wandb_dir = list(logs.tags), lasting_dir(logs.save_dir)
        group = sweep_group(job_type) or (tables[0] if tables else job_type)
        wandb_dir.mkdir(parents=True, exist_ok=True)

        def start(offline: bool) -> WandbLogger:
            logger = WandbLogger(
                project=logs.project, name=logs.name, group=group,
                job_type=job_type, tags=tables, save_dir=str(wandb_dir), offline=offline,
                config=logs.config, settings=wandb_settings(),
                mode="offline" if offline else None,  # Lightning's WANDB_MODE is not read after an online try
            )
            logger._wandb_init.pop("anonymous", None)  # Lightning passes None, which W&B warns about in every run
            if not offline:
                logger.experiment  # noqa: B018  (starts the online run now: a failure falls back before training)
            return logger

        loggers.append(start_wandb(start, logs.offline, str(wandb_dir)))
    elif logs.kind == "csv":
        loggers.append(CSVLogger(save_dir=logs.save_dir, name=job_type, version=logs.name))
    return loggers
