"""The study as conf/ablations declares it (the `ablations` config): its encoders, pretraining seeds, fine-tuning
modes, seeds and tables, and the grid of runs they make. Each encoder is pretrained once per pretraining seed, run
`<encoder>-<pretraining seed>`, a job of its DVC stage `pretrain@<encoder>`. A table's row is `<encoder>-<mode>`, and
each row x task x pretraining run x fine-tuning seed one fine-tuning cell, `<task>-<encoder>-<mode>-<pretraining
seed>-<seed>`, a job of its encoder's stage `finetune@<encoder>` (dvc.yaml's foreach reads the encoders from the same
file, so a stage's name is what it runs and survives any edit of the others). A profile's `cells` setting leaves runs
out: they stay in the grid and write a "not run" record saying why.

Light on purpose (no torch): the `configs` stage imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bertlab.errors import UserError
from bertlab.settings import NAME

NOT_RUN = "not run"  # the status of a run the profile leaves out
SEP = "-"  # joins a cell's parts: no encoder, mode or task name holds it


@dataclass(frozen=True)
class Cell:
    """One fine-tuning run of the grid: a table's row on one of its tasks, on one pretraining run of its encoder, with
    one fine-tuning seed."""

    tables: tuple[str, ...]  # the tables that read it (a task may be a column of several: the cell runs once)
    task: str
    row: str  # <encoder>-<mode>
    pretrain_seed: int
    seed: int

    @property
    def name(self) -> str:
        return cell_name(self.task, self.row, self.pretrain_seed, self.seed)

    @property
    def encoder(self) -> str:
        return split_row(self.row)[0]

    @property
    def mode(self) -> str:
        return split_row(self.row)[1]


def split_row(row: str) -> tuple[str, str]:
    """(encoder, mode) of a row `<encoder>-<mode>`."""
    encoder, _, mode = row.partition(SEP)
    return encoder, mode


def cell_name(task: str, row: str, pretrain_seed: int, seed: int) -> str:
    """A cell's run name (its folder under data/finetune/<encoder>/):
    `<task>-<encoder>-<mode>-<pretraining seed>-<seed>`."""
    return SEP.join((task, row, str(pretrain_seed), str(seed)))


def pretrain_name(encoder: str, seed: int) -> str:
    """A pretraining run's name (its folder under data/pretrain/<encoder>/): `<encoder>-<pretraining seed>`."""
    return f"{encoder}{SEP}{seed}"


def pretrain_encoder(run: str) -> str:
    """The encoder of pretraining run `run` (`<encoder>-<pretraining seed>`)."""
    return run.rpartition(SEP)[0]


def cells(study: dict[str, Any]) -> Iterator[Cell]:
    """Every cell of the tables, each pretraining run and fine-tuning seed, once (with every table that reads it)."""
    readers: dict[tuple[str, str], list[str]] = {}
    for table, spec in study["tables"].items():
        for task in spec["tasks"]:
            for row in spec["rows"]:
                readers.setdefault((task, row), []).append(table)
    for (task, row), tables in readers.items():
        for pretrain_seed in study["pretrain_seeds"]:
            for seed in study["seeds"]:
                yield Cell(tuple(tables), task, row, pretrain_seed, seed)


def tables_using(study: dict[str, Any], encoder: str) -> list[str]:
    """The tables with a row on `encoder`."""
    return [t for t, spec in study["tables"].items() if any(split_row(r)[0] == encoder for r in spec["rows"])]


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value) or SEP in value:
        raise UserError(f"{where}: {value!r} is not a name (letters, digits, _ . =; no {SEP})")
    return value


def _is_overrides(value: Any) -> bool:
    """Whether `value` is a list of Hydra overrides (strings)."""
    return isinstance(value, list) and all(isinstance(o, str) for o in value)


def _overrides(study: dict[str, Any], key: str) -> None:
    if not isinstance(study.get(key), dict) or not study[key] or not all(
            _is_overrides(v) for v in study[key].values()):
        raise UserError(f"ablations.{key}: expected names, each with a list of Hydra overrides")
    for name in study[key]:
        _name(name, f"ablations.{key}")


