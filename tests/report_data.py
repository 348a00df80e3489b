"""Synthetic results for the report tests, laid out as the stages write them under data/: fine-tuning cells with
metrics.json + items.json, pretraining runs with metrics.json + heldout_items.json (+ a loss curve), the manifest.

Every headline number is recomputed from the per-item columns with `bertlab.report.stats.score`, as the stages'
numbers are, so the tests can state the tables' numbers exactly. The study they fill is the tests' own
(tests/study.yaml, `study()`), not conf/ablations/default.yaml.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bertlab.report import stats

STUDY = Path(__file__).with_name("study.yaml")
N = {"classification": 200, "span": 100, "tagging": 100}
KIND = {"squad": "span", "conll2003": "tagging"}  # every other task here: classification
METRIC = {"squad": "f1", "conll2003": "f1"}  # every other task here: accuracy
SPLIT = {"mnli": "validation_matched"}
LABELS = np.array([1] * 120 + [0] * 80)  # majority class 1: the floor scores 60.0
KEYS = ("num_layers", "hidden_size", "num_heads", "intermediate_size")
HELDOUT = 300  # held-out instances, 10 scored positions each
UNIGRAM = 900.0


def study() -> dict[str, Any]:
    """The tests' own study (tests/study.yaml), a fresh copy: its tables are the ones these runs fill."""
    return yaml.safe_load(STUDY.read_text())


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _hits(name: str, n: int, percent: float) -> np.ndarray:
    """A 0/1 vector with exactly `percent`% ones at random places (seeded by `name`)."""
    hit = np.zeros(n, dtype=bool)
    hit[_rng(name).permutation(n)[: round(n * percent / 100)]] = True
    return hit


def items(name: str, task: str, score: float | str) -> dict[str, Any]:
    """items.json of a run that scores `score` (a percentage), or "constant": the floor's own predictor."""
    kind = KIND.get(task, "classification")
    n = N[kind]
    if kind == "classification":
        floor = {"pred": [1] * n, "label": LABELS.tolist()}
        hit = _hits(name, n, 0 if score == "constant" else score)  # right on `score`% of the items
        pred = np.ones(n, int) if score == "constant" else np.where(hit, LABELS, 1 - LABELS)
        model = {"pred": pred.tolist(), "label": LABELS.tolist()}
    elif kind == "span":
        hit = _hits(name, n, score).astype(float) * 100
        floor = {"exact_match": [0.0] * (n - 2) + [100.0] * 2, "f1": [0.0] * (n - 2) + [100.0] * 2}
        model = {"exact_match": hit.tolist(), "f1": hit.tolist()}
    else:  # one gold entity per sentence: found (tp) or missed with a wrong guess (fp + fn); F1 = hits / n
        hit = np.zeros(n, int) if score == "constant" else _hits(name, n, score).astype(int)
        floor = {"tp": [0] * n, "fp": [0] * n, "fn": [1] * n}  # all "O"
        model = {"tp": hit.tolist(), "fp": (1 - hit).tolist() if score != "constant" else [0] * n,
                 "fn": (1 - hit).tolist()}
    return {"split": SPLIT.get(task, "validation"), "kind": kind, "metric": METRIC.get(task, "accuracy"), "n": n,
            "model": model, "floor": {"name": "the floor", **floor}}


def headline(item_file: dict[str, Any], side: str = "model") -> float:
    cols = {k: np.asarray(v) for k, v in item_file[side].items() if k != "name"}
    return stats.score(item_file["kind"], item_file["metric"], cols)


FROZEN = {"finetune": ("finetune", None, False), "bilstm": ("finetune", None, True), "probe": ("probe", "last", False)}


