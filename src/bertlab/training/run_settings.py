"""What any training run, pretraining or a fine-tuning cell, hands its Trainer and loggers, typed and read once from
the composed config (`bertlab.training.trainer` reads these, never the config)."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def loader_processes(num_workers: int) -> dict[str, Any]:
    """A DataLoader's worker settings: `num_workers` processes forked where the platform forks, also in a job that
    runs in a process of its own (`impl.jobs` > 1: joblib's loky workers start processes by spawning, which cannot
    pickle a loader's dataset)."""
    fork = num_workers > 0 and "fork" in multiprocessing.get_all_start_methods()
    return {"num_workers": num_workers, **({"multiprocessing_context": "fork"} if fork else {})}


@dataclass(frozen=True)
class Devices:
    """Where a Trainer runs (`impl`): accelerator, devices, nodes, strategy, precision, and the per-device batch cap."""

    accelerator: str = "cpu"
    devices: Any = 1  # a count, a list of ids or "auto", as Lightning takes it
    num_nodes: int | None = None  # None: the launcher's (`bertlab.training.trainer.num_nodes`)
    strategy: str = "auto"
    precision: Any = "32-true"
    max_device_batch: int | None = None

    @classmethod
    def of(cls, impl: DictConfig) -> Devices:
        return cls(impl.accelerator, impl.devices, impl.get("num_nodes"), impl.strategy, impl.precision,
                   impl.max_device_batch)


@dataclass(frozen=True)
class LogSettings:
    """The run's loggers besides the CSV one (`logger`): which, and what a W&B run is named, tagged and logs."""

    kind: str  # wandb | csv | none
    name: str  # the run's
    save_dir: str = ""
    project: str = ""
    tags: tuple[str, ...] = ()  # the ablation tables that use the run
    offline: bool = True
    config: dict[str, Any] | None = None  # the whole resolved config, as W&B records it

    def with_encoder(self, encoder_dir: Path) -> LogSettings:
        """These settings with the W&B config's `model` the pretrained encoder in `encoder_dir` (its config.json:
        the model a fine-tuning cell ran) in place of the composed default, which the cell does not read."""
        if self.config is None:
            return self
        model = json.loads((Path(encoder_dir) / "config.json").read_text(encoding="utf-8"))
        return replace(self, config={**self.config, "model": {**model, "pretrained": str(encoder_dir)}})

    @classmethod
    def of(cls, cfg: DictConfig) -> LogSettings:
        lg = cfg.logger
        if lg.kind == "none":
            return cls("none", cfg.name)
        return cls(lg.kind, cfg.name, str(lg.save_dir), str(lg.get("project", "")), tuple(lg.get("tags") or ()),
                   bool(lg.get("offline", True)), OmegaConf.to_container(cfg, resolve=True))
