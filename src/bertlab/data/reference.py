"""`pretrain_data.reference`: pretraining instances with google-research/bert `create_pretraining_data.py`'s exact
semantics, static masks included, for runs that must match the reference rather than run fast.

One `random.Random(seed)` drives everything in google's order: shuffle the documents; for each of `dupe_factor`
passes over them, build a document's `[CLS] A [SEP] B [SEP]` pairs (`truncate_seq_pair` trims the longer segment,
B on ties, front or back at random) and mask each as it is made (`create_masked_lm_predictions`: candidates are
all tokens but `[CLS]`/`[SEP]`, `min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))` of
them, 80% `[MASK]`, 10% kept, 10% a random id from the whole vocabulary); finally shuffle the instances. Masks are
fixed per pass (the default builder draws them per batch instead: RoBERTa's dynamic masking). Packed rows (No
NSP, LTR), which google does not make, get the same masking, one static mask per row and pass.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import torch

from bertlab.data.corpus import token_dtype
from bertlab.data.instances import Documents, Instances, create_packed_instances
from bertlab.data.vocab import CLS_ID, MASK_ID, PAD_ID, SEP_ID


def create_reference_nsp_instances(
    documents: Documents, max_seq_length: int, *, short_seq_prob: float, dupe_factor: int, seed: int,
    masked_lm_prob: float, max_predictions_per_seq: int, vocab_size: int, continuation: torch.Tensor | None = None,
) -> Instances:
    """Google's `create_training_instances` on tokenized `documents`; `continuation` enables whole-word masking."""
    docs = [[s.tolist() for s in doc if len(s)] for doc in documents]
    order = [d for d, doc in enumerate(docs) if doc]
    rng = random.Random(seed)
    rng.shuffle(order)
    mask = _Masker(masked_lm_prob, max_predictions_per_seq, vocab_size, continuation, rng)
    rows: list[tuple[list[int], int, bool, int, bool, int, list[int], list[int]]] = []
    for _ in range(dupe_factor):
        for index in range(len(order)):
            rows.extend(_document_instances(docs, order, index, max_seq_length - 3, short_seq_prob, rng, mask))
    rng.shuffle(rows)
    tokens, a_lens, not_next, documents_of, short, chunks, positions, labels = zip(*rows) if rows else ((),) * 8
    instances = _instances(tokens, max_seq_length, positions, labels, vocab_size)
    instances.token_type_ids[:] = np.arange(max_seq_length) >= np.asarray(a_lens)[:, None] + 2
    instances.token_type_ids[np.asarray(instances.input_ids) == PAD_ID] = 0
    instances.next_sentence_label[:] = not_next
    instances.document_index[:] = documents_of
    instances.short_target[:] = short
    instances.chunk_sentences[:] = chunks
    return instances


def create_reference_packed_instances(
    documents: Documents, max_seq_length: int, *, dupe_factor: int, seed: int, masked_lm_prob: float,
    max_predictions_per_seq: int, vocab_size: int, continuation: torch.Tensor | None = None,
) -> Instances:
    """Packed rows (`create_packed_instances`), `dupe_factor` copies each with its own static mask, shuffled."""
    packed = create_packed_instances(documents, max_seq_length)
    rng = random.Random(seed)
    mask = _Masker(masked_lm_prob, max_predictions_per_seq, vocab_size, continuation, rng)
    rows = []
    for _ in range(dupe_factor):
        for r, row in enumerate(np.asarray(packed.input_ids)):
            tokens = row[row != PAD_ID].tolist()
            rows.append((tokens, r, *mask(tokens)))
    rng.shuffle(rows)
    tokens, source, positions, labels = zip(*rows)
    instances = _instances(tokens, max_seq_length, positions, labels, vocab_size)
    instances.document_index[:] = np.asarray(packed.document_index)[list(source)]
    return instances


