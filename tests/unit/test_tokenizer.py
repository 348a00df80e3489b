"""The tokenizer stage's vocabulary: BERT's special tokens first, the same ids for the same text on every run."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bertlab.tokenizer import SPECIAL_TOKENS, new_tokenizer, renumbered, train_tokenizer
from tests.conftest import SHARED_DATA


def texts() -> list[str]:
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ne", "ra", "tu", "bo", "si", "de", "fa", "gu", "pe", "Zé", "x"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(50)) + "." for _ in range(1000)]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_the_same_text_gives_the_same_ids(kind: str) -> None:
    """HF's trainers number the alphabet in hash-map order (without `renumbered`, 3 of 4 runs of this test's
    WordPiece training moved 14-16 tokens to other ids); the stage's vocabulary is the same on every run."""
    vocabs = [train_tokenizer(texts(), kind=kind, vocab_size=600).get_vocab() for _ in range(4)]
    assert all(v == vocabs[0] for v in vocabs)
    assert [vocabs[0][t] for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4] and len(vocabs[0]) == 600


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_renumbering_changes_ids_not_tokenization(kind: str) -> None:
    tok, trainer = new_tokenizer(kind, lowercase=True)
    trainer.vocab_size = 600
    tok.train_from_iterator(texts(), trainer=trainer)
    sorted_tok = renumbered(tok)
    assert sorted_tok.get_vocab().keys() == tok.get_vocab().keys()
    learned = [sorted_tok.id_to_token(i) for i in range(len(SPECIAL_TOKENS), sorted_tok.get_vocab_size())]
    assert learned == sorted(learned)
    sample = texts()[:50] + ["unseen wørds: qqq Zébo-kalo!"]
    for a, b in zip(tok.encode_batch(sample), sorted_tok.encode_batch(sample), strict=True):
        assert a.tokens == b.tokens and a.offsets == b.offsets
        assert [sorted_tok.token_to_id(t) for t in a.tokens] == b.ids
    pair = sorted_tok.encode("mi ka", "lo")
    assert pair.tokens[0] == "[CLS]" and pair.ids[0] == 2 and pair.type_ids[-1] == 1


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_a_tie_between_continuation_pieces_is_broken_the_same_way_every_time(kind: str) -> None:
    """Every pair here is seen 5 times: the one merge goes to the tie-break, which `tokenizers` decides by the ids it
    gives `##a` and `##c` in hash-map order (unpatched, 12 of 40 runs learned `qa`, 28 `qc`); `seeded_pieces`
    numbers them in code-point order first."""
    vocabs = {tuple(sorted(train_tokenizer(["qab qcd"] * 5, kind=kind, vocab_size=15, min_frequency=1).get_vocab()))
              for _ in range(20)}
    assert len(vocabs) == 1 and "qa" in next(iter(vocabs))
    assert {"a", "q", "##a", "##d"} <= set(next(iter(vocabs)))  # the seeded pieces stay in the vocabulary


def test_the_seeded_pieces_are_not_added_tokens() -> None:
    """Given to the trainer as special tokens, the alphabet would otherwise be matched in text as added tokens."""
    tok = train_tokenizer(["qab qcd"] * 5, vocab_size=15, min_frequency=1)
    assert [t.content for t in tok.get_added_tokens_decoder().values()] == SPECIAL_TOKENS
    assert tok.encode("qab", add_special_tokens=False).tokens == ["qa", "##b"]


@pytest.mark.skipif(not (SHARED_DATA / "MANIFEST.md").exists(), reason=f"{SHARED_DATA} is absent")
def test_the_stage_writes_the_same_bytes_in_every_process(tmp_path: Path) -> None:
    """The smoke corpus is one where merge counts tie at the decision: unpatched, 3 of 10 processes wrote a
    tokenizer.json with `##yed` where the others had `##oy`. Eight processes, each with its own hash seeds."""
    env = {**os.environ, "BERTLAB_DATA_MIRROR": str(SHARED_DATA)}
    common = ["profile=smoke", "logger=none", "hydra.run.dir=" + str(tmp_path / "hydra")]
    done = subprocess.run([sys.executable, "-m", "bertlab.download", f"data_dir={tmp_path / 'data'}", *common],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = []
    for seed in range(8):
        data = tmp_path / f"run{seed}"
        data.mkdir()
        (data / "download").symlink_to(tmp_path / "data" / "download")
        runs.append((data, subprocess.Popen(
            [sys.executable, "-m", "bertlab.tokenizer", f"data_dir={data}", *common],
            env={**env, "PYTHONHASHSEED": str(seed)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        if len(runs) % 4 == 0:  # four at a time
            for _, proc in runs[-4:]:
                assert proc.wait(timeout=600) == 0, proc.stderr.read()[-2000:]
    outputs = {(data / "tokenizer" / "tokenizer.json").read_bytes() for data, _ in runs}
    assert len(outputs) == 1
