"""Paired-bootstrap statistics: metrics rebuilt from per-item columns equal the official ones, and each verdict."""

import math

import numpy as np
import pytest
from seqeval.metrics.sequence_labeling import get_entities

from bertlab.report import stats
from bertlab.metrics import entity_f1, glue_metrics, squad_scores

N = 60
RESAMPLE = np.random.default_rng(7).integers(0, N, N)  # item indices with repeats, as one bootstrap draw


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def classification_run(rng: np.random.Generator, labels: np.ndarray, p_correct: float) -> dict[str, np.ndarray]:
    """Predictions right with probability `p_correct`, else another class."""
    wrong = (labels + rng.integers(1, labels.max() + 1, len(labels))) % (labels.max() + 1)
    return {"pred": np.where(rng.random(len(labels)) < p_correct, labels, wrong), "label": labels}


@pytest.mark.parametrize(
    ("task", "metric", "classes"), [("mnli", "accuracy", 3), ("mrpc", "f1", 2), ("cola", "matthews", 2)]
)
@pytest.mark.parametrize("idx", [None, RESAMPLE], ids=["all", "resample"])
def test_classification_equals_glue(task: str, metric: str, classes: int, idx, rng) -> None:
    cols = classification_run(rng, rng.integers(0, classes, N), 0.7)
    take = slice(None) if idx is None else idx
    official = glue_metrics(task, cols["pred"][take], cols["label"][take])[metric]
    assert stats.score("classification", metric, cols, idx) == pytest.approx(official, abs=1e-4)


@pytest.mark.parametrize(("task", "metric"), [("cola", "matthews"), ("mrpc", "f1")])
def test_constant_predictions_score_zero_like_glue(task: str, metric: str, rng) -> None:
    cols = {"pred": np.zeros(N, dtype=int), "label": rng.integers(0, 2, N)}
    assert stats.score("classification", metric, cols) == 0.0 == glue_metrics(task, cols["pred"], cols["label"])[metric]


@pytest.mark.parametrize("metric", ["pearson", "spearman"])
@pytest.mark.parametrize("idx", [None, RESAMPLE], ids=["all", "resample"])
def test_regression_equals_glue(metric: str, idx, rng) -> None:
    label = rng.integers(0, 6, N).astype(float)  # ties, as STS-B's labels have
    cols = {"pred": label + rng.normal(0, 1.5, N), "label": label}
    take = slice(None) if idx is None else idx
    official = glue_metrics("stsb", cols["pred"][take], cols["label"][take])[metric]
    assert stats.score("regression", metric, cols, idx) == pytest.approx(official, abs=1e-3)


def test_regression_constant_prediction_is_nan(rng) -> None:
    cols = {"pred": np.full(N, 2.5), "label": rng.normal(size=N)}
    assert math.isnan(stats.score("regression", "pearson", cols))


def test_span_equals_squad_on_all_and_resampled_questions(rng) -> None:
    words = "red blue green cat dog the a sat ran".split()
    refs = {str(q): [" ".join(rng.choice(words, 2)) for _ in range(2)] for q in range(N)}
    preds = {q: " ".join(rng.choice(words, int(rng.integers(1, 4)))) for q in refs}
    per_q = [squad_scores({q: preds[q]}, {q: refs[q]}) for q in refs]
    cols = {key: np.array([s[key] for s in per_q]) for key in ("exact_match", "f1")}
    for idx, ids in [(None, list(refs)), (RESAMPLE, [str(i) for i in RESAMPLE])]:
        keys = [(f"{k}-{q}", q) for k, q in enumerate(ids)]  # a question drawn twice counts twice
        official = squad_scores({key: preds[q] for key, q in keys}, {key: refs[q] for key, q in keys})
        for metric in ("exact_match", "f1"):
            assert stats.score("span", metric, cols, idx) == pytest.approx(official[metric], abs=1e-4)


