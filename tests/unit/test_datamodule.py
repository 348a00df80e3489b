"""The fine-tuning data module, and which dev examples every profile scores."""

from pathlib import Path

import datasets
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab.data.tasks import Task
from bertlab.errors import UserError
from bertlab.kinds.base import Lengths
from bertlab.kinds.classification import GlueEvaluator
from bertlab.stage import CONF_DIR
from bertlab.tokenizer import train_tokenizer
from bertlab.training.recipe import DataSettings
from bertlab.training.task_datamodule import TaskDataModule, subsample

SST2 = Task(name="sst2", kind="classification", hub_id="x", config="x", text_columns=("sentence",),
            label_column="label", num_labels=2, train_split="train", eval_splits=("validation",), metric="accuracy")


def test_subsample_is_seeded_and_keeps_everything_when_small() -> None:
    ds = datasets.Dataset.from_dict({"x": list(range(100))})
    a, b = subsample(ds, 10, 0), subsample(ds, 10, 0)
    assert a["x"] == b["x"] and len(set(a["x"])) == 10 and a["x"] != subsample(ds, 10, 1)["x"]
    assert a["x"] == sorted(a["x"])  # dev-set order is kept
    assert subsample(ds, None, 0) is ds and subsample(ds, 1000, 0) is ds


def test_lengths_are_capped_by_the_encoders_positions() -> None:
    assert Lengths.capped(384, 128, 64, 64) == Lengths(64, 32, 30)
    assert Lengths.capped(128, 128, 64, 512) == Lengths(128, 64, 62)


def test_no_task_scores_a_test_split() -> None:
    for path in sorted(Path(CONF_DIR, "task").glob("*.yaml")):
        splits = OmegaConf.load(path).eval_splits
        assert splits and not any("test" in s for s in splits), f"{path.name}: {list(splits)}"


@pytest.mark.parametrize("profile, eval_examples, squad_questions", [
    ("smoke", 64, 32), ("cpu", None, 1000), ("gpu", None, None), ("paper", None, None),
])
def test_dev_sets_are_whole_above_smoke(profile: str, eval_examples: int | None, squad_questions: int | None) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        ft = compose(config_name="config", overrides=[f"profile={profile}"]).finetune
    assert (ft.max_eval_examples, ft.squad_max_eval_examples, ft.subsample_seed) == (eval_examples, squad_questions, 0)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    d = tmp_path_factory.mktemp("sst2")
    words = "good bad film plot actor scene long short".split()
    rows = {s: {"sentence": [f"{words[i % 8]} {words[(i * 3) % 8]}" for i in range(n)],
                "label": [int(i % 3 == 0) for i in range(n)]} for s, n in (("train", 30), ("validation", 20))}
    datasets.DatasetDict({s: datasets.Dataset.from_dict(r) for s, r in rows.items()}).save_to_disk(str(d / "sst2"))
    return d / "sst2", train_tokenizer([" ".join(words)] * 5, vocab_size=100, min_frequency=1)


def test_the_module_prepares_rows_loaders_and_evaluators_once(task_dir: tuple) -> None:
    path, tokenizer = task_dir
    dm = TaskDataModule(SST2, path, tokenizer, Lengths(16),
                        DataSettings(batch_size=8, max_train_examples=12, max_eval_examples=10))
    dm.setup("fit")
    rows, evaluator = dm.train_rows, dm.evaluators[0]
    assert (dm.train_examples, dm.eval_examples, len(rows)) == (12, {"validation": 10}, 12)
    assert isinstance(evaluator, GlueEvaluator) and evaluator.rows == 10
    assert evaluator.train_labels == [r["label"] for r in rows]  # the floor's majority: what the model trains on
    picked = subsample(datasets.load_from_disk(str(path))["validation"], 10, 0)
    assert evaluator.labels == picked["label"]  # same dev examples whatever the encoder or seed
    dm.setup("validate")
    assert dm.train_rows is rows and dm.evaluators == [evaluator]
    batches = list(dm.val_dataloader()[0])
    assert [len(b["index"]) for b in batches] == [8, 2] and batches[0]["index"].tolist() == list(range(8))
    assert sum(len(b["index"]) for b in dm.train_dataloader()) == 12


def test_a_missing_split_is_a_user_error(task_dir: tuple) -> None:
    path, tokenizer = task_dir
    task = Task(**{**SST2.__dict__, "eval_splits": ("validation", "validation_matched")})
    with pytest.raises(UserError, match="lacks the split\\(s\\) validation_matched"):
        TaskDataModule(task, path, tokenizer, Lengths(16), DataSettings(batch_size=8)).setup("fit")
