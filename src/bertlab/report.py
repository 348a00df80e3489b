"""The BERT paper's Tables 5, 6 and 7 from our runs: collect results, aggregate seeds, check the paper's
claims, render Markdown, CSV, metrics and plots. `spec` is the `ablations` config as a plain dict.
"""

from __future__ import annotations

import csv
import math
import operator
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bertlab.stage import UserError, read_json, write_json  # noqa: E402

OK, NO_DATA, NOT_RUN = "ok", "no data", "not run"
HOLDS, FAILS, UNMEASURED = "holds", "does not hold", "not measured"
TABLES = ("table5", "table6", "table7")
CSV_FIELDS = ("table", "row", "column", "paper", "mean", "std", "n", "status")
FINETUNE = {"mode": "finetune", "bilstm": False}  # what a Table 5 or 6 row means unless it says otherwise


@dataclass(frozen=True)
class Results:
    """Everything the report reads from the data directory."""

    finetune: list[dict[str, Any]]
    pretrain: dict[str, dict[str, Any]]
    curves: dict[str, list[tuple[int, float]]]  # pretrain run -> (step, train loss)
    manifest: dict[str, Any]
    unigram: dict[str, float]  # held-out unigram perplexity per instance format: nsp, packed
    as_of: str  # modification time of the newest input file


@dataclass(frozen=True)
class Cell:
    """Our number for one table cell: the values over seeds, or why there are none."""

    status: str
    values: tuple[float, ...] = ()

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        """Sample standard deviation over seeds (n - 1); None below two seeds."""
        return statistics.stdev(self.values) if self.n > 1 else None

    def short(self, digits: int = 1) -> str:
        if not self.values:
            return "—" if self.status == NOT_RUN else self.status
        return f"{self.mean:.{digits}f}"

    def text(self, digits: int = 1) -> str:
        """`mean ± std (n seeds)`, "no data", or "—" for a run never made."""
        if not self.values:
            return self.short(digits)
        spread = f" ± {self.std:.{digits}f}" if self.std is not None else ""
        return f"{self.mean:.{digits}f}{spread} ({self.n} seed{'s' if self.n > 1 else ''})"


@dataclass(frozen=True)
class Entry:
    """One cell of a table: the paper's number beside ours."""

    table: str
    row: str  # the row's label
    key: str  # the row's name in metrics.json
    column: str  # a task, or ppl / unigram_ppl (Table 6)
    paper: float | None
    cell: Cell


@dataclass(frozen=True)
class Finding:
    claim: str  # the paper's claim and how it is decided
    verdict: str  # HOLDS | FAILS | UNMEASURED
    evidence: str  # the numbers it was decided on


@dataclass(frozen=True)
class Report:
    entries: list[Entry]
    findings: list[Finding]
    figures: list[Path]


# ---------------------------------------------------------------------------------------------- inputs