def ft(encoder: str, task: str, score: float | str | None, seed: int = 1, mode: str = "finetune",
       with_items: bool = True, pretrain_seed: int = 1) -> dict[str, Any]:
    """A fine-tuning run of row `<encoder>-<mode>` (`mode`: a mode of the study; any other is a Table 7 strategy) on
    the encoder's pretraining run at `pretrain_seed`, as the pipeline names it: its metrics.json record, and under
    "_items" its items.json (None: no items file). `score` None = the task had no data."""
    name = f"{task}-{encoder}-{mode}-{pretrain_seed}-{seed}"
    finetune_mode, features, bilstm = FROZEN.get(mode, ("feature_based", mode, True))
    split, metric = SPLIT.get(task, "validation"), METRIC.get(task, "accuracy")
    draw = name if pretrain_seed != 1 else f"{task}-{encoder}-{mode}-{seed}"  # the first run's items: as they were
    item_file = items(draw, task, score) if score is not None else None
    value = headline(item_file) if item_file else None
    return {
        "name": name, "encoder": encoder, "pretrain_seed": pretrain_seed, "task": task, "seed": seed,
        "mode": finetune_mode, "features": features,
        "bilstm": bilstm, "status": "ok" if value is not None else "no data",
        "reason": None if value is not None else "not in mirror",
        "metrics": {split: {metric: value}} if value is not None else {}, "headline": value,
        "headline_metric": metric, "train_seconds": 1.0, "_items": item_file if with_items else None,
        "steps": 300 if value is not None and mode != "probe" else None,
        "train_examples": 4800 if value is not None else None,
        **({"probe": {"C": 0.01, "converged": True}} if mode == "probe" else {}),
    }


def heldout(name: str, ppl: float, kind: str = "masked-token", fmt: str = "nsp") -> dict[str, Any]:
    """heldout_items.json of a run with perplexity exactly `ppl`: per-instance losses around log(ppl), the harder
    instances hard for every model, and the unigram floor (exactly UNIGRAM) on the same positions."""
    shared = np.random.default_rng(0).normal(0, 0.5, HELDOUT)
    own = _rng(name).normal(0, 0.1, HELDOUT)
    loss = shared + own - (shared + own).mean() + np.log(ppl)
    count = np.full(HELDOUT, 10)
    return {"format": fmt, "kind": kind, "n": HELDOUT,
            "model": {"loss_sum": (10 * loss).tolist(), "count": count.tolist()},
            "floor": {"name": "unigram", "loss_sum": (10 * (shared - shared.mean() + np.log(UNIGRAM))).tolist(),
                      "count": count.tolist()}}


def pre(name: str, preset: tuple[int, ...], trained: tuple[int, ...], non_embedding: int, ppl: float,
        nsp: bool = True, kind: str = "masked-token") -> dict[str, Any]:
    """A pretraining run's metrics.json, and under "_items" its heldout_items.json."""
    item_file = heldout(name, ppl, kind, "nsp" if nsp else "packed")
    return {
        "objective": "mlm_nsp" if nsp else "ltr", "nsp": nsp, "causal": kind == "next-token",
        "shape": dict(zip(KEYS, trained)), "preset": "L{}_H{}_A{}".format(*preset),
        "parameters": {"total": non_embedding + 10**6, "non_embedding": non_embedding}, "steps": 2000,
        "train_seconds": 1.0, "heldout_mlm_loss": 3.0, "heldout_ppl": stats.score("lm", "ppl", {
            k: np.asarray(v) for k, v in item_file["model"].items()}), "heldout_kind": kind, "_items": item_file,
    }


