"""Evaluators: metrics, the per-item columns that recompute them, and the floors (no training here)."""

import random

import numpy as np
import pytest
from seqeval.metrics.sequence_labeling import get_entities

from bertlab.data.tasks import Task
from bertlab.evaluate import items_and_floor
from bertlab.kinds.classification import GlueEvaluator
from bertlab.kinds.span import SquadEvaluator
from bertlab.kinds.tagging import TaggingEvaluator, entity_counts
from bertlab.metrics import entity_f1, glue_metrics

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


def task(kind: str, metric: str, name: str = "t") -> Task:
    return Task(name=name, kind=kind, hub_id="x", config="x", text_columns=("a",), label_column="label",
                num_labels=2, train_split="train", eval_splits=("validation",), metric=metric)


def test_majority_class_floor_scores_the_dev_share_of_that_class() -> None:
    dev = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1]  # 7 of 10 are class 1
    evaluator = GlueEvaluator("validation", 10, task="mrpc", labels=dev, train_labels=[1, 0, 1, 1, 0, 1])
    floor = evaluator.floor()
    assert floor.name == "majority class of the training labels (1)" and floor.predictions == [1] * 10
    scores = evaluator.evaluate(floor.predictions).metrics
    assert scores["accuracy"] == pytest.approx(70.0) and scores["f1"] == pytest.approx(100 * 14 / 17)
    tie = GlueEvaluator("validation", 3, task="sst2", labels=[0, 1, 1], train_labels=[1, 0, 2, 2, 0])
    assert tie.floor().predictions == [0, 0, 0]  # a tie goes to the lowest class id


def test_regression_floor_draws_normal_predictions_from_the_training_labels() -> None:
    train = [0.0, 1.0, 2.0, 5.0]
    evaluator = GlueEvaluator("validation", 50, task="stsb", kind="regression", labels=list(np.linspace(0, 5, 50)),
                              train_labels=train)
    floor = evaluator.floor()
    assert floor.predictions == np.random.default_rng(0).normal(2.0, np.std(train), 50).tolist()
    assert floor.predictions == evaluator.floor().predictions  # seeded
    assert "mean 2 and sd 1.871" in floor.name
    cols = evaluator.evaluate(floor.predictions).columns
    assert cols["pred"] == floor.predictions and cols["label"] == evaluator.labels


def squad_evaluator() -> SquadEvaluator:
    """Three questions, one window each: token t of a window covers chars [4t, 4t + 3) of its context."""
    contexts = ["The Rio was hot", "abc def ghi jkl", "one two six ten"]
    offsets = [[None] + [(4 * t, 4 * t + 3) for t in range(4)] + [None] for _ in contexts]
    features = {"example_index": [0, 1, 2], "offsets": offsets, "input_ids": [[0] * 6] * 3}
    answers = [["rio", "a Rio de"], ["ghi jkl"], ["zzz"]]
    return SquadEvaluator("validation", 3, features=features, contexts=contexts, answers=answers)


def one_hot(n: int, at: int) -> np.ndarray:
    logits = np.zeros(n)
    logits[at] = 10.0
    return logits


def test_squad_items_are_official_per_question_scores_whose_mean_is_the_metric() -> None:
    evaluator = squad_evaluator()
    # predicted spans: "The Rio" (normalises to "rio"), "def ghi jkl" (2 of 3 tokens), "one" (wrong)
    predictions = [(one_hot(6, 1), one_hot(6, 2)), (one_hot(6, 2), one_hot(6, 4)), (one_hot(6, 1), one_hot(6, 1))]
    evaluation = evaluator.evaluate(predictions)
    assert evaluation.columns["exact_match"] == [100.0, 0.0, 0.0]
    assert evaluation.columns["f1"] == pytest.approx([100.0, 80.0, 0.0])  # P 2/3, R 1: F1 0.8
    for metric, values in evaluation.columns.items():
        assert np.mean(values) == pytest.approx(evaluation.metrics[metric], rel=1e-6)


