"""The tasks' official metrics, on the paper's 0-100 scale, through maintained libraries.

GLUE via `torchmetrics.functional`, SQuAD v1.1 via torchmetrics' port of the official script, CoNLL-2003
entity F1 via seqeval (conlleval semantics).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from seqeval.metrics import f1_score as seq_f1, precision_score as seq_precision, recall_score as seq_recall
from torchmetrics.functional import accuracy, f1_score, matthews_corrcoef, pearson_corrcoef, spearman_corrcoef
from torchmetrics.functional.text import squad

ArrayLike = Sequence[float] | np.ndarray | torch.Tensor


def glue_metrics(task: str, preds: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """GLUE dev metrics of one task (and one eval split), 0-100.

    `preds` are class ids (scores for `stsb`). cola: `matthews`; stsb: `pearson`, `spearman`; mrpc and
    qqp: `f1` (positive class 1) and `accuracy`; every other task (mnli per split): `accuracy`.
    """
    if task == "stsb":
        p, y = torch.as_tensor(preds, dtype=torch.float64), torch.as_tensor(labels, dtype=torch.float64)
        return {"pearson": _pct(pearson_corrcoef(p, y)), "spearman": _pct(spearman_corrcoef(p, y))}
    p, y = torch.as_tensor(preds, dtype=torch.long), torch.as_tensor(labels, dtype=torch.long)
    if task == "cola":
        # GLUE (sklearn) scores a constant prediction or label vector 0; torchmetrics returns a small
        # non-zero eps-smoothed value there (e.g. 2.6 for all-"acceptable" on CoLA dev).
        degenerate = p.unique().numel() < 2 or y.unique().numel() < 2
        return {"matthews": 0.0 if degenerate else _pct(matthews_corrcoef(p, y, task="binary"))}
    num_classes = max(2, int(torch.cat([p, y]).max()) + 1)
    scores = {"accuracy": _pct(accuracy(p, y, task="multiclass", num_classes=num_classes, average="micro"))}
    if task in ("mrpc", "qqp"):
        scores["f1"] = _pct(f1_score(p, y, task="binary"))
    return scores


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, float]:
    """SQuAD v1.1 `exact_match` and `f1` (0-100), each the max over an example's reference answers.

    Answers are normalised as the official script does (lower case; drop punctuation and a/an/the;
    collapse whitespace); a question without a prediction scores 0. Caveat of torchmetrics: when both
    the prediction and a reference normalise to nothing (e.g. "the" vs "."), F1 is 1, where v1.1 gives 0
    (3 of 10,570 dev questions have such a reference).
    """
    preds = [{"id": qid, "prediction_text": text} for qid, text in predictions.items()]
    target = [{"id": qid, "answers": {"text": list(answers)}} for qid, answers in references.items()]
    return {key: float(value) for key, value in squad(preds, target).items()}  # already 0-100


def entity_f1(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Entity-level micro `f1`, `precision`, `recall` (0-100) of IOB tag sequences, as conlleval counts them.

    seqeval's default mode follows conlleval: an I- tag after O or after another type starts an entity,
    and an entity counts only if its type and both boundaries match.
    """
    return {
        "f1": 100.0 * float(seq_f1(gold, pred, zero_division=0)),
        "precision": 100.0 * float(seq_precision(gold, pred, zero_division=0)),
        "recall": 100.0 * float(seq_recall(gold, pred, zero_division=0)),
    }


def _pct(value: torch.Tensor) -> float:
    return 100.0 * float(value)
