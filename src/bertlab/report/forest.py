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
from bertlab.report.stats import (BEYOND, CONTRADICTED, NOT_MEASURED, REPRODUCED, SIZE_OUT,  # noqa: E402
                                  UNRESOLVED)

STYLE = {  # verdict -> (marker, colour): told apart by shape too, for greyscale and colour-blind readers
    REPRODUCED: ("o", "#1b9e77"), CONTRADICTED: ("X", "#d95f02"), UNRESOLVED: ("D", "#7570b3"),
    BEYOND: ("s", "#999999")}
ROW_INCHES, PANEL_INCHES = 0.3, 0.75  # a pair's row; a panel's title and axis


def measured(pair: Pair) -> bool:
    c = pair.contrast
    return c.verdict != NOT_MEASURED and all(math.isfinite(v) for v in (c.estimate, c.low, c.high))


def span(pair: Pair) -> list[float]:
    """What a pair's row must show on its x-axis: its interval, the paper's A - B and the line of no difference (the
    bound, for a ratio)."""
    c = pair.contrast
    return [c.low, c.high, pair.bound if pair.ratio else 0.0] + ([] if pair.paper is None else [pair.paper])


def row_label(pair: Pair) -> str:
    """`column: A − B` (`A / B` for a ratio), `*` where a side is at its floor."""
    sign = "/" if pair.ratio else "−"
    return f"{'LM ppl' if pair.column == PPL else pair.column}: {pair.a.label} {sign} {pair.b.label}" + (
        " *" if pair.compressed else "")


def unit(pairs: list[Pair]) -> str:
    """A panel's x-axis: dev points, perplexity (lower is better) or A's perplexity over its floor's."""
    if pairs[0].ratio:
        return "A's held-out perplexity / its unigram floor's (the claim: below the dashed bound)"
    if pairs[0].column == PPL:
        return "A − B, held-out perplexity (lower is better: < 0 favours A)"
    return "A − B, dev points (> 0 favours A, as the paper claims)"


def plot_claims(path: Path, findings: list[Finding]) -> list[list[str]]:
    """The forest plot of `findings` into `path`: a panel per claim with a measured pair, a row per measured pair
    (its not-measured pairs counted in the panel's title; claims with none listed at the foot), a vertical line at
    no difference (at the bound for a ratio claim), the paper's A - B where it gives one; dev-point panels share one
    x scale, which shows every interval and paper's effect. Returns each panel's row labels, top to bottom; nothing
    is written (and [] returned) when no pair was measured."""
    panels = [(f, [p for p in f.pairs if measured(p)]) for f in findings]
    drawn = [(f, pairs) for f, pairs in panels if pairs]
    if not drawn:
        return []
    unmeasured = [f"{f.id} ({len(f.pairs)})" for f, pairs in panels if not pairs]
    heights = [len(pairs) * ROW_INCHES + PANEL_INCHES for _, pairs in drawn]
    fig, axes = plt.subplots(len(drawn), 1, figsize=(11, sum(heights) + 1.0), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    points = [x for _, pairs in drawn for p in pairs if not (p.ratio or p.column == PPL) for x in span(p)]
    labels = []
    for ax, (finding, pairs) in zip(axes[:, 0], drawn):
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
        labels.append([row_label(p) for p in pairs])
        ax.set_yticks(list(ys), labels[-1], fontsize=8)
        ax.set_ylim(len(pairs) - 0.5, -0.5)  # the first pair on top
        skipped = len(finding.pairs) - len(pairs)
        title = f"{finding.id} ({finding.table}): {finding.text}" + (f" [+{skipped} not measured]" if skipped else "")
        ax.set_title(textwrap.shorten(title, 130), fontsize=9, loc="left")
        ax.set_xlabel(unit(pairs), fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.legend(handles=[Line2D([], [], ls="", marker=m, color=c, label=v) for v, (m, c) in STYLE.items()] + [
        Line2D([], [], ls="", marker="o", mfc="white", mew=1.5, color="black",
               label=f"hollow: {SIZE_OUT} (outside the interval)"),
        Line2D([], [], ls="", marker="|", ms=12, mew=2, color="black", label="the paper's A − B")],
        loc="outside upper center", ncol=3, fontsize=8, frameon=False)
    foot = ("95% intervals (over several pretraining runs: t on the Multi-Bootstrap's variance parts); * a side at its "
            "floor (effects compressed).")
    if unmeasured:
        foot += " No pair measured: " + ", ".join(unmeasured) + "."
    fig.supxlabel(textwrap.fill(foot, 160), fontsize=7, x=0.01, ha="left")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return labels
