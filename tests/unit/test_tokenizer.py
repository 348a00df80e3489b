"""The tokenizer stage's vocabulary: BERT's special tokens first, the same ids for the same text on every run."""

import random

import pytest

from bertlab.data.vocab import SPECIAL_TOKENS
from bertlab.tokenizer import new_tokenizer, renumbered, train_tokenizer


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
