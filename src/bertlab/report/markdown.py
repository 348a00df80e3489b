"""`reports/ablations.md`: the study's tables beside the paper's numbers with their floors, the figures, and the
findings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bertlab.report import stats
from bertlab.report.cells import PPL, Entry
from bertlab.report.collect import NO_DATA, NOT_RUN, OK, Results, encoder_record
from bertlab.report.legend import legend
from bertlab.report.multiboot import DRAWS, MultiContrast
from bertlab.report.pairs import Finding, Pair
from bertlab.report.tables import encoder_of, rows, shape_text, table_names, tasks

LEGEND = (
    "Each cell: the paper's dev-set number; ours as mean ± sample std over its runs (\"(1 seed)\": one run, no "
    "spread; \"(3 pretraining runs × 1 seed)\": the encoder pretrained at 3 seeds, each fine-tuned once); and the floor, what a trivial predictor scores on the same items (the majority training class; "
    "random predictions for regression; random span logits for SQuAD; all-\"O\" for NER; unigram perplexity on the "
    "same held-out positions for the LM), flagged **at floor** when a paired bootstrap cannot tell ours from it "
    "and **below floor** when ours is worse (no floor: the runs wrote no per-item file). \"no data\" = the task's "
    "data could not be had, \"—\" = not run at this profile (why: below the table)."
)
PPL_NOTE = ("The perplexity intervals cover held-out instances only: each encoder has one pretraining run, so the "
            "variation between pretraining runs is not in them.")
PPL_RUNS_NOTE = ("The perplexity intervals over several pretraining runs (the items × runs column) are t intervals on "
                 "the runs' spread and the held-out instances' noise that every run shares (the instances resampled, "
                 "the same for every run), as the other pairs' are.")
PROBE_NOTE = ("Each side's probe is a logistic regression on its frozen, standardised features (a sentence's mean "
              "real-token vector; a word's first sub-token), fitted to convergence with its L2 strength chosen by "
              "cross-validated log-loss on the training examples only: the same procedure for both encoders.")
HELDOUT_NOTE = (
    "Held-out perplexity is scored where the input shows `[MASK]`: the held-out positions are chosen at the paper's "
    "15%, and every one of them shows `[MASK]`, so a model earns nothing for copying a visible answer. (Reports "
    "before commit `60f2f98` corrupted the held-out positions by BERT's 80/10/10 rule, which leaves a tenth of them "
    "showing their answer; their `cpu` `bert`, 0.478 × unigram there, was 0.815 × unigram at its `[MASK]` inputs.)"
)
LEARNED, FEATURES = "beyond_unigram", "features_carry"  # the claims that say whether the encoder learned anything


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _grid(entries: list[Entry], table: str) -> dict[str, dict[str, Entry]]:
    """{row key: {column: entry}} of one table, rows in table order."""
    grid: dict[str, dict[str, Entry]] = {}
    for e in entries:
        if e.table == table:
            grid.setdefault(e.key, {})[e.column] = e
    return grid


def _cells(e: Entry, digits: int = 1) -> list[str]:
    """paper, ours, floor."""
    return [_number(e.paper, digits), e.cell.text(digits), e.cell.floor_text(digits)]


def _header(label: dict[str, str], columns: list[str]) -> list[str]:
    return [f"{label[t]} {w}" for t in columns for w in ("paper", "ours", "floor")]


def _floor_names(entries: list[Entry], table: str, label: dict[str, str]) -> list[str]:
    """One line naming the floor of each column of `table` (as the per-item files name it), if any has one."""
    names: dict[str, str] = {}
    for e in entries:
        if e.table == table and e.cell.floor_name:
            names.setdefault(label.get(e.column, "LM ppl"), e.cell.floor_name)
    return ["", "Floors: " + "; ".join(f"{k}: {v}" for k, v in names.items()) + "."] if names else []


def _not_run(entries: list[Entry], table: str) -> list[str]:
    """One line saying why the profile left cells of `table` out, if it left any out."""
    whys = sorted({e.cell.reason for e in entries if e.table == table and e.cell.status == NOT_RUN
                   and e.cell.reason != NOT_RUN})
    return ["", "; ".join(w[:1].upper() + w[1:] for w in whys) + "."] if whys else []


def grid_section(spec: dict[str, Any], entries: list[Entry], name: str, label: dict[str, str]) -> list[str]:
    """A table of rows x tasks: the paper's number, ours and the floor in each."""
    columns = tasks(spec, name)
    body = [[c[columns[0]].row] + [x for t in columns for x in _cells(c[t])] for c in _grid(entries, name).values()]
    return table([""] + _header(label, columns), body) if columns else ["(no tasks at this profile)"]


