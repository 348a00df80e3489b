"""Task definitions (conf/task/*.yaml) against the data's schemas, sentence-pair encoding and padding."""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tokenizers import Tokenizer

from bertlab.data.encoding import encode_pairs, pad_collate
from bertlab.data.tasks import Task
from bertlab.data.vocab import CLS_ID, PAD_ID, SEP_ID
from bertlab.metrics import entity_f1, glue_metrics, squad_scores
from bertlab.tokenizer import train_tokenizer

TASK_DIR = Path(__file__).resolve().parents[2] / "conf" / "task"
GLUE = ["cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte", "wnli"]


def load_task(name: str) -> Task:
    return Task(**OmegaConf.load(TASK_DIR / f"{name}.yaml"))


def test_the_papers_tasks_are_defined_and_every_task_config_loads() -> None:
    names = {p.stem for p in TASK_DIR.glob("*.yaml")}
    assert {*GLUE, "squad", "conll2003"} <= names
    assert all(load_task(name).name == name for name in names)


@pytest.mark.parametrize("name", [*GLUE, "squad", "conll2003"])
def test_yaml_loads_into_task(name: str) -> None:
    task = load_task(name)
    assert task.name == name
    assert isinstance(task.text_columns, tuple) and isinstance(task.eval_splits, tuple)
    hash(task)  # frozen and hashable
    expected_kind = {"stsb": "regression", "squad": "span", "conll2003": "tagging"}.get(name, "classification")
    assert task.kind == expected_kind
    if task.kind == "classification":
        assert task.hub_id == "nyu-mll/glue" and task.config == name
        assert task.label_names is not None and len(task.label_names) == task.num_labels


@pytest.mark.parametrize("name", [*GLUE, "squad", "conll2003"])
def test_headline_metric_is_returned_by_the_metric_function(name: str) -> None:
    task = load_task(name)
    if task.kind == "span":
        keys = squad_scores({"q": "a"}, {"q": ["a"]}).keys()
    elif task.kind == "tagging":
        keys = entity_f1([["O"]], [["O"]]).keys()
    else:
        keys = glue_metrics(name, [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]).keys()
    assert task.metric in keys


def test_mnli_is_evaluated_on_matched_and_mismatched() -> None:
    task = load_task("mnli")
    assert task.eval_splits == ("validation_matched", "validation_mismatched") and task.num_labels == 3
    assert task.text_columns == ("premise", "hypothesis")


def test_invalid_definitions_are_rejected() -> None:
    fields = OmegaConf.to_container(OmegaConf.load(TASK_DIR / "mrpc.yaml"))
    with pytest.raises(ValueError, match="unknown kind"):
        Task(**{**fields, "kind": "ranking"})
    with pytest.raises(ValueError, match="label_names"):
        Task(**{**fields, "num_labels": 3})


def _features(mirror: Path, hub_id: str, config: str, split: str) -> tuple[list[str], dict]:
    """Column names and Hugging Face `features` of a split in the local mirror."""
    import pyarrow.parquet as pq

    files = sorted((mirror / hub_id / config).glob(f"{split}-*.parquet"))
    assert files, f"no {split} split for {hub_id}/{config} in {mirror}"
    schema = pq.read_schema(files[0])
    return schema.names, json.loads(schema.metadata[b"huggingface"])["info"]["features"]


@pytest.mark.parametrize("name", [*GLUE, "squad", "conll2003"])
def test_task_agrees_with_local_parquet_schema(name: str, shared_data: Path) -> None:
    task = load_task(name)
    if not (shared_data / task.hub_id / task.config).is_dir():
        pytest.skip(f"{task.hub_id}/{task.config} is not in the local mirror {shared_data} (e.g. MNLI, QQP offline)")
    for split in (task.train_split, *task.eval_splits):
        columns, features = _features(shared_data, task.hub_id, task.config, split)
        assert {*task.text_columns, task.label_column} <= set(columns)
        label = features[task.label_column]
        if task.kind == "classification":
            assert label == {"names": list(task.label_names), "_type": "ClassLabel"}
        elif task.kind == "regression":
            assert label["_type"] == "Value" and label["dtype"].startswith("float") and task.num_labels == 1
        elif task.kind == "tagging":
            assert features[task.text_columns[0]]["_type"] == "Sequence"
            assert label["feature"] == {"names": list(task.label_names), "_type": "ClassLabel"}
        else:
            assert set(label["feature"]) == {"text", "answer_start"}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer(["one two three four five six", "alpha beta gamma"] * 3, vocab_size=100, min_frequency=1)


