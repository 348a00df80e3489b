"""Read what the other stages wrote: fine-tuning and pretraining metrics, their per-item files, loss curves and
the download manifest (their formats: the docstrings of the stages that write them and of `bertlab.kinds`)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from bertlab.errors import UserError
from bertlab.files import read_json
from bertlab.kinds import KINDS
from bertlab.study import NOT_RUN

OK, NO_DATA = "ok", "no data"  # a run's status; NOT_RUN: the profile left it out (a cell's status: never run, too)
STAGES = ("download", "tokenizer", "pretrain_data", "pretrain", "finetune", "ablations")  # in pipeline order
Columns = dict[str, np.ndarray]


@dataclass(frozen=True)
class Items:
    """One run's per-item scores and its floor's, on the same n items (a fine-tuning dev set or held-out set)."""

    scored_on: str  # what the items are: the dev split, or the held-out format and kind ("nsp masked-token")
    kind: str  # `bertlab.report.stats` kind: a task kind (`bertlab.kinds`), or lm
    n: int
    model: Columns
    floor: Columns
    floor_name: str


@dataclass(frozen=True)
class Results:
    """Everything the report reads from the data directory."""

    finetune: list[dict[str, Any]]  # metrics.json of every fine-tuning run
    items: dict[str, Items]  # fine-tuning run name -> the items.json beside its metrics.json
    pretrain: dict[str, dict[str, Any]]  # pretraining run name (`<encoder>-<seed>`) -> its metrics.json
    heldout: dict[str, Items]  # pretraining run name -> its heldout_items.json
    curves: dict[str, list[tuple[int, float]]]  # pretraining run -> (step, train loss)
    manifest: dict[str, Any]
    as_of: str  # modification time of the newest input file
    timing: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # stage -> run -> seconds
    not_run: dict[str, str] = field(default_factory=dict)  # pretraining run the profile left out -> why

    def has_data(self, task: str) -> bool:
        """Whether `task`'s data was downloaded, as the manifest says (a task it does not name: yes)."""
        return self.manifest.get("tasks", {}).get(task, {}).get("status", OK) == OK


def _columns(path: Path, side: Any, n: int, names: set[str] | None) -> Columns:
    """The per-item columns of one side ("model" or "floor", whose "name" is not a column) as arrays."""
    side = side if isinstance(side, dict) else {}
    cols = {k: np.asarray(v, dtype=np.float64) for k, v in side.items() if k != "name"}
    if not cols or (names is not None and set(cols) != names):
        raise UserError(f"{path}: 'model' and 'floor' must hold the same per-item columns")
    if any(c.shape != (n,) for c in cols.values()):
        raise UserError(f"{path}: every per-item column must be a list of n={n} numbers")
    return cols


def read_items(path: Path) -> Items:
    """A fine-tuning run's `items.json` or a pretraining run's `heldout_items.json`."""
    raw = read_json(path)
    try:
        n = int(raw["n"])
        model = _columns(path, raw["model"], n, None)
        floor = _columns(path, raw["floor"], n, set(model))
        if path.name == "heldout_items.json":
            return Items(f"{raw['format']} {raw['kind']}", "lm", n, model, floor, raw["floor"].get("name", ""))
        if raw["kind"] not in KINDS:
            raise UserError(f"{path}: kind {raw['kind']!r} is not one of {sorted(KINDS)}")
        return Items(raw["split"], raw["kind"], n, model, floor, raw["floor"].get("name", ""))
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"{path}: not a per-item file of the documented format ({err!r})") from err


def identity(run: dict[str, Any]) -> tuple:
    """What makes a fine-tuning run a cell of a table (all but the pretraining run and the seed)."""
    features = run.get("features") if run["mode"] != "finetune" else None
    return run["encoder"], run["task"], run["mode"], features, bool(run.get("bilstm"))


def encoder_runs(results: Results, encoder: str, seeds: list[int] | None = None) -> list[dict[str, Any]]:
    """The finished pretraining runs of `encoder` (at `seeds`; None: all), by seed."""
    found = [r for r in results.pretrain.values() if r["encoder"] == encoder and (seeds is None or r["seed"] in seeds)]
    return sorted(found, key=lambda r: r["seed"])


def encoder_record(results: Results, encoder: str) -> dict[str, Any] | None:
    """What every pretraining run of `encoder` shares (its shape, parameters, objective): its first run's record."""
    return next(iter(encoder_runs(results, encoder)), None)


def read_curve(path: Path, column: str = "train/loss") -> list[tuple[int, float]]:
    """(step, value) of one column of a Lightning CSVLogger file, skipping rows where it was not logged."""
    points: dict[int, float] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            value = float(row.get(column) or "nan")
            if not math.isnan(value):
                points[int(float(row["step"]))] = value
    return sorted(points.items())


def read_timing(data_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """{stage: {run: {startup_seconds, process_seconds}}}: what each completed stage process left in
    `<data_dir>/timing/` (`bertlab.stage.main`) for the budget ledger."""
    return {stage: {p.stem: read_json(p) for p in sorted((data_dir / "timing" / stage).glob("*.json"))}
            for stage in STAGES if (data_dir / "timing" / stage).is_dir()}


def collect(data_dir: Path) -> Results:
    """Read every pretraining and fine-tuning result with its per-item file, and the download manifest (a pretraining
    run the profile left out: in `not_run`, with why; a fine-tuning one is a record of status NOT_RUN)."""
    manifest_file = data_dir / "download" / "manifest.json"
    if not manifest_file.exists():
        raise UserError(f"{manifest_file} not found: run the download stage first")
    pretrain_files = sorted((data_dir / "pretrain").glob("*/*/metrics.json"))  # <encoder>/<encoder>-<seed>
    finetune_files = sorted((data_dir / "finetune").glob("*/*/metrics.json"))  # <encoder>/<cell>
    curve_files = sorted((data_dir / "pretrain").glob("*/*/metrics.csv"))
    item_files = [p.with_name("items.json") for p in finetune_files if p.with_name("items.json").exists()]
    heldout_files = sorted((data_dir / "pretrain").glob("*/*/heldout_items.json"))
    finetune = [read_json(p) for p in finetune_files]
    seen: dict[tuple, str] = {}
    for run in finetune:
        key = (*identity(run), run["pretrain_seed"], run["seed"])
        if key in seen:
            raise UserError(f"fine-tuning runs {seen[key]!r} and {run['name']!r} are the same cell, pretraining run "
                            "and seed")
        seen[key] = run["name"]
    inputs = [manifest_file, *pretrain_files, *finetune_files, *curve_files, *item_files, *heldout_files]
    newest = max(p.stat().st_mtime for p in inputs)
    curves = {p.parent.name: read_curve(p) for p in curve_files}
    pretrain = {p.parent.name: read_json(p) for p in pretrain_files}
    not_run = {name: run.get("reason", NOT_RUN) for name, run in pretrain.items() if run.get("status") == NOT_RUN}
    return Results(
        finetune=finetune,
        items={run["name"]: read_items(p.with_name("items.json"))
               for run, p in zip(finetune, finetune_files) if p.with_name("items.json").exists()},
        pretrain={name: run for name, run in pretrain.items() if name not in not_run},
        heldout={p.parent.name: read_items(p) for p in heldout_files},
        curves={name: points for name, points in curves.items() if points},
        manifest=read_json(manifest_file),
        as_of=datetime.fromtimestamp(newest, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        timing=read_timing(data_dir),
        not_run=not_run,
    )
