"""The layout of the study's tables as the `ablations` config gives them (`tables`: each its tasks and its rows
`<encoder>-<mode>`, `bertlab.study`): what a row is called in the report, and which runs are its cells."""

from __future__ import annotations

from typing import Any

from bertlab.errors import UserError
from bertlab.settings import preset_shape
from bertlab.study import cell_name, split_row

PPL = "ppl"  # Table 6's held-out LM perplexity column; every other column is a task


def table_names(spec: dict[str, Any]) -> list[str]:
    """The tables, in the declaration's order."""
    return list(spec["tables"])


def tasks(spec: dict[str, Any], table: str) -> list[str]:
    return list(spec["tables"][table]["tasks"])


def rows(spec: dict[str, Any], table: str) -> dict[str, dict[str, Any]]:
    """A table's rows: `<encoder>-<mode>` -> its label, key, paper numbers and, where its encoder's model is a paper
    shape's preset, that `shape` (`row_shape`)."""
    found = {}
    for name, row in spec["tables"][table]["rows"].items():
        row, shape = row or {}, row_shape(spec, name)
        if row.get("shape", shape) != shape:
            raise UserError(f"ablations.tables.{table}.rows.{name}.shape={row['shape']!r}: its encoder's model "
                            f"preset is {shape or 'no paper shape'} (leave `shape` out: it is the preset's)")
        found[name] = row | ({"shape": shape} if shape else {})
    return found


def row_shape(spec: dict[str, Any], name: str) -> str | None:
    """Row `name`'s paper shape `<layers>/<hidden>/<heads>` as its encoder's model preset names it (the last
    `model=L<layers>_H<hidden>_A<heads>` of its overrides), or None."""
    models = [o.partition("=")[2] for o in spec.get("encoders", {}).get(encoder_of(name), []) if o.startswith("model=")]
    shape = preset_shape(models[-1]) if models else None
    return "/".join(map(str, shape)) if shape else None


def row_key(name: str, row: dict[str, Any]) -> str:
    """A row's name in reports/metrics.json and claims.json: its `key`, else its encoder (beside a mode other than
    `finetune`: `<encoder>_<mode>`)."""
    encoder, mode = split_row(name)
    return row.get("key") or (encoder if mode == "finetune" else f"{encoder}_{mode}")


def row_label(name: str, row: dict[str, Any]) -> str:
    """A row's name in the tables: its `label`, else (Table 6) its paper shape, else its `<encoder>-<mode>`."""
    return row.get("label") or row.get("shape") or name


def paper(spec: dict[str, Any], table: str, row: dict[str, Any]) -> dict[str, float]:
    """The paper's numbers of a row by column (a number alone: the table's one task's)."""
    value = row.get("paper") or {}
    return value if isinstance(value, dict) else {tasks(spec, table)[0]: value}


def paper_effect(spec: dict[str, Any], table: str, a: str, b: str, column: str) -> float | None:
    """The paper's own A - B in `column` between rows `a` and `b` (`<encoder>-<mode>`) of `table`; None where either
    row lacks the number, and for perplexity (the paper's is on another tokenizer and corpus: not comparable)."""
    if column == PPL:
        return None
    table_rows = rows(spec, table)
    numbers = [paper(spec, table, table_rows.get(r, {})).get(column) for r in (a, b)]
    return None if None in numbers else numbers[0] - numbers[1]


def encoder_of(name: str) -> str:
    return split_row(name)[0]


def in_row(run: dict[str, Any], task: str, name: str) -> bool:
    """Whether a fine-tuning run's metrics.json record is a run of row `name`'s cell in `task`."""
    return run["task"] == task and run["name"] == cell_name(task, name, run["pretrain_seed"], run["seed"])


def matches(run: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether a fine-tuning run's metrics.json record has every field of `fields`."""
    return all(run.get(k) == v for k, v in fields.items())


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
