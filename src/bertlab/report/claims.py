"""The paper's claims as declared contrasts (`ablations.claims`), each decided by the Multi-Bootstrap
(`bertlab.report.multiboot`) over the sides' pretraining runs, their fine-tuning seeds and the dev items: paired by
pretraining seed where both sides ran the same seeds (at one seed two encoders draw their initialisation and data order
from the same streams), unpaired otherwise; with one run a side it is `bertlab.report.stats.compare` draw for draw.

A claim says "A is better than B" on some columns of one table; it expands into pairs (column, A, B): A and B are
the cells of the rows (`<encoder>-<mode>`) its `better` and `than` name, or, with `by_size`, every two rows of the
table whose models differ in non-embedding parameters, the larger as A. Its columns are its table's tasks, or its
`columns`, and its `also`. Each pair gets A - B with its 95% interval and a verdict, the paper's own A - B from the
rows' `paper` numbers (where both have one; never for perplexity) and where it lies against the interval, and whether a
side is at (or below) its floor, where effects are compressed. Beside the verdict: its power (`bertlab.report.power`:
the MDE, and the pretraining runs a side the paper's effect needs at `bootstrap.run_sd`), its family-wise reading
(Holm within the pair's table, `bertlab.report.family`), and whether an interval end lies within Monte-Carlo error of
0. A pair whose sides are the models of an earlier pair's (Table 7's strategies that read the same hidden states at
the encoder's depth, `feature_signature`) is counted once: marked, and left out of the counts and the family.
A claim with `floor_ratio: r` says instead that A's held-out perplexity is at most r times its unigram floor's (on
the same positions): each pair gets that ratio with its interval over held-out instances (its own family).
"""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import combinations, product
from typing import Any

from bertlab.errors import UserError
from bertlab.modeling.features import feature_signature
from bertlab.report import family, power, stats
from bertlab.report.cells import PPL, Cell, CellOf, cell_lookup, resampling, side_cell
from bertlab.report.collect import NO_DATA, NOT_RUN, Results, encoder_record
from bertlab.report.multiboot import MultiContrast, multi_bootstrap
from bertlab.report.pairs import Finding, Pair, Side
from bertlab.report.tables import (encoder_of, paper_effect, row_key, row_label, rows, shape_size, table_names,
                                   tasks)
from bertlab.study import SEP


def _unmeasured(a: Cell, b: Cell, a_label: str, b_label: str) -> str:
    """Why A - B cannot be measured on the two cells ("" when it can)."""
    why = [f"{label}: {cell.reason}" for label, cell in ((a_label, a), (b_label, b)) if cell.reason]
    if not why and (a.scored_on, a.n_items) != (b.scored_on, b.n_items):
        why = [f"{a_label} was scored on {a.n_items} {a.scored_on} items, {b_label} on {b.n_items} {b.scored_on}"]
    return "; ".join(why)


def contrast(a: Cell, b: Cell, a_label: str, b_label: str, bootstrap: dict[str, Any]) -> tuple[stats.Contrast, str]:
    """A - B over the cells' per-item scores (`stats.compare`: its runs are the cells' seeds), or "not measured" with
    the reason."""
    nan, why = math.nan, _unmeasured(a, b, a_label, b_label)
    if why:
        return stats.Contrast(nan, nan, nan, stats.NOT_MEASURED, 0, len(a.runs), len(b.runs)), why
    result = stats.compare(a.runs, b.runs, a.kind, a.metric, **resampling(bootstrap))
    return result, "" if result.verdict != stats.NOT_MEASURED else "the metric is not finite"


