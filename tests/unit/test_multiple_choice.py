"""A task kind added by its own module alone: multiple choice (SWAG-like) end to end on synthetic data, from the
download's checks through fine-tuning to the report's per-item scores."""

from __future__ import annotations

import random
from pathlib import Path

import datasets
import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from bertlab import kinds
from bertlab.download import check_task
from bertlab.errors import UserError
from bertlab.files import read_tokenizer
from bertlab.finetune import finetune
from bertlab.kinds import KINDS
from bertlab.kinds.base import Encoding, Lengths
from bertlab.report import stats
from bertlab.stage import CONF_DIR
from tests.helpers import finetune_config

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
CHOICES = 4


def swag_like(rng: random.Random, n: int) -> dict[str, list]:
    """label = the ending that holds `zebra` (no other ever does), at a random position: trivially learnable."""
    rows: dict[str, list] = {"startphrase": [], **{f"ending{i}": [] for i in range(CHOICES)}, "label": []}
    for _ in range(n):
        right = rng.randrange(CHOICES)
        rows["startphrase"].append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))))
        for i in range(CHOICES):
            words = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
            if i == right:
                words.insert(rng.randrange(len(words) + 1), "zebra")
            rows[f"ending{i}"].append(" ".join(words))
        rows["label"].append(right)
    return rows


@pytest.fixture(scope="module")
def swag(finetune_data: Path) -> datasets.DatasetDict:
    """The `finetune_data` directory with a synthetic task `swag` (240 training and 60 dev examples)."""
    rng = random.Random(0)
    dd = datasets.DatasetDict({split: datasets.Dataset.from_dict(swag_like(rng, n))
                               for split, n in (("train", 240), ("validation", 60))})
    dd.save_to_disk(str(finetune_data / "download" / "tasks" / "swag"))
    return dd


def test_the_download_checks_a_multiple_choice_tasks_columns_and_labels(swag: datasets.DatasetDict) -> None:
    task = OmegaConf.load(Path(CONF_DIR) / "task" / "swag.yaml")
    check_task("swag", task, swag, None)
    with pytest.raises(UserError, match="holds the label 4, outside 0 .. 3"):
        check_task("swag", task, datasets.DatasetDict({"train": swag["train"].map(lambda r: {"label": 4})}), None)
    with pytest.raises(UserError, match="column 'ending2' is int64, not what task swag reads \\(text\\)"):
        check_task("swag", task, datasets.DatasetDict({"train": swag["train"].map(lambda r: {"ending2": 1})}), None)


def test_multiple_choice_learns_to_pick_the_ending_and_the_report_scores_its_items(
    finetune_data: Path, swag: datasets.DatasetDict
) -> None:
    result = finetune(finetune_config(finetune_data, "name=choice", "task=swag", "finetune.epochs=3",
                                      "finetune.lr=1e-3", "finetune.head_lr=1e-2"))
    record, items = result.record, result.items
    assert record["status"] == "ok" and record["headline_metric"] == "accuracy"
    assert set(record["metrics"]["validation"]) == {"accuracy"}
    assert record["headline"] >= 80.0 > 40.0 >= record["floor"]["accuracy"]  # 4 endings: chance is 25%
    assert record["train_examples"] == 240 and record["eval_examples"] == 60
    assert (items["kind"], items["metric"], items["n"]) == ("multiple_choice", "accuracy", 60)
    assert items["model"]["label"] == swag["validation"]["label"]  # dev-set order
    majority = int(np.bincount(swag["train"]["label"]).argmax())
    assert items["floor"]["name"] == f"majority class of the training labels ({majority})"
    assert items["floor"]["pred"] == [majority] * 60
    for side, value in (("model", record["headline"]), ("floor", record["floor"]["accuracy"])):
        cols = {k: np.asarray(v, dtype=np.float64) for k, v in items[side].items() if k != "name"}
        assert stats.score("multiple_choice", "accuracy", cols) == pytest.approx(value)

    kind = KINDS["multiple_choice"]  # a batch: every pair padded to the longest, a score per ending
    how = Encoding(read_tokenizer(finetune_data / "tokenizer" / "tokenizer.json"), Lengths(64))
    rows, _ = kind.encode(result.module.task, swag["validation"].select(range(3)), "validation", False, how)
    batch = kind.collate(rows, pad_id=0)
    longest = max(len(ids) for row in rows for ids in row["input_ids"])
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (3, CHOICES, longest)
    result.module.eval()
    assert result.module(batch).shape == (3, CHOICES)


def test_a_multiple_choice_task_without_data_says_so_and_takes_no_probe(tmp_path: Path) -> None:
    task_dir = tmp_path / "download" / "tasks" / "swag"  # as the download stage leaves a task it could not get
    task_dir.mkdir(parents=True)
    (task_dir / "NO_DATA").write_text("allenai/swag/regular/train is not in the mirror\n")
    record = finetune(finetune_config(tmp_path, "name=nodata", "task=swag")).record
    assert (record["status"], record["headline"]) == ("no data", None)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["profile=smoke", "task=swag", "finetune.mode=probe"])
    with pytest.raises(UserError, match="a linear probe predicts a class per example or a tag per word, not task "
                                        "swag's multiple_choice outputs"):
        kinds.check(cfg)