def sizes_section(spec: dict[str, Any], results: Results, entries: list[Entry], name: str,
                  label: dict[str, str]) -> list[str]:
    """Table 6: per row, the model trained, its held-out LM perplexity with the unigram floor, and its tasks."""
    columns = tasks(spec, name)
    body = []
    for (row_name, row), c in zip(rows(spec, name).items(), _grid(entries, name).values()):
        encoder = encoder_of(row_name)
        run = encoder_record(results, encoder)
        kind = "" if not run or run["heldout_kind"] == "masked-token" else f" ({run['heldout_kind']})"
        trained = [f"`{encoder}` {shape_text(run['shape'])}", f"{run['parameters']['non_embedding'] / 1e6:.2f}M",
                   str(run["steps"])] if run else [f"`{encoder}` —", "—", "—"]
        ppl = c[PPL]
        body.append([row["shape"], *trained, _number(ppl.paper, 2), ppl.cell.short(2) + kind, ppl.cell.floor_text(2)]
                    + [x for t in columns for x in _cells(c[t])])
    header = ["#L/#H/#A (paper)", "trained as", "non-emb. params", "steps", "LM ppl paper", "LM ppl ours",
              "unigram ppl (floor)"]
    return table(header + _header(label, columns), body) + [
        "", "Our perplexities use our corpus and vocabulary: compare their order, not their size, with the paper's; "
        "the unigram perplexity of the same held-out positions is the floor any LM must go below. " + HELDOUT_NOTE]


def _difference(pair: Pair) -> str:
    c = pair.contrast
    if not math.isfinite(c.estimate) or not (math.isfinite(c.low) and math.isfinite(c.high)):
        return "—"
    if pair.ratio:
        return f"{c.estimate:.3f} [{c.low:.3f}, {c.high:.3f}] × unigram"
    digits = 2 if pair.column == PPL else 1
    runs = f"; runs {' / '.join(f'{m:+.{digits}f}' for m in pair.run_margins)}" if pair.run_margins else ""
    return f"{c.estimate:+.{digits}f} [{c.low:+.{digits}f}, {c.high:+.{digits}f}]{runs}"


def _verdict(pair: Pair) -> str:
    """The verdict on direction and size in bold with its reading, the bootstrap-seed edge and why it was not measured;
    for a pair repeating another's models, where it is counted."""
    c = pair.contrast
    if not pair.counted:
        return f"*counted once*: {pair.same_as}"
    edge = f"; **edge: within the bootstrap's Monte-Carlo error of 0** (±{c.mc_error:.2f})" if pair.edge else ""
    return f"**{pair.label}**{pair.reading.removeprefix(pair.label)}{edge}" + (f" ({pair.reason})" if pair.reason
                                                                             else "")