class _Masker:
    """Google's `create_masked_lm_predictions` on token ids: (masked positions, their original ids), sorted by
    position; the tokens are masked in place."""

    def __init__(self, masked_lm_prob: float, max_predictions: int, vocab_size: int,
                 continuation: torch.Tensor | None, rng: random.Random) -> None:
        self.prob, self.max_predictions, self.vocab_size, self.rng = masked_lm_prob, max_predictions, vocab_size, rng
        self.continuation = None if continuation is None else continuation.tolist()

    def __call__(self, tokens: list[int]) -> tuple[list[int], list[int]]:
        rng, candidates = self.rng, []
        for i, token in enumerate(tokens):
            if token in (CLS_ID, SEP_ID):
                continue
            if self.continuation is not None and candidates and self.continuation[token]:
                candidates[-1].append(i)
            else:
                candidates.append([i])
        rng.shuffle(candidates)
        budget = min(self.max_predictions, max(1, int(round(len(tokens) * self.prob))))
        chosen: list[tuple[int, int]] = []
        for word in candidates:
            if len(chosen) >= budget:
                break
            if len(chosen) + len(word) > budget:
                continue
            for i in word:  # whole words never overlap, so google's "already covered" check never fires
                original = tokens[i]
                if rng.random() < 0.8:
                    tokens[i] = MASK_ID
                elif rng.random() >= 0.5:
                    tokens[i] = rng.randint(0, self.vocab_size - 1)
                chosen.append((i, original))
        chosen.sort()
        return [i for i, _ in chosen], [label for _, label in chosen]


def _document_instances(
    docs: list[list[list[int]]], order: list[int], index: int, max_num_tokens: int, short_seq_prob: float,
    rng: random.Random, mask: _Masker,
) -> list[tuple]:
    """Google's `create_instances_from_document` for the document at `index` of the shuffled `order`."""
    document = docs[order[index]]
    target_seq_length = max_num_tokens
    short = rng.random() < short_seq_prob
    if short:
        target_seq_length = rng.randint(2, max_num_tokens)
    out, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target_seq_length:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for sentence in chunk[:a_end] for t in sentence]
            b: list[int] = []
            random_next = len(chunk) == 1 or rng.random() < 0.5
            if random_next:
                for _ in range(10):
                    other = rng.randint(0, len(order) - 1)
                    if other != index:
                        break
                other_document = docs[order[other]]
                for sentence in other_document[rng.randint(0, len(other_document) - 1):]:
                    b.extend(sentence)
                    if len(b) >= target_seq_length - len(a):
                        break
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                b = [t for sentence in chunk[a_end:] for t in sentence]
            _truncate_seq_pair(a, b, max_num_tokens, rng)
            tokens = [CLS_ID, *a, SEP_ID, *b, SEP_ID]
            out.append((tokens, len(a), random_next, order[index], short, len(chunk), *mask(tokens)))
            chunk, length = [], 0
        i += 1
    return out


def _truncate_seq_pair(a: list[int], b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    while len(a) + len(b) > max_num_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def _instances(tokens: Sequence[list[int]], max_seq_length: int, positions: Sequence[list[int]],
               labels: Sequence[list[int]], vocab_size: int) -> Instances:
    """Rows of masked `tokens` as `Instances`: `input_ids` the original text (masked positions restored),
    `masked_input_ids` what the model reads, `mlm_mask` the positions it predicts."""
    n = len(tokens)
    masked = np.full((n, max_seq_length), PAD_ID, dtype=token_dtype(vocab_size))
    mlm_mask = np.zeros((n, max_seq_length), dtype=bool)
    original = masked.copy()
    for r, (row, pos, lab) in enumerate(zip(tokens, positions, labels)):
        masked[r, : len(row)] = row
        original[r, : len(row)] = row
        original[r, pos] = lab
        mlm_mask[r, pos] = True
    return Instances(
        input_ids=original, token_type_ids=np.zeros((n, max_seq_length), dtype=np.uint8),
        next_sentence_label=np.zeros(n, dtype=np.int8), document_index=np.zeros(n, dtype=np.int32),
        short_target=np.zeros(n, dtype=bool), chunk_sentences=np.zeros(n, dtype=np.uint16),
        masked_input_ids=masked, mlm_mask=mlm_mask,
    )
