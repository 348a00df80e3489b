"""SQuAD windows, answer labels and answer extraction on a hand-made example with known token positions."""

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from bertlab.data.squad import encode_squad, postprocess
from bertlab.data.vocab import CLS_ID, SEP_ID
from bertlab.tokenizer import train_tokenizer

CONTEXT = "Tourists love it. The Golden Gate Bridge, opened in 1937, spans the strait near San Francisco."
# One token per word or punctuation mark (checked in `test_context_tokens`):
#  0 tourists 1 love 2 it 3 . 4 the 5 golden 6 gate 7 bridge 8 , 9 opened 10 in 11 1937 12 , 13 spans
# 14 the 15 strait 16 near 17 san 18 francisco 19 .
QUESTION = "Which bridge opened in 1937?"
ANSWER = "Gate Bridge, opened"  # context tokens 6..9
ANSWER_START = CONTEXT.index(ANSWER)
# max_length 14 with a 3-token question: [CLS] q q q [SEP] + 8 context tokens + [SEP]; windows start every
# 4 tokens: [0, 8) cuts the answer, [4, 12) holds it whole, [8, 16) cuts it, [12, 20) misses it.
SETTINGS = {"max_length": 14, "doc_stride": 4, "max_query_length": 3}
PREFIX = 5  # [CLS] + 3 question tokens + [SEP]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    texts = [CONTEXT, QUESTION, "A second context about Rome and Paris."]
    return train_tokenizer(texts, vocab_size=400, min_frequency=1)


@pytest.fixture(scope="module")
def features(tokenizer: Tokenizer) -> dict[str, list]:
    return encode_squad(tokenizer, [QUESTION], [CONTEXT], [ANSWER_START], [ANSWER], **SETTINGS)


def test_context_tokens(tokenizer: Tokenizer) -> None:
    assert len(tokenizer.encode(CONTEXT, add_special_tokens=False).ids) == 20


def test_window_layout(tokenizer: Tokenizer, features: dict[str, list]) -> None:
    question_ids = tokenizer.encode(QUESTION, add_special_tokens=False).ids[:3]
    context_ids = tokenizer.encode(CONTEXT, add_special_tokens=False).ids
    assert features["example_index"] == [0, 0, 0, 0]
    for window, start in enumerate([0, 4, 8, 12]):
        ids, types, offsets = (features[k][window] for k in ("input_ids", "token_type_ids", "offsets"))
        assert ids == [CLS_ID, *question_ids, SEP_ID, *context_ids[start : start + 8], SEP_ID]
        assert len(ids) == len(types) == len(offsets) <= SETTINGS["max_length"]
        assert types == [0] * PREFIX + [1] * (len(ids) - PREFIX)
        assert offsets[:PREFIX] == [None] * PREFIX and offsets[-1] is None
        assert all(offset is not None for offset in offsets[PREFIX:-1])


def test_answer_labelled_only_in_the_window_that_holds_it_whole(features: dict[str, list]) -> None:
    # Windows 0 and 2 hold part of the answer: label [CLS]. Window 1 holds tokens 6..9 at 5 + (6 - 4) = 7 .. 10.
    assert features["start_positions"] == [0, 7, 0, 0]
    assert features["end_positions"] == [0, 10, 0, 0]
    answer_end = ANSWER_START + len(ANSWER)
    overlaps = [any(o and o[0] < answer_end and o[1] > ANSWER_START for o in window) for window in features["offsets"]]
    assert overlaps == [True, True, True, False]  # windows 0 and 2 cut the answer
    for offsets, start in zip(features["offsets"], features["start_positions"]):
        spans = [o for o in offsets if o is not None]
        whole = spans[0][0] <= ANSWER_START and answer_end <= spans[-1][1]
        assert (start != 0) == whole


def test_gold_positions_map_back_to_the_answer_text(features: dict[str, list]) -> None:
    offsets, start, end = features["offsets"][1], features["start_positions"][1], features["end_positions"][1]
    assert CONTEXT[offsets[start][0] : offsets[end][1]] == ANSWER


