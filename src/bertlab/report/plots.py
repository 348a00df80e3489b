"""The report's figures (PNG): Table 6 against model size, Table 7 by strategy, pretraining loss curves, and the
scaling sweep's A - B against pretraining tokens. Our numbers carry their 95% bootstrap intervals (over items and
seeds) and their floors; a score axis spans at least `MIN_SPAN` points, so that a non-difference does not look like
one."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter  # noqa: E402

from bertlab.report import stats  # noqa: E402
from bertlab.report.cells import PPL, Cell, Entry, resampling  # noqa: E402
from bertlab.report.collect import Results, encoder_record  # noqa: E402
from bertlab.report.tables import encoder_of, rows, tasks  # noqa: E402

MIN_SPAN = 10.0  # points: the least a dev-score axis spans
INTERVAL = "bars: 95% bootstrap interval"


def _save(fig: Any, path: Path, note: str = "") -> None:
    """`fig` into `path`; `note` (which profile's report it is) in its lower right corner."""
    fig.tight_layout()
    stamp(fig, note)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def stamp(fig: Any, note: str) -> None:
    """`note` in small grey type in `fig`'s lower right corner: `dvc plots show` sets one profile's figures beside
    another's (the scaling sweep's), which only this tells apart."""
    if note:
        fig.text(0.998, 0.002, note, ha="right", va="bottom", fontsize=7, color="grey")


def trained_shapes(spec: dict[str, Any], results: Results) -> dict[str, str]:
    """Each table row (`<encoder>-<mode>`) whose encoder ran: the shape it trained, `layers/hidden/heads`."""
    shapes = {}
    for table in spec["tables"]:
        for name in rows(spec, table):
            if run := encoder_record(results, encoder_of(name)):
                s = run["shape"]
                shapes[name] = f"{s['num_layers']}/{s['hidden_size']}/{s['num_heads']}"
    return shapes


def shape_label(label: str, trained: str | None) -> str:
    """A row's label with the shape that ran first, where its label is the paper's shape (Table 6's) and the
    profile shrank it: `4/192/4 (paper 12/768/12)`."""
    if trained is None or trained == label or not re.fullmatch(r"\d+/\d+/\d+", label):
        return label
    return f"{trained} (paper {label})"


def error_bars(cells: list[Cell], bootstrap: dict[str, Any]) -> list[list[float]]:
    """Below and above each cell's mean, the distances to its 95% bootstrap interval (0 without per-item scores);
    `bootstrap`: `ablations.bootstrap`."""
    bars, settings = [], resampling(bootstrap)
    for c in cells:
        low, high = stats.interval(c.runs, c.kind, c.metric, **settings) if c.runs else (math.nan, math.nan)
        bars.append([0.0, 0.0] if math.isnan(low) else [max(c.mean - low, 0.0), max(high - c.mean, 0.0)])
    return [list(side) for side in zip(*bars)] or [[], []]


def score_limits(values: list[float]) -> tuple[float, float]:
    """y limits that show `values` (means, interval ends, floors; the finite ones) over at least MIN_SPAN points,
    padded."""
    finite = [v for v in values if math.isfinite(v)] or [0.0]
    low, high = min(finite), max(finite)
    grow = max(MIN_SPAN - (high - low), 0.0) / 2
    low, high = low - grow, high + grow
    return low - 0.05 * (high - low), high + 0.05 * (high - low)


def plot_sizes(path: Path, spec: dict[str, Any], results: Results, entries: list[Entry], table: str = "table6",
               note: str = "") -> bool:
    """Table 6 (`table`): held-out perplexity (with its unigram floor) and dev scores (with their floors) against
    non-embedding parameters (a tick at each size run), each with its 95% interval, each point labelled with the
    shape it trained and the paper's; False if no pretraining run of its rows exists."""
    if table not in spec["tables"]:
        return False
    label = {t: c["label"] for t, c in spec["columns"].items()}
    cells: dict[str, dict[str, Entry]] = {}
    for e in entries:
        if e.table == table:
            cells.setdefault(e.key, {})[e.column] = e
    encoders = [encoder_of(name) for name in rows(spec, table)]
    paper_shape = {encoder_of(name): row.get("shape", "") for name, row in rows(spec, table).items()}
    trained = {e: run for e in encoders if (run := encoder_record(results, e))}
    points = sorted(  # (non-embedding parameters, encoder, {column: cell})
        (trained[encoder]["parameters"]["non_embedding"], encoder, {col: e.cell for col, e in by_column.items()})
        for encoder, by_column in zip(encoders, cells.values())
        if encoder in trained
    )
    if not points:
        return False
    bootstrap = spec.get("bootstrap", {})
    fig, (ax_ppl, ax_dev) = plt.subplots(1, 2, figsize=(12, 4.5))
    xs = [p for p, _, _ in points]
    ax_ppl.errorbar(xs, [c[PPL].mean for _, _, c in points], yerr=error_bars([c[PPL] for _, _, c in points], bootstrap),
                    fmt="o-", capsize=3, label=f"ours ({INTERVAL})")
    for p, k, c in points:  # the shape trained (layers/hidden/heads): above its point, below where one is above it
        s, y = trained[k]["shape"], c[PPL].mean
        above = y >= max(c2[PPL].mean for p2, _, c2 in points if p2 == p)
        ax_ppl.annotate(shape_label(paper_shape[k], f"{s['num_layers']}/{s['hidden_size']}/{s['num_heads']}"), (p, y),
                        fontsize=7, xytext=(0, 6 if above else -6), textcoords="offset points", ha="center",
                        va="bottom" if above else "top")
    floors = [c[PPL].floor_value for _, _, c in points]
    if any(f is not None for f in floors):
        ax_ppl.plot(xs, [math.nan if f is None else f for f in floors], "s--", color="grey", lw=1,
                    label="unigram floor (same positions)")
    ax_ppl.set(xscale="log", yscale="log", xlabel="non-embedding parameters (shape trained: L/H/A)",
               ylabel="held-out perplexity at [MASK] inputs", title="Table 6: masked-LM perplexity (ours)")
    ax_ppl.legend(fontsize=7)
    shown = []  # every mean, interval end and floor drawn: the axis shows them all
    for task in tasks(spec, table):
        measured = [(p, c[task]) for p, _, c in points if c[task].values]
        if not measured:  # no data (MNLI here): not in the legend either
            continue
        means, bars = [c.mean for _, c in measured], error_bars([c for _, c in measured], bootstrap)
        line = ax_dev.errorbar([p for p, _ in measured], means, yerr=bars, marker="o", capsize=3, label=label[task])
        floors = [(p, c.floor_value) for p, c in measured if c.floor_value is not None]
        if floors:
            ax_dev.plot([p for p, _ in floors], [f for _, f in floors], "s--", lw=1, ms=4,
                        color=line.lines[0].get_color(), alpha=0.6, label=f"{label[task]} floor")
        shown += [m - b for m, b in zip(means, bars[0])] + [m + b for m, b in zip(means, bars[1])]
        shown += [f for _, f in floors]
    ax_dev.set(xscale="log", xlabel="non-embedding parameters", ylabel=f"dev score ({INTERVAL})",
               title="Table 6: dev scores (ours)")
    if shown:  # a task measured
        ax_dev.set_ylim(*score_limits(shown))
        ax_dev.legend(fontsize=7)
    sizes = sorted(set(xs))
    for ax in (ax_ppl, ax_dev):  # a labelled tick at each size run (a log axis' own minor labels collide)
        ax.margins(x=0.12)  # room for the first and last points' shape labels
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(sizes, [f"{x / 1e6:.2g}M" for x in sizes])
    ax_ppl.yaxis.set_major_locator(LogLocator(subs=(1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)))  # 250, 300, ...: readable
    ax_ppl.yaxis.set_major_formatter(ScalarFormatter())
    ax_ppl.yaxis.set_minor_formatter(NullFormatter())
    _save(fig, path, note)
    return True


def plot_strategies(path: Path, entries: list[Entry], bootstrap: dict[str, Any], table: str = "table7",
                    note: str = "") -> bool:
    """Table 7 (`table`): paper vs ours (with its 95% interval) per strategy, with our floor marked above the axis
    (an all-"O" tagger's F1 is 0); False if we have no number."""
    bars = [e for e in entries if e.table == table]
    if not any(e.cell.values for e in bars):
        return False
    xs = range(len(bars))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar([x - 0.2 for x in xs], [e.paper if e.paper is not None else math.nan for e in bars], 0.4, label="paper")
    ax.bar([x + 0.2 for x in xs], [e.cell.mean if e.cell.values else math.nan for e in bars], 0.4,
           yerr=error_bars([e.cell for e in bars], bootstrap), capsize=3, label=f"ours ({INTERVAL})")
    floors = [e.cell.floor_value for e in bars]
    if any(f is not None for f in floors):
        ax.plot([x + 0.2 for x in xs], [math.nan if f is None else f for f in floors], "_", color="crimson", ms=16,
                mew=3, zorder=4, label="our floor")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xticks(list(xs), [e.row for e in bars], rotation=25, ha="right", fontsize=8)
    ax.set(ylabel="dev F1", ylim=(-8, 118), title="Table 7: CoNLL-2003 NER by strategy")
    ax.legend(ncol=3, loc="upper center", fontsize=8)
    _save(fig, path, note)
    return True


def loss_label(run: dict[str, Any]) -> str:
    """What a pretraining run's training loss is, by its objective's properties (its metrics.json's `causal`, `nsp`)."""
    if run.get("causal"):
        return "next-token loss"
    return "MLM + NSP loss" if run.get("nsp") else "MLM loss"


def plot_curves(path: Path, curves: dict[str, list[tuple[int, float]]], runs: dict[str, dict[str, Any]],
                note: str = "") -> bool:
    """Pretraining loss against step, one panel per objective (their losses are not comparable), one line per run
    (colour and dash both vary, so six sizes can be told apart); `runs`: each run's metrics.json. False if no run
    logged a loss."""
    if not curves:
        return False
    panels: dict[str, list[str]] = {}
    for name in sorted(curves):
        panels.setdefault(runs.get(name, {}).get("objective", "?"), []).append(name)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    styles = ["-", "--", ":", "-."]
    for ax, (objective, names) in zip(axes[0], sorted(panels.items())):
        for i, name in enumerate(names):
            points = curves[name]
            ax.plot([s for s, _ in points], [v for _, v in points], styles[i % len(styles)], label=name)
        ax.set(xlabel="step", ylabel=f"train {loss_label(runs.get(names[0], {}))}", title=objective)
        ax.legend(fontsize=7)
    _save(fig, path, note)
    return True


def plot_budgets(path: Path, title: str, ylabel: str, lines: dict[str, list[tuple[int, float, float, float]]],
                 ratios: dict[str, list[tuple[int, float]]], note: str = "") -> None:
    """The scaling sweep's figure of one claim: A - B with its interval against pretraining tokens (log x), one line
    per fine-tuning budget (`lines`: label -> (tokens, estimate, low, high)), and the zero line; beside it the
    encoders' held-out perplexity over the unigram floor (`ratios`: encoder -> (tokens, ratio)). Points not measured
    are left out, and a panel without any says so."""
    fig, (ax, ax_ppl) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    measured = False
    for i, (label, points) in enumerate(lines.items()):
        finite = [p for p in sorted(points) if all(math.isfinite(v) for v in p[1:])]
        if finite:
            measured = True
            xs = [t * 1.03 ** (i - (len(lines) - 1) / 2) for t, *_ in finite]  # the budgets side by side at one x
            ax.errorbar(xs, [e for _, e, _, _ in finite], marker="o", capsize=3, label=label,
                        yerr=[[e - lo for _, e, lo, _ in finite], [hi - e for _, e, _, hi in finite]])
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set(xscale="log", xlabel="pretraining tokens", ylabel=ylabel, title=title)
    for encoder, points in ratios.items():
        ax_ppl.plot([t for t, _ in points], [r for _, r in points], "o-", label=encoder)
    if len(ratios) > 1:
        ax_ppl.legend(fontsize=7)
    ax_ppl.set(xscale="log", xlabel="pretraining tokens", ylabel="held-out ppl / unigram ppl", title="The encoders")
    tokens = sorted({t for points in lines.values() for t, *_ in points}
                    | {t for points in ratios.values() for t, _ in points})
    for axis in (ax, ax_ppl):  # a label at each budget run (log axes' own minor labels collide)
        axis.xaxis.set_minor_formatter(NullFormatter())
        if tokens:
            axis.set_xticks(tokens, [f"{t / 1e6:.3g}M" if t >= 100_000 else f"{t:,}" for t in tokens])
    if measured:
        ax.legend(title="fine-tuning budget", fontsize=7)
    for axis, empty in ((ax, not measured), (ax_ppl, not ratios)):
        if empty:
            axis.text(0.5, 0.5, "not measured", transform=axis.transAxes, ha="center", va="center", color="grey")
    _save(fig, path, note)
