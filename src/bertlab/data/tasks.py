"""Fine-tuning task definitions (`conf/task/*.yaml`) and whether a task's data was downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertlab.files import require
from bertlab.settings import CHOICES


@dataclass(frozen=True)
class Task:
    """One fine-tuning task, as in `conf/task/<name>.yaml`: `Task(**cfg)`.

    `num_labels` is the head's output size: classes, tags per token, choices, ... (its kind's module,
    `bertlab.kinds`, says). `metric` is the key, in the dict returned by the
    task's metric function in `bertlab.metrics`, of the headline number the paper's tables report.
    """

    name: str
    kind: str
    hub_id: str
    config: str
    text_columns: tuple[str, ...]
    label_column: str
    num_labels: int
    train_split: str
    eval_splits: tuple[str, ...]
    metric: str
    label_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in (kinds := CHOICES["task.kind"]):
            raise ValueError(f"task {self.name}: unknown kind {self.kind!r}; expected one of {kinds}")
        # Hydra/YAML give lists; keep the dataclass hashable and immutable.
        for key in ("text_columns", "eval_splits", "label_names"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, tuple(value))
        if self.label_names is not None and len(self.label_names) != self.num_labels:
            raise ValueError(f"task {self.name}: {len(self.label_names)} label_names but num_labels={self.num_labels}")


def missing_data(task_dir: Path) -> str | None:
    """Why the task downloaded to `task_dir` has no data (the download stage's `NO_DATA` note), or None if it has."""
    note = require(task_dir, "download") / "NO_DATA"
    return note.read_text().strip() if note.exists() else None
