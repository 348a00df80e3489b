"""Every report file: the tables and findings as CSV, `metrics.json` (the headline numbers, for `dvc metrics show`
and `dvc exp show`), `claims.json` (every cell and contrast, the family-wise counts), the evidence they were computed
from (`bertlab.report.evidence`), the figures and the Markdown report, written into one directory."""

from __future__ import annotations

import csv
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertlab.errors import UserError
from bertlab.files import write_json
from bertlab.report.cells import Entry, build_entries, cell_lookup
from bertlab.report.claims import check_claims
from bertlab.report.collect import Results
from bertlab.report.evidence import save
from bertlab.report.forest import plot_claims
from bertlab.report.ledger import ledger_section
from bertlab.report.markdown import render_markdown
from bertlab.report.multiboot import MultiContrast
from bertlab.report.pairs import Finding, Pair
from bertlab.report.plots import plot_curves, plot_sizes, plot_strategies, trained_shapes
from bertlab.report.stats import BEYOND, CONTRADICTED, NOT_MEASURED, REPRODUCED, SIZE_OUT, UNRESOLVED
from bertlab.report.tables import table_names

CSV_FIELDS = ("table", "row", "column", "paper", "mean", "std", "n", "status", "floor", "floor_status")
FINDING_FIELDS = ("claim", "table", "text", "own_check", "column", "A", "B", "estimate", "low", "high", "verdict",
                  "size", "label", "n_items", "runs_a", "runs_b", "pretrain_runs_a", "pretrain_runs_b", "reason",
                  "paper_effect", "paper_vs_interval", "compressed", "mde", "paper_vs_mde", "runs_needed", "runs_low",
                  "runs_high", "unlimited_power", "power_note", "df", "p_value", "p_floor", "holm_p", "familywise",
                  "holm_edge", "mc_error", "edge", "same_model")

VERDICT_KEYS = {REPRODUCED: "reproduced", CONTRADICTED: "contradicted", UNRESOLVED: "unresolved",
                BEYOND: "beyond_scale", NOT_MEASURED: "not_measured"}  # metrics.json's keys: no spaces


@dataclass(frozen=True)
class Report:
    entries: list[Entry]
    findings: list[Finding]
    figures: list[Path]


def git_commit() -> str:
    """The short hash of HEAD, or "unknown" outside a repository or before the first commit."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _finite(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def csv_rows(entries: list[Entry], table: str) -> list[list[Any]]:
    """One row per cell of `table`, in CSV_FIELDS order (floor status only where we have a number)."""
    return [[e.table, e.row, e.column, e.paper, e.cell.mean, e.cell.std, e.cell.n, e.cell.status,
             e.cell.floor_value, e.cell.floor_status if e.cell.values else None]
            for e in entries if e.table == table]


def _resampled(p: Pair) -> tuple[float | None, float | None, bool | None, float | None]:
    """A pair's p-value, the larger Monte-Carlo error of its interval's ends, whether the p-value is the draws' floor
    (the true one below it) and its t interval's degrees of freedom (None: no Multi-Bootstrap, or no t interval)."""
    c = p.contrast
    if not isinstance(c, MultiContrast):
        return None, None, None, None
    return _finite(c.p_value), _finite(c.mc_error), c.p_floor, _finite(c.df, 1)


def _count(value: float) -> int | str:
    return "inf" if math.isinf(value) else int(value)


def _runs(p: Pair) -> int | str | None:
    """The pretraining runs a side the paper's effect needs: a count, "inf" (not at this scale), None (not sized)."""
    return None if p.runs_needed is None else _count(p.runs_needed)


def finding_rows(findings: list[Finding]) -> list[list[Any]]:
    """One row per pair of every claim, in FINDING_FIELDS order (`runs_needed` as text: a count or "inf")."""
    return [[f.id, f.table, f.text, f.own, p.column, p.a.label, p.b.label, _finite(p.contrast.estimate),
             _finite(p.contrast.low), _finite(p.contrast.high), p.contrast.verdict, p.size, p.label,
             p.contrast.n_items, *p.seeds, *p.pretrain_runs, p.reason, _finite(p.paper), p.paper_vs_interval,
             p.compressed, _finite(p.mde), p.paper_vs_mde, None if p.runs_needed is None else str(_runs(p)),
             *([str(_count(v)) for v in p.runs_range] if p.runs_range else (None, None)), _finite(p.unlimited, 3),
             p.power_note, df, p_value, p_floor, _finite(p.holm_p), p.familywise or None, p.holm_edge, mc_error,
             p.edge, p.same_as or None]
            for f in findings for p in f.pairs for p_value, mc_error, p_floor, df in [_resampled(p)]]


