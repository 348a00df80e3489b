"""Evaluation of a fine-tuned model: the `items.json` record of its headline split (the per-item columns of the
model and of the floor) and the floor's headline metric.

Each kind's evaluator (`bertlab.kinds`: one module a kind) turns one prediction per eval row (in dataset order)
into the task's official metrics and the per-item columns that recompute them, and gives the floor every headline
is read against; floors go through the same evaluator as the model's predictions.
"""

from __future__ import annotations

from typing import Any

from bertlab.data.tasks import Task
from bertlab.files import finite
from bertlab.kinds.base import Evaluation, Evaluator


def items_and_floor(task: Task, evaluator: Evaluator, model: Evaluation) -> tuple[dict[str, Any], float | None]:
    """The `items.json` record of the headline split (the model's columns and the floor's) and the floor's
    headline metric."""
    floor = evaluator.floor()
    scored = evaluator.evaluate(floor.predictions)
    n = len(next(iter(model.columns.values())))
    record = {"split": evaluator.split, "kind": task.kind, "metric": task.metric, "n": n, "model": model.columns,
              "floor": {"name": floor.name, **scored.columns}}
    return record, finite(scored.metrics)[task.metric]