def decide(a: Cell, b: Cell, a_label: str, b_label: str, bootstrap: dict[str, Any]) -> tuple[stats.Contrast, str]:
    """A - B by the Multi-Bootstrap over each cell's pretraining runs (`runs_a`, `runs_b`), paired on the pretraining
    seeds both ran, with the draws' SD, p-value and Monte-Carlo error; or "not measured" with the reason. Sharing two
    or more seeds, a run one side has alone is in its cell's score, not in the contrast: it carries its seed's effect,
    which pairing takes out, so more runs never widen the interval; sharing fewer, the others are drawn apart."""
    nan, why = math.nan, _unmeasured(a, b, a_label, b_label)
    if why:
        return stats.Contrast(nan, nan, nan, stats.NOT_MEASURED, 0, len(set(a.pretrain_seeds)),
                              len(set(b.pretrain_seeds))), why
    seeds = [sorted(set(c.pretrain_seeds)) for c in (a, b)]
    both = [s for s in seeds[0] if s in seeds[1]]
    groups = [[g for s in [*both, *(s for s in mine if s not in both)] for g, t in zip(c.groups, mine) if t == s]
              for c, mine in zip((a, b), seeds)]  # the shared seeds first, in one order on both sides
    complete = seeds[0] == seeds[1] or len(both) >= 2  # every run paired: the shared seeds' runs alone
    groups = [g[:len(both)] for g in groups] if complete else groups
    result = multi_bootstrap(*groups, a.kind, a.metric, paired=complete, shared=len(both), **resampling(bootstrap))
    if result.verdict in (stats.REPRODUCED, stats.CONTRADICTED) and not result.settled:
        result = replace(result, verdict=stats.UNRESOLVED)  # an end the bootstrap's own seed could move across 0
    return result, "" if result.verdict != stats.NOT_MEASURED else "the metric is not finite"


def _power(c: stats.Contrast, paper: float | None, run_sd: float | None,
           alpha: float) -> tuple[float | None, power.Power | None, str, float | None]:
    """A measured contrast's MDE at 80% power (its design's: the contrast's SE; with one pretraining run a side that
    leaves the between-run variance out), its power sized at the paper's effect (at `run_sd` where the between-run
    variance is unmeasured; None where there is no effect or no SD to size it with): the pretraining runs a side it
    needs, rounded to what their range carries, and the power with unlimited runs; both in words, and on an edge
    (`power.Power.edge`) the fewest runs a side within the item variance's Monte-Carlo error."""
    if not isinstance(c, MultiContrast) or c.verdict == stats.NOT_MEASURED:
        return None, None, "", None
    design = power.power_of(c, paper, alpha=alpha)
    sized = power.power_of(c, paper, None if run_sd is None else run_sd**2, alpha=alpha)
    notes = [design.note] if design.note else []
    span = sized.runs_range
    if sized.runs_needed is not None:
        at = f"at the assumed between-run SD of {run_sd:g} " if sized.note == power.ASSUMED else ""
        runs, least = sized.runs_needed, "at least " if sized.note == power.ASSUMED else ""
        notes.append(f"{at}the paper's {paper:+.1f} " + (
            f"reaches 80% power at no number of pretraining runs: with unlimited runs a side, {least}"
            f"{sized.unlimited:.0%}" if math.isinf(runs) else
            f"needs {'~' * (span is not None and span[1] > 2 * span[0] and runs >= 10)}{runs:.0f} pretraining "
            f"run{'' if runs == 1 else 's'} a side"))
        if span and span[0] != span[1]:
            notes[-1] += (f" ({span[0]:.0f} to {span[1]:.0f} over the between-run variance's "
                          f"{power.RUN_VAR_LEVEL:.0%} interval, {c.run_df:.3g} degrees of freedom, and the item "
                          "variance's Monte-Carlo error)")
    fewest = sized.runs_band[0] if sized.edge else None
    if fewest is not None:
        notes.append(f"on the edge: within the dev items' noise's Monte-Carlo error it needs {fewest:.0f} or more "
                     "runs a side, or no number of runs decides it")
    return design.mde, sized if sized.runs_needed is not None else None, "; ".join(notes), fewest


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
        runs = [encoder_record(results, encoder_of(n)) for n in (n1, n2)]
        if all(runs):
            s1, s2 = (run["parameters"]["non_embedding"] for run in runs)
        else:
            s1, s2 = shape_size(r1["shape"]), shape_size(r2["shape"])
        if s1 != s2:
            big, small = ((n1, r1), (n2, r2)) if s1 > s2 else ((n2, r2), (n1, r1))
            pairs.append(tuple(Side(row_label(n, r), row_key(n, r), n) for n, r in (big, small)))
    return pairs