def write_csv(path: Path, header: tuple[str, ...], rows: list[list[Any]]) -> None:
    """A CSV file with `header`; None is written as an empty cell."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])


def _counted(findings: list[Finding], own: bool | None = None) -> list[Pair]:
    """The pairs the verdict counts take (of the paper's claims, or of the project's own checks, or all when `own` is
    None): each pair repeating another's models counted once."""
    return [p for f in findings if own is None or f.own == own for p in f.pairs if p.counted]


def headline(findings: list[Finding]) -> dict[str, Any]:
    """`metrics.json`, what fits one line of `dvc metrics show`: the paper's claims' contrasts by verdict on the
    direction (`reproduced`, `contradicted`, `unresolved`, `beyond_scale`) and how many of its resolved ones rule the
    paper's size out (`size_ruled_out`), apart from the project's own checks (`own_reproduced`, `own_contradicted`:
    from scratch, the probes, the perplexity bound), and each perplexity-over-floor ratio (`<claim>.<A>`). Everything
    else (not measured, family-wise, the size verdicts of unresolved pairs) is in `claims.json` and the report."""
    paper, own = _counted(findings, False), _counted(findings, True)
    out: dict[str, Any] = {VERDICT_KEYS[v]: sum(p.contrast.verdict == v for p in paper)
                           for v in (REPRODUCED, CONTRADICTED, UNRESOLVED, BEYOND)}
    out["size_ruled_out"] = sum(p.contrast.verdict in (REPRODUCED, CONTRADICTED) and p.size == SIZE_OUT for p in paper)
    out |= {f"own_{VERDICT_KEYS[v]}": sum(p.contrast.verdict == v for p in own) for v in (REPRODUCED, CONTRADICTED)}
    for f in findings:
        for p in f.pairs:
            if p.ratio:
                out[f"{f.id}.{p.a.key}"] = _finite(p.contrast.estimate)
    return out


def details(tables: list[str], entries: list[Entry], findings: list[Finding]) -> dict[str, Any]:
    """`claims.json`: {table: {row key: {column: our cell and its floor}}} for measured cells, {"claims": {id: {text,
    own (one of the project's own checks), summary, pairs: {name: contrast}}}} for every claim (`verdict` on the
    direction, `size` on the paper's size, `label` both in words; `df`: the t interval's degrees of freedom, null for a
    percentile interval; `p_floor`: the p-value is the draws' smallest, the true one below it; `runs_needed`: a count
    rounded to what its range carries, "inf" where no number of pretraining runs reaches 80% power, null where it is
    not sized; `runs_range`: the runs needed over the between-run variance's interval and the item variance's
    Monte-Carlo error; `unlimited_power`: the power with unlimited runs a side; `holm_edge`: the family-wise reading
    changes within the p-values' Monte-Carlo error), and {"familywise": {"paper" | "checks": {verdict: count}}}: how
    many contrasts get each verdict read family-wise (Holm within each table; a pair outside a family keeps its own; a
    pair repeating another's models counted once)."""
    out: dict[str, Any] = {t: {} for t in tables}
    for e in entries:
        if e.cell.values:
            out[e.table].setdefault(e.key, {})[e.column] = {
                "mean": _finite(e.cell.mean), "std": _finite(e.cell.std), "n": e.cell.n,
                "floor": _finite(e.cell.floor_value), "floor_status": e.cell.floor_status}
    out["claims"] = {
        f.id: {"table": f.table, "text": f.text, "own": f.own, "summary": f.summary, "pairs": {
            p.name: {"estimate": _finite(p.contrast.estimate), "low": _finite(p.contrast.low),
                     "high": _finite(p.contrast.high), "verdict": p.contrast.verdict, "size": p.size,
                     "label": p.label, "n_items": p.contrast.n_items,
                     "runs_a": p.seeds[0], "runs_b": p.seeds[1], "pretrain_runs_a": p.pretrain_runs[0],
                     "pretrain_runs_b": p.pretrain_runs[1], "run_margins": [_finite(m) for m in p.run_margins],
                     "reason": p.reason,
                     "finetuning": p.budget, "paper_effect": _finite(p.paper),
                     "paper_vs_interval": p.paper_vs_interval, "compressed": p.compressed,
                     "reading": p.reading, "mde": _finite(p.mde), "paper_vs_mde": p.paper_vs_mde,
                     "runs_needed": _runs(p), "runs_range": list(map(_count, p.runs_range)) if p.runs_range else None,
                     "unlimited_power": _finite(p.unlimited, 3), "power_note": p.power_note,
                     "df": _resampled(p)[3], "p_value": _resampled(p)[0], "p_floor": _resampled(p)[2],
                     "holm_p": _finite(p.holm_p), "familywise": p.familywise or None, "holm_edge": p.holm_edge,
                     "mc_error": _resampled(p)[1], "edge": p.edge, "same_model": p.same_as or None}
            for p in f.pairs}}
        for f in findings}
    out["familywise"] = {
        group: {VERDICT_KEYS[v]: sum((p.familywise or p.contrast.verdict) == v for p in _counted(findings, own))
                for v in (REPRODUCED, CONTRADICTED, UNRESOLVED, BEYOND)}
        for group, own in (("paper", False), ("checks", True))}
    return out