def test_tagging_equals_seqeval_entity_scores(rng) -> None:
    tags = ["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    gold = [list(rng.choice(tags, int(rng.integers(1, 8)))) for _ in range(N)]
    pred = [[t if rng.random() < 0.7 else str(rng.choice(tags)) for t in sent] for sent in gold]
    gold[0] = pred[0] = ["O"]  # a sentence without entities
    counts = []
    for g, p in zip(gold, pred):
        ge, pe = set(get_entities(g)), set(get_entities(p))
        counts.append((len(ge & pe), len(pe - ge), len(ge - pe)))
    cols = dict(zip(("tp", "fp", "fn"), np.array(counts).T))
    for idx in (None, RESAMPLE):
        take = range(N) if idx is None else idx
        official = entity_f1([gold[i] for i in take], [pred[i] for i in take])
        for metric in ("f1", "precision", "recall"):
            assert stats.score("tagging", metric, cols, idx) == pytest.approx(official[metric], abs=1e-9)


def test_tagging_without_entities_scores_zero() -> None:
    cols = {"tp": np.zeros(3), "fp": np.zeros(3), "fn": np.zeros(3)}
    assert stats.score("tagging", "f1", cols) == 0.0 == entity_f1([["O"]] * 3, [["O"]] * 3)["f1"]


def test_lm_perplexity_pools_tokens() -> None:
    cols = {"loss_sum": np.array([2.0, 9.0, 1.0]), "count": np.array([1, 3, 1])}
    assert stats.score("lm", "ppl", cols) == pytest.approx(math.exp(12 / 5))
    assert stats.score("lm", "ppl", cols, np.array([1, 1, 2])) == pytest.approx(math.exp(19 / 7))


def test_unknown_metric_raises() -> None:
    with pytest.raises(ValueError, match="spearman"):
        stats.score("classification", "spearman", {"pred": np.zeros(2), "label": np.zeros(2)})


def accuracy_sides(rng, p_a: float, p_b: float, n: int = 800, seeds: int = 2):
    labels = rng.integers(0, 2, n)
    return tuple([classification_run(rng, labels, p) for _ in range(seeds)] for p in (p_a, p_b))


@pytest.mark.parametrize(
    ("p_a", "p_b", "verdict"),
    [(0.8, 0.6, stats.REPRODUCED), (0.6, 0.8, stats.CONTRADICTED), (0.7, 0.7, stats.UNRESOLVED)],
)
def test_compare_verdicts(p_a: float, p_b: float, verdict: str, rng) -> None:
    a, b = accuracy_sides(rng, p_a, p_b)
    c = stats.compare(a, b, "classification", "accuracy", draws=500)
    assert c.verdict == verdict
    assert c.low <= c.estimate <= c.high and (c.n_items, c.runs_a, c.runs_b) == (800, 2, 2)
    mean_a, mean_b = (np.mean([stats.score("classification", "accuracy", r) for r in side]) for side in (a, b))
    assert c.estimate == pytest.approx(mean_a - mean_b)
    assert abs(c.estimate - 100 * (p_a - p_b)) < 5  # the estimate is the difference of the two means
    assert stats.compare(a, b, "classification", "accuracy", draws=500) == c  # deterministic for a seed


def test_same_run_on_both_sides_is_a_zero_width_tie(rng) -> None:
    a, _ = accuracy_sides(rng, 0.7, 0.7, seeds=1)  # items are paired, and a side with one run keeps it
    c = stats.compare(a, a, "classification", "accuracy", draws=200)
    assert (c.estimate, c.low, c.high, c.verdict) == (0.0, 0.0, 0.0, stats.UNRESOLVED)


def test_perplexity_lower_is_better(rng) -> None:
    count = rng.integers(5, 20, 300)
    low, high = ({"loss_sum": count * (mean + rng.normal(0, 0.3, 300)), "count": count} for mean in (3.0, 3.5))
    assert not stats.higher_is_better("ppl") and stats.higher_is_better("accuracy")
    assert stats.compare([low], [high], "lm", "ppl", draws=300).verdict == stats.REPRODUCED
    assert stats.compare([high], [low], "lm", "ppl", draws=300).verdict == stats.CONTRADICTED


def test_not_measured(rng) -> None:
    a, b = accuracy_sides(rng, 0.8, 0.6)
    empty = stats.compare(a, [], "classification", "accuracy")
    assert empty.verdict == stats.NOT_MEASURED and (empty.runs_a, empty.runs_b) == (2, 0) and math.isnan(empty.estimate)
    label = rng.normal(size=100)
    constant = {"pred": np.zeros(100), "label": label}
    good = {"pred": label + rng.normal(size=100), "label": label}
    assert stats.compare([good], [constant], "regression", "pearson").verdict == stats.NOT_MEASURED


def test_different_item_counts_raise(rng) -> None:
    a, _ = accuracy_sides(rng, 0.7, 0.7, n=100)
    _, b = accuracy_sides(rng, 0.7, 0.7, n=120)
    with pytest.raises(ValueError, match="item counts"):
        stats.compare(a, b, "classification", "accuracy")


@pytest.mark.parametrize(
    ("p_model", "status"), [(0.95, stats.ABOVE_FLOOR), (0.4, stats.BELOW_FLOOR), (None, stats.AT_FLOOR)]
)
def test_floor_status(p_model: float | None, status: str, rng) -> None:
    labels = (rng.random(500) < 0.7).astype(int)  # majority class 1 scores about 70
    floor = {"pred": np.ones(500, dtype=int), "label": labels}
    runs = [floor] if p_model is None else [classification_run(rng, labels, p_model) for _ in range(2)]
    got, contrast = stats.floor_status(runs, floor, "classification", "accuracy", draws=300)
    assert got == status and contrast.runs_b == 1


def test_summarize() -> None:
    def c(verdict: str) -> stats.Contrast:
        return stats.Contrast(0.0, 0.0, 0.0, verdict, 10, 2, 2)

    verdicts = [stats.REPRODUCED] * 3 + [stats.CONTRADICTED] + [stats.UNRESOLVED] * 10
    assert stats.summarize([c(v) for v in verdicts]) == (
        "3 reproduced, 1 contradicted, 10 unresolved at this scale of 14 pairs"
    )
    assert stats.summarize([c(stats.NOT_MEASURED)]) == (
        "0 reproduced, 0 contradicted, 0 unresolved at this scale, 1 not measured of 1 pair"
    )
    assert stats.summarize([c(stats.NOT_MEASURED)], why_unmeasured="1 no data") == (
        "0 reproduced, 0 contradicted, 0 unresolved at this scale, 1 not measured (1 no data) of 1 pair"
    )
    sized = [stats.Contrast(2.0, 1.0, 3.0, v, 10, 2, 2) for v in (stats.REPRODUCED,) * 3 + (stats.UNRESOLVED,)]
    assert stats.summarize(sized, [2.5, 10.7, None, 9.0]) == (  # the unresolved one ruling it out is not counted
        "3 reproduced, 0 contradicted, 1 unresolved at this scale of 4 pairs (of the 2 resolved beside the paper's own "
        "A - B: 1 at its size, 1 ruling it out)")


def test_interval_covers_the_true_difference_95_percent_of_the_time() -> None:
    """300 simulated paired experiments, true accuracy difference 5 points: 400 items x 2 seeds a side.

    Items have a shared difficulty (70% of each run's per-item outcomes follow it, so A and B are paired),
    and each seed shifts its run's accuracy by N(0, 2 points).
    """
    rng = np.random.default_rng(1)

    def side(difficulty: np.ndarray, labels: np.ndarray, p: float) -> list[dict[str, np.ndarray]]:
        runs = []
        for _ in range(2):
            u = np.where(rng.random(400) < 0.7, difficulty, rng.random(400))  # uniform, so P(correct) = p + shift
            correct = u < p + rng.normal(0, 0.02)
            runs.append({"pred": np.where(correct, labels, 1 - labels), "label": labels})
        return runs

    covered = 0
    for i in range(300):
        difficulty, labels = rng.random(400), rng.integers(0, 2, 400)
        a, b = side(difficulty, labels, 0.75), side(difficulty, labels, 0.70)
        c = stats.compare(a, b, "classification", "accuracy", draws=600, seed=i)
        covered += c.low <= 5.0 <= c.high
    assert 0.91 <= covered / 300 <= 0.98


def _lm(loss_per_position: np.ndarray, count: int = 10) -> dict[str, np.ndarray]:
    return {"loss_sum": loss_per_position * count, "count": np.full(len(loss_per_position), count)}


@pytest.mark.parametrize("ratio, bound, verdict", [
    (0.40, 0.5, stats.REPRODUCED), (0.60, 0.5, stats.CONTRADICTED), (0.50, 0.5, stats.UNRESOLVED)])
def test_ratio_to_floor_verdicts(ratio: float, bound: float, verdict: str) -> None:
    rng = np.random.default_rng(0)
    floor = rng.normal(7.0, 0.3, 2000)                       # nats per scored position, per held-out instance
    run = floor + np.log(ratio) + rng.normal(0, 0.05, 2000)  # the model: `ratio` x the floor's perplexity
    c = stats.ratio_to_floor([_lm(run)], _lm(floor), bound, draws=500)
    assert c.estimate == pytest.approx(ratio, rel=0.01) and c.low < c.estimate < c.high
    assert c.high - c.low < 0.01 and c.verdict == verdict


def test_ratio_to_floor_is_not_measured_when_not_finite() -> None:
    run = _lm(np.array([np.inf, 1.0]))
    assert stats.ratio_to_floor([run], _lm(np.array([1.0, 1.0])), 0.5).verdict == stats.NOT_MEASURED


def test_ratio_to_floor_over_pretraining_runs_resamples_them() -> None:
    """Three runs at 0.40, 0.45 and 0.55 x the floor: the estimate is their mean and the interval spans the runs'
    spread, so "at most 0.5 x" is unresolved over the procedure though the first run alone reproduces it."""
    rng = np.random.default_rng(1)
    floor = rng.normal(7.0, 0.3, 2000)
    runs = [_lm(floor + np.log(r) + rng.normal(0, 0.05, 2000)) for r in (0.40, 0.45, 0.55)]
    first = stats.ratio_to_floor(runs[:1], _lm(floor), 0.5, draws=2000)
    pooled = stats.ratio_to_floor(runs, _lm(floor), 0.5, draws=2000)
    assert first.verdict == stats.REPRODUCED and first.high < 0.41
    assert pooled.estimate == pytest.approx(np.mean([0.40, 0.45, 0.55]), rel=0.01) and pooled.runs_a == 3
    assert pooled.low < 0.43 and pooled.high > 0.51 and pooled.verdict == stats.UNRESOLVED


@pytest.mark.parametrize("low, high, verdict, paper, where, text", [
    (-2.5, 1.2, stats.UNRESOLVED, 3.5, "above",
     "unresolved at this scale; the paper's size ruled out: its +3.5 is above the interval"),
    (-6.9, 3.3, stats.UNRESOLVED, 1.6, "inside",
     "unresolved at this scale; the paper's size holds: the interval admits its +1.6"),
    (1.1, 4.4, stats.REPRODUCED, 10.7, "above",
     "reproduced; the paper's size ruled out: its +10.7 is above the interval"),
    (1.1, 4.4, stats.REPRODUCED, 2.0, "inside", "reproduced; the paper's size holds: the interval admits its +2.0"),
    (-5.9, -0.3, stats.CONTRADICTED, 0.1, "above", "contradicted; the paper's size ruled out: its +0.1 is above the "
     "interval"),
    (-1.0, 1.0, stats.UNRESOLVED, -2.0, "below", "unresolved at this scale; the paper's size ruled out: its -2.0 is "
     "below the interval"),
    (-1.0, 1.0, stats.UNRESOLVED, None, None, "unresolved at this scale"),
    (math.nan, math.nan, stats.NOT_MEASURED, 3.5, None, "not measured"),
])
def test_a_verdict_says_whether_its_interval_admits_the_papers_effect(low: float, high: float, verdict: str,
                                                                      paper: float | None, where: str | None,
                                                                      text: str) -> None:
    contrast = stats.Contrast((low + high) / 2, low, high, verdict, 100, 1, 1)
    assert stats.against_paper(contrast, paper) == where
    assert stats.reading(contrast, paper) == text
    assert stats.label(contrast, paper) == text.split(":")[0]  # direction and size, the reading's first words
    assert stats.size_of(contrast, paper) == {None: None, "inside": stats.SIZE_HOLDS}.get(where, stats.SIZE_OUT)
    if verdict != stats.NOT_MEASURED:
        assert stats.reading(contrast, paper, compressed=True) == text + "; a side is at its floor, where effects are compressed"


def test_on_synthetic_items_an_interval_too_wide_admits_the_paper_and_a_narrow_one_rules_it_out() -> None:
    """Two classifiers equally good, differing on a fifth of the items: on 200 items the 95% interval is ~9 points wide
    and admits a paper's +1.0; on 20,000 items of the same kind it is under a point wide and rules the +1.0 out."""
    rng = np.random.default_rng(0)
    for n, where in ((200, "inside"), (20_000, "above")):
        label = rng.integers(0, 2, n)
        a = np.where(rng.random(n) < 0.75, label, 1 - label)
        redrawn = np.where(rng.random(n) < 0.75, label, 1 - label)  # as good as A, drawn afresh
        b = np.where(rng.random(n) < 0.2, redrawn, a)  # B is A but on ~20% of the items
        contrast = stats.compare([{"pred": a, "label": label}], [{"pred": b, "label": label}], "classification",
                                 "accuracy", draws=1000)
        assert contrast.verdict == stats.UNRESOLVED or n == 20_000
        assert stats.against_paper(contrast, 1.0) == where


def test_a_cells_interval_brackets_its_mean_at_the_binomial_width(rng) -> None:
    """Accuracy 0.7 on 1,000 items: the 95% interval is about ±1.96 sqrt(.7 × .3 / 1000) = ±2.8 points; two seeds
    of one score give about the same; no run, no interval."""
    labels = rng.integers(0, 2, 1000)
    run = {"pred": np.where(np.arange(1000) < 700, labels, 1 - labels), "label": labels}
    low, high = stats.interval([run], "classification", "accuracy", draws=2000)
    assert low < 70.0 < high and (high - low) / 2 == pytest.approx(2.84, abs=0.3)
    twice = stats.interval([run, run], "classification", "accuracy", draws=2000)
    assert twice == pytest.approx((low, high), abs=0.5)
    assert all(math.isnan(v) for v in stats.interval([], "classification", "accuracy"))
