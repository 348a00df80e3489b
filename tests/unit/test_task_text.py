"""`corpus.task_text`: a task's training-split text, never its labels or other splits, as pretraining documents."""

from pathlib import Path

import datasets
import pytest
from hydra import compose, initialize_config_dir

from bertlab.task_text import added_documents, task_documents
from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.stage import CONF_DIR

PAIRS = Task(name="pairs", kind="classification", hub_id="x/y", config="pairs", text_columns=("a", "b"),
             label_column="label", num_labels=2, train_split="train", eval_splits=("validation",), metric="accuracy")
TAGS = Task(name="tags", kind="tagging", hub_id="x/y", config="tags", text_columns=("tokens",),
            label_column="ner_tags", num_labels=3, train_split="train", eval_splits=("validation",), metric="f1")
SPANS = Task(name="spans", kind="span", hub_id="x/y", config="spans", text_columns=("question", "context"),
             label_column="answers", num_labels=2, train_split="train", eval_splits=("validation",), metric="f1")


def save(path: Path, train: dict, validation: dict) -> Path:
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(train),
                          "validation": datasets.Dataset.from_dict(validation)}).save_to_disk(str(path))
    return path


def test_sentence_pairs_give_a_line_per_sentence_in_documents_of_n_lines(tmp_path: Path) -> None:
    train = {"a": [f"first {i}" for i in range(5)], "b": [f"second  {i}\n" for i in range(5)], "label": [7] * 5}
    d = save(tmp_path / "pairs", train, {"a": ["dev a"], "b": ["dev b"], "label": [1]})
    docs = task_documents(PAIRS, d, lines=4)
    lines = [line for doc in docs for line in doc.split("\n")]
    assert lines == [x for i in range(5) for x in (f"first {i}", f"second {i}")]   # whitespace folded
    assert [len(doc.split("\n")) for doc in docs] == [4, 4, 2]
    assert not any("dev" in doc or "7" in doc for doc in docs)                     # no dev split, no label


def test_tagging_joins_words_and_span_keeps_each_context_once(tmp_path: Path) -> None:
    tags = save(tmp_path / "tags", {"tokens": [["EU", "rejects", "German"], [], ["Peter"]], "ner_tags": [[1, 0, 2], [], [1]]},
                {"tokens": [["dev"]], "ner_tags": [[0]]})
    assert task_documents(TAGS, tags, lines=50) == ["EU rejects German\nPeter"]
    answers = [{"text": ["x"], "answer_start": [0]}] * 3
    spans = save(tmp_path / "spans", {"question": ["q1", "q2", "q3"], "context": ["c one", "c one", "c two"],
                                      "answers": answers},
                 {"question": ["dq"], "context": ["dev context"], "answers": answers[:1]})
    assert task_documents(SPANS, spans, lines=50) == ["c one\nc two"]   # contexts only: questions are not prose


def test_added_documents_come_from_the_configured_tasks_and_refuse_missing_data(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        none = compose("config")
        cfg = compose("config", overrides=["corpus.task_text=[sst2]", "corpus.task_text_lines=2"])
        bad = compose("config", overrides=["corpus.task_text=[nope]"])
    assert added_documents(none.corpus, none.download.tasks, tmp_path) == []       # the default adds nothing
    save(tmp_path / "sst2", {"sentence": ["good film", "bad film", "fine"], "label": [1, 0, 1], "idx": [0, 1, 2]},
         {"sentence": ["dev"], "label": [0], "idx": [0]})
    assert added_documents(cfg.corpus, cfg.download.tasks, tmp_path) == ["good film\nbad film", "fine"]
    with pytest.raises(UserError, match="corpus.task_text: 'nope' is not a task"):
        added_documents(bad.corpus, bad.download.tasks, tmp_path)
    (tmp_path / "sst2").rename(tmp_path / "gone")
    with pytest.raises(UserError, match="whose data is not in"):
        added_documents(cfg.corpus, cfg.download.tasks, tmp_path)
