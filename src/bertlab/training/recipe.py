"""A training run's settings, typed: small frozen parts read once from the composed config, one a piece of the run
(the task's data, the fine-tuning module, the probe, the devices, the loggers), so that no piece reads the config.

`Recipe.of(cfg, task)` is a fine-tuning cell's, built at the top of its work (`bertlab.training.cell`); its devices
and loggers are `bertlab.training.run_settings`', which the pretraining stage reads too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from bertlab.kinds import KINDS
from bertlab.kinds.base import Lengths, TaskSpec
from bertlab.training.run_settings import Devices, LogSettings


@dataclass(frozen=True)
class DataSettings:
    """How a task's splits are read, encoded and batched (`TaskDataModule`)."""

    batch_size: int
    eval_batch_size: int | None = None
    num_workers: int = 0
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    subsample_seed: int = 0
    n_best_size: int = 20  # SQuAD's answer search
    max_answer_length: int = 30


@dataclass(frozen=True)
class ModuleSettings:
    """What a `FinetuneModule` puts between the encoder and the loss, and how it is optimised."""

    mode: str = "finetune"
    features: str = "last"
    bilstm: bool = False
    bilstm_hidden: int | None = None
    bilstm_layers: int = 2
    head_dropout: float = 0.1
    pooling: str = "cls"
    lr: float = 2e-5
    head_lr: float | None = None  # None: `lr`
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6


@dataclass(frozen=True)
class ProbeSettings:
    """A linear probe's fit (`bertlab.training.probe.fit`)."""

    cs: tuple[float, ...]
    folds: int
    tol: float
    cv_tol: float
    max_iter: int


@dataclass(frozen=True)
class Recipe:
    """A fine-tuning cell's settings: what each piece of its work takes."""

    name: str
    seed: int
    tokenizer_file: Path
    tasks_dir: Path  # the downloaded tasks, a folder each
    work_dir: Path  # the loggers' scratch folder, under `<out_dir>/checkpoints/finetune/`
    dropout: float  # the encoder's while it is fine-tuned
    lengths: Lengths  # wanted (the encoder's positions cap them)
    data: DataSettings
    module: ModuleSettings
    probe: ProbeSettings
    epochs: int
    grad_clip: float | None
    compile: bool
    devices: Devices
    logs: LogSettings

    @classmethod
    def of(cls, cfg: DictConfig, task: TaskSpec) -> Recipe:
        """The cell `cfg` composes, on `task` (a kind with `windows` has its own sequence length and sizes)."""
        ft, impl, windows = cfg.finetune, cfg.impl, KINDS[task.kind].windows
        head_lr = ft.feature_head_lr if ft.mode != "finetune" and ft.feature_head_lr is not None else ft.head_lr
        return cls(
            name=cfg.name, seed=cfg.seed, tokenizer_file=Path(cfg.data_dir) / "tokenizer" / "tokenizer.json",
            tasks_dir=Path(cfg.data_dir) / "download" / "tasks",
            work_dir=Path(cfg.out_dir) / "checkpoints" / "finetune" / cfg.name, dropout=ft.dropout,
            lengths=Lengths(ft.squad_max_seq_length if windows else ft.max_seq_length, ft.doc_stride,
                            ft.max_query_length),
            data=DataSettings(
                ft.batch_size, impl.eval_batch_size, int(impl.num_workers),
                ft.squad_max_train_examples if windows else ft.max_train_examples,
                ft.squad_max_eval_examples if windows else ft.max_eval_examples, ft.subsample_seed, ft.n_best_size,
                ft.max_answer_length),
            module=ModuleSettings(ft.mode, ft.features, ft.bilstm, ft.bilstm_hidden, ft.bilstm_layers,
                                  ft.head_dropout, ft.pooling, ft.lr, head_lr, ft.warmup_ratio, ft.weight_decay,
                                  tuple(ft.betas), ft.eps),
            probe=ProbeSettings(tuple(ft.probe_cs), ft.probe_folds, ft.probe_tol, ft.probe_cv_tol, ft.probe_max_iter),
            epochs=ft.epochs, grad_clip=ft.grad_clip, compile=bool(impl.compile), devices=Devices.of(impl),
            logs=LogSettings.of(cfg),
        )
