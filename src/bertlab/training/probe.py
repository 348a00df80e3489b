"""A linear probe (`finetune.mode=probe`): what a frozen encoder's features carry, read by a logistic regression
trained to convergence, the same procedure for every encoder (a never-trained one included).

- Features (`features`): one vector per training or dev example from the frozen encoder (eval mode, no dropout):
  sentence tasks the mean of the real tokens' features (the alternative would be the `[CLS]` token's); tagging each
  word's first sub-token's feature (the token BERT tags a word on). `finetune.features` picks the layers (`last`:
  the last layer's output); a scalar mix is learned, so a probe reads only fixed strategies.
- Fit (`fit`): features standardised (mean and sd of the training examples), then scikit-learn's multinomial L2
  logistic regression (L-BFGS) at each C of `finetune.probe_cs`, scored by log-loss in `finetune.probe_folds`-fold
  cross-validation over the training examples (`LogisticRegressionCV`, its fits stopped at `finetune.probe_cv_tol`;
  tagging: folds of whole sentences), the folds shuffled by the cell's seed; the C with the best mean held-out
  log-loss is refitted on all training examples until the gradient is below `finetune.probe_tol` (sklearn's
  mean-loss scale). Nothing of the dev set is seen.
"""

from __future__ import annotations

import csv
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertlab.data.vocab import IGNORE_INDEX
from bertlab.errors import UserError
from bertlab.kinds import KINDS
from bertlab.modeling.heads import LayerFeatures
from bertlab.modeling.model import BertEncoder

log = logging.getLogger(__name__)
SCORING = "neg_log_loss"  # how the folds score each C: a proper scoring rule, smoother than accuracy


@dataclass
class Features:
    """A split's probe inputs: `x` (n, d) float64, `y` (n,) the targets where the rows have them, and `row`, the
    split row each vector comes from (a tagged sentence gives one per word)."""

    x: np.ndarray
    y: np.ndarray | None
    row: np.ndarray


@dataclass
class Probe:
    """A fitted probe: the standardiser and the logistic regression, and how C was chosen and the fit ended."""

    scaler: Any  # sklearn StandardScaler
    model: Any  # sklearn LogisticRegression at the chosen C
    cs: list[float]  # the grid
    cv_log_loss: list[float]  # per C, the mean held-out log-loss over the folds
    iterations: int  # L-BFGS iterations of the final fit
    cv_iterations: int  # ... of the cross-validation's fits, all folds and Cs
    converged: bool  # every fit (the folds' and the final one) ended on its tolerance, none on `max_iter`

    @property
    def c(self) -> float:
        return float(self.model.C)

    def write_curve(self, path: Path) -> None:
        """The cross-validation curve as CSV: per C, the mean held-out log-loss over the folds."""
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["C", "cv_log_loss"])
            out.writerows(zip(self.cs, self.cv_log_loss))

    def record(self, folds: int, tol: float, cv_tol: float, max_iter: int, train_vectors: int) -> dict[str, Any]:
        """What metrics.json says of the probe."""
        best = self.cs.index(self.c)
        return {"solver": "sklearn LogisticRegression (L-BFGS, L2) on standardised features",
                "C": self.c, "Cs": self.cs, "cv_folds": folds, "cv_scoring": "log_loss",
                "cv_log_loss": [round(v, 6) for v in self.cv_log_loss], "C_at_grid_edge": best in (0, len(self.cs) - 1),
                "iterations": self.iterations, "cv_iterations": self.cv_iterations, "converged": self.converged,
                "tol": tol, "cv_tol": cv_tol, "max_iter": max_iter, "train_vectors": train_vectors,
                "features": int(self.model.coef_.shape[1])}


def features(encoder: BertEncoder, rows: Sequence[dict[str, Any]], kind: str, strategy: str, causal: bool,
             pad_id: int, batch_size: int, device: torch.device) -> Features:
    """The frozen encoder's probe features of `rows` (a split's model rows, in any order), in row order: one per
    row (sentence kinds: the mean over its real tokens), or one per labelled token (tagging: each word's first
    sub-token, where `label_ids` holds its tag), with `y` from `label` / `label_ids`."""
    c, per_token = encoder.config, KINDS[kind].probe == "token"
    layers = LayerFeatures(strategy, c.num_layers, c.hidden_size)
    if layers.mix is not None:  # settings.check_probe refuses these at the door
        raise ValueError(f"a probe reads fixed features, and {strategy!r} is a learned scalar mix")
    encoder.eval().to(device)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]["input_ids"]))  # batches of like lengths pad little
    xs, ys, owners = [], [], []
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            picked = order[start:start + batch_size]
            batch = {k: v.to(device) for k, v in KINDS[kind].collate([rows[i] for i in picked], pad_id).items()}
            out = encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], causal=causal,
                          output_hidden_states=True)
            tokens = layers(out.hidden_states).float()
            owner = torch.tensor(picked, device=device)
            if per_token:
                labels = batch["label_ids"]
                where = labels != IGNORE_INDEX
                xs.append(tokens[where])
                ys.append(labels[where])
                owners.append(owner[:, None].expand_as(labels)[where])
            else:
                mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                xs.append((tokens * mask).sum(1) / mask.sum(1))
                ys.append(batch["label"] if "label" in batch else None)
                owners.append(owner)
    row = torch.cat(owners).cpu().numpy()
    keep = np.argsort(row, kind="stable")  # back in row order (a sentence's words stay in order)
    x = torch.cat(xs).cpu().double().numpy()[keep]
    y = None if any(t is None for t in ys) else torch.cat(ys).cpu().numpy()[keep]
    return Features(x, y, row[keep])


