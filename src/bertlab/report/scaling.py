"""The scaling sweep's report, from its rows (`bertlab.report.scaling_rows`): each claim's A - B (paired bootstrap
over dev items and seeds) at every pretraining budget x fine-tuning budget, with each side's held-out perplexity over
its unigram floor. A claim on `ppl` compares two encoders' held-out perplexity on the same held-out instances.

Beside each verdict: what its interval says of the paper's own A - B (the rows of the study's tables a claim's
`paper` names, `bertlab.report.sweep.paper_effects`), and whether a side is at its floor, where effects are compressed.
Writes `scaling.md` (where each claim resolves, then per claim its table and figure), `scaling.csv` (one row per
claim x pretraining budget x fine-tuning budget), `scaling/<claim>.png` and `scaling/<claim>.csv` (the figure's
points, for `dvc plots show`) into the report directory.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from bertlab.report import stats
from bertlab.report.cells import PPL, Cell
from bertlab.report.collect import NOT_RUN
from bertlab.report.markdown import table
from bertlab.report.plots import plot_budgets
from bertlab.report.render import write_csv
from bertlab.report.scaling_rows import Row
from bertlab.report.sweep import budgets

PLOT_FIELDS = ("tokens", "estimate", "low", "high", "verdict", "run")  # scaling/<claim>.csv (run: fine-tuning budget)
FIELDS = ("claim", "A", "B", "task", "metric", "pretrain_steps", "tokens", "examples", "lr", "estimate", "low",
          "high", "verdict", "n_items", "seeds", "heldout_ppl", "heldout_unigram_ppl", "reason", "a_mean", "b_mean",
          "floor", "a_floor_status", "b_floor_status", "a_heldout_ratio", "b_heldout_ratio", "paper_effect",
          "paper_vs_interval", "compressed")


def _number(value: float | None, digits: int = 4) -> Any:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def csv_rows(found: list[Row]) -> list[list[Any]]:
    """One row per claim x pretraining budget x fine-tuning budget, in FIELDS order (None: an empty cell)."""
    return [[r.claim["id"], r.a, r.b, r.claim["task"], r.metric, r.steps, r.tokens, r.budget["examples"],
             r.budget.get("lr"), _number(r.contrast.estimate), _number(r.contrast.low), _number(r.contrast.high),
             r.contrast.verdict, r.contrast.n_items, f"{r.contrast.runs_a}/{r.contrast.runs_b}",
             _number(r.trained.get("heldout_ppl")), _number(r.trained.get("heldout_unigram_ppl")), r.reason,
             *(_number(c.mean) for c in r.cells), _number(_floored(r).floor_value),
             *(c.floor_status for c in r.cells), *(_number(x) for x in r.ratios), _number(r.paper),
             stats.against_paper(r.contrast, r.paper), r.compressed]
            for r in found]


def _floored(row: Row) -> Cell:
    """A side whose floor was scored (its `floor_name` and `floor_value` are the claim's: both sides share the items),
    else an unrun cell (no floor)."""
    return next((c for c in row.cells if c.floor_value is not None), Cell(NOT_RUN))


def _budget_header(budget: dict[str, Any]) -> str:
    if budget.get("heldout"):
        return "held-out instances"
    examples = "all examples" if budget["examples"] is None else f"{budget['examples']:,} examples"
    return examples + (f" (lr {budget['lr']:g})" if budget.get("lr") is not None else "")


def _tokens(row: Row) -> str:
    if row.tokens is None:
        return f"{row.steps:,} steps"
    return (f"{row.tokens / 1e6:.2f}M" if row.tokens >= 100_000 else f"{row.tokens:,}") + " tokens"


def _pretraining(row: Row) -> str:
    if row.tokens is None:
        return f"{row.steps:,} steps, not run"
    return f"{row.steps:,} steps, {_tokens(row)}"


def settles(line: list[Row]) -> str:
    """Where one claim at one fine-tuning budget resolves along the pretraining budgets measured: the verdict it keeps
    from some budget on to the largest (every larger budget agreeing), with what it was below; "not within the
    budgets run" while the largest is unresolved."""
    measured = sorted((r for r in line if r.contrast.verdict != stats.NOT_MEASURED), key=lambda r: r.steps)
    if not measured:
        return stats.NOT_MEASURED
    stretches = []  # [verdict, its first row, its last row] of each stretch of one verdict
    for r in measured:
        if stretches and stretches[-1][0] == r.contrast.verdict:
            stretches[-1][2] = r
        else:
            stretches.append([r.contrast.verdict, r, r])

    def span(first: Row, last: Row) -> str:
        return _tokens(first) if first is last else f"{_tokens(first)} to {_tokens(last)}"

    (verdict, first, last), before = stretches[-1], stretches[:-1]
    if not before:
        where = f"at every budget measured ({span(first, last)})"
    else:
        where = f"from {_tokens(first)} on (below: " + "; ".join(f"{v} at {span(a, b)}" for v, a, b in before) + ")"
    if len(measured) < len(line):
        where += f"; {len(measured)} of {len(line)} budgets measured"
    return ("not within the budgets run: unresolved " if verdict == stats.UNRESOLVED else f"{verdict} ") + where


def _verdict(row: Row) -> str:
    c = row.contrast
    if c.verdict == stats.NOT_MEASURED:
        return f"{stats.NOT_MEASURED}: {row.reason}" if row.reason else stats.NOT_MEASURED
    flags = "".join(f"; {side} **{cell.floor_status}**" for side, cell in zip("AB", row.cells) if cell.at_floor)
    means = " vs ".join(f"{cell.mean:.1f}" for cell in row.cells)
    reading = stats.reading(c, row.paper, row.compressed)
    return f"{c.estimate:+.1f} [{c.low:+.1f}, {c.high:+.1f}] {reading} ({means}{flags})"


def markdown(spec: dict[str, Any], found: list[Row], profile: str, commit: str, runs: tuple[int, int]) -> str:
    """scaling.md: per claim, its figure and a table of A - B [95% interval] verdict by budget; `runs`: the sweep's
    runs finished and planned (fewer finished: an interim report)."""
    own = spec.get("task_budgets") or {}
    shared = ", ".join(map(_budget_header, spec["finetune_budgets"]))
    lines = [
        "# How much compute each claim needs: pretraining tokens x fine-tuning updates", "",
        f"Profile `{profile}`, commit `{commit}`: `python -m bertlab.scaling` (conf/scaling/{profile}.yaml). "
        f"Pretraining budgets {', '.join(f'{s:,}' for s in spec['pretrain_steps'])} steps (each its own run, its "
        f"schedule ending at its budget); fine-tuning budgets {shared}"
        + "".join(f" ({t}: {', '.join(map(_budget_header, b))})" for t, b in own.items()) + "; "
        f"seeds {', '.join(map(str, spec['seeds']))}. Each cell: A − B on the dev set (points), its 95% paired-"
        "bootstrap interval over dev items and seeds, and the verdict on the paper's direction, with what the "
        "interval says of the paper's own A − B (outside it, even an unresolved verdict says the effect here is "
        "smaller or larger than the paper's) and whether a side is at its floor, where effects are compressed. "
        "Held-out ppl / unigram: the pretrained encoder's held-out perplexity over the unigram floor of the same "
        "positions.", "",
    ]
    if runs[0] < runs[1]:
        lines += [f"**An interim report: {runs[0]} of the sweep's {runs[1]} runs are finished**; a cell without its "
                  "runs is \"not measured\". Rerun the command to go on.", ""]
    summary = []
    for claim in spec["claims"]:
        for b in budgets(spec, claim["task"]):
            line = [r for r in found if r.claim["id"] == claim["id"] and r.budget == b]
            summary.append([claim["text"], _budget_header(b), settles(line), _paper_at_largest(line)])
    lines += ["## Where each claim resolves", "",
              "Along the pretraining budgets, at each fine-tuning budget: the verdict a claim keeps from some budget "
              "on to the largest measured (what it was below), or \"not within the budgets run\" while the "
              "largest is unresolved; beside it, the paper's own A − B and where it lies against the interval at "
              "the largest budget measured (outside it, the effect here is smaller or larger than the paper's).", "",
              *table(["claim", "fine-tuning budget", "where it resolves", "the paper's A − B: at the largest budget"],
                     summary), ""]
    for claim in spec["claims"]:
        mine = [r for r in found if r.claim["id"] == claim["id"]]
        scored = next((c for c in map(_floored, mine) if c.floor_value is not None), Cell(NOT_RUN))
        floor = f" Floor ({scored.floor_name}): {scored.floor_value:.1f}." if scored.floor_value is not None else ""
        what = "held-out perplexity on the same held-out instances" if claim["task"] == PPL else claim["task"]
        lines += [f"## {claim['text']}", "",
                  f"A − B, {mine[0].metric}: {_side(claim['a'])} vs {_side(claim['b'])} on {what}, then A's and "
                  f"B's means over seeds.{floor} A side the bootstrap cannot tell from the floor on the same items is "
                  f"flagged. The paper's A − B: {_paper(mine[0].paper)}.", "",
                  f"![{claim['id']}](scaling/{claim['id']}.png)", ""]
        grid = []
        for steps in spec["pretrain_steps"]:
            at = [r for r in mine if r.steps == steps]
            ratios = " / ".join("—" if x is None else f"{x:.3f}" for x in at[0].ratios)
            grid.append([_pretraining(at[0]), ratios, *map(_verdict, at)])
        header = ["pretraining", "held-out ppl / unigram (A / B)", *map(_budget_header, budgets(spec, claim["task"]))]
        lines += [*table(header, grid), ""]
    return "\n".join(lines)


def _paper(effect: float | None) -> str:
    """The paper's A - B, or "none" (no row of the paper for a side, or perplexity: not comparable)."""
    return "none" if effect is None else f"{effect:+.1f}"


def _paper_at_largest(line: list[Row]) -> str:
    """The paper's A - B and where it lies against the interval of the largest pretraining budget measured."""
    measured = [r for r in line if r.contrast.verdict != stats.NOT_MEASURED]
    where = stats.against_paper(max(measured, key=lambda r: r.steps).contrast, line[0].paper) if measured else None
    text = {"inside": "inside the interval", "above": "outside (above) the interval",
            "below": "outside (below) the interval"}.get(where or "")
    return _paper(line[0].paper) + (f": {text}" if text else "")


def _side(side: list[str]) -> str:
    """A claim side as the report names it: `encoder` and its fine-tuning mode, if any."""
    return " ".join([f"`{side[0]}`", *side[1:]])


def plot_rows(mine: list[Row]) -> list[list[Any]]:
    """A claim's measured points, in PLOT_FIELDS order: what `dvc plots show` draws (x tokens, y estimate)."""
    return [[r.tokens, _number(r.contrast.estimate), _number(r.contrast.low), _number(r.contrast.high),
             r.contrast.verdict, _budget_header(r.budget)]
            for r in mine if r.tokens and r.contrast.verdict != stats.NOT_MEASURED]


def figure(path: Path, claim: dict[str, Any], mine: list[Row], own: list[dict[str, Any]], note: str = "") -> None:
    """A claim's A - B with its interval against pretraining tokens, one line per fine-tuning budget, and each
    pretrained side's held-out perplexity over the unigram floor beside it."""
    pretrained = [r for r in mine if r.tokens]
    lines = {_budget_header(b): [(r.tokens, r.contrast.estimate, r.contrast.low, r.contrast.high)
                                 for r in pretrained if r.budget == b] for b in own}
    ratios = {side[0]: sorted({(r.tokens, r.ratios[i]) for r in pretrained if r.ratios[i] is not None})
              for i, side in enumerate((claim["a"], claim["b"]))}
    plot_budgets(path, claim["text"], f"A − B ({mine[0].metric})", lines, {k: v for k, v in ratios.items() if v},
                 note)


def write(report_dir: Path, spec: dict[str, Any], found: list[Row], profile: str, commit: str,
          runs: tuple[int, int]) -> list[Path]:
    """scaling.md, scaling.csv and per claim its figure and points into `report_dir`, each written aside and then
    moved into place (no other file there is touched); the paths written."""
    (report_dir / "scaling").mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(dir=report_dir, prefix=".scaling-") as tmp:
        staged = Path(tmp)
        write_csv(staged / "scaling.csv", FIELDS, csv_rows(found))
        (staged / "scaling.md").write_text(markdown(spec, found, profile, commit, runs) + "\n")
        for claim in spec["claims"]:
            mine = [r for r in found if r.claim["id"] == claim["id"]]
            figure(staged / f"{claim['id']}.png", claim, mine, budgets(spec, claim["task"]),
                   f"the scaling sweep, profile {profile}, commit {commit}")
            write_csv(staged / f"{claim['id']}.csv", PLOT_FIELDS, plot_rows(mine))
        per_claim = [f"{c['id']}{ext}" for c in spec["claims"] for ext in (".csv", ".png")]
        for name in ("scaling.csv", "scaling.md", *per_claim):
            target = report_dir / ("scaling" if name in per_claim else "") / name
            (staged / name).replace(target)
            written.append(target)
    return written