def _missing(*cells: Cell) -> str:
    """`Pair.missing` of a pair on `cells`: NO_DATA where a side has no data, else NOT_RUN where one was not run."""
    return next((s for s in (NO_DATA, NOT_RUN) if any(c.status == s for c in cells)), "")


def floor_ratio_pair(spec: dict[str, Any], results: Results, a: Side, bound: float,
                     bootstrap: dict[str, Any]) -> Pair:
    """A's held-out perplexity over its unigram floor's, over all its pretraining runs, against `bound`."""
    cell = side_cell(spec, results, a.row, PPL)
    b = Side(f"{bound:g} × unigram", "floor", "")
    reason = cell.reason or ("" if cell.floor is not None else "no per-instance floor")
    if reason:
        nan = math.nan
        return Pair(PPL, a, b, stats.Contrast(nan, nan, nan, stats.NOT_MEASURED, 0, 1, 1), reason,
                    _missing(cell), bound=bound)
    runs = len(cell.runs)
    return Pair(PPL, a, b, stats.ratio_to_floor(cell.runs, cell.floor, bound, **resampling(bootstrap)),
                bound=bound, seeds=(runs, 1), pretrain_runs=(runs, 1))


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
    """Every declared claim, each pair decided by a paired bootstrap over items and seeds with its power, pairs
    repeating another's models counted once, and each table's pairs read family-wise (`cell`: a `cell_lookup` shared
    with the tables, so each side's floor is bootstrapped once)."""
    bootstrap = spec.get("bootstrap", {})
    alpha = 1 - bootstrap.get("level", 0.95)
    cell = cell or cell_lookup(spec, results)

    declared, ids = [], set()
    for i, claim in enumerate(spec.get("claims", [])):
        where = f"ablations.claims[{i}]"
        _check(spec, claim, where)
        if claim["id"] in ids:
            raise UserError(f"{where}.id: {claim['id']!r} is used twice")
        ids.add(claim["id"])
        table = claim["table"]
        if claim.get("floor_ratio") is not None:
            declared.append((claim, [floor_ratio_pair(spec, results, a, float(claim["floor_ratio"]), bootstrap)
                                     for a in _sides(spec, claim, where, "better")]))
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
            result, reason = decide(*cells, a.label, b.label, bootstrap)
            budgets = [c.budget for c in cells]
            budget = budgets[0] if budgets[0] == budgets[1] else " / ".join(x or "—" for x in budgets)
            effect = paper_effect(spec, table, a.row, b.row, column)
            run_sd = None if column == PPL else bootstrap.get("run_sd")
            mde, sized, note, fewest = _power(result, effect, run_sd, alpha)
            runs = sized.runs_needed if sized else None
            if (result.verdict == stats.UNRESOLVED and sized and sized.beyond and fewest is None
                    and sized.note != power.ASSUMED):  # unlimited runs under BEYOND_POWER, measured run variance
                result = replace(result, verdict=stats.BEYOND)
            pairs.append(Pair(column, a, b, result, reason, _missing(*cells), budget=budget, paper=effect,
                              compressed=any(c.at_floor for c in cells), seeds=(len(cells[0].runs), len(cells[1].runs)),
                              pretrain_runs=(len(cells[0].groups), len(cells[1].groups)),
                              mde=mde, runs_needed=runs, power_note=note, runs_edge=fewest,
                              runs_range=sized.runs_range if sized else None,
                              unlimited=sized.unlimited if sized else None,
                              same_as=_repeat(results, a, b, cells)))
        declared.append((claim, pairs))
    findings = [Finding(c["id"], c["table"], c["text"], tuple(pairs), own=own(spec, c)) for c, pairs in declared]
    return _familywise(_count_once(findings, results, cell), alpha)