def collect(data_dir: Path) -> Results:
    """Read every pretraining and fine-tuning result, the download manifest and the corpus statistics."""
    manifest_file = data_dir / "download" / "manifest.json"
    if not manifest_file.exists():
        raise UserError(f"{manifest_file} not found: run the download stage first")
    stats_file = data_dir / "pretrain_data" / "stats.json"
    pretrain_files = sorted((data_dir / "pretrain").glob("*/metrics.json"))
    finetune_files = sorted((data_dir / "finetune").glob("*/metrics.json"))
    curve_files = sorted((data_dir / "pretrain").glob("*/metrics.csv"))
    finetune = [read_json(p) for p in finetune_files]
    seen: dict[tuple, str] = {}
    for run in finetune:
        key = (*_identity(run), run["seed"])
        if key in seen:
            raise UserError(f"fine-tuning runs {seen[key]!r} and {run['name']!r} are the same cell and seed")
        seen[key] = run["name"]
    inputs = [manifest_file, *pretrain_files, *finetune_files, *curve_files]
    if stats_file.exists():
        inputs.append(stats_file)
    newest = max(p.stat().st_mtime for p in inputs)
    curves = {p.parent.name: read_curve(p) for p in curve_files}
    return Results(
        finetune=finetune,
        pretrain={p.parent.name: read_json(p) for p in pretrain_files},
        curves={name: points for name, points in curves.items() if points},
        manifest=read_json(manifest_file),
        unigram=read_json(stats_file)["heldout_unigram_ppl"] if stats_file.exists() else {},
        as_of=datetime.fromtimestamp(newest, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _identity(run: dict[str, Any]) -> tuple:
    """What makes a fine-tuning run a cell of a table (all but the seed)."""
    features = run.get("features") if run["mode"] == "feature_based" else None
    return run["encoder"], run["task"], run["mode"], features, bool(run.get("bilstm"))


def read_curve(path: Path, column: str = "train/loss") -> list[tuple[int, float]]:
    """(step, value) of one column of a Lightning CSVLogger file, skipping rows where it was not logged."""
    points: dict[int, float] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            value = float(row.get(column) or "nan")
            if not math.isnan(value):
                points[int(float(row["step"]))] = value
    return sorted(points.items())


# ---------------------------------------------------------------------------------------------- tables


def cell(runs: list[dict[str, Any]], columns: dict[str, Any], task: str, **select: Any) -> Cell:
    """Our number for `task` over the runs whose fields equal `select`: ok runs win over "no data" ones."""
    matching = [r for r in runs if r["task"] == task and all(r.get(k) == v for k, v in select.items())]
    ok = [r for r in matching if r["status"] == OK]
    if not ok:
        return Cell(NO_DATA if matching else NOT_RUN)
    col = columns[task]
    try:
        values = [r["metrics"][col["split"]][col["metric"]] for r in ok]
        return Cell(OK, tuple(math.nan if v is None else float(v) for v in values))  # null: not finite
    except KeyError as err:
        raise UserError(f"a {task} run has no metrics.{col['split']}.{col['metric']} ({err})") from err


def _select(row: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return defaults | {k: row[k] for k in ("encoder", "mode", "features", "bilstm") if k in row}


def table_rows(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    """(table, the fields its fine-tuning runs have, its tasks) for every row of Tables 5, 6 and 7."""
    for table in ("table5", "table6"):
        for row in spec[table]["rows"]:
            yield table, _select(row, FINETUNE), spec[table]["tasks"]
    t7 = spec["table7"]
    for row in t7["rows"]:
        yield "table7", _select(row, {"encoder": t7["encoder"]}), [t7["task"]]


def tables_of(spec: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The tables that use a run: a pretraining run (`{"encoder": name}`) through any row on it, a fine-tuning run
    (encoder, task, mode, features, bilstm) as a cell. W&B groups and tags runs by them."""
    def uses(fields: dict[str, Any], tasks: list[str]) -> bool:
        if "task" not in run:
            return fields["encoder"] == run["encoder"]
        return run["task"] in tasks and all(run.get(k) == v for k, v in fields.items())

    return [t for t in TABLES if any(table == t and uses(fields, tasks) for table, fields, tasks in table_rows(spec))]


def shape_text(shape: dict[str, int]) -> str:
    return f"{shape['num_layers']}/{shape['hidden_size']}/{shape['num_heads']}"


def preset_name(shape: str) -> str:
    """The `conf/model` preset of a paper shape: '12/768/12' -> 'L12_H768_A12'."""
    layers, hidden, heads = shape.split("/")
    return f"L{layers}_H{hidden}_A{heads}"


def pretrain_cell(results: Results, encoder: str) -> Cell:
    """Held-out LM perplexity of a pretraining run."""
    run = results.pretrain.get(encoder)
    return Cell(OK, (float(run["heldout_ppl"]),)) if run else Cell(NOT_RUN)


def unigram_cell(results: Results, encoder: str) -> Cell:
    """The unigram perplexity of the held-out instances the run was scored on (NSP pairs or packed text)."""
    run = results.pretrain.get(encoder)
    value = results.unigram.get("nsp" if run["nsp"] else "packed") if run else None
    return Cell(OK, (float(value),)) if value is not None else Cell(NOT_RUN)


def build_entries(spec: dict[str, Any], results: Results) -> list[Entry]:
    """Every cell of Tables 5, 6 and 7."""
    runs, columns = results.finetune, spec["columns"]
    entries = []
    t5 = spec["table5"]
    for row in t5["rows"]:
        sel = _select(row, FINETUNE)
        for task in t5["tasks"]:
            entries.append(Entry("table5", row["label"], row.get("key", row["encoder"]), task,
                                 row["paper"].get(task), cell(runs, columns, task, **sel)))
    t6 = spec["table6"]
    for row in t6["rows"]:
        enc = row["encoder"]
        run = results.pretrain.get(enc)
        if run and run["preset"] != preset_name(row["shape"]):
            raise UserError(f"table6 row {row['shape']}: pretraining run {enc!r} used model {run['preset']}, "
                            f"not {preset_name(row['shape'])}")
        label, key = row["shape"], row.get("key", enc)
        entries.append(Entry("table6", label, key, "ppl", row["paper"].get("ppl"), pretrain_cell(results, enc)))
        entries.append(Entry("table6", label, key, "unigram_ppl", None, unigram_cell(results, enc)))
        sel = _select(row, FINETUNE)
        for task in t6["tasks"]:
            entries.append(Entry("table6", label, key, task, row["paper"].get(task), cell(runs, columns, task, **sel)))
    t7 = spec["table7"]
    for row in t7["rows"]:
        sel = _select(row, {"encoder": t7["encoder"]})
        entries.append(Entry("table7", row["label"], row["key"], t7["task"], row["paper"],
                             cell(runs, columns, t7["task"], **sel)))
    names = [(e.table, e.key, e.column) for e in entries]
    if len(set(names)) != len(names):
        raise UserError("two rows of one table have the same key: give one of them a `key`")
    return entries


# ---------------------------------------------------------------------------------------------- findings

_OPS = {">": (operator.gt, "≤"), "<": (operator.lt, "≥"), "≥": (operator.ge, "<")}


def compare(a_name: str, a: Cell, op: str, b_name: str, b: Cell) -> tuple[bool | None, str]:
    """Whether mean(a) `op` mean(b) (None when either is missing), and the numbers as text."""
    if not (a.values and b.values):
        return None, f"{a_name} {a.short()} vs {b_name} {b.short()}"
    holds = _OPS[op][0](a.mean, b.mean)
    return holds, f"{a_name} {a.short()} {op if holds else _OPS[op][1]} {b_name} {b.short()}"


def verdict(outcomes: list[bool | None]) -> str:
    """Does not hold if any measured comparison fails; holds if all were measured and pass."""
    if any(o is False for o in outcomes):
        return FAILS
    return HOLDS if outcomes and all(outcomes) else UNMEASURED


def _finding(claim: str, checks: list[tuple[bool | None, str]], none: str = "nothing to compare") -> Finding:
    return Finding(claim, verdict([c[0] for c in checks]), "; ".join(c[1] for c in checks) or none)


def size_finding(spec: dict[str, Any], results: Results) -> Finding:
    """Table 6: every model with more non-embedding parameters has a lower held-out masked-LM perplexity."""
    models = []  # (non-embedding parameters, perplexity, encoder)
    for row in spec["table6"]["rows"]:
        run = results.pretrain.get(row["encoder"])
        if run and run["heldout_kind"] == "masked-token":
            models.append((run["parameters"]["non_embedding"], run["heldout_ppl"], row["encoder"]))
    models.sort()
    pairs = [(a, b) for a in models for b in models if a[0] < b[0]]
    bad = [f"{a[2]} {a[1]:.2f} ≤ {b[2]} {b[1]:.2f}" for a, b in pairs if b[1] >= a[1]]
    listing = ", ".join(f"{enc} ({p / 1e6:.2f}M) {ppl:.2f}" for p, ppl, enc in models)
    evidence = f"{listing}: {len(pairs) - len(bad)} of {len(pairs)} size-ordered pairs in order"
    claim = ("Larger models reach lower LM perplexity (Table 6); decided on every pair of models with "
             "different non-embedding parameter counts: the larger must have the lower held-out MLM perplexity")
    if not pairs:
        return Finding(claim, UNMEASURED, f"{listing or 'no model'}: fewer than two sizes measured")
    return Finding(claim, FAILS if bad else HOLDS, evidence + ("; out of order: " + ", ".join(bad) if bad else ""))


def check_findings(spec: dict[str, Any], results: Results) -> list[Finding]:
    """The paper's claims, each decided from our numbers only."""
    runs, columns, names = results.finetune, spec["columns"], spec["findings"]
    label = {t: c["label"] for t, c in columns.items()}

    def ours(encoder: str, task: str, **select: Any) -> Cell:
        return cell(runs, columns, task, **(FINETUNE | {"encoder": encoder} | select))

    bert, ltr, scratch = names["bert"], names["ltr"], names["scratch"]
    ltr_checks = [compare(f"{label[t]}: LTR", ours(ltr, t), "<", "BERT", ours(bert, t)) for t in ("mrpc", "squad")]
    bilstm = [compare("SQuAD: LTR + BiLSTM", ours(ltr, "squad", bilstm=True), ">", "LTR", ours(ltr, "squad"))]
    t7 = spec["table7"]

    def feat(name: str) -> Cell:
        return cell(runs, columns, t7["task"], encoder=t7["encoder"], mode="feature_based", features=name)

    layers = [compare("concat last four", feat("concat_last_four"), "≥", "last hidden", feat("last")),
              compare("last hidden", feat("last"), ">", "embeddings", feat("embeddings"))]
    pretrained = []
    for task in columns:
        with_pretraining, without = ours(bert, task), ours(scratch, task)
        if with_pretraining.values and without.values:
            pretrained.append(compare(f"{label[task]}: pretrained", with_pretraining, ">", "scratch", without))
    return [
        size_finding(spec, results),
        _finding("A left-to-right LM is worse than the MLM (BERT) on MRPC and on SQuAD (Table 5)", ltr_checks),
        _finding("A BiLSTM on top improves the LTR model on SQuAD (Table 5)", bilstm),
        _finding("Feature-based NER: concat last four ≥ last hidden > embeddings (Table 7)", layers),
        _finding("Pretraining helps: BERT beats the same model from scratch on every task with data for both",
                 pretrained, none="no task with data for both"),
    ]


# ---------------------------------------------------------------------------------------------- outputs


def csv_rows(entries: list[Entry], table: str) -> list[list[Any]]:
    """One row per cell of `table`, in CSV_FIELDS order."""
    return [[e.table, e.row, e.column, e.paper, e.cell.mean, e.cell.std, e.cell.n, e.cell.status]
            for e in entries if e.table == table]


def write_csv(path: Path, header: tuple[str, ...], rows: list[list[Any]]) -> None:
    """A CSV file with `header`; None is written as an empty cell."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])


def metrics(entries: list[Entry]) -> dict[str, dict[str, dict[str, float]]]:
    """{table: {row key: {column: our mean}}} for `dvc metrics show`, measured cells only."""
    out: dict[str, dict[str, dict[str, float]]] = {t: {} for t in TABLES}
    for e in entries:
        if e.cell.values:
            out[e.table].setdefault(e.key, {})[e.column] = round(e.cell.mean, 4)
    return out


def _number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def _grid(entries: list[Entry], table: str) -> dict[str, dict[str, Entry]]:
    """{row key: {column: entry}} of one table, rows in table order."""
    grid: dict[str, dict[str, Entry]] = {}
    for e in entries:
        if e.table == table:
            grid.setdefault(e.key, {})[e.column] = e
    return grid


def render_markdown(spec: dict[str, Any], results: Results, entries: list[Entry], findings: list[Finding],
                    figures: list[Path], profile: str, commit: str) -> str:
    """The whole report: header, Tables 5-7 beside the paper, figures, findings."""
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
    lines += [
        "",
        "Each cell: the paper's dev-set number, then ours as mean ± sample std over fine-tuning seeds; "
        '"no data" = the task\'s data could not be had, "—" = not run at this profile.',
        "",
        "## Table 5: pre-training tasks (BERT-base, dev)",
        "",
    ]
    t5 = spec["table5"]["tasks"]
    rows = [[c[t5[0]].row] + [x for t in t5 for x in (_number(c[t].paper), c[t].cell.text())]
            for c in _grid(entries, "table5").values()]
    lines += _markdown_table([""] + [f"{label[t]} {w}" for t in t5 for w in ("paper", "ours")], rows)

    lines += ["", "## Table 6: model size (dev accuracy; LM perplexity on held-out pretraining data)", ""]
    t6 = spec["table6"]
    rows = []
    for row, c in zip(t6["rows"], _grid(entries, "table6").values()):
        run = results.pretrain.get(row["encoder"])
        kind = "" if not run or run["heldout_kind"] == "masked-token" else f" ({run['heldout_kind']})"
        trained = [f"`{row['encoder']}` {shape_text(run['shape'])}", f"{run['parameters']['non_embedding'] / 1e6:.2f}M",
                   str(run["steps"])] if run else [f"`{row['encoder']}` —", "—", "—"]
        rows.append([row["shape"], *trained, _number(c["ppl"].paper, 2), c["ppl"].cell.short(2) + kind,
                     c["unigram_ppl"].cell.short(2)]
                    + [x for t in t6["tasks"] for x in (_number(c[t].paper), c[t].cell.text())])
    header = ["#L/#H/#A (paper)", "trained as", "non-emb. params", "steps", "LM ppl paper", "LM ppl ours", "unigram ppl"]
    lines += _markdown_table(header + [f"{label[t]} {w}" for t in t6["tasks"] for w in ("paper", "ours")], rows)
    lines += ["", "Our perplexities use our corpus and vocabulary: compare their order, not their size, with the "
              "paper's; the unigram perplexity of the same held-out tokens is the baseline any LM must go below."]

    t7 = spec["table7"]
    lines += ["", f"## Table 7: {label[t7['task']]} NER, fine-tuning vs frozen features (`{t7['encoder']}`, dev F1)", ""]
    rows = [[e.row, _number(e.paper), e.cell.text()] for e in entries if e.table == "table7"]
    lines += _markdown_table(["Strategy", "paper", "ours"], rows)

    if figures:
        lines += ["", "## Figures", ""] + [f"![{p.stem}](figures/{p.name})" for p in figures]
    lines += ["", "## Findings: the paper's claims on our numbers", ""]
    rows = [[str(i), f.claim, f"**{f.verdict}**", f.evidence] for i, f in enumerate(findings, 1)]
    lines += _markdown_table(["#", "claim (how decided)", "verdict", "our numbers"], rows)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- plots


def plot_sizes(path: Path, spec: dict[str, Any], results: Results, entries: list[Entry]) -> bool:
    """Table 6: held-out perplexity and dev scores against non-embedding parameters; False if nothing to plot."""
    label = {t: c["label"] for t, c in spec["columns"].items()}
    points = sorted(  # (non-embedding parameters, encoder, {column: cell})
        (results.pretrain[row["encoder"]]["parameters"]["non_embedding"], row["encoder"],
         {col: e.cell for col, e in cells.items()})
        for row, cells in zip(spec["table6"]["rows"], _grid(entries, "table6").values())
        if row["encoder"] in results.pretrain
    )
    if not points:
        return False
    fig, (ax_ppl, ax_dev) = plt.subplots(1, 2, figsize=(11, 4))
    ax_ppl.plot([p for p, _, _ in points], [c["ppl"].mean for _, _, c in points], "o-", label="ours")
    for p, k, c in points:
        ax_ppl.annotate(k, (p, c["ppl"].mean), fontsize=7, xytext=(3, 3), textcoords="offset points")
    for kind in sorted({"nsp" if results.pretrain[enc]["nsp"] else "packed" for _, enc, _ in points}):
        if kind in results.unigram:
            ax_ppl.axhline(results.unigram[kind], ls="--", lw=1, color="grey", label=f"unigram baseline ({kind})")
    ax_ppl.set(xscale="log", yscale="log", xlabel="non-embedding parameters", ylabel="held-out LM perplexity",
               title="Table 6: LM perplexity (ours)")
    ax_ppl.legend(fontsize=7)
    for task in spec["table6"]["tasks"]:
        xs = [(p, c[task]) for p, _, c in points if c[task].values]
        ax_dev.errorbar([p for p, _ in xs], [c.mean for _, c in xs], yerr=[c.std or 0.0 for _, c in xs],
                        marker="o", capsize=3, label=label[task])
    ax_dev.set(xscale="log", xlabel="non-embedding parameters", ylabel="dev score", title="Table 6: dev scores (ours)")
    ax_dev.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_strategies(path: Path, entries: list[Entry]) -> bool:
    """Table 7: paper vs ours (mean ± std) per strategy; False if we have no number."""
    rows = [e for e in entries if e.table == "table7"]
    if not any(e.cell.values for e in rows):
        return False
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar([x - 0.2 for x in xs], [e.paper if e.paper is not None else math.nan for e in rows], 0.4, label="paper")
    ax.bar([x + 0.2 for x in xs], [e.cell.mean if e.cell.values else math.nan for e in rows], 0.4,
           yerr=[e.cell.std or 0.0 for e in rows], capsize=3, label="ours")
    ax.set_xticks(list(xs), [e.row for e in rows], rotation=25, ha="right", fontsize=8)
    ax.set(ylabel="dev F1", ylim=(0, 115), title="Table 7: CoNLL-2003 NER by strategy")
    ax.legend(ncol=2, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_curves(path: Path, curves: dict[str, list[tuple[int, float]]]) -> bool:
    """Pretraining loss against step, one line per run; False if no run logged a loss."""
    if not curves:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in sorted(curves.items()):
        ax.plot([s for s, _ in points], [v for _, v in points], label=name)
    ax.set(xlabel="step", ylabel="train loss", title="Pretraining loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------- all


def write(out: Path, spec: dict[str, Any], results: Results, profile: str, commit: str) -> Report:
    """Write every report file into the empty directory `out`: ablations.md, ablations_table{5,6,7}.csv,
    metrics.json, figures/*.png and pretrain_loss/<run>.csv (step, loss: for `dvc plots`)."""
    entries = build_entries(spec, results)
    findings = check_findings(spec, results)
    (out / "figures").mkdir()
    plots = {"table6": lambda p: plot_sizes(p, spec, results, entries),
             "table7": lambda p: plot_strategies(p, entries),
             "pretrain_loss": lambda p: plot_curves(p, results.curves)}
    figures = [p for name, plot in plots.items() if plot(p := out / "figures" / f"{name}.png")]
    (out / "pretrain_loss").mkdir()
    for name, points in results.curves.items():
        write_csv(out / "pretrain_loss" / f"{name}.csv", ("step", "loss"), [list(p) for p in points])
    for table in TABLES:
        write_csv(out / f"ablations_{table}.csv", CSV_FIELDS, csv_rows(entries, table))
    write_json(out / "metrics.json", metrics(entries))
    (out / "ablations.md").write_text(render_markdown(spec, results, entries, findings, figures, profile, commit))
    return Report(entries, findings, figures)
