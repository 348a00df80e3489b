"""The report's figures: the forest plot of the claims (a row per measured pair), Table 6's score axis and interval
bars, Table 7's floor marks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from bertlab.report import forest, plots
from bertlab.report.cells import PPL, Cell, Entry
from bertlab.report.claims import Finding, Pair, Side
from bertlab.report.stats import CONTRADICTED, NOT_MEASURED, REPRODUCED, UNRESOLVED, Contrast
from tests.report_data import items

PNG = b"\x89PNG\r\n\x1a\n"


def pair(column: str, a: str, b: str, verdict: str, estimate: float = math.nan, width: float = 2.0,
         paper: float | None = None, **kw: Any) -> Pair:
    contrast = Contrast(estimate, estimate - width, estimate + width, verdict, 100, 1, 1)
    return Pair(column, Side(a, a, a), Side(b, b, b), contrast, paper=paper, **kw)


FINDINGS = [
    Finding("beyond_unigram", "table5", "BERT's perplexity is at most half its floor's",
            (pair(PPL, "bert", "0.5 × unigram", REPRODUCED, 0.15, 0.01, bound=0.5),)),
    Finding("nsp_helps", "table5", "NSP helps", (
        pair("qnli", "bert", "nonsp", UNRESOLVED, -0.7, paper=3.5),
        pair("mnli", "bert", "nonsp", NOT_MEASURED, paper=0.5),
        pair("squad", "bert", "nonsp", REPRODUCED, 2.8, paper=0.6, compressed=True),
        pair("sst2", "bert", "nonsp", CONTRADICTED, -3.0, paper=0.1))),
    Finding("size_ppl", "table6", "Larger models reach lower perplexity",
            (pair(PPL, "12/768/12", "3/768/12", REPRODUCED, -25.0),)),
    Finding("size_mnli", "table6", "Larger models score higher on MNLI",
            (pair("mnli", "12/768/12", "3/768/12", NOT_MEASURED, paper=6.5),)),
    Finding("features_carry", "probes", "Features carry", (pair("conll2003", "bert", "scratch", REPRODUCED, 30.0),)),
]


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each figure a plot draws, kept open for inspection (the plots close theirs), closed after the test."""
    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


def test_the_forest_plot_has_a_row_per_measured_pair_and_a_panel_per_claim(tmp_path: Path, figures: list) -> None:
    rows = forest.plot_claims(tmp_path / "claims.png", FINDINGS)
    assert rows == [["LM ppl: bert / 0.5 × unigram"],
                    ["qnli: bert − nonsp", "squad: bert − nonsp *", "sst2: bert − nonsp"],  # mnli: not measured
                    ["LM ppl: 12/768/12 − 3/768/12"], ["conll2003: bert − scratch"]]
    assert (tmp_path / "claims.png").read_bytes().startswith(PNG)
    (fig,) = figures
    axes = fig.axes
    assert [[t.get_text() for t in ax.get_yticklabels()] for ax in axes] == rows  # what was drawn: one row a pair
    assert [ax.get_title(loc="left").split(" (")[0] for ax in axes] == [
        "beyond_unigram", "nsp_helps", "size_ppl", "features_carry"]
    assert axes[1].get_title(loc="left").endswith("[+1 not measured]")
    assert "No pair measured: size_mnli (1)." in fig.get_supxlabel().replace("\n", " ")
    # each row's point at its estimate, coloured by verdict; the paper's effect beside it where it has one
    nsp = axes[1]
    points = [line for line in nsp.get_lines() if line.get_marker() in ("o", "X", "D")]
    assert [(line.get_xdata()[0], line.get_marker(), line.get_color()) for line in points] == [
        (-0.7, *forest.STYLE[UNRESOLVED]), (2.8, *forest.STYLE[REPRODUCED]), (-3.0, *forest.STYLE[CONTRADICTED])]
    papers = [(line.get_xdata()[0], line.get_ydata()[0]) for line in nsp.get_lines() if line.get_gid() == "paper"]
    assert papers == [(3.5, 0), (0.6, 1), (0.1, 2)]
    # the dev-point panels share one x range that shows every interval and paper effect; the ratio panel its bound
    low, high = nsp.get_xlim()
    assert axes[3].get_xlim() == (low, high) and low < -5.0 and high > 32.0
    assert axes[0].get_xlim()[0] < 0.14 and axes[0].get_xlim()[1] > 0.5


def test_no_measured_pair_writes_no_forest_plot(tmp_path: Path) -> None:
    assert forest.plot_claims(tmp_path / "claims.png", FINDINGS[3:4]) == []
    assert not (tmp_path / "claims.png").exists()


def cell(task: str, name: str, score: float) -> Cell:
    """A one-seed classification (or tagging) cell scoring `score`, with its floor, as the report builds them."""
    run = items(name, task, score)
    floor = {k: v for k, v in run["floor"].items() if k != "name"}
    value = 60.0 if run["kind"] == "classification" else 0.0  # the synthetic floor: majority class 1 / all "O"
    return Cell("ok", (score,), kind=run["kind"], metric=run["metric"], scored_on="validation", n_items=run["n"],
                runs=(run["model"],), floor=floor, floor_value=value)