def publish(src: Path, dest: Path) -> None:
    """Move the report's files from `src` into `dest` file by file, each replacing only the file of its own name:
    nothing else in `dest`, its `figures/` or `pretrain_loss/` is touched, whatever directory `dest` is (under `dvc
    repro`, DVC removes the declared outputs before the stage runs, so no earlier report's file lingers there). A
    directory where a report file goes, or a file where its folder goes, stops the stage before anything moves."""
    items = sorted(src.rglob("*"))
    for item in items:
        target = dest / item.relative_to(src)
        if target.exists() and target.is_dir() != item.is_dir():
            raise UserError(f"{target} is in the way of the report's {'folder' if item.is_dir() else 'file'} "
                                  f"{item.relative_to(src)}: move it, or set ablations.report_dir to another folder")
    for item in items:
        target = dest / item.relative_to(src)
        if item.is_dir():
            target.mkdir(exist_ok=True)
        else:
            item.replace(target)


def analyse(spec: dict[str, Any], results: Results) -> tuple[list[Entry], list[Finding]]:
    """The tables' cells and every claim's findings: all the report's statistics (each cell's floor bootstrapped
    once for both), which `details` turns into claims.json."""
    cell = cell_lookup(spec, results)
    return build_entries(spec, results, cell), check_claims(spec, results, cell)


def write(out: Path, spec: dict[str, Any], results: Results, profile: str, commit: str,
          recipe: list[str] = ()) -> Report:
    """Write every report file into the empty directory `out`: ablations.md, ablations_<table>.csv (each table),
    ablations_findings.csv, metrics.json, claims.json, evidence/ (what claims.json is computed from: `spec` and
    `results`), figures/*.png and pretrain_loss/<objective>.csv (step, run, loss: a `dvc plots` chart each); `recipe`:
    the run's deviations from the paper's recipe, one line each."""
    entries, findings = analyse(spec, results)
    (out / "figures").mkdir()
    note = f"profile {profile}, commit {commit}"  # which report a figure is of, beside another's in dvc plots show
    plots = {"claims": lambda p: bool(plot_claims(p, findings, trained_shapes(spec, results), note)),  # first
             "table6": lambda p: plot_sizes(p, spec, results, entries, note=note),
             "table7": lambda p: plot_strategies(p, entries, spec.get("bootstrap", {}), note=note),
             "pretrain_loss": lambda p: plot_curves(p, results.curves, results.pretrain, note)}
    figures = [p for name, plot in plots.items() if plot(p := out / "figures" / f"{name}.png")]
    (out / "pretrain_loss").mkdir()
    by_objective: dict[str, list[list[Any]]] = {}
    for name, points in sorted(results.curves.items()):
        objective = results.pretrain.get(name, {}).get("objective", "unknown")
        by_objective.setdefault(objective, []).extend([s, name, v] for s, v in points)
    for objective, rows in by_objective.items():  # one `dvc plots` chart per objective, a line per run (by_run)
        write_csv(out / "pretrain_loss" / f"{objective}.csv", ("step", "run", "loss"), rows)
    for table in table_names(spec):
        write_csv(out / f"ablations_{table}.csv", CSV_FIELDS, csv_rows(entries, table))
    write_csv(out / "ablations_findings.csv", FINDING_FIELDS, finding_rows(findings))
    write_json(out / "metrics.json", headline(findings))
    write_json(out / "claims.json", details(table_names(spec), entries, findings))
    save(out / "evidence", spec, results)
    (out / "ablations.md").write_text(render_markdown(spec, results, entries, findings, figures, profile, commit,
                                                         ledger_section(results), recipe))
    return Report(entries, findings, figures)