def test_encode_single_and_pair(tokenizer: Tokenizer) -> None:
    one, two, alpha = (tokenizer.token_to_id(w) for w in ("one", "two", "alpha"))
    single = encode_pairs(tokenizer, ["one two"], None, max_length=32)
    assert single == {"input_ids": [[CLS_ID, one, two, SEP_ID]], "token_type_ids": [[0, 0, 0, 0]]}
    pair = encode_pairs(tokenizer, ["one two"], ["alpha"], max_length=32)
    assert pair == {"input_ids": [[CLS_ID, one, two, SEP_ID, alpha, SEP_ID]], "token_type_ids": [[0, 0, 0, 0, 1, 1]]}


def test_pair_truncation_shortens_the_longer_side_first(tokenizer: Tokenizer) -> None:
    ids = {w: tokenizer.token_to_id(w) for w in "one two three four five six alpha beta".split()}
    # 6 + 2 tokens + 3 specials = 11 > 8: drop 3 tokens, all from the 6-token side.
    out = encode_pairs(tokenizer, ["one two three four five six"], ["alpha beta"], max_length=8)
    a = [ids[w] for w in ("one", "two", "three")]
    assert out["input_ids"] == [[CLS_ID, *a, SEP_ID, ids["alpha"], ids["beta"], SEP_ID]]
    # 6 + 6 + 3 = 15 > 9: both sides end at 3 tokens.
    out = encode_pairs(tokenizer, ["one two three four five six"], ["one two three four five six"], max_length=9)
    assert out["input_ids"] == [[CLS_ID, *a, SEP_ID, *a, SEP_ID]]
    assert out["token_type_ids"] == [[0] * 5 + [1] * 4]


def test_encoding_restores_the_callers_tokenizer_settings(tokenizer: Tokenizer) -> None:
    tokenizer.enable_padding(pad_id=PAD_ID, length=20)
    tokenizer.enable_truncation(3, strategy="only_second")
    settings = (tokenizer.truncation, tokenizer.padding)
    try:
        out = encode_pairs(tokenizer, ["one two three"], None, max_length=4)
        assert out["input_ids"] == [[CLS_ID, tokenizer.token_to_id("one"), tokenizer.token_to_id("two"), SEP_ID]]
        assert (tokenizer.truncation, tokenizer.padding) == settings
    finally:
        tokenizer.no_padding()
        tokenizer.no_truncation()


def test_pad_collate_classification() -> None:
    batch = pad_collate(
        [
            {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "label": 1},
            {"input_ids": [2, 7, 8, 3, 9, 3], "token_type_ids": [0, 0, 0, 0, 1, 1], "label": 0},
        ],
        pad_id=PAD_ID,
    )
    assert batch["input_ids"].tolist() == [[2, 7, 3, PAD_ID, PAD_ID, PAD_ID], [2, 7, 8, 3, 9, 3]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0], [1] * 6]
    assert batch["label"].dtype == torch.long and batch["label"].tolist() == [1, 0]


def test_pad_collate_regression_labels_are_float() -> None:
    batch = pad_collate([{"input_ids": [2, 3], "label": 4.2}, {"input_ids": [2, 5, 3], "label": 1.0}], pad_id=PAD_ID)
    assert batch["label"].dtype == torch.float32
    assert batch["label"].tolist() == pytest.approx([4.2, 1.0])


def test_pad_collate_token_labels_padded_with_ignore_index() -> None:
    batch = pad_collate(
        [{"input_ids": [2, 7, 3], "label_ids": [-100, 1, -100]}, {"input_ids": [2, 3], "label_ids": [-100, -100]}],
        pad_id=PAD_ID,
    )
    assert batch["label_ids"].tolist() == [[-100, 1, -100], [-100, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
