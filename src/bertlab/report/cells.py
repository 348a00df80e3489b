"""The cells of the study's tables: our number over pretraining runs and seeds (from metrics.json), the runs' per-item
scores (for the paired contrasts) and the floor beside it (from the same per-item files)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from bertlab.errors import UserError
from bertlab.report import stats
from bertlab.report.collect import NOT_RUN, NO_DATA, OK, Columns, Results, encoder_record, encoder_runs
from bertlab.study import pretrain_encoder
from bertlab.report.tables import (PPL, encoder_of, in_row, matches, paper, preset_name, row_key, row_label, rows,
                                   table_names, tasks)


RESAMPLING = ("draws", "seed", "level")  # `ablations.bootstrap`'s keys the resampling functions take


@dataclass(frozen=True)
class Cell:
    """Our number for one table cell over its runs (each a pretraining run's fine-tuning seed), their per-item scores,
    and its floor."""

    status: str  # OK | NO_DATA | NOT_RUN
    values: tuple[float, ...] = ()  # the headline metric of each run (NaN: not finite)
    pretrain_seeds: tuple[int, ...] = ()  # each run's pretraining seed (which pretraining run it is of)
    kind: str = ""  # the `bertlab.report.stats` kind and metric the per-item scores are scored with
    metric: str = ""
    scored_on: str = ""  # the items' split (or held-out format), which a paired contrast must share
    n_items: int = 0
    runs: tuple[Columns, ...] = ()  # per-item columns of each run
    floor: Columns | None = None
    floor_name: str = ""
    reason: str = ""  # why the cell has no per-item scores ("" when it has them)
    floor_value: float | None = None
    floor_status: str = stats.NOT_MEASURED
    budget: str = ""  # the runs' fine-tuning budget: optimizer updates and training examples
    features: str = ""  # the frozen-feature strategy its runs read (Table 7's; "" when fine-tuned whole or probed)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        """Sample standard deviation over the runs (n - 1); None below two."""
        return statistics.stdev(self.values) if self.n > 1 else None

    @property
    def groups(self) -> tuple[tuple[Columns, ...], ...]:
        """The per-item columns grouped by pretraining run (the Multi-Bootstrap's input), by seed."""
        seeds = sorted(set(self.pretrain_seeds))
        return tuple(tuple(r for r, s in zip(self.runs, self.pretrain_seeds) if s == seed) for seed in seeds)

    def counted(self) -> str:
        """How many runs the number is over: `n seed(s)`, or `p pretraining runs × k seeds`."""
        runs = len(set(self.pretrain_seeds))
        if runs <= 1:
            return f"{self.n} seed{'s' if self.n > 1 else ''}"
        per = f"{self.n // runs} seed{'s' if self.n > runs else ''}" if self.n % runs == 0 else f"{self.n} runs"
        return f"{runs} pretraining runs × {per}"

    def short(self, digits: int = 1) -> str:
        if not self.values:
            return "—" if self.status == NOT_RUN else self.status
        return f"{self.mean:.{digits}f}"

    def text(self, digits: int = 1) -> str:
        """`mean ± std (n seeds)`, `mean (1 seed)`, `mean ± std (3 pretraining runs × 2 seeds)`, "no data", or "—"
        for a run never made."""
        if not self.values:
            return self.short(digits)
        spread = f" ± {self.std:.{digits}f}" if self.std is not None else ""
        return f"{self.mean:.{digits}f}{spread} ({self.counted()})"

    @property
    def at_floor(self) -> bool:
        """Whether the runs are at or below their floor (`with_floor`'s paired bootstrap): differences from this cell
        are compressed, whatever the paper's."""
        return self.floor_status in (stats.AT_FLOOR, stats.BELOW_FLOOR)

    def floor_text(self, digits: int = 1) -> str:
        """The floor's value, flagged when we are at or below it; "" when there is none."""
        if self.floor_value is None:
            return ""
        return f"{self.floor_value:.{digits}f}" + (f", **{self.floor_status}**" if self.at_floor else "")


@dataclass(frozen=True)
class Entry:
    """One cell of a table: the paper's number beside ours."""

    table: str
    row: str  # the row's label
    key: str  # the row's name in metrics.json
    column: str  # a task, or ppl (Table 6)
    paper: float | None
    cell: Cell


def finetune_cell(results: Results, columns: dict[str, Any], task: str, fields: dict[str, Any]) -> Cell:
    """Our number for `task` over the fine-tuning runs whose fields equal `fields`."""
    return runs_cell(results, columns, task, [r for r in results.finetune if r["task"] == task and matches(r, fields)])


def row_cell(results: Results, columns: dict[str, Any], task: str, row: str, pretrain_seeds: list[int],
             seeds: list[int]) -> Cell:
    """Our number for `task` over the runs of table row `row` (`<encoder>-<mode>`) at the study's `pretrain_seeds` and
    `seeds`: `<task>-<row>-<pretraining seed>-<seed>` (a folder of a run no longer in the grid is not read)."""
    return runs_cell(results, columns, task, [r for r in results.finetune if in_row(r, task, row)
                                              and r["pretrain_seed"] in pretrain_seeds and r["seed"] in seeds])


def runs_cell(results: Results, columns: dict[str, Any], task: str, matching: list[dict[str, Any]]) -> Cell:
    """Our number for `task` over the fine-tuning runs `matching` (pretraining runs and seeds): ok runs win over "no
    data" (a run's, or the task's in the download manifest: no profile could run it here), and "no data" over runs the
    profile left out ("not run", with why)."""
    ok = sorted((r for r in matching if r["status"] == OK), key=lambda r: (r["pretrain_seed"], r["seed"]))
    if not ok:
        if not results.has_data(task) or any(r["status"] == NO_DATA for r in matching):
            return Cell(NO_DATA, reason=NO_DATA)
        why = next((r["reason"] for r in matching if r["status"] == NOT_RUN and r.get("reason")), NOT_RUN)
        return Cell(NOT_RUN, reason=why)
    col = columns[task]
    try:
        raw = [r["metrics"][col["split"]][col["metric"]] for r in ok]
    except KeyError as err:
        raise UserError(f"a {task} run has no metrics.{col['split']}.{col['metric']} ({err})") from err
    budget = "; ".join(sorted({budget_of(r) for r in ok}))
    features = {r.get("features") or "" for r in ok if r.get("mode") == "feature_based"}
    cell = Cell(OK, tuple(math.nan if v is None else float(v) for v in raw),  # None: not finite
                tuple(r["pretrain_seed"] for r in ok), metric=col["metric"], budget=budget, features=features.pop() if len(features) == 1 else "")
    missing = [r["name"] for r in ok if r["name"] not in results.items]
    if missing:
        return replace(cell, reason=f"no items.json for {', '.join(missing)}")
    items = [results.items[r["name"]] for r in ok]
    if {(i.scored_on, i.kind, i.n) for i in items} != {(col["split"], items[0].kind, items[0].n)}:
        return replace(cell, reason=f"the seeds' items.json are not all {items[0].n} {col['split']} items")
    first = items[0]
    return replace(cell, kind=first.kind, scored_on=first.scored_on, n_items=first.n,
                   runs=tuple(i.model for i in items), floor=first.floor, floor_name=first.floor_name)


def budget_of(run: dict[str, Any]) -> str:
    """A fine-tuning run's budget: its optimizer updates and training examples, or a probe's (a solver run to
    convergence, no updates)."""
    steps, examples = run.get("steps"), run.get("train_examples")
    if examples is None:
        return "?"
    if "probe" in run:
        return f"probe to convergence, {examples:,} examples"
    return f"{steps:,} updates, {examples:,} examples" if steps is not None else "?"


def pretrain_cell(results: Results, encoder: str, seeds: list[int] | None = None) -> Cell:
    """Held-out LM perplexity of `encoder`'s pretraining runs (at `seeds`; None: all), each with its per-instance
    losses, and the unigram floor (the same held-out instances for every run)."""
    found = encoder_runs(results, encoder, seeds)
    if not found:
        why = next((r for name, r in sorted(results.not_run.items()) if pretrain_encoder(name) == encoder), NOT_RUN)
        return Cell(NOT_RUN, reason=why)
    cell = Cell(OK, tuple(float(r["heldout_ppl"]) for r in found), tuple(r["seed"] for r in found), kind="lm",
                metric=PPL)
    missing = [r["name"] for r in found if r["name"] not in results.heldout]
    if missing:
        return replace(cell, reason=f"no heldout_items.json for {', '.join(missing)}")
    items = [results.heldout[r["name"]] for r in found]
    first = items[0]
    if {(i.scored_on, i.n) for i in items} != {(first.scored_on, first.n)}:
        return replace(cell, reason=f"{encoder}'s runs were not all scored on {first.n} {first.scored_on} items")
    return replace(cell, scored_on=first.scored_on, n_items=first.n, runs=tuple(i.model for i in items),
                   floor=first.floor, floor_name=first.floor_name)


def side_cell(spec: dict[str, Any], results: Results, row: str, column: str) -> Cell:
    """The cell a table row or a claim's side (`<encoder>-<mode>`) has in `column` (ppl: its encoder's), over the
    study's pretraining runs and seeds."""
    if column == PPL:
        return pretrain_cell(results, encoder_of(row), spec["pretrain_seeds"])
    return row_cell(results, spec["columns"], column, row, spec["pretrain_seeds"], spec["seeds"])


def resampling(bootstrap: dict[str, Any]) -> dict[str, Any]:
    """The bootstrap's own settings of `ablations.bootstrap` (draws, seed, level), as the resampling functions take
    them: not the power's assumed between-run SD (`run_sd`)."""
    return {k: v for k, v in bootstrap.items() if k in RESAMPLING}


def with_floor(cell: Cell, bootstrap: dict[str, Any]) -> Cell:
    """`cell` with its floor's value and whether the runs are above, at or below it (a paired bootstrap)."""
    if not cell.runs or cell.floor is None:
        return cell
    status, _ = stats.floor_status(cell.runs, cell.floor, cell.kind, cell.metric, **resampling(bootstrap))
    value = stats.score(cell.kind, cell.metric, cell.floor)
    return replace(cell, floor_value=value if math.isfinite(value) else None, floor_status=status)


CellOf = Callable[[str, str], Cell]


def cell_lookup(spec: dict[str, Any], results: Results) -> CellOf:
    """(row, column) -> its cell with its floor, bootstrapped once however many tables and claims show it."""
    found: dict[tuple[str, str], Cell] = {}
    bootstrap = spec.get("bootstrap", {})

    def cell(row: str, column: str) -> Cell:
        if (row, column) not in found:
            found[row, column] = with_floor(side_cell(spec, results, row, column), bootstrap)
        return found[row, column]

    return cell


def columns_of(table: str, spec: dict[str, Any]) -> list[str]:
    """A table's columns: its tasks, after the LM perplexity where it has one (`ppl`: Table 6)."""
    return ([PPL] if spec["tables"][table].get("ppl") else []) + tasks(spec, table)


def check_sizes(spec: dict[str, Any], results: Results) -> None:
    """Each row with a paper `shape` (Table 6's) must have been pretrained at that model shape."""
    for table in table_names(spec):
        for name, row in rows(spec, table).items():
            run = encoder_record(results, encoder_of(name))
            if "shape" in row and run and run["preset"] != preset_name(row["shape"]):
                raise UserError(f"{table} row {row['shape']}: pretraining run {encoder_of(name)!r} used model "
                                f"{run['preset']}, not {preset_name(row['shape'])}")


def build_entries(spec: dict[str, Any], results: Results, cell: CellOf | None = None) -> list[Entry]:
    """Every cell of every table, each with its floor (`cell`: a `cell_lookup` shared with the claims)."""
    check_sizes(spec, results)
    cell = cell or cell_lookup(spec, results)
    entries = []
    for table in table_names(spec):
        for name, row in rows(spec, table).items():
            numbers = paper(spec, table, row)
            for column in columns_of(table, spec):
                entries.append(Entry(table, row_label(name, row), row_key(name, row), column, numbers.get(column),
                                     cell(name, column)))
    names = [(e.table, e.key, e.column) for e in entries]
    if len(set(names)) != len(names):
        raise UserError("two rows of one table have the same key: give one of them a `key`")
    return entries
