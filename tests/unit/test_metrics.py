"""Official task metrics on hand-made inputs whose values are worked out by hand in the comments."""

import math

import pytest
import torch

from bertlab.metrics import entity_f1, glue_metrics, squad_scores

# Binary confusion of BINARY_PREDS vs BINARY_LABELS: TP=3 (0, 2, 4), FP=1 (1), TN=2 (3, 6), FN=1 (5).
BINARY_PREDS = [1, 1, 1, 0, 1, 0, 0]
BINARY_LABELS = [1, 0, 1, 0, 1, 1, 0]


def test_cola_matthews() -> None:
    # (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (6 - 1) / sqrt(4*4*3*3) = 5/12
    assert glue_metrics("cola", BINARY_PREDS, BINARY_LABELS) == {"matthews": pytest.approx(100 * 5 / 12, abs=1e-4)}


@pytest.mark.parametrize("preds", [[1] * 7, [0] * 7])
def test_cola_matthews_constant_prediction_is_zero(preds: list[int]) -> None:
    # GLUE/sklearn: zero denominator -> 0 (torchmetrics alone would give about +-2.6 here).
    assert glue_metrics("cola", preds, BINARY_LABELS) == {"matthews": 0.0}


@pytest.mark.parametrize("task", ["mrpc", "qqp"])
def test_f1_and_accuracy(task: str) -> None:
    scores = glue_metrics(task, torch.tensor(BINARY_PREDS), torch.tensor(BINARY_LABELS))
    assert scores.keys() == {"f1", "accuracy"}
    assert scores["f1"] == pytest.approx(100 * 2 * 3 / (2 * 3 + 1 + 1), abs=1e-4)  # 2TP/(2TP+FP+FN) = 75
    assert scores["accuracy"] == pytest.approx(100 * 5 / 7, abs=1e-4)  # (TP+TN)/n


@pytest.mark.parametrize("task", ["sst2", "qnli", "rte", "wnli"])
def test_accuracy_only(task: str) -> None:
    assert glue_metrics(task, BINARY_PREDS, BINARY_LABELS) == {"accuracy": pytest.approx(100 * 5 / 7, abs=1e-4)}


def test_mnli_three_class_accuracy() -> None:
    assert glue_metrics("mnli", [0, 1, 2, 2, 1], [0, 1, 1, 2, 0]) == {"accuracy": pytest.approx(60.0, abs=1e-4)}


def test_stsb_pearson_and_spearman() -> None:
    # x = 1 2 3 4 100 (mean 22), y = 2 1 4 3 5 (mean 3); deviations -21 -20 -19 -18 78 and -1 -2 1 0 2:
    # sum dx*dy = 21 + 40 - 19 + 0 + 156 = 198, sum dx^2 = 7610, sum dy^2 = 10.
    # Ranks of x are 1..5, so Spearman = Pearson(1 2 3 4 5, y) = 8 / sqrt(10 * 10) = 0.8.
    scores = glue_metrics("stsb", [1.0, 2.0, 3.0, 4.0, 100.0], [2.0, 1.0, 4.0, 3.0, 5.0])
    assert scores["pearson"] == pytest.approx(100 * 198 / math.sqrt(7610 * 10), abs=1e-4)
    assert scores["spearman"] == pytest.approx(80.0, abs=1e-3)


def test_stsb_spearman_averages_tied_ranks() -> None:
    # Ranks of 1 2 2 3 are 1 2.5 2.5 4: deviations -1.5 0 0 1.5 vs -1.5 -0.5 0.5 1.5 -> 4.5 / sqrt(4.5 * 5)
    scores = glue_metrics("stsb", [1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0])
    assert scores["spearman"] == pytest.approx(100 * 4.5 / math.sqrt(4.5 * 5), abs=1e-3)


def test_glue_metrics_return_plain_floats() -> None:
    for task, preds in [("cola", BINARY_PREDS), ("mrpc", BINARY_PREDS), ("stsb", [0.5, 1.0, 3.0, 2.0])]:
        assert all(type(v) is float for v in glue_metrics(task, preds, BINARY_LABELS[: len(preds)]).values())


@pytest.mark.parametrize(
    ("prediction", "reference"),
    [
        ("The Eiffel  Tower!", "eiffel tower"),  # article, punctuation, case, whitespace
        ("an apple", "Apple."),
        ("  Denver\tBroncos ", "the denver broncos"),
    ],
)
def test_squad_normalisation_gives_exact_match(prediction: str, reference: str) -> None:
    assert squad_scores({"q": prediction}, {"q": [reference]}) == {"exact_match": 100.0, "f1": 100.0}


def test_squad_articles_are_whole_words_only() -> None:
    # "theatre" keeps its "the": tokens {theatre} vs {atre} share nothing.
    assert squad_scores({"q": "theatre"}, {"q": ["atre"]}) == {"exact_match": 0.0, "f1": 0.0}