def _power(pair: Pair) -> str:
    """The MDE, the paper's effect against it, and the pretraining runs a side it needs (or the power with unlimited
    runs where no number reaches 80%), or "—"."""
    if pair.mde is None or not pair.counted:
        return "—"
    parts = [f"{pair.mde:.{2 if pair.column == PPL else 1}f}"]
    if pair.paper_vs_mde:
        parts.append(f"the paper's {pair.paper:+.1f} {pair.paper_vs_mde} it")
    if pair.runs_needed is not None:
        n = pair.runs_needed
        lo, hi = pair.runs_range or (n, n)
        rough = "~" if hi > 2 * lo and n >= 10 else ""
        span = f" ({lo:.0f}-{hi:.0f})" if lo != hi else ""
        least = "≥ " if min(pair.pretrain_runs) == 1 else ""
        parts.append(f"no number of runs reaches 80%: unlimited runs a side {least}{pair.unlimited:.0%} power"
                     if math.isinf(n) else f"{rough}{n:.0f} run{'s' * (n > 1)} a side{span}")
    if pair.runs_edge is not None:
        parts.append(f"edge: {pair.runs_edge:.0f}+ runs a side or none, within the Monte-Carlo error")
    return "; ".join(parts)


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _holm(pair: Pair) -> str:
    """Whether a resolved verdict holds family-wise, with its Holm-adjusted p (and the edge where the p-values'
    Monte-Carlo error spans both readings); "—" for any other."""
    if pair.holm_p is None or pair.contrast.verdict not in (stats.REPRODUCED, stats.CONTRADICTED):
        return "—"
    floor = isinstance(pair.contrast, MultiContrast) and pair.contrast.p_floor
    p = f"{'≤' if floor else ''}{p_text(pair.holm_p)}".replace("≤<", "<")
    edge = "; **edge**: within the p-values' Monte-Carlo error of the level" if pair.holm_edge else ""
    held = "holds" if pair.familywise == pair.contrast.verdict else "not family-wise"
    return f"{held} (p {p}){edge}"


def _pair_row(pair: Pair, label: dict[str, str]) -> list[str]:
    c = pair.contrast
    runs = "/".join(f"{p}×{s // p}" if p > 1 and s % p == 0 else str(s)
                    for p, s in zip(pair.pretrain_runs, pair.seeds))
    size = f"{c.n_items} × {runs}" if c.n_items else "—"
    return [label.get(pair.column, "LM ppl"), pair.a.label, pair.b.label, _difference(pair), size,
            pair.budget or "—", _verdict(pair), _power(pair), _holm(pair)]


def findings_section(spec: dict[str, Any], findings: list[Finding]) -> list[str]:
    """Each claim with its verdict summary, then a table of its pairs."""
    label = {t: c["label"] for t, c in spec["columns"].items()}
    boot = {"draws": DRAWS, "level": 0.95} | spec.get("bootstrap", {})
    lines = ["## Findings: the paper's claims as paired contrasts", "", *legend(boot, findings)]
    for i, f in enumerate(findings, 1):
        lines += ["", f"### {i}. {f.text} ({f.table.replace('table', 'Table ')}): {f.summary}"]
        if any(p.column == PPL for p in f.pairs):
            several = any(max(p.pretrain_runs) > 1 for p in f.pairs if p.column == PPL)
            lines += ["", PPL_RUNS_NOTE if several else PPL_NOTE]
        rows = [_pair_row(p, label) for p in f.pairs]
        if rows:
            lines += [""] + table(["column", "A", "B", "A − B [95% interval]", "items × runs A/B", "fine-tuning",
                                   "verdict", "MDE (80% power)", "Holm"], rows)
    return lines


def summary_section(findings: list[Finding], label: dict[str, str]) -> list[str]:
    """What the encoder learned (its held-out ratio to the unigram floor, its probed features) and the verdict counts,
    in a paragraph, from the findings themselves."""
    by_id = {f.id: f for f in findings}
    lines = ["## Summary", ""]
    learned = by_id.get(LEARNED)
    if learned and learned.pairs:
        c = learned.pairs[0].contrast
        ratio = f"{c.estimate:.3f} [{c.low:.3f}, {c.high:.3f}]" if math.isfinite(c.estimate) else "not measured"
        if c.verdict == stats.REPRODUCED:
            what = "it has learned well beyond word frequencies"
        else:
            what = ("it has **not learned enough beyond word frequencies to test the pretraining claims**: read every "
                    "pretrained-vs-scratch verdict below as a statement about an encoder near its unigram floor")
        lines.append(f"- `{learned.pairs[0].a.key}`'s held-out perplexity at `[MASK]` inputs is {ratio} × the unigram "
                     f"floor of the same positions (the claim: at most {learned.pairs[0].b.label}): {what}.")
    probe = by_id.get(FEATURES)
    if probe:
        parts = [f"{label.get(p.column, p.column)} {_difference(p)} ({p.contrast.verdict})" for p in probe.pairs]
        lines.append(f"- Its frozen features against a never-trained encoder's, by a linear probe (A − B): "
                     f"{'; '.join(parts) or 'not run'}. {PROBE_NOTE}")
    lines += [_tally("The paper's claims on our runs", [p for f in findings if not f.own for p in f.pairs]),
              _tally("The project's own checks (from scratch, the probes, the perplexity bound; not the paper's)",
                     [p for f in findings if f.own for p in f.pairs])]
    return lines


