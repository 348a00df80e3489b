"""The layout of the paper's Tables 5, 6 and 7 as the `ablations` config gives it: which runs each row selects.

Light on purpose (no numpy, no matplotlib): the `configs` stage imports `tables_of` to write each training run's
W&B tags into its config.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

TABLES = ("table5", "table6", "table7")
FINETUNE = {"mode": "finetune", "bilstm": False}  # what a Table 5 or 6 row means unless it says otherwise
SELECTORS = ("encoder", "mode", "features", "bilstm")


def defaults(spec: dict[str, Any], table: str) -> dict[str, Any]:
    """The fields every row of `table` selects unless it says otherwise."""
    return {"encoder": spec["table7"]["encoder"]} if table == "table7" else dict(FINETUNE)


def select(spec: dict[str, Any], table: str, row: dict[str, Any]) -> dict[str, Any]:
    """The fine-tuning run fields a row (or a claim's side) of `table` selects: its selectors over the defaults."""
    return defaults(spec, table) | {k: row[k] for k in SELECTORS if k in row}


def tasks(spec: dict[str, Any], table: str) -> list[str]:
    return [spec["table7"]["task"]] if table == "table7" else list(spec[table]["tasks"])


def table_rows(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(table, row, the fields its fine-tuning runs have) for every row of Tables 5, 6 and 7."""
    for table in TABLES:
        for row in spec[table]["rows"]:
            yield table, row, select(spec, table, row)


def row_key(row: dict[str, Any]) -> str:
    """A row's name in reports/metrics.json: its `key`, else its encoder."""
    return row.get("key", row.get("encoder", ""))


def row_label(row: dict[str, Any]) -> str:
    """A row's name in the tables: its `label`, else (Table 6) its paper shape."""
    return row.get("label") or row["shape"]


def matches(run: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether a fine-tuning run's metrics.json record has every field of `fields`."""
    return all(run.get(k) == v for k, v in fields.items())


def tables_of(spec: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The tables that use a run: a pretraining run (`{"encoder": name}`) through any row on it, a fine-tuning run
    (encoder, task, mode, features, bilstm) as a cell. W&B groups and tags runs by them."""
    def uses(table: str, fields: dict[str, Any]) -> bool:
        if "task" not in run:
            return fields["encoder"] == run["encoder"]
        return run["task"] in tasks(spec, table) and matches(run, fields)

    return [t for t in TABLES if any(table == t and uses(t, fields) for table, _, fields in table_rows(spec))]


def shape_text(shape: dict[str, int]) -> str:
    return f"{shape['num_layers']}/{shape['hidden_size']}/{shape['num_heads']}"


def preset_name(shape: str) -> str:
    """The `conf/model` preset of a paper shape: '12/768/12' -> 'L12_H768_A12'."""
    layers, hidden, heads = shape.split("/")
    return f"L{layers}_H{hidden}_A{heads}"


def shape_size(shape: str) -> int:
    """Layers x hidden²: the order of a paper shape's non-embedding parameters (12·L·H² to leading order)."""
    layers, hidden, _ = (int(x) for x in shape.split("/"))
    return layers * hidden * hidden
