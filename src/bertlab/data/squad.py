"""SQuAD v1.1: question + context windows with answer labels, and answer extraction from span logits.

Windows follow BERT's `run_squad.py`: `[CLS] question [SEP] context window [SEP]`, the question cut to
`max_query_length` tokens, and windows of the context starting every `doc_stride` tokens (the step between
window starts, as in the reference; Hugging Face's `stride` is instead the overlap).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from bertlab.data.encoding import configured

def encode_squad(
    tokenizer: Tokenizer,
    questions: Sequence[str],
    contexts: Sequence[str],
    answer_starts: Sequence[int] | None = None,
    answer_texts: Sequence[str] | None = None,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
) -> dict[str, list]:
    """Windows of every (question, context) example, as columns of equal length.

    `input_ids`, `token_type_ids`, `example_index` (position in `questions`), `offsets` (per token, its
    `(start, end)` chars in the context or None). With answers (training): `start_positions` and
    `end_positions`, the answer's first and last token when it lies entirely in the window, else 0 (`[CLS]`).
    """
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    labelled = answer_starts is not None and answer_texts is not None
    features: dict[str, list] = {"input_ids": [], "token_type_ids": [], "example_index": [], "offsets": []}
    if labelled:
        features |= {"start_positions": [], "end_positions": []}
    with configured(tokenizer) as tok:
        question_encodings = tok.encode_batch(list(questions), add_special_tokens=False)
        context_encodings = tok.encode_batch(list(contexts), add_special_tokens=False)
    for index, (question, context) in enumerate(zip(question_encodings, context_encodings, strict=True)):
        prefix = [cls_id, *question.ids[:max_query_length], sep_id]
        room = max_length - len(prefix) - 1
        if room <= 0:
            raise ValueError(f"max_length={max_length} leaves no room for the context after the question")
        answer = None
        if labelled:
            char_start = answer_starts[index]
            answer = _token_span(context.offsets, char_start, char_start + len(answer_texts[index]))
        for start in _window_starts(len(context.ids), room, doc_stride):
            end = min(start + room, len(context.ids))  # window = context tokens [start, end)
            features["input_ids"].append([*prefix, *context.ids[start:end], sep_id])
            features["token_type_ids"].append([0] * len(prefix) + [1] * (end - start + 1))
            features["example_index"].append(index)
            features["offsets"].append([None] * len(prefix) + list(context.offsets[start:end]) + [None])
            if labelled:
                inside = answer is not None and start <= answer[0] and answer[1] < end
                shift = len(prefix) - start
                features["start_positions"].append(answer[0] + shift if inside else 0)
                features["end_positions"].append(answer[1] + shift if inside else 0)
    return features


def postprocess(
    start_logits: Sequence[Sequence[float]],
    end_logits: Sequence[Sequence[float]],
    features: dict[str, list],
    contexts: Sequence[str],
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> list[str]:
    """The best answer of every example: the exact context substring of its highest-scoring span.

    Per window (one row of logits per feature; float arrays or CPU tensors, padding beyond the window
    ignored), spans pair the `n_best_size` best starts with the `n_best_size` best ends, both context tokens,
    start <= end and at most `max_answer_length` tokens; the best start + end logit over all windows of an
    example wins. An example without any valid span gets "".
    """
    best: list[tuple[float, str]] = [(-np.inf, "")] * len(contexts)
    for window, (example, offsets) in enumerate(zip(features["example_index"], features["offsets"], strict=True)):
        starts = np.asarray(start_logits[window], dtype=np.float64)[: len(offsets)]
        ends = np.asarray(end_logits[window], dtype=np.float64)[: len(offsets)]
        top_ends = np.argsort(ends)[::-1][:n_best_size]
        for i in np.argsort(starts)[::-1][:n_best_size]:
            for j in top_ends:
                if offsets[i] is None or offsets[j] is None or not 0 <= j - i < max_answer_length:
                    continue
                score = starts[i] + ends[j]
                if score > best[example][0]:
                    best[example] = (score, contexts[example][offsets[i][0] : offsets[j][1]])
    return [text for _, text in best]


def _window_starts(num_tokens: int, room: int, doc_stride: int) -> list[int]:
    """First context token of each window: every `doc_stride` (at most `room`) until the end is covered."""
    starts = [0]
    while starts[-1] + room < num_tokens:
        starts.append(starts[-1] + min(room, doc_stride))
    return starts


def _token_span(offsets: Sequence[tuple[int, int]], char_start: int, char_end: int) -> tuple[int, int] | None:
    """First and last context token overlapping the chars `[char_start, char_end)`, or None if none does."""
    covered = [t for t, (start, end) in enumerate(offsets) if start < char_end and end > char_start]
    return (covered[0], covered[-1]) if covered else None
