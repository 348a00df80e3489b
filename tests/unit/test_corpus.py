"""Sentence splitting and document tokenization."""

import numpy as np
import pytest

from bertlab.data.corpus import sample_documents, split_sentences, token_dtype, tokenize_documents
from bertlab.data.vocab import CLS_ID, SEP_ID
from bertlab.tokenizer import train_tokenizer

BOOK = """\
CHAPTER I.

It was a bright cold day in April, and the clocks were striking thirteen.
Mr. Smith, his chin nuzzled into his breast, slipped quickly through the
glass doors. "Who is there?" he asked. Nobody answered! The hallway smelt
of boiled cabbage and old rag mats; at one end of it a coloured poster
had been tacked to the wall.

    Twinkle, twinkle, little star,
    How I wonder what you are!

He had read J. R. R. Tolkien in the U.S. Army. it was late.
"""


def test_split_sentences_rejoins_hard_wrapped_lines():
    assert split_sentences(BOOK) == [
        "CHAPTER I.",
        "It was a bright cold day in April, and the clocks were striking thirteen.",
        "Mr. Smith, his chin nuzzled into his breast, slipped quickly through the glass doors.",
        '"Who is there?" he asked.',
        "Nobody answered!",
        "The hallway smelt of boiled cabbage and old rag mats; at one end of it a coloured poster "
        "had been tacked to the wall.",
        "Twinkle, twinkle, little star,",
        "How I wonder what you are!",
        "He had read J. R. R. Tolkien in the U.S. Army. it was late.",
    ]


def test_split_sentences_wikipedia_paragraphs_and_headings():
    text = (
        "Aachen is a city in Germany. It has about 250,000 inhabitants (2020). \"Aix\" is its French name.\n"
        "History.\n"
        "Early history.\n"
        "The first settlement dates from the Neolithic (c. 3000 BC) according to excavations.\n\n"
    )
    assert split_sentences(text) == [
        "Aachen is a city in Germany.",
        "It has about 250,000 inhabitants (2020).",
        '"Aix" is its French name.',
        "History.",
        "Early history.",
        "The first settlement dates from the Neolithic (c. 3000 BC) according to excavations.",
    ]
    assert split_sentences(" \n\n \n") == []


@pytest.fixture(scope="module")
def tokenizer():
    texts = [split_sentences(BOOK)] * 3
    return train_tokenizer((" ".join(t) for t in texts), vocab_size=300, min_frequency=1)


def test_tokenize_documents(tokenizer):
    texts = [BOOK, "", "  \n\n", "One sentence here. Another one there."]
    documents = tokenize_documents(texts, tokenizer, batch_sentences=4)  # forces several batches
    assert len(documents) == 2  # empty documents dropped
    assert [len(doc) for doc in documents] == [len(split_sentences(BOOK)), 2]
    for doc, text in zip(documents, [BOOK, texts[3]]):
        for ids, sentence in zip(doc, split_sentences(text)):
            assert ids.dtype == np.uint16 and ids.ndim == 1 and ids.size > 0
            assert CLS_ID not in ids and SEP_ID not in ids
            assert ids.tolist() == tokenizer.encode(sentence, add_special_tokens=False).ids


def test_sample_documents():
    texts = [f"document {i}: " + "words " * i for i in range(100)]
    everything = list(sample_documents(texts, None, seed=0))
    assert sorted(everything) == sorted(texts) and everything != texts
    assert everything == list(sample_documents(texts, None, seed=0))
    sample = list(sample_documents(texts, 2000, seed=0))
    assert sum(map(len, sample)) == 2000
    assert sample[:-1] == everything[: len(sample) - 1] and everything[len(sample) - 1].startswith(sample[-1])


def test_token_dtype():
    assert token_dtype(30522) == np.uint16
    assert token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.int32