def test_table6_scores_span_ten_points_with_their_floor_and_intervals(tmp_path: Path, figures: list) -> None:
    """Scores within a point of each other (as SST-2's 78.4-79.0 were) are drawn on an axis that also shows the
    floor, with each cell's 95% interval as its bar."""
    spec = {"tables": {"table6": {"rows": {"small-finetune": {}, "big-finetune": {}}, "tasks": ["sst2"], "ppl": True}},
            "encoders": {"small": ["model=L3_H768_A12"], "big": ["model=L6_H768_A12"]},
            "columns": {"sst2": {"label": "SST-2"}}, "bootstrap": {"draws": 300}}
    results = type("R", (), {"pretrain": {
        f"{e}-1": {"encoder": e, "seed": 1, "parameters": {"non_embedding": n},
                   "shape": {"num_layers": l, "hidden_size": 64, "num_heads": 4}}
        for e, n, l in (("small", 1e5, 1), ("big", 1e6, 2))}})()
    ppl = Cell("ok", (80.0,), floor_value=900.0)
    entries = [Entry("table6", e, e, c, None, cell_) for e, s in (("small", 78.5), ("big", 79.0))
               for c, cell_ in ((PPL, ppl), ("sst2", cell("sst2", e, s)))]
    assert plots.plot_sizes(tmp_path / "t6.png", spec, results, entries)
    (fig,) = figures
    dev = fig.axes[1]
    low, high = dev.get_ylim()
    assert low < 60.0 and high > 79.0 and high - low >= plots.MIN_SPAN  # the floor (60) in view
    (bars,) = dev.containers  # SST-2's, drawn at each cell's 95% interval: several points each side on 200 items
    drawn = [y for seg in bars.lines[2][0].get_segments() for y in (seg[0][1], seg[1][1])]
    below, above = plots.error_bars([e.cell for e in entries if e.column == "sst2"], spec["bootstrap"])
    assert drawn == pytest.approx([78.5 - below[0], 78.5 + above[0], 79.0 - below[1], 79.0 + above[1]])
    assert all(b > 2.0 for b in below + above)
    assert [line.get_label() for line in dev.get_lines() if line.get_label().endswith("floor")] == ["SST-2 floor"]
    # each point's shape as trained, the paper's beside; a labelled tick at each size and between 100 and 1000
    assert [t.get_text() for t in fig.axes[0].texts] == ["1/64/4 (paper 3/768/12)", "2/64/4 (paper 6/768/12)"]
    for ax in fig.axes:
        assert [(t.get_position()[0], t.get_text()) for t in ax.get_xticklabels()] == [(1e5, "0.1M"), (1e6, "1M")]
    ticks = fig.axes[0].get_yticks()
    assert {100, 200, 250, 300, 500, 1000} <= {round(t) for t in ticks}


def test_the_forest_plot_draws_what_the_report_counts_with_the_shapes_that_ran(tmp_path: Path, figures: list) -> None:
    """A pair of an earlier pair's models (Table 7's strategies that read the same layers) is not drawn again, but
    named in the foot; a side named by the paper's shape shows the shape that ran first; a long title wraps, whole;
    the profile in the corner."""
    repeat = pair("conll2003", "sum_all", "embeddings", UNRESOLVED, 1.4, same_as="the same model as sum_four")
    long = "Every feature-based strategy on hidden layers beats the embeddings alone, " * 3
    findings = [Finding("size_ppl", "table6", "Larger models reach lower perplexity",
                        (pair(PPL, "12/768/12", "3/768/12", REPRODUCED, -25.0),)),
                Finding("features", "table7", long, (pair("conll2003", "sum_four", "embeddings", UNRESOLVED, 1.4),
                                                     repeat))]
    rows = forest.plot_claims(tmp_path / "claims.png", findings, {"12/768/12": "4/192/12", "3/768/12": "1/192/12"},
                              "profile smoke, commit abc")
    assert rows == [["LM ppl: 4/192/12 (paper 12/768/12) − 1/192/12 (paper 3/768/12)"],
                    ["conll2003: sum_four − embeddings"]]
    (fig,) = figures
    title = fig.axes[1].get_title(loc="left")
    assert title.replace("\n", " ") == f"features (table7): {long}".rstrip() and title.count("\n") >= 2
    assert max(map(len, title.splitlines())) <= forest.TITLE_CHARACTERS
    assert "pairs of an earlier pair's models, features (1)." in fig.get_supxlabel().replace("\n", " ")
    assert fig.texts[-1].get_text() == "profile smoke, commit abc"


def test_table7_floor_marks_sit_above_the_axis(tmp_path: Path, figures: list) -> None:
    entries = [Entry("table7", "Fine-tuning", "finetune", "conll2003", 96.4, cell("conll2003", "ft", 90.0)),
               Entry("table7", "Embeddings", "embeddings", "conll2003", 91.0, cell("conll2003", "emb", 0.0))]
    assert plots.plot_strategies(tmp_path / "t7.png", entries, {"draws": 300})
    (fig,) = figures
    (ax,) = fig.axes
    (floor,) = [line for line in ax.get_lines() if line.get_label() == "our floor"]
    assert list(floor.get_ydata()) == [0.0, 0.0] and ax.get_ylim()[0] <= -5.0  # clear of the bottom spine
    assert (tmp_path / "t7.png").read_bytes().startswith(PNG)
