"""CoNLL-2003 word tags onto first sub-tokens and back."""

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from bertlab.data.ner import encode_words, word_predictions
from bertlab.data.vocab import CLS_ID, SEP_ID
from bertlab.tokenizer import train_tokenizer

# Tag ids of conf/task/conll2003.yaml: O=0 B-PER=1 I-PER=2 B-ORG=3 I-ORG=4 B-LOC=5 I-LOC=6 B-MISC=7 I-MISC=8
WORDS = [
    ["Johnathan", "Smithers", "visited", "the", "U.S.", "in", "May", "."],
    ["Rome", "is", "nice"],
]
TAGS = [[1, 2, 0, 0, 5, 0, 0, 0], [5, 0, 0]]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    # A tiny vocabulary, so that the rarer words split into several sub-tokens.
    return train_tokenizer(["the visited in may is nice rome the in is"] * 5, vocab_size=80, min_frequency=1)


def test_labels_only_on_first_subtokens(tokenizer: Tokenizer) -> None:
    encoded = encode_words(tokenizer, WORDS, TAGS, max_length=64)
    for ids, word_ids, labels, tags in zip(encoded["input_ids"], encoded["word_ids"], encoded["label_ids"], TAGS):
        assert ids[0] == CLS_ID and ids[-1] == SEP_ID
        assert word_ids[0] is None and word_ids[-1] is None
        assert len(ids) == len(word_ids) == len(labels)
        labelled = [t for t, label in enumerate(labels) if label != -100]
        first = [word_ids.index(w) for w in range(len(tags))]  # every word has a sub-token here
        assert labelled == first
        assert [labels[t] for t in first] == tags
    # The case is meaningful: some words have several sub-tokens ("U.S." at least 4: u . s .).
    assert encoded["word_ids"][0].count(4) >= 4
    assert len(encoded["input_ids"][0]) > len(WORDS[0]) + 2


def test_without_tags_there_are_no_labels(tokenizer: Tokenizer) -> None:
    encoded = encode_words(tokenizer, WORDS, None, max_length=64)
    assert encoded.keys() == {"input_ids", "token_type_ids", "word_ids"}
    assert all(set(types) == {0} for types in encoded["token_type_ids"])


def test_word_predictions_round_trip_gold(tokenizer: Tokenizer) -> None:
    encoded = encode_words(tokenizer, WORDS, TAGS, max_length=64)
    for labels, word_ids, tags in zip(encoded["label_ids"], encoded["word_ids"], TAGS):
        # Predictions on non-first sub-tokens, specials and padding are ignored.
        preds = [label if label != -100 else 8 for label in labels] + [8, 8]
        assert word_predictions(preds, word_ids, len(tags)) == tags


def test_words_cut_off_by_max_length_get_o(tokenizer: Tokenizer) -> None:
    encoded = encode_words(tokenizer, [["Rome", "is", "nice", "Rome"]], [[5, 0, 0, 5]], max_length=4)
    word_ids = encoded["word_ids"][0]
    assert len(encoded["input_ids"][0]) == 4 and encoded["input_ids"][0][-1] == SEP_ID
    kept = {w for w in word_ids if w is not None}
    assert 3 not in kept
    predicted = word_predictions(encoded["label_ids"][0], word_ids, 4)
    assert predicted == [tag if w in kept else 0 for w, tag in enumerate([5, 0, 0, 5])]


def test_real_dev_sentences_round_trip(shared_data: Path) -> None:
    import pyarrow.parquet as pq

    dev = next((shared_data / "eriktks/conll2003/conll2003").glob("validation-*.parquet"))
    rows = pq.read_table(dev, columns=["tokens", "ner_tags"]).slice(0, 200)
    words, tags = rows.column("tokens").to_pylist(), rows.column("ner_tags").to_pylist()
    tokenizer = train_tokenizer([" ".join(w) for w in words], vocab_size=1000)
    encoded = encode_words(tokenizer, words, tags, max_length=512)
    for labels, word_ids, gold in zip(encoded["label_ids"], encoded["word_ids"], tags):
        assert word_predictions(labels, word_ids, len(gold)) == gold
