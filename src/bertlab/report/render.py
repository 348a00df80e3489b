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
from bertlab.report.stats import BEYOND, CONTRADICTED, NOT_MEASURED, REPRODUCED, UNRESOLVED
from bertlab.report.tables import table_names

CSV_FIELDS = ("table", "row", "column", "paper", "mean", "std", "n", "status", "floor", "floor_status")
FINDING_FIELDS = ("claim", "table", "text", "column", "A", "B", "estimate", "low", "high", "verdict", "n_items",
                  "runs_a", "runs_b", "pretrain_runs_a", "pretrain_runs_b", "reason", "paper_effect", "paper_vs_interval", "compressed", "mde",
                  "paper_vs_mde", "runs_needed", "power_note", "p_value", "holm_p", "familywise", "mc_error", "edge",
                  "same_model")

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


def _resampled(p: Pair) -> tuple[float | None, float | None]:
    """A pair's p-value and the larger Monte-Carlo error of its interval's ends (None: no Multi-Bootstrap draws)."""
    c = p.contrast
    return (_finite(c.p_value), _finite(c.mc_error)) if isinstance(c, MultiContrast) else (None, None)


def _runs(p: Pair) -> int | str | None:
    """The pretraining runs a side the paper's effect needs: a count, "inf" (not at this scale), None (not sized)."""
    return None if p.runs_needed is None else "inf" if math.isinf(p.runs_needed) else int(p.runs_needed)


def finding_rows(findings: list[Finding]) -> list[list[Any]]:
    """One row per pair of every claim, in FINDING_FIELDS order (`runs_needed` as text: a count or "inf")."""
    return [[f.id, f.table, f.text, p.column, p.a.label, p.b.label, _finite(p.contrast.estimate),
             _finite(p.contrast.low), _finite(p.contrast.high), p.contrast.verdict, p.contrast.n_items, *p.seeds,
             *p.pretrain_runs, p.reason, _finite(p.paper), p.paper_vs_interval, p.compressed, _finite(p.mde),
             p.paper_vs_mde, None if p.runs_needed is None else str(_runs(p)), p.power_note, p_value, _finite(p.holm_p),
             p.familywise or None, mc_error, p.edge, p.same_as or None]
            for f in findings for p in f.pairs for p_value, mc_error in [_resampled(p)]]


def write_csv(path: Path, header: tuple[str, ...], rows: list[list[Any]]) -> None:
    """A CSV file with `header`; None is written as an empty cell."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])


def _counted(findings: list[Finding]) -> list[Pair]:
    """The pairs the verdict counts take: each pair repeating another's models counted once."""
    return [p for f in findings for p in f.pairs if p.counted]


def headline(findings: list[Finding]) -> dict[str, Any]:
    """`metrics.json`, what fits one line of `dvc metrics show`: how many contrasts got each verdict and each
    perplexity-over-floor ratio (`<claim>.<A>`). Everything else is in `claims.json`."""
    counted = _counted(findings)
    out: dict[str, Any] = {VERDICT_KEYS[v]: sum(p.contrast.verdict == v for p in counted) for v in VERDICT_KEYS}
    for f in findings:
        for p in f.pairs:
            if p.ratio:
                out[f"{f.id}.{p.a.key}"] = _finite(p.contrast.estimate)
    return out


def details(tables: list[str], entries: list[Entry], findings: list[Finding]) -> dict[str, Any]:
    """`claims.json`: {table: {row key: {column: our cell and its floor}}} for measured cells, {"claims": {id: {text,
    summary, pairs: {name: contrast}}}} for every claim (`runs_needed`: a count, "inf" where no number of pretraining
    runs decides the paper's effect at this scale, null where it is not sized; `runs_range`: the runs needed at the
    ends of a measured between-run variance's interval), and {"familywise": {verdict: count}}:
    how many contrasts get each verdict read family-wise (Holm within each table; a pair outside a family keeps its
    own; a pair repeating another's models counted once)."""
    out: dict[str, Any] = {t: {} for t in tables}
    for e in entries:
        if e.cell.values:
            out[e.table].setdefault(e.key, {})[e.column] = {
                "mean": _finite(e.cell.mean), "std": _finite(e.cell.std), "n": e.cell.n,
                "floor": _finite(e.cell.floor_value), "floor_status": e.cell.floor_status}
    out["claims"] = {
        f.id: {"table": f.table, "text": f.text, "summary": f.summary, "pairs": {
            p.name: {"estimate": _finite(p.contrast.estimate), "low": _finite(p.contrast.low),
                     "high": _finite(p.contrast.high), "verdict": p.contrast.verdict, "n_items": p.contrast.n_items,
                     "runs_a": p.seeds[0], "runs_b": p.seeds[1], "pretrain_runs_a": p.pretrain_runs[0],
                     "pretrain_runs_b": p.pretrain_runs[1], "run_margins": [_finite(m) for m in p.run_margins],
                     "reason": p.reason,
                     "finetuning": p.budget, "paper_effect": _finite(p.paper),
                     "paper_vs_interval": p.paper_vs_interval, "compressed": p.compressed,
                     "reading": p.reading, "mde": _finite(p.mde), "paper_vs_mde": p.paper_vs_mde,
                     "runs_needed": _runs(p), "runs_range": list(map(int, p.runs_range)) if p.runs_range else None,
                     "power_note": p.power_note, "p_value": _resampled(p)[0],
                     "holm_p": _finite(p.holm_p), "familywise": p.familywise or None, "mc_error": _resampled(p)[1],
                     "edge": p.edge, "same_model": p.same_as or None}
            for p in f.pairs}}
        for f in findings}
    counted = _counted(findings)
    out["familywise"] = {VERDICT_KEYS[v]: sum((p.familywise or p.contrast.verdict) == v for p in counted)
                         for v in (REPRODUCED, CONTRADICTED, UNRESOLVED, BEYOND)}
    return out


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
