"""Evaluation of a fine-tuned model: one prediction per eval row (in dataset order) -> the task's official metrics,
the per-item columns that recompute them, and the floor every headline is read against.

Items (`items.json`'s columns): GLUE examples (`pred`, `label`), SQuAD questions (`exact_match`, `f1`, 0-100,
max over the references, by the same official normalisation as the corpus score), CoNLL-2003 sentences (`tp`,
`fp`, `fn`: entities as seqeval's conlleval mode extracts them, so micro F1 from their sums is `entity_f1`).

Floors go through the same evaluator as the model's predictions: the majority class of the training labels;
for regression, random normal predictions with the training labels' mean and (population) sd; for SQuAD, random
start/end logits through the same postprocessing and scoring; for tagging, all "O". Random floors use seed 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from seqeval.metrics.sequence_labeling import get_entities

from bertlab.data.ner import word_predictions
from bertlab.data.squad import postprocess
from bertlab.data.tasks import Task
from bertlab.files import finite
from bertlab.metrics import entity_f1, glue_metrics, squad_scores

FLOOR_SEED = 0


@dataclass
class Evaluation:
    metrics: dict[str, float]  # the split's official metrics, 0-100
    columns: dict[str, list]  # per item, the columns that recompute them


@dataclass
class Floor:
    name: str
    predictions: list  # one per row, shaped as the model's


@dataclass
class Evaluator(ABC):
    split: str
    rows: int  # rows of the eval dataset (SQuAD: windows)

    @abstractmethod
    def evaluate(self, predictions: list) -> Evaluation:
        """Metrics and per-item columns from one prediction per row, in dataset order."""

    @abstractmethod
    def floor(self) -> Floor:
        """The floor's predictions, one per row."""


@dataclass
class GlueEvaluator(Evaluator):
    """Classification (class ids) or regression (scores) of sentences or pairs; one item per example."""

    task: str = ""
    kind: str = "classification"
    labels: list = field(default_factory=list)
    train_labels: list = field(default_factory=list)  # of the examples the model trained on: the floor's

    def evaluate(self, predictions: list) -> Evaluation:
        return Evaluation(glue_metrics(self.task, predictions, self.labels),
                          {"pred": list(predictions), "label": list(self.labels)})

    def floor(self) -> Floor:
        y = np.asarray(self.train_labels, dtype=np.float64)
        if self.kind == "regression":
            mean, sd = float(y.mean()), float(y.std())
            preds = np.random.default_rng(FLOOR_SEED).normal(mean, sd, self.rows).tolist()
            return Floor(f"random normal predictions (the training labels' mean {mean:.4g} and sd {sd:.4g}, "
                         f"seed {FLOOR_SEED})", preds)
        majority = int(np.bincount(y.astype(np.int64)).argmax())  # ties: the lowest class id
        return Floor(f"majority class of the training labels ({majority})", [majority] * self.rows)


@dataclass
class SquadEvaluator(Evaluator):
    """Start/end logits per window -> the best span of each question; one item per question."""

    features: dict[str, list] = field(default_factory=dict)
    contexts: list[str] = field(default_factory=list)
    answers: list[list[str]] = field(default_factory=list)
    n_best_size: int = 20
    max_answer_length: int = 30

    def evaluate(self, predictions: list) -> Evaluation:
        texts = postprocess(
            [p[0] for p in predictions], [p[1] for p in predictions], self.features, self.contexts,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
        )
        keys = [str(i) for i in range(len(self.contexts))]  # positions: ids need not be unique
        metrics = squad_scores(dict(zip(keys, texts)), dict(zip(keys, self.answers)))
        per_question = [squad_scores({"q": text}, {"q": refs}) for text, refs in zip(texts, self.answers, strict=True)]
        return Evaluation(metrics, {k: [s[k] for s in per_question] for k in ("exact_match", "f1")})

    def floor(self) -> Floor:
        rng = np.random.default_rng(FLOOR_SEED)
        preds = [(rng.standard_normal(len(ids)), rng.standard_normal(len(ids))) for ids in self.features["input_ids"]]
        return Floor(f"random start/end logits (standard normal, seed {FLOOR_SEED})", preds)


@dataclass
class TaggingEvaluator(Evaluator):
    """Tag ids per token -> each word's tag (its first sub-token's), entity-level scores; one item per sentence."""

    word_ids: list[list[int | None]] = field(default_factory=list)
    gold: list[list[str]] = field(default_factory=list)
    label_names: tuple[str, ...] = ()

    @property
    def outside(self) -> int:
        return self.label_names.index("O") if "O" in self.label_names else 0

    def evaluate(self, predictions: list) -> Evaluation:
        pred = [
            [self.label_names[t] for t in word_predictions(p, w, len(g), outside_id=self.outside)]
            for p, w, g in zip(predictions, self.word_ids, self.gold, strict=True)
        ]
        counts = np.array([entity_counts(g, p) for g, p in zip(self.gold, pred)], dtype=np.int64).reshape(-1, 3)
        columns = {k: counts[:, i].tolist() for i, k in enumerate(("tp", "fp", "fn"))}
        return Evaluation(entity_f1(self.gold, pred), columns)

    def floor(self) -> Floor:
        return Floor('all "O" (no entity predicted)', [[self.outside] * len(w) for w in self.word_ids])


def entity_counts(gold: list[str], pred: list[str]) -> tuple[int, int, int]:
    """True positives, false positives and false negatives of one sentence's entities (type and both boundaries
    must match), extracted as seqeval does: summed over sentences they give its micro precision, recall and F1."""
    g, p = set(get_entities(list(gold))), set(get_entities(list(pred)))
    tp = len(g & p)
    return tp, len(p) - tp, len(g) - tp


def items_and_floor(task: Task, evaluator: Evaluator, model: Evaluation) -> tuple[dict[str, Any], float | None]:
    """The `items.json` record of the headline split (the model's columns and the floor's) and the floor's
    headline metric."""
    floor = evaluator.floor()
    scored = evaluator.evaluate(floor.predictions)
    n = len(next(iter(model.columns.values())))
    record = {"split": evaluator.split, "kind": task.kind, "metric": task.metric, "n": n, "model": model.columns,
              "floor": {"name": floor.name, **scored.columns}}
    return record, finite(scored.metrics)[task.metric]