BASE = (12, 768, 12, 3072)
SMALL = (4, 192, 12, 768)
PRETRAIN = {
    "bert": pre("bert", BASE, SMALL, 1_800_000, 40.0),
    "ltr": pre("ltr", BASE, SMALL, 1_800_000, 30.0, nsp=False, kind="next-token"),
    "scratch": pre("scratch", BASE, SMALL, 1_800_000, 8000.0),
    "L3_H768_A12": pre("L3_H768_A12", (3, 768, 12, 3072), (1, 192, 12, 768), 450_000, 60.0),
    "L6_H768_A3": pre("L6_H768_A3", (6, 768, 3, 3072), (2, 192, 3, 768), 900_000, 52.0),
    "L6_H768_A12": pre("L6_H768_A12", (6, 768, 12, 3072), (2, 192, 12, 768), 900_000, 50.0),
    "L12_H768_A12": pre("L12_H768_A12", BASE, SMALL, 1_800_000, 40.0),  # Table 6's 12/768/12 row
}
FINETUNE = [
    *(ft("bert", "mrpc", v, seed=s) for s, v in [(1, 80.0), (2, 82.0), (3, 84.0)]),  # 82.0 ± 2.0
    ft("nonsp", "mrpc", 55.0),  # BERT far above: NSP helps on MRPC, reproduced
    ft("bert", "sst2", 85.0, seed=1), ft("bert", "sst2", 86.0, seed=2),  # 85.5 ± 0.7071
    ft("nonsp", "sst2", 85.5),  # a tie: unresolved
    ft("bert", "squad", 70.0), ft("bert", "mnli", None),  # bert qnli: never run
    *(ft("L12_H768_A12", "mrpc", v, seed=s) for s, v in [(1, 80.0), (2, 82.0), (3, 84.0)]),
    ft("L12_H768_A12", "sst2", 85.0, seed=1), ft("L12_H768_A12", "sst2", 86.0, seed=2),
    ft("L12_H768_A12", "mnli", None),
    ft("ltr", "mrpc", 97.0),  # LTR far above BERT: MLM beats LTR on MRPC, contradicted
    ft("ltr", "squad", 40.0),  # BERT 70: reproduced
    ft("ltr", "squad", 50.0, mode="bilstm", with_items=False),  # no items.json: not measured
    ft("scratch", "mrpc", "constant"), ft("scratch", "sst2", 80.0),  # scratch MRPC: the majority class, at floor
    ft("L3_H768_A12", "mrpc", 70.0), ft("L6_H768_A3", "mrpc", 75.0),
    ft("L3_H768_A12", "sst2", 30.0),  # below the 60.0 floor
    ft("bert", "conll2003", 90.0),
    *(ft("bert", "conll2003", v, mode=f) for f, v in [("embeddings", "constant"), ("last", 80.0),
                                                       ("concat_last_four", 85.0)]),
]
MANIFEST = {
    "source": "/mirror", "tasks": {"mnli": {"status": "no data", "reason": "nyu-mll/glue/mnli: not in the mirror"}},
    "deviations": {"nyu-mll/glue/qnli/train": "QNLI train REBUILT from SQuAD v1.1 train"},
}
LOSS_CSV = "epoch,step,train/loss,train/mlm_loss,val/ppl\n0,9,8.0,7.5,\n0,19,6.0,5.5,\n0,19,,,300.0\n0,29,5.0,4.5,\n"


def _dump(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def pretrain_runs(pretrain: dict[str, dict] = PRETRAIN) -> dict[str, dict]:
    """`Results.pretrain` of `pretrain` (encoder -> its run at seed 1): run name -> record."""
    return {f"{e}-1": {"name": f"{e}-1", "encoder": e, "seed": 1, **{k: v for k, v in r.items() if k != "_items"}}
            for e, r in pretrain.items()}


def write_data(root: Path, finetune: list[dict] = FINETUNE, pretrain: dict[str, dict] = PRETRAIN) -> None:
    """The synthetic results as the other stages lay them out under `root` (a data/ directory): `pretrain` maps an
    encoder (or any key, with the run's `encoder` and `seed` in its record; seed 1 where none) to its run."""
    _dump(root / "download" / "manifest.json", MANIFEST)
    for key, run in pretrain.items():
        encoder, seed = run.get("encoder", key), run.get("seed", 1)
        folder = root / "pretrain" / encoder / f"{encoder}-{seed}"
        record = {k: v for k, v in run.items() if k != "_items"}
        _dump(folder / "metrics.json", {"name": folder.name, "encoder": encoder, "seed": seed, **record})
        _dump(folder / "heldout_items.json", run["_items"])
        if encoder != "scratch":  # never trained: no curve
            (folder / "metrics.csv").write_text(LOSS_CSV)
    for run in finetune:
        cell = root / "finetune" / run["encoder"] / run["name"]
        _dump(cell / "metrics.json", {k: v for k, v in run.items() if k != "_items"})
        if run["_items"] is not None:
            _dump(cell / "items.json", run["_items"])