def check(study: dict[str, Any]) -> None:
    """A one-line UserError for the first thing in the declaration that makes no grid: a name that is no path
    component or holds `-`, a row whose encoder or mode is not declared, a task without a column, an encoder no
    table has a row on (its stages would train what nothing reads), a twin that is no encoder. A cell of several
    tables (a task that is a column of each, on one row) is one cell, trained once and read by each."""
    for key in ("encoders", "modes"):
        _overrides(study, key)
    for key in ("pretrain_seeds", "seeds"):
        seeds = study.get(key)
        if not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise UserError(f"ablations.{key}={seeds!r}: expected a list of distinct integers >= 0")
    if not isinstance(study.get("tables"), dict):
        raise UserError("ablations.tables: expected tables, each with tasks and rows")
    for table, spec in study["tables"].items():
        where = f"ablations.tables.{_name(table, 'ablations.tables')}"
        if not (isinstance(spec, dict) and isinstance(spec.get("tasks"), list) and isinstance(spec.get("rows"), dict)):
            raise UserError(f"{where}: expected `tasks` (a list) and `rows` (<encoder>-<mode>: its label and numbers)")
        for task in spec["tasks"]:
            if _name(task, f"{where}.tasks") not in study.get("columns", {}):
                raise UserError(f"{where}.tasks: {task!r} has no entry in ablations.columns (what the report reads)")
        for row in spec["rows"]:
            encoder, mode = split_row(row)
            for part, key in ((encoder, "encoders"), (mode, "modes")):
                if part not in study[key]:
                    raise UserError(f"{where}.rows: {row!r} is not <encoder>-<mode> of ablations.{key} "
                                    f"({', '.join(study[key])})")
    for encoder in study["encoders"]:
        if not tables_using(study, encoder):
            raise UserError(f"ablations.encoders.{encoder}: no table has a row on it (its stages would pretrain what "
                            "nothing reads): give it a row, or remove it")
    twins = study.get("twins") or {}
    if not isinstance(twins, dict):
        raise UserError(f"ablations.twins={twins!r}: expected encoders, each -> the encoder whose model it may be")
    for twin, of in twins.items():
        if twin not in study["encoders"] or of not in study["encoders"] or twin == of:
            raise UserError(f"ablations.twins: {twin}: {of} is not two encoders of ablations.encoders (an encoder -> "
                            "the encoder whose model it may be)")


def check_policy(policy: dict[str, Any], study: dict[str, Any]) -> None:
    """`ablations.cells` (what a profile runs): `seeds` per task (or `default`) a count >= 1, `pretrain_seeds` per
    encoder (or `default`; how many it pretrains) or table (how many of them its cells run on) a count >= 1, `skip`
    tasks or encoders with a reason, `finetune` a table's task -> Hydra overrides of its cells."""
    tasks = set(study.get("columns", {}))
    seeds, skip = policy.get("seeds") or {}, policy.get("skip") or {}
    for name, n in (policy.get("pretrain_seeds") or {}).items():
        if name != "default" and name not in study["encoders"] and name not in study["tables"]:
            raise UserError(f"ablations.cells.pretrain_seeds.{name}: not an encoder of ablations.encoders nor a table "
                            "of ablations.tables")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(study["pretrain_seeds"]):
            raise UserError(f"ablations.cells.pretrain_seeds.{name}={n!r}: expected a count from 1 to "
                            f"{len(study['pretrain_seeds'])} (ablations.pretrain_seeds)")
    for table, by_task in (policy.get("finetune") or {}).items():
        where = f"ablations.cells.finetune.{table}"
        if table not in study["tables"]:
            raise UserError(f"{where}: not a table of ablations.tables ({', '.join(study['tables'])})")
        if not isinstance(by_task, dict):
            raise UserError(f"{where}: expected tasks of the table, each with a list of Hydra overrides")
        for task, overrides in by_task.items():
            if task not in study["tables"][table]["tasks"]:
                raise UserError(f"{where}.{task}: not a task of ablations.tables.{table}")
            if not _is_overrides(overrides):
                raise UserError(f"{where}.{task}: expected a list of Hydra overrides")
    for task, n in seeds.items():
        if task != "default" and task not in tasks:
            raise UserError(f"ablations.cells.seeds.{task}: not a task of ablations.columns")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(study["seeds"]):
            raise UserError(f"ablations.cells.seeds.{task}={n!r}: expected a count from 1 to {len(study['seeds'])} "
                            "(ablations.seeds; leave a task out with skip)")
    for name, why in skip.items():
        if name not in tasks and name not in study["encoders"]:
            raise UserError(f"ablations.cells.skip.{name}: not a task of ablations.columns nor an encoder of "
                            "ablations.encoders")
        if not isinstance(why, str) or not why.strip():
            raise UserError(f"ablations.cells.skip.{name}: give the reason the report prints")


