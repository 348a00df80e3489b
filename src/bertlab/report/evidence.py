"""The report's evidence: everything its statistics read, written beside it into `<report dir>/evidence/`, from which
`python -m bertlab.report.recompute` recomputes every cell, interval and verdict without data/ or conf/.

`runs.json`: {"format", "spec": the `ablations` config the report used, "results": each field of
`bertlab.report.collect.Results` as it is (the fine-tuning and pretraining records exactly as their metrics.json hold
them, the curves, manifest, timing, not_run, as_of), except that each per-item field (`items`, `heldout`) holds
{run: its `Items` with each side's columns replaced by their names}}. `items.npz` (`np.savez_compressed`): every
per-item column under `<field>/<run>/<side>/<column>` (side: `model` or `floor`), in the dtype the report read.
Both are written field by field from the dataclasses, so a field or record key added there travels without a change
here. JSON keeps key order and Python's NaN; a read back `Results` equals the one written, tuples and dtypes too.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import numpy as np

from bertlab.errors import UserError
from bertlab.report.collect import Columns, Items, Results

FORMAT = 1
RUNS, ARRAYS = "runs.json", "items.npz"
BROKEN = (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile, zlib.error)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _holds_items(hint: Any) -> bool:
    """Whether a `Results` field is {run: Items}."""
    return get_origin(hint) is dict and get_args(hint)[-1] is Items


def _typed(value: Any, hint: Any) -> Any:
    """A JSON value as the type `hint` declares it: JSON's lists back into tuples where the hint has them."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple:
        return tuple(_typed(v, a) for v, a in zip(value, args))
    if origin is list:
        return [_typed(v, args[0]) for v in value]
    if origin is dict:
        return {k: _typed(v, args[1]) for k, v in value.items()}
    return value


def _key(*parts: str) -> str:
    return "/".join(parts)


def save(folder: Path, spec: dict[str, Any], results: Results) -> None:
    """Write `runs.json` and `items.npz` into `folder` (created): the study `spec` and every field of `results`."""
    arrays: dict[str, np.ndarray] = {}
    plain: dict[str, Any] = {}
    for f in fields(Results):
        value = getattr(results, f.name)
        if not _holds_items(_hints(Results)[f.name]):
            plain[f.name] = value
            continue
        plain[f.name] = {}
        for run, items in value.items():
            entry = plain[f.name][run] = {}
            for g in fields(Items):
                side = getattr(items, g.name)
                if _hints(Items)[g.name] == Columns:
                    arrays.update({_key(f.name, run, g.name, c): column for c, column in side.items()})
                    side = list(side)
                entry[g.name] = side
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUNS).write_text(json.dumps({"format": FORMAT, "spec": spec, "results": plain}, indent=1) + "\n")
    np.savez_compressed(folder / ARRAYS, **arrays)


def _items(raw: dict[str, Any], field: str, run: str, arrays: Any) -> Items:
    """One run's `Items` from its entry in runs.json and its columns in items.npz."""
    values = {}
    for g in fields(Items):
        if _hints(Items)[g.name] == Columns:
            values[g.name] = {c: arrays[_key(field, run, g.name, c)] for c in raw[g.name]}
            if any(column.shape != (raw["n"],) for column in values[g.name].values()):
                raise ValueError(f"{field}/{run}/{g.name}: a column of other than n={raw['n']} items")
        else:
            values[g.name] = raw[g.name]
    return Items(**values)


def load(folder: Path) -> tuple[dict[str, Any], Results]:
    """The study spec and the `Results` that `save` wrote into `folder`; a UserError naming it when it is missing,
    of another format or unreadable."""
    if not (folder / RUNS).is_file() or not (folder / ARRAYS).is_file():
        raise UserError(f"{folder}: no {RUNS} and {ARRAYS} there (the ablations stage writes them beside "
                        "claims.json)")
    try:
        raw = json.loads((folder / RUNS).read_text(encoding="utf-8"))
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, not {FORMAT}")
        stored = raw["results"]
        with np.load(folder / ARRAYS, allow_pickle=False) as arrays:
            values = {f.name: {run: _items(entry, f.name, run, arrays) for run, entry in stored[f.name].items()}
                      if _holds_items(_hints(Results)[f.name]) else _typed(stored[f.name], _hints(Results)[f.name])
                      for f in fields(Results)}
        return raw["spec"], Results(**values)
    except BROKEN as err:
        why = " ".join(str(err).split())  # one line
        raise UserError(f"{folder}: not the report's evidence ({type(err).__name__}: {why})") from err
