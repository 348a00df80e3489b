"""Shared fixtures: a synthetic mirror in the hub's layout, so unit tests never touch the network."""

from __future__ import annotations

import os

# Before anything imports datasets or huggingface_hub: without these a hub look-up waits ~23 s to fail.
for _var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("WANDB_MODE", "offline")

import random  # noqa: E402
from pathlib import Path  # noqa: E402

import datasets  # noqa: E402
import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

WORDS = "the a cat dog sat ran on under table house river quickly slowly big small red blue saw heard".split()


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
    return " ".join(words).capitalize() + "."


def document(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


def write_split(root: Path, hub_id: str, config: str, split: str, rows: dict[str, list]) -> None:
    path = root / hub_id / config / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(rows).to_parquet(str(path))


@pytest.fixture(scope="session")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small mirror: the two corpus sources, SST-2 and MRPC (train + validation); nothing else."""
    root = tmp_path_factory.mktemp("mirror")
    rng = random.Random(0)
    write_split(root, "bertlab/wiki-text", "default", "train",
                {"id": [str(i) for i in range(40)], "text": [document(rng, rng.randint(1, 30)) for _ in range(40)]})
    write_split(root, "bertlab/gutenberg-books", "default", "train",
                {"text": [document(rng, 200) for _ in range(4)], "title": [f"book {i}" for i in range(4)]})
    for split, n in (("train", 64), ("validation", 32)):
        labels = [rng.randint(0, 1) for _ in range(n)]
        write_split(root, "nyu-mll/glue", "sst2", split,
                    {"sentence": [("good " if y else "bad ") + sentence(rng) for y in labels], "label": labels,
                     "idx": list(range(n))})
        write_split(root, "nyu-mll/glue", "mrpc", split,
                    {"sentence1": [sentence(rng) for _ in range(n)], "sentence2": [sentence(rng) for _ in range(n)],
                     "label": labels, "idx": list(range(n))})
    return root