def own(spec: dict[str, Any], claim: dict[str, Any]) -> bool:
    """Whether a claim is one of the project's own checks, not the paper's: a bound on a floor (`floor_ratio`), or a
    side whose row the paper has no numbers for (from scratch, a probe: its table gives the row no `paper`)."""
    if claim.get("floor_ratio") is not None:
        return True
    if claim.get("by_size"):
        return False
    named = [r for key in ("better", "than") for r in (claim[key] if isinstance(claim[key], list) else [claim[key]])]
    return any(rows(spec, claim["table"]).get(r, {}).get("paper") is None for r in named)


Model = tuple[str, ...]


def model_of(results: Results, row: str, cell: Cell) -> Model:
    """What a side's cell is: its encoder and what its frozen features compute at the encoder's trained depth
    (`feature_signature`: Table 7's "weighted sum all" and "last four" of 4 layers are one model), else its row."""
    run = encoder_record(results, encoder_of(row))
    if not cell.features or not run:
        return (row,)
    combine, reads = feature_signature(cell.features, run["shape"]["num_layers"])
    return encoder_of(row), combine, *map(str, reads)


def _depth(results: Results, side: Side) -> str:
    return f"{encoder_record(results, encoder_of(side.row))['shape']['num_layers']} layers"


def _repeat(results: Results, a: Side, b: Side, cells: tuple[Cell, Cell]) -> str:
    """Why a pair is no contrast at all: its two sides are one model at this depth ("" when they are not)."""
    if a.row == b.row or model_of(results, a.row, cells[0]) != model_of(results, b.row, cells[1]):
        return ""
    return f"{a.label} and {b.label} are the same model at {_depth(results, a)}"


def _count_once(findings: list[Finding], results: Results, cell: CellOf) -> list[Finding]:
    """Mark each pair whose column and sides' models an earlier pair (of any claim) has: it is counted there."""
    first: dict[tuple[str, Model, Model], Pair] = {}

    def once(p: Pair) -> Pair:
        if p.ratio or not p.counted:
            return p
        key = (p.column, *(model_of(results, s.row, cell(s.row, p.column)) for s in (p.a, p.b)))
        q = first.setdefault(key, p)
        if q is p:
            return p
        where = f"counted in {q.a.label} vs {q.b.label}"
        if (p.a.row, p.b.row) == (q.a.row, q.b.row):  # the same rows, compared again by another claim
            return replace(p, same_as=f"the same contrast: {where}")
        mine, its = (p.a, q.a) if p.a.row != q.a.row else (p.b, q.b)
        return replace(p, same_as=f"{mine.label} is the same model as {its.label} at {_depth(results, mine)}: {where}")

    return [replace(f, pairs=tuple(once(p) for p in f.pairs)) for f in findings]


def _familywise(findings: list[Finding], alpha: float) -> list[Finding]:
    """Each table's counted, measured pairs read family-wise: Holm over their p-values at `alpha`
    (`bertlab.report.family`), and on an edge where Holm over the ends of their p-values' Monte-Carlo band
    (`MultiContrast.p_band`) reads a resolved verdict both ways."""
    members: dict[str, list[tuple[int, int]]] = {}
    for i, f in enumerate(findings):
        for j, p in enumerate(f.pairs):
            if p.counted and isinstance(p.contrast, MultiContrast) and math.isfinite(p.contrast.p_value):
                members.setdefault(f.table, []).append((i, j))
    pairs = [list(f.pairs) for f in findings]
    for where in members.values():
        contrasts = [pairs[i][j].contrast for i, j in where]
        lows, highs = (family.holm([c.p_band[end] for c in contrasts]) for end in (0, 1))
        for (i, j), p, verdict, low, high in zip(where, family.holm([c.p_value for c in contrasts]),
                                                 family.familywise(contrasts, alpha), lows, highs):
            resolved = pairs[i][j].contrast.verdict in (stats.REPRODUCED, stats.CONTRADICTED)
            pairs[i][j] = replace(pairs[i][j], holm_p=float(p), familywise=verdict,
                                  holm_edge=bool(resolved and (low <= alpha) != (high <= alpha)))
    return [replace(f, pairs=tuple(ps)) for f, ps in zip(findings, pairs)]
