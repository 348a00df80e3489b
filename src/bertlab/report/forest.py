"""The verdicts as one picture: a forest plot of every measured claim pair (A - B with its 95% interval, the paper's
A - B beside it), a panel per claim, its pairs' verdicts on the direction by marker and colour, on the paper's size by
fill: hollow where the paper's A - B lies outside the interval (its size ruled out)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from bertlab.report.cells import PPL  # noqa: E402
from bertlab.report.claims import Finding, Pair  # noqa: E402
from bertlab.report.plots import shape_label, stamp  # noqa: E402
from bertlab.report.stats import (BEYOND, CONTRADICTED, NOT_MEASURED, REPRODUCED, SIZE_OUT,  # noqa: E402
                                  UNRESOLVED)

STYLE = {  # verdict -> (marker, colour): told apart by shape too, for greyscale and colour-blind readers
    REPRODUCED: ("o", "#1b9e77"), CONTRADICTED: ("X", "#d95f02"), UNRESOLVED: ("D", "#7570b3"),
    BEYOND: ("s", "#999999")}
ROW_INCHES, PANEL_INCHES, TITLE_LINE_INCHES = 0.3, 0.75, 0.17  # a pair's row; a panel's title and axis; a title's
TITLE_CHARACTERS = 100  # a title's line: all of it shows above its panel, whose labels take the figure's left third


def measured(pair: Pair) -> bool:
    c = pair.contrast
    return c.verdict != NOT_MEASURED and all(math.isfinite(v) for v in (c.estimate, c.low, c.high))


def span(pair: Pair) -> list[float]:
    """What a pair's row must show on its x-axis: its interval, the paper's A - B and the line of no difference (the
    bound, for a ratio)."""
    c = pair.contrast
    return [c.low, c.high, pair.bound if pair.ratio else 0.0] + ([] if pair.paper is None else [pair.paper])


def row_label(pair: Pair, shapes: dict[str, str] | None = None) -> str:
    """`column: A − B` (`A / B` for a ratio), `*` where a side is at its floor; a side named by the paper's shape
    (Table 6's) with the shape that ran first (`shapes`: a row's, `<encoder>-<mode>` -> `layers/hidden/heads`)."""
    sign, shapes = "/" if pair.ratio else "−", shapes or {}
    a, b = (shape_label(side.label, shapes.get(side.row)) for side in (pair.a, pair.b))
    return f"{'LM ppl' if pair.column == PPL else pair.column}: {a} {sign} {b}" + (" *" if pair.compressed else "")


def title(finding: Finding, pairs: list[Pair]) -> str:
    """A panel's title: the claim, and how many of its pairs were not measured."""
    skipped = sum(not measured(p) for p in finding.pairs)
    return f"{finding.id} ({finding.table}): {finding.text}" + (f" [+{skipped} not measured]" if skipped else "")


def unit(pairs: list[Pair]) -> str:
    """A panel's x-axis: dev points, perplexity (lower is better) or A's perplexity over its floor's."""
    if pairs[0].ratio:
        return "A's held-out perplexity / its unigram floor's (the claim: below the dashed bound)"
    if pairs[0].column == PPL:
        return "A − B, held-out perplexity (lower is better: < 0 favours A)"
    return "A − B, dev points (> 0 favours A, as the paper claims)"


def plot_claims(path: Path, findings: list[Finding], shapes: dict[str, str] | None = None,
                note: str = "") -> list[list[str]]:
    """The forest plot of `findings` into `path`: a panel per claim with a measured pair, a row per measured pair
    that counts (its not-measured pairs counted in the panel's title, and its repeats, an earlier pair's models, in
    the foot, as the report counts them; claims with none listed at the foot), a vertical line at no difference (at
    the bound for a ratio claim), the paper's A - B where it gives one; dev-point panels share one x scale, which
    shows every interval and paper's effect; `shapes` and `note` as `row_label` and `plots.stamp` take them. Returns
    each panel's row labels, top to bottom; nothing is written (and [] returned) when no pair was measured."""
    repeats = [f"{f.id} ({n})" for f in findings if (n := sum(measured(p) and not p.counted for p in f.pairs))]
    panels = [(f, [p for p in f.pairs if measured(p) and p.counted]) for f in findings]
    drawn = [(f, pairs) for f, pairs in panels if pairs]
    if not drawn:
        return []
    unmeasured = [f"{f.id} ({len(f.pairs)})" for f, pairs in panels if not pairs]
    titles = [textwrap.wrap(title(f, pairs), TITLE_CHARACTERS) for f, pairs in drawn]
    heights = [len(pairs) * ROW_INCHES + PANEL_INCHES + TITLE_LINE_INCHES * (len(t) - 1)
               for (_, pairs), t in zip(drawn, titles)]
    fig, axes = plt.subplots(len(drawn), 1, figsize=(11, sum(heights) + 1.0), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    points = [x for _, pairs in drawn for p in pairs if not (p.ratio or p.column == PPL) for x in span(p)]
    labels = []
    for ax, (finding, pairs), lines in zip(axes[:, 0], drawn, titles):
        ys = range(len(pairs))
        for y, pair in zip(ys, pairs):
            c = pair.contrast
            marker, colour = STYLE[c.verdict]
            ax.errorbar(c.estimate, y, xerr=[[c.estimate - c.low], [c.high - c.estimate]], fmt=marker,
                        color=colour, ecolor=colour, capsize=3, ms=7, zorder=3, mew=1.5,
                        mfc="white" if pair.size == SIZE_OUT else colour)
            if pair.paper is not None:
                ax.plot(pair.paper, y, "|", color="black", ms=14, mew=2, zorder=2, gid="paper")
        ax.axvline(pairs[0].bound if pairs[0].ratio else 0.0, color="black", lw=0.8,
                   ls="--" if pairs[0].ratio else "-")
        shared = not pairs[0].ratio and pairs[0].column != PPL
        low, high = min(xs := points if shared else [x for p in pairs for x in span(p)]), max(xs)
        pad = 0.05 * (high - low or 1.0)
        ax.set_xlim(low - pad, high + pad)
        labels.append([row_label(p, shapes) for p in pairs])
        ax.set_yticks(list(ys), labels[-1], fontsize=8)
        ax.set_ylim(len(pairs) - 0.5, -0.5)  # the first pair on top
        ax.set_title("\n".join(lines), fontsize=9, loc="left")
        ax.set_xlabel(unit(pairs), fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=[Line2D([], [], ls="", marker=m, color=c, label=v) for v, (m, c) in STYLE.items()] + [
        Line2D([], [], ls="", marker="o", mfc="white", mew=1.5, color="black",
               label=f"hollow: {SIZE_OUT} (outside the interval)"),
        Line2D([], [], ls="", marker="|", ms=12, mew=2, color="black", label="the paper's A − B")],
        loc="outside upper center", ncol=4, fontsize=8, frameon=False)
    foot = ("95% intervals (over several pretraining runs: t on the Multi-Bootstrap's variance parts); * a side at its "
            "floor (effects compressed).")
    if repeats:
        foot += " Not drawn again, as not counted again: pairs of an earlier pair's models, " + ", ".join(repeats) + "."
    if unmeasured:
        foot += " No pair measured: " + ", ".join(unmeasured) + "."
    fig.supxlabel(textwrap.fill(foot, 160), fontsize=7, x=0.01, ha="left")
    stamp(fig, note)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return labels