def _tally(what: str, pairs: list[Pair]) -> str:
    """One bullet of verdict counts over `pairs` (each repeat counted once), split by the paper's size, and
    family-wise."""
    counted = [p for p in pairs if p.counted]
    held = {v: sum((p.familywise or p.contrast.verdict) == v for p in counted)
            for v in (stats.REPRODUCED, stats.CONTRADICTED)}
    repeats = len(pairs) - len(counted)
    summary = stats.summarize([p.contrast for p in counted], [p.paper for p in counted], _unmeasured(counted))
    return (f"- {what}: {summary}; family-wise (Holm within each table): {held[stats.REPRODUCED]} reproduced, "
            f"{held[stats.CONTRADICTED]} contradicted" + (f" ({repeats} more pair{'s' * (repeats > 1)} repeating "
                                                           "another's models, counted once)" if repeats else "") + ".")


def _unmeasured(pairs: list[Pair]) -> str:
    """Why the not measured of `pairs` were: no data offline, not run at this profile, or else (a metric not finite)."""
    why = [p.missing for p in pairs if p.contrast.verdict == stats.NOT_MEASURED]
    if not why:
        return ""
    parts = [f"{why.count(NO_DATA)} no data", f"{why.count(NOT_RUN)} not run at this profile"]
    rest = len(why) - why.count(NO_DATA) - why.count(NOT_RUN)
    return ", ".join(parts + [f"{rest} otherwise (below)"] * bool(rest))


def render_markdown(spec: dict[str, Any], results: Results, entries: list[Entry], findings: list[Finding],
                    figures: list[Path], profile: str, commit: str, ledger: list[str] = (),
                    recipe: list[str] = ()) -> str:
    """The whole report: header (with the `recipe` deviations), the tables beside the paper with floors (and why the
    profile left cells out), figures, findings, the `ledger` lines."""
    label = {t: c["label"] for t, c in spec["columns"].items()}
    man = results.manifest
    source = "the Hugging Face hub" if man["source"] == "hub" else f"a local mirror of the hub (`{man['source']}`)"
    lines = [
        "# BERT ablations: the paper's Tables 5, 6 and 7 beside ours",
        "",
        f"- Profile: `{profile}`; commit: `{commit}`; results as of {results.as_of} (newest input file)",
        f"- Data: {source}",
    ]
    deviations = sorted(man.get("deviations", {}).items())
    lines += [f"- Deviation: `{k}`: {v}" for k, v in deviations] or ["- Deviations from the hub: none"]
    lines += [f"- No data for {t}: {info.get('reason', 'unavailable')}"
              for t, info in sorted(man["tasks"].items()) if info["status"] != OK]
    lines += ["", *summary_section(findings, label)]
    if recipe:
        lines += ["", f"Departures from BERT's recipe at the `{profile}` profile:", ""] + [f"- {r}" for r in recipe]
    lines += ["", LEGEND]
    for name in table_names(spec):
        lines += ["", f"## {spec['tables'][name].get('title', name)}", ""]
        if spec["tables"][name].get("ppl"):
            lines += sizes_section(spec, results, entries, name, label)
        else:
            lines += grid_section(spec, entries, name, label)
        lines += _floor_names(entries, name, label) + _not_run(entries, name)

    if figures:
        lines += ["", "## Figures", ""] + [f"![{p.stem}](figures/{p.name})" for p in figures]
    lines += ["", *findings_section(spec, findings)]
    if ledger:
        lines += ["", *ledger]
    return "\n".join(lines) + "\n"