def splits(train: Features, folds: int, seed: int, grouped: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """`folds` (train, held-out) index pairs over the training vectors, shuffled by `seed`: stratified by class, or
    (`grouped`: tagging) whole rows to a fold, so a sentence's words are never on both sides."""
    from sklearn.model_selection import GroupKFold, StratifiedKFold

    rows = len(np.unique(train.row))
    if rows < folds:
        raise UserError(f"finetune.probe_folds={folds}: the probe's cross-validation needs at least {folds} training "
                        f"examples, got {rows}")
    if grouped:
        return list(GroupKFold(folds, shuffle=True, random_state=seed).split(train.x, train.y, train.row))
    with warnings.catch_warnings():  # a class rarer than the folds: some folds lack it, which the scores allow
        warnings.filterwarnings("ignore", message=".*least populated class.*")
        return list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(train.x, train.y))


def fit(train: Features, *, cs: Sequence[float], folds: int, seed: int, tol: float, cv_tol: float, max_iter: int,
        grouped: bool) -> Probe:
    """The probe on `train`: standardised features, C chosen by cross-validated log-loss from `cs`, the final
    logistic regression at that C on every training vector (module docstring)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    if train.y is None or len(np.unique(train.y)) < 2:
        raise UserError("finetune.mode=probe: the training examples hold fewer than 2 classes")
    scaler = StandardScaler().fit(train.x)
    x = scaler.transform(train.x)
    grid = [float(c) for c in cs]
    # BLAS on the stage's threads (impl.threads), not its own default: on a busy 2-core machine two BLAS threads
    # beside torch's took 20x as long as one (35 s against 1.7 s for one fit of 67k x 192 features, 9 classes).
    with threadpool_limits(limits=torch.get_num_threads(), user_api="blas"), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        path = LogisticRegressionCV(
            Cs=grid, cv=splits(train, folds, seed, grouped), scoring=SCORING, l1_ratios=(0.0,), solver="lbfgs",
            tol=cv_tol, max_iter=max_iter, refit=False, use_legacy_attributes=False,
        ).fit(x, train.y)
        cv_log_loss = (-path.scores_[:, 0, :].mean(axis=0)).tolist()  # (folds, l1 ratios, Cs) -> per C
        best = grid[int(np.argmin(cv_log_loss))]  # ties: the smallest C, as sklearn's argmax of the scores
        model = LogisticRegression(C=best, l1_ratio=0.0, solver="lbfgs", tol=tol, max_iter=max_iter).fit(x, train.y)
    stopped = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    if stopped:
        log.warning("the probe's solver stopped before finetune.probe_tol=%g in %d fit(s) (finetune.probe_max_iter=%d):"
                    " %s", tol, len(stopped), max_iter, str(stopped[0].message).splitlines()[0])
    return Probe(scaler, model, grid, cv_log_loss, int(np.max(model.n_iter_)), int(path.n_iter_.sum()), not stopped)


def predictions(probe: Probe, split: Features, rows: Sequence[dict[str, Any]], kind: str, outside: int) -> list:
    """One prediction per row, as the kind's evaluator reads it: a class id, or (tagging) a tag id per token, the
    probe's at each word's first sub-token and `outside` elsewhere (the evaluator reads only the first)."""
    labels = probe.model.predict(probe.scaler.transform(split.x)).tolist()
    if KINDS[kind].probe != "token":
        return labels
    tags = [[outside] * len(r["input_ids"]) for r in rows]
    firsts = [[t for t, y in enumerate(r["label_ids"]) if y != IGNORE_INDEX] for r in rows]
    at = dict.fromkeys(range(len(rows)), 0)
    for owner, label in zip(split.row.tolist(), labels, strict=True):
        tags[owner][firsts[owner][at[owner]]] = int(label)
        at[owner] += 1
    return tags