def test_squad_floor_is_seeded_random_logits_through_the_same_evaluator() -> None:
    evaluator = squad_evaluator()
    floor = evaluator.floor()
    rng = np.random.default_rng(0)
    for start, end in floor.predictions:
        assert np.array_equal(start, rng.standard_normal(6)) and np.array_equal(end, rng.standard_normal(6))
    record, value = items_and_floor(task("span", "f1"), evaluator, evaluator.evaluate(floor.predictions))
    assert record["floor"]["f1"] == record["model"]["f1"] and record["n"] == 3
    assert value == pytest.approx(np.mean(record["floor"]["f1"]), rel=1e-6)


def random_tags(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(TAGS) if rng.random() < 0.5 else "O" for _ in range(n)]


def test_per_sentence_entity_counts_sum_to_seqeval_micro_scores() -> None:
    rng = random.Random(0)
    gold = [random_tags(rng, rng.randint(0, 12)) for _ in range(200)]
    pred = [[g if rng.random() < 0.7 else rng.choice(TAGS) for g in sentence] for sentence in gold]
    tp, fp, fn = np.sum([entity_counts(g, p) for g, p in zip(gold, pred)], axis=0)
    scores = entity_f1(gold, pred)
    assert tp > 0 and fp > 0 and fn > 0
    assert 100 * tp / (tp + fp) == pytest.approx(scores["precision"], rel=1e-12)
    assert 100 * tp / (tp + fn) == pytest.approx(scores["recall"], rel=1e-12)
    assert 200 * tp / (2 * tp + fp + fn) == pytest.approx(scores["f1"], rel=1e-12)
    # conlleval's rules: an I- after O starts an entity; a type change ends one
    assert entity_counts(["I-PER", "I-PER", "B-LOC"], ["B-PER", "I-PER", "I-LOC"]) == (2, 0, 0)
    assert entity_counts(["B-PER", "I-PER"], ["B-PER", "I-LOC"]) == (0, 2, 1)


def test_tagging_items_and_the_all_outside_floor() -> None:
    names = TAGS
    word_ids = [[None, 0, 1, 1, 2, None], [None, 0, 1, None]]
    gold = [["B-PER", "I-PER", "O"], ["B-LOC", "B-LOC"]]
    evaluator = TaggingEvaluator("validation", 2, word_ids=word_ids, gold=gold, label_names=names)
    model = evaluator.evaluate([[0, 1, 2, 3, 0, 0], [0, 3, 0, 0]])  # words: B-PER I-PER O | B-LOC O
    assert model.columns == {"tp": [1, 1], "fp": [0, 0], "fn": [0, 1]}
    record, value = items_and_floor(task("tagging", "f1"), evaluator, model)
    assert record["floor"] == {"name": 'all "O" (no entity predicted)', "tp": [0, 0], "fp": [0, 0], "fn": [1, 2]}
    assert record["floor"]["fn"] == [len(get_entities(g)) for g in gold] and value == 0.0
    assert record | {"model": None, "floor": None} == {"split": "validation", "kind": "tagging", "metric": "f1", "n": 2,
                                                       "model": None, "floor": None}


def test_classification_items_recompute_the_metrics_and_undefined_scores_are_none() -> None:
    evaluator = GlueEvaluator("validation", 4, task="cola", labels=[1, 0, 1, 1], train_labels=[1, 1, 0])
    model = evaluator.evaluate([1, 0, 0, 1])
    assert glue_metrics("cola", model.columns["pred"], model.columns["label"]) == model.metrics
    record, value = items_and_floor(task("classification", "matthews", "cola"), evaluator, model)
    assert record["floor"]["pred"] == [1, 1, 1, 1] and value == 0.0  # GLUE scores a constant prediction 0


def test_tagging_evaluator_takes_each_words_first_subtoken() -> None:
    names = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
    # [CLS] w0 w1a w1b w2 [SEP]; w1 is split in two sub-tokens; a second sentence lost its last word to truncation
    word_ids = [[None, 0, 1, 1, 2, None], [None, 0, None]]
    gold = [["O", "B-PER", "O"], ["B-LOC", "B-LOC"]]
    token_preds = [[0, 0, 1, 3, 0, 0], [0, 3, 0]]  # w1's second sub-token (B-LOC) must not count
    evaluator = TaggingEvaluator("validation", 2, word_ids=word_ids, gold=gold, label_names=names)
    metrics = evaluator.evaluate(token_preds).metrics
    assert metrics == entity_f1(gold, [["O", "B-PER", "O"], ["B-LOC", "O"]])
    assert metrics["precision"] == 100.0