def pretrain_seeds_run(policy: dict[str, Any], encoder: str, seeds: list[int]) -> list[int]:
    """The pretraining seeds the profile runs of `encoder`: the first `cells.pretrain_seeds.<encoder>` (or `default`;
    none named: all) of `seeds`."""
    counts = policy.get("pretrain_seeds") or {}
    return seeds[:counts.get(encoder, counts.get("default", len(seeds)))]


def encoder_left_out(policy: dict[str, Any], encoder: str, seed: int, seeds: list[int]) -> str | None:
    """Why the profile leaves `encoder`'s pretraining run at `seed` out (all its cells are), or None."""
    why = (policy.get("skip") or {}).get(encoder)
    if why:
        return f"{encoder}: {why}"
    run = pretrain_seeds_run(policy, encoder, seeds)
    if seed not in run:
        return (f"pretraining seed {seed}: {encoder} runs the first {len(run)} of ablations.pretrain_seeds "
                "(ablations.cells.pretrain_seeds)")
    return None


def cell_overrides(policy: dict[str, Any], cell: Cell) -> list[str]:
    """The profile's Hydra overrides of `cell`'s fine-tuning (`cells.finetune.<table>.<task>`: a budget set where its
    claims are decided), after its mode's; a UserError where two tables that read the cell give it different ones
    (it is trained once)."""
    given = {t: list(((policy.get("finetune") or {}).get(t) or {}).get(cell.task) or []) for t in cell.tables}
    first = cell.tables[0]
    for table, overrides in given.items():
        if overrides != given[first]:
            raise UserError(f"ablations.cells.finetune: {cell.task} x {cell.row} is a cell of {first} and {table}, "
                            f"which give it {given[first]} and {overrides}: it is trained once, for every table that "
                            "reads it (give both the same)")
    return given[first]


def cell_left_out(policy: dict[str, Any], cell: Cell, seeds: list[int], pretrain_seeds: list[int]) -> str | None:
    """Why the profile leaves `cell` out (its task or encoder skipped, its pretraining run left out or beyond its
    table's count, or its seed beyond the task's count), or None."""
    skip, counts = policy.get("skip") or {}, policy.get("seeds") or {}
    if skip.get(cell.task):
        return f"{cell.task}: {skip[cell.task]}"
    if why := encoder_left_out(policy, cell.encoder, cell.pretrain_seed, pretrain_seeds):
        return why
    runs = max((policy.get("pretrain_seeds") or {}).get(t, len(pretrain_seeds)) for t in cell.tables)
    if pretrain_seeds.index(cell.pretrain_seed) >= runs:
        return (f"pretraining seed {cell.pretrain_seed}: {' and '.join(cell.tables)}'s cells run on the first {runs} "
                "of ablations.pretrain_seeds (ablations.cells.pretrain_seeds)")
    n = counts.get(cell.task, counts.get("default", len(seeds)))
    if seeds.index(cell.seed) >= n:
        return f"seed {cell.seed}: {cell.task} runs the first {n} of ablations.seeds (ablations.cells.seeds)"
    return None
