"""The paper's claims as declared contrasts (`ablations.claims`), each decided by paired bootstrap (`bertlab.report.stats`).

A claim says "A is better than B" on some columns of one table; it expands into pairs (column, A, B): A and B are
the cells of the rows (`<encoder>-<mode>`) its `better` and `than` name, or, with `by_size`, every two rows of the
table whose models differ in non-embedding parameters, the larger as A. Its columns are its table's tasks, or its
`columns`, and its `also`. Each pair gets A - B with its 95% interval and a verdict, the paper's own A - B from the
rows' `paper` numbers (where both have one; never for perplexity) and where it lies against the interval, and whether a
side is at (or below) its floor, where effects are compressed.
A claim with `floor_ratio: r` says instead that A's held-out perplexity is at most r times its unigram floor's (on
the same positions): each pair gets that ratio with its interval over held-out instances.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations, product
from typing import Any

from bertlab.errors import UserError
from bertlab.report import stats
from bertlab.report.cells import PPL, Cell, CellOf, cell_lookup, side_cell
from bertlab.report.collect import NOT_RUN, Results
from bertlab.report.tables import (encoder_of, paper_effect, row_key, row_label, rows, shape_size, table_names,
                                   tasks)
from bertlab.study import SEP


@dataclass(frozen=True)
class Side:
    label: str  # the table row's label, or its `<encoder>-<mode>`
    key: str
    row: str  # `<encoder>-<mode>`: its cells are the runs `<task>-<row>-<seed>`


@dataclass(frozen=True)
class Pair:
    """One contrast of a claim: the paper says A is better than B in `column`."""

    column: str
    a: Side
    b: Side
    contrast: stats.Contrast
    reason: str = ""  # why it was not measured
    bound: float | None = None  # a ratio pair's: B is `bound` times A's floor
    budget: str = ""  # the cells' fine-tuning budget (A's / B's where they differ)
    paper: float | None = None  # the paper's own A - B (None: it gives no comparable number)
    compressed: bool = False  # a side is at or below its floor

    @property
    def ratio(self) -> bool:
        """Whether the contrast is A's perplexity over B's (B: `bound` times A's floor), not A - B."""
        return self.bound is not None

    @property
    def name(self) -> str:
        return f"{self.column}: {self.a.key} vs {self.b.key}"

    @property
    def paper_vs_interval(self) -> str | None:
        """Where the paper's A - B lies against our interval: "inside", "above", "below", or None."""
        return stats.against_paper(self.contrast, self.paper)

    @property
    def reading(self) -> str:
        """The verdict with what the interval says of the paper's effect, and the floor's compression."""
        return stats.reading(self.contrast, self.paper, self.compressed)


@dataclass(frozen=True)
class Finding:
    """A claim of the paper and its pairs on our runs."""

    id: str
    table: str
    text: str
    pairs: tuple[Pair, ...]

    @property
    def summary(self) -> str:
        """The one pair's verdict, the counts of each verdict over the pairs, or "not measured" with none run."""
        if not self.pairs:
            return f"{stats.NOT_MEASURED} (not run)"
        if len(self.pairs) == 1:
            return self.pairs[0].contrast.verdict
        return stats.summarize([p.contrast for p in self.pairs])


def contrast(a: Cell, b: Cell, a_label: str, b_label: str, bootstrap: dict[str, Any]) -> tuple[stats.Contrast, str]:
    """A - B over the cells' per-item scores, or "not measured" with the reason."""
    why = [f"{label}: {cell.reason}" for label, cell in ((a_label, a), (b_label, b)) if cell.reason]
    if not why and (a.scored_on, a.n_items) != (b.scored_on, b.n_items):
        why = [f"{a_label} was scored on {a.n_items} {a.scored_on} items, {b_label} on {b.n_items} {b.scored_on}"]
    if why:
        nan = math.nan
        return stats.Contrast(nan, nan, nan, stats.NOT_MEASURED, 0, len(a.runs), len(b.runs)), "; ".join(why)
    result = stats.compare(a.runs, b.runs, a.kind, a.metric, **bootstrap)
    return result, "" if result.verdict != stats.NOT_MEASURED else "the metric is not finite"


def _side(spec: dict[str, Any], table: str, row: str) -> Side:
    """A claim's side: named as its table names the row, if it has it."""
    found = rows(spec, table).get(row)
    return Side(row, row, row) if found is None else Side(row_label(row, found), row_key(row, found), row)


def _sides(spec: dict[str, Any], claim: dict[str, Any], where: str, key: str) -> list[Side]:
    value = claim.get(key)
    listed = value if isinstance(value, list) else [value]
    if not listed or not all(isinstance(r, str) and SEP in r for r in listed):
        raise UserError(f"{where}.{key}: give one or a list of rows, each <encoder>-<mode>, not {value!r}")
    return [_side(spec, claim["table"], r) for r in listed]


def columns(spec: dict[str, Any], claim: dict[str, Any]) -> list[str]:
    """A claim's columns: its `columns`, else its table's tasks; then its `also`."""
    return [*(claim.get("columns") or tasks(spec, claim["table"])), *claim.get("also", [])]


def size_pairs(spec: dict[str, Any], results: Results, table: str) -> list[tuple[Side, Side]]:
    """(larger, smaller) for every two rows of `table` whose models differ in non-embedding parameters (as trained;
    by the paper's shape where a run is missing, which orders them the same way)."""
    pairs = []
    for (n1, r1), (n2, r2) in combinations(rows(spec, table).items(), 2):
        runs = [results.pretrain.get(encoder_of(n)) for n in (n1, n2)]
        if all(runs):
            s1, s2 = (run["parameters"]["non_embedding"] for run in runs)
        else:
            s1, s2 = shape_size(r1["shape"]), shape_size(r2["shape"])
        if s1 != s2:
            big, small = ((n1, r1), (n2, r2)) if s1 > s2 else ((n2, r2), (n1, r1))
            pairs.append(tuple(Side(row_label(n, r), row_key(n, r), n) for n, r in (big, small)))
    return pairs


def floor_ratio_pair(spec: dict[str, Any], results: Results, a: Side, bound: float,
                     bootstrap: dict[str, Any]) -> Pair:
    """A's held-out perplexity over its unigram floor's, against `bound`."""
    cell = side_cell(spec, results, a.row, PPL)
    b = Side(f"{bound:g} × unigram", "floor", "")
    reason = cell.reason or ("" if cell.floor is not None else "no per-instance floor")
    if reason:
        nan = math.nan
        return Pair(PPL, a, b, stats.Contrast(nan, nan, nan, stats.NOT_MEASURED, 0, 1, 1), reason, bound=bound)
    return Pair(PPL, a, b, stats.ratio_to_floor(cell.runs[0], cell.floor, bound, **bootstrap), bound=bound)


def _check(spec: dict[str, Any], claim: Any, where: str) -> None:
    if not isinstance(claim, dict) or not isinstance(claim.get("id"), str) or not isinstance(claim.get("text"), str):
        raise UserError(f"{where}: a claim needs an `id` and a one-line `text`")
    if claim.get("table") not in spec["tables"]:
        raise UserError(f"{where}.table: {claim.get('table')!r} is not one of {', '.join(table_names(spec))}")
    for key in ("columns", "also"):
        if key in claim and (not isinstance(claim[key], list) or not set(claim[key]) <= {PPL, *spec["columns"]}):
            raise UserError(f"{where}.{key}: a list of `ablations.columns` tasks (or {PPL}), not {claim[key]!r}")
    if claim.get("floor_ratio") is not None and columns(spec, claim) != [PPL]:
        raise UserError(f"{where}.columns: a floor_ratio claim is about [{PPL}], not {columns(spec, claim)!r}")
    if not set(claim.get("if_run", [])) <= set(spec["columns"]):
        raise UserError(f"{where}.if_run: {claim['if_run']!r} must be tasks of `ablations.columns`")
    if claim.get("by_size") and any("shape" not in row for row in rows(spec, claim["table"]).values()):
        raise UserError(f"{where}.by_size: the rows of {claim['table']} need encoders of a paper shape's model "
                        "preset (model=L<layers>_H<hidden>_A<heads>)")


def check_claims(spec: dict[str, Any], results: Results, cell: CellOf | None = None) -> list[Finding]:
    """Every declared claim, each pair decided by a paired bootstrap over items and seeds (`cell`: a `cell_lookup`
    shared with the tables, so each side's floor is bootstrapped once)."""
    bootstrap = spec.get("bootstrap", {})
    cell = cell or cell_lookup(spec, results)

    findings, ids = [], set()
    for i, claim in enumerate(spec.get("claims", [])):
        where = f"ablations.claims[{i}]"
        _check(spec, claim, where)
        if claim["id"] in ids:
            raise UserError(f"{where}.id: {claim['id']!r} is used twice")
        ids.add(claim["id"])
        table = claim["table"]
        if claim.get("floor_ratio") is not None:
            findings.append(Finding(claim["id"], table, claim["text"], tuple(
                floor_ratio_pair(spec, results, a, float(claim["floor_ratio"]), bootstrap)
                for a in _sides(spec, claim, where, "better"))))
            continue
        if claim.get("by_size"):
            sides = size_pairs(spec, results, table)
        else:
            sides = list(product(_sides(spec, claim, where, "better"), _sides(spec, claim, where, "than")))
        pairs = []
        for column, (a, b) in product(columns(spec, claim), sides):
            cells = cell(a.row, column), cell(b.row, column)
            if column in claim.get("if_run", []) and any(c.status == NOT_RUN for c in cells):
                continue
            result, reason = contrast(*cells, a.label, b.label, bootstrap)
            budgets = [c.budget for c in cells]
            budget = budgets[0] if budgets[0] == budgets[1] else " / ".join(x or "—" for x in budgets)
            pairs.append(Pair(column, a, b, result, reason, budget=budget,
                              paper=paper_effect(spec, table, a.row, b.row, column),
                              compressed=any(c.at_floor for c in cells)))
        findings.append(Finding(claim["id"], table, claim["text"], tuple(pairs)))
    return findings