def test_without_answers_there_are_no_labels(tokenizer: Tokenizer) -> None:
    features = encode_squad(tokenizer, [QUESTION], [CONTEXT], **SETTINGS)
    assert "start_positions" not in features and len(features["input_ids"]) == 4


def test_question_longer_than_max_length_is_an_error(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="no room"):
        encode_squad(tokenizer, [QUESTION], [CONTEXT], max_length=6, max_query_length=64)


def _peaked_logits(features: dict[str, list], peaks: dict[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Logits of -100, padded past the longest window, with start/end peaks of 10 at `peaks[window]`."""
    shape = (len(features["input_ids"]), max(len(ids) for ids in features["input_ids"]) + 2)  # 2 padding columns
    start, end = np.full(shape, -100.0), np.full(shape, -100.0)
    for window, (s, e) in peaks.items():
        start[window, s], end[window, e] = 10.0, 10.0
    return start, end


def test_postprocess_returns_exact_substring_across_windows(tokenizer: Tokenizer) -> None:
    other_context = "A second context about Rome and Paris."
    features = encode_squad(tokenizer, [QUESTION, "Which city?"], [CONTEXT, other_context], **SETTINGS)
    assert features["example_index"] == [0, 0, 0, 0, 1]
    # Example 0: gold peaks in window 1 (tokens 7..10); example 1: "Rome" is context token 4.
    rome = min(3, len(tokenizer.encode("Which city?", add_special_tokens=False).ids)) + 2 + 4
    start, end = _peaked_logits(features, {1: (7, 10), 4: (rome, rome)})
    assert postprocess(start, end, features, [CONTEXT, other_context]) == [ANSWER, "Rome"]


def test_postprocess_skips_invalid_spans(tokenizer: Tokenizer, features: dict[str, list]) -> None:
    start, end = _peaked_logits(features, {1: (7, 10)})
    start[0, 2], end[0, 2] = 50.0, 50.0  # a question token
    start[2, 8], end[2, 6] = 50.0, 50.0  # end before start
    start[3, 13], end[3, 13] = 50.0, 50.0  # the final [SEP]
    start[3, 14], end[3, 14] = 50.0, 50.0  # padding beyond the window
    assert postprocess(start, end, features, [CONTEXT]) == [ANSWER]
    # A weaker 1-token span ("spans", token 13, at 5 + 13 - 12 in window 3) wins only once the 4-token gold
    # span is longer than max_answer_length.
    start[3, 6], end[3, 6] = 5.0, 5.0
    assert postprocess(start, end, features, [CONTEXT], max_answer_length=4) == [ANSWER]
    assert postprocess(start, end, features, [CONTEXT], max_answer_length=3) == ["spans"]


def test_postprocess_without_valid_span_returns_empty(features: dict[str, list]) -> None:
    start, end = _peaked_logits(features, {})
    assert postprocess(start, end, features, [CONTEXT], max_answer_length=0) == [""]


def test_real_dev_answers_are_labelled(shared_data: Path) -> None:
    import pyarrow.parquet as pq

    dev = next((shared_data / "rajpurkar/squad/plain_text").glob("validation-*.parquet"))
    rows = pq.read_table(dev).slice(0, 60).to_pylist()
    tokenizer = train_tokenizer([r["context"] for r in rows] + [r["question"] for r in rows], vocab_size=2000)
    starts = [r["answers"]["answer_start"][0] for r in rows]
    texts = [r["answers"]["text"][0] for r in rows]
    features = encode_squad(tokenizer, [r["question"] for r in rows], [r["context"] for r in rows], starts, texts)
    found = {}
    for example, offsets, s, e in zip(
        features["example_index"], features["offsets"], features["start_positions"], features["end_positions"]
    ):
        if s:
            found[example] = rows[example]["context"][offsets[s][0] : offsets[e][1]]
    # Every answer is labelled, as the whole tokens that hold it: exactly the answer unless it starts or ends
    # inside a word (the mirror's answer_start is the first occurrence of the text: "gold" in "golden").
    assert found.keys() == set(range(len(rows)))
    assert all(texts[i] in span for i, span in found.items())
    assert sum(span == texts[i] for i, span in found.items()) >= 0.85 * len(rows)
