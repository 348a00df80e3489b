"""Shared fixtures and the real data mirror's location: synthetic data in the hub's layout (so most tests never touch
the network or the mirror), a data dir prepared by the first stages, and one for fine-tuning."""

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

from bertlab.tokenizer import train_tokenizer  # noqa: E402
from tests.helpers import REPO, document, save_encoder, sentence, stage, write_split  # noqa: E402

SHARED_DATA = REPO.parent / "shared" / "data"  # the local copy of the hub on our machines


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real data mirror (`<repo>/../shared/data`); a test that needs it is skipped where it is absent."""
    if not (SHARED_DATA / "MANIFEST.md").exists():
        pytest.skip(f"{SHARED_DATA} is absent: this test reads the local dataset mirror")
    return SHARED_DATA


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


@pytest.fixture(scope="module")
def prepared(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """download -> tokenizer -> pretrain_data on the synthetic mirror, as processes (one data dir per module)."""
    data = tmp_path_factory.mktemp("data")
    for name in ("download", "tokenizer", "pretrain_data"):
        done = stage(name, data, mirror=mirror)
        assert done.returncode == 0, done.stderr[-3000:]
    return data


# -- fine-tuning data: synthetic tasks of every kind and tiny encoders ------------------------------------------------

TASK_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
              "quebec romeo sierra tango uniform victor whiskey xray yankee").split()
NAMES, PLACES = ["john", "mary"], ["paris", "rome"]


def draw(rng: random.Random, n: int) -> list[str]:
    """`n` words of the tasks' vocabulary."""
    return [rng.choice(TASK_WORDS) for _ in range(n)]


def presence_task(rng: random.Random, n: int) -> dict[str, list]:
    """label = whether `zebra` is in the sentence: trivially learnable."""
    rows = {"sentence": [], "label": []}
    for _ in range(n):
        words, label = draw(rng, rng.randint(4, 8)), rng.random() < 0.5
        if label:
            words.insert(rng.randrange(len(words) + 1), "zebra")
        rows["sentence"].append(" ".join(words))
        rows["label"].append(int(label))
    return rows


def similarity_task(rng: random.Random, n: int) -> dict[str, list]:
    rows = {"sentence1": [], "sentence2": [], "label": []}
    for _ in range(n):
        a = draw(rng, 5)
        shared = rng.randint(0, 5)
        b = a[:shared] + draw(rng, 5 - shared)
        rows["sentence1"].append(" ".join(a))
        rows["sentence2"].append(" ".join(b))
        rows["label"].append(float(shared))
    return rows


def ner_task(rng: random.Random, n: int) -> dict[str, list]:
    """Names are B-PER (1), a name after a name I-PER (2), places B-LOC (5), everything else O."""
    rows = {"tokens": [], "ner_tags": []}
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(rng.randint(3, 9)):
            r = rng.random()
            if r < 0.15:
                tokens += [rng.choice(NAMES)] + ([rng.choice(NAMES)] if rng.random() < 0.3 else [])
                tags += [1] + [2] * (len(tokens) - len(tags) - 1)
            elif r < 0.25:
                tokens.append(rng.choice(PLACES))
                tags.append(5)
            else:
                tokens.append(rng.choice(TASK_WORDS))
                tags.append(0)
        rows["tokens"].append(tokens)
        rows["ner_tags"].append(tags)
    return rows


def squad_task(rng: random.Random, n: int) -> dict[str, list]:
    rows = {"id": [], "title": [], "context": [], "question": [], "answers": []}
    for i in range(n):
        answer = rng.choice(PLACES + NAMES)
        before, after = " ".join(draw(rng, rng.randint(5, 60))), " ".join(draw(rng, rng.randint(5, 30)))
        context = f"{before} the answer is {answer} . {after}"
        rows["id"].append(f"q{i}")
        rows["title"].append("t")
        rows["context"].append(context)
        rows["question"].append(f"what is the answer {rng.choice(TASK_WORDS)} ?")
        rows["answers"].append({"text": [answer], "answer_start": [context.index(f"is {answer}") + 3]})
    return rows


@pytest.fixture(scope="module")
def finetune_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir as the fine-tuning stage reads it: a tokenizer, two tiny 4-layer encoders (`tiny`: MLM + NSP,
    `tiny_ltr`: left-to-right) and synthetic tasks of every kind, with MNLI marked "no data"."""
    d = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    texts = [" ".join(draw(rng, 10) + NAMES + PLACES + ["zebra", "the", "answer", "is", "what", "?", "."])
             for _ in range(50)]
    tokenizer = train_tokenizer(texts, vocab_size=200, min_frequency=1)
    (d / "tokenizer").mkdir()
    tokenizer.save(str(d / "tokenizer" / "tokenizer.json"))
    save_encoder(d, "tiny", tokenizer.get_vocab_size(), "mlm_nsp", nsp=True, causal=False)
    save_encoder(d, "tiny_ltr", tokenizer.get_vocab_size(), "ltr", nsp=False, causal=True)
    tasks = {
        "sst2": {"train": presence_task(rng, 480), "validation": presence_task(rng, 100)},
        "stsb": {"train": similarity_task(rng, 64), "validation": similarity_task(rng, 40)},
        "conll2003": {"train": ner_task(rng, 200), "validation": ner_task(rng, 40), "test": ner_task(rng, 30)},
        "squad": {"train": squad_task(rng, 24), "validation": squad_task(rng, 12)},
    }
    for name, splits in tasks.items():
        dd = datasets.DatasetDict({s: datasets.Dataset.from_dict(rows) for s, rows in splits.items()})
        dd.save_to_disk(str(d / "download" / "tasks" / name))
    (d / "download" / "tasks" / "mnli").mkdir(parents=True)  # as the download stage leaves a task it could not get
    (d / "download" / "tasks" / "mnli" / "NO_DATA").write_text("nyu-mll/glue/mnli/train is not in the mirror\n")
    return d