def test_squad_partial_overlap_f1() -> None:
    # pred tokens: in city of paris (4); ref tokens: paris france (2); common 1 -> P=1/4, R=1/2, F1=1/3
    scores = squad_scores({"q": "in the city of Paris"}, {"q": ["Paris, France"]})
    assert scores["exact_match"] == 0.0
    assert scores["f1"] == pytest.approx(100 / 3, abs=1e-4)


def test_squad_max_over_references() -> None:
    # vs "broncos": P=1/2, R=1 -> 2/3; vs "broncos team": P=1/2, R=1/2 -> 1/2; max = 2/3
    scores = squad_scores({"q": "Denver Broncos"}, {"q": ["Broncos", "the Broncos team"]})
    assert scores == {"exact_match": 0.0, "f1": pytest.approx(200 / 3, abs=1e-4)}
    assert squad_scores({"q": "Denver Broncos"}, {"q": ["Broncos", "Denver Broncos"]})["exact_match"] == 100.0


def test_squad_averages_over_questions_and_missing_prediction_scores_zero() -> None:
    references = {"a": ["Paris"], "b": ["Paris, France"], "c": ["Rome"]}
    predictions = {"a": "paris", "b": "in the city of Paris"}  # c unanswered
    with pytest.warns(UserWarning, match="Unanswered"):
        scores = squad_scores(predictions, references)
    assert scores["exact_match"] == pytest.approx(100 / 3, abs=1e-4)
    assert scores["f1"] == pytest.approx(100 * (1 + 1 / 3 + 0) / 3, abs=1e-4)


def test_squad_known_deviation_when_both_normalise_to_nothing() -> None:
    # torchmetrics follows SQuAD v2.0 here (F1 = 1 when both token lists are empty); v1.1 gives F1 0.
    # EM is 1 under both. Pinned so that a change of torchmetrics' behaviour is noticed.
    assert squad_scores({"q": "the"}, {"q": ["."]}) == {"exact_match": 100.0, "f1": 100.0}


@pytest.mark.parametrize(
    ("gold", "pred", "n_gold", "n_pred", "n_correct"),
    [
        # A wrong I- tag breaks the PER span into PER, ORG, PER: 1 gold, 3 predicted, none right.
        (["B-PER", "I-PER", "I-PER"], ["B-PER", "I-ORG", "I-PER"], 1, 3, 0),
        # Adjacent entities of one type: B-PER B-PER is two entities, B-PER I-PER is one.
        (["B-PER", "B-PER", "O"], ["B-PER", "I-PER", "O"], 2, 1, 0),
        # I- after O starts an entity (conlleval), so it matches the gold B-LOC I-LOC.
        (["O", "B-LOC", "I-LOC"], ["O", "I-LOC", "I-LOC"], 1, 1, 1),
        # Same span, wrong type.
        (["B-ORG", "I-ORG", "O"], ["B-MISC", "I-MISC", "O"], 1, 1, 0),
        # Right type, wrong boundary.
        (["B-LOC", "I-LOC", "O"], ["B-LOC", "O", "O"], 1, 1, 0),
    ],
)
def test_entity_f1_bio_edge_cases(gold: list[str], pred: list[str], n_gold: int, n_pred: int, n_correct: int) -> None:
    scores = entity_f1([gold], [pred])
    assert scores["precision"] == pytest.approx(100 * n_correct / n_pred)
    assert scores["recall"] == pytest.approx(100 * n_correct / n_gold)
    assert scores["f1"] == pytest.approx(100 * 2 * n_correct / (n_gold + n_pred))


def test_entity_f1_micro_over_sentences() -> None:
    gold = [
        ["B-PER", "I-PER", "I-PER", "O", "B-LOC"],  # PER(0-2) LOC(4)
        ["B-PER", "B-PER", "O"],  # PER(0) PER(1)
        ["O", "B-LOC", "I-LOC"],  # LOC(1-2)
        ["B-ORG", "O"],  # ORG(0)
    ]
    pred = [
        ["B-PER", "I-ORG", "I-PER", "O", "B-LOC"],  # PER(0) ORG(1) PER(2) LOC(4): LOC right
        ["B-PER", "I-PER", "O"],  # PER(0-1)
        ["O", "I-LOC", "I-LOC"],  # LOC(1-2): right
        ["B-MISC", "O"],  # MISC(0)
    ]
    # 6 gold, 7 predicted, 2 right: P = 2/7, R = 1/3, F1 = 2*2/(6+7) = 4/13
    scores = entity_f1(gold, pred)
    assert scores["precision"] == pytest.approx(100 * 2 / 7)
    assert scores["recall"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * 4 / 13)


def test_entity_f1_without_predicted_entities_is_zero() -> None:
    assert entity_f1([["B-PER", "O"]], [["O", "O"]]) == {"f1": 0.0, "precision": 0.0, "recall": 0.0}
