"""`pretrain_data.reference` against an independent port of google-research/bert `create_pretraining_data.py`.

`google_instances` below is google's algorithm transcribed for token ids (its functions, control flow and random
calls in the original's order), not bertlab's code: the reference builder must give the same instances, masks
included, from the same documents and seed.
"""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
import torch

from bertlab.data.instances import InstanceDataset
from bertlab.data.masking import PretrainingCollator
from bertlab.data.reference import create_reference_nsp_instances, create_reference_packed_instances
from bertlab.data.vocab import IGNORE_INDEX

CLS, SEP, MASK = 2, 3, 4
VOCAB = 500
CONTINUATION = set(range(300, VOCAB))  # ids that stand for "##" pieces in the whole-word test

TrainingInstance = collections.namedtuple("TrainingInstance", "tokens segment_ids is_random_next positions labels")
MaskedLmInstance = collections.namedtuple("MaskedLmInstance", ["index", "label"])


def google_instances(all_documents, max_seq_length, dupe_factor, short_seq_prob, masked_lm_prob,
                     max_predictions_per_seq, rng, do_whole_word_mask=False):
    """create_training_instances, after reading: remove empty documents, shuffle them, make the instances."""
    all_documents = [x for x in all_documents if x]
    rng.shuffle(all_documents)
    vocab_words = list(range(VOCAB))
    instances = []
    for _ in range(dupe_factor):
        for document_index in range(len(all_documents)):
            instances.extend(create_instances_from_document(
                all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                max_predictions_per_seq, vocab_words, rng, do_whole_word_mask))
    rng.shuffle(instances)
    return instances


def create_instances_from_document(all_documents, document_index, max_seq_length, short_seq_prob, masked_lm_prob,
                                   max_predictions_per_seq, vocab_words, rng, do_whole_word_mask):
    document = all_documents[document_index]
    max_num_tokens = max_seq_length - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    instances = []
    current_chunk = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = []
                for j in range(a_end):
                    tokens_a.extend(current_chunk[j])
                tokens_b = []
                if len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    num_unused_segments = len(current_chunk) - a_end
                    i -= num_unused_segments
                else:
                    is_random_next = False
                    for j in range(a_end, len(current_chunk)):
                        tokens_b.extend(current_chunk[j])
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                tokens = [CLS] + tokens_a + [SEP] + tokens_b + [SEP]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                tokens, positions, labels = create_masked_lm_predictions(
                    tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng, do_whole_word_mask)
                instances.append(TrainingInstance(tokens, segment_ids, is_random_next, positions, labels))
            current_chunk = []
            current_length = 0
        i += 1
    return instances


def create_masked_lm_predictions(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng,
                                 do_whole_word_mask):
    cand_indexes = []
    for (i, token) in enumerate(tokens):
        if token == CLS or token == SEP:
            continue
        if do_whole_word_mask and len(cand_indexes) >= 1 and token in CONTINUATION:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])
    rng.shuffle(cand_indexes)
    output_tokens = list(tokens)
    num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
    masked_lms = []
    covered_indexes = set()
    for index_set in cand_indexes:
        if len(masked_lms) >= num_to_predict:
            break
        if len(masked_lms) + len(index_set) > num_to_predict:
            continue
        if any(index in covered_indexes for index in index_set):
            continue
        for index in index_set:
            covered_indexes.add(index)
            if rng.random() < 0.8:
                masked_token = MASK
            else:
                if rng.random() < 0.5:
                    masked_token = tokens[index]
                else:
                    masked_token = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            output_tokens[index] = masked_token
            masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))
    masked_lms = sorted(masked_lms, key=lambda x: x.index)
    return output_tokens, [p.index for p in masked_lms], [p.label for p in masked_lms]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_num_tokens:
            break
        trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc_tokens[0]
        else:
            trunc_tokens.pop()


def documents(seed: int = 0, n: int = 300) -> list[list[np.ndarray]]:
    """Random documents of random sentences of non-special ids; some one-sentence and some empty documents."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        sentences = 0 if rng.random() < 0.03 else 1 if rng.random() < 0.1 else int(rng.integers(2, 15))
        docs.append([rng.integers(5, VOCAB, int(rng.integers(1, 40))).astype(np.uint16) for _ in range(sentences)])
    return docs


@pytest.mark.parametrize("whole_word", [False, True])
@pytest.mark.parametrize(("max_seq_length", "seed"), [(64, 12345), (128, 7)])
def test_reference_mode_builds_googles_instances_and_masks(max_seq_length: int, seed: int, whole_word: bool) -> None:
    docs = documents(seed)
    options = dict(dupe_factor=3, short_seq_prob=0.1, masked_lm_prob=0.15, max_predictions_per_seq=20)
    expected = google_instances([[s.tolist() for s in doc] for doc in docs], max_seq_length, rng=random.Random(seed),
                                do_whole_word_mask=whole_word, **options)
    continuation = torch.tensor([i in CONTINUATION for i in range(VOCAB)]) if whole_word else None
    ours = create_reference_nsp_instances(docs, max_seq_length, seed=seed, vocab_size=VOCAB,
                                          continuation=continuation, **options)
    assert len(ours) == len(expected) > 1000
    for row, google in enumerate(expected):
        n = len(google.tokens)
        assert ours.masked_input_ids[row, :n].tolist() == google.tokens
        assert not ours.masked_input_ids[row, n:].any() and not ours.input_ids[row, n:].any()  # padding
        assert ours.token_type_ids[row, :n].tolist() == google.segment_ids and not ours.token_type_ids[row, n:].any()
        assert bool(ours.next_sentence_label[row]) == google.is_random_next
        assert np.flatnonzero(ours.mlm_mask[row]).tolist() == google.positions
        assert ours.input_ids[row, google.positions].tolist() == google.labels
    restored = np.where(ours.mlm_mask, ours.input_ids, ours.masked_input_ids)
    assert (restored == ours.input_ids).all()  # input_ids: the text, masks undone


def test_reference_masks_are_static_and_the_collator_uses_them() -> None:
    inst = create_reference_packed_instances(documents(1), 32, dupe_factor=2, seed=3, masked_lm_prob=0.15,
                                             max_predictions_per_seq=5, vocab_size=VOCAB)
    rows = [InstanceDataset(inst)[i] for i in range(8)]
    for seed in (0, 1):  # a different batch seed changes nothing: the masks came with the instances
        batch = PretrainingCollator(VOCAB, seed=seed)([{**r, "batch": 0} for r in rows])
        length = batch["input_ids"].shape[1]
        assert (batch["input_ids"].numpy() == inst.masked_input_ids[:8, :length]).all()
        labels = batch["mlm_labels"].numpy()
        assert ((labels != IGNORE_INDEX) == inst.mlm_mask[:8, :length]).all()
        assert (labels[inst.mlm_mask[:8, :length]] == inst.input_ids[:8, :length][inst.mlm_mask[:8, :length]]).all()
    budget = np.minimum(5, np.maximum(1, np.round((inst.input_ids != 0).sum(1) * 0.15)))
    assert (inst.mlm_mask.sum(1) == budget).all()  # google's count: [CLS]/[SEP] included, capped
    # each dupe_factor pass masks every packed row once, with its own mask
    by_text = collections.defaultdict(list)
    for text, mask in zip(map(bytes, inst.input_ids), map(bytes, inst.mlm_mask)):
        by_text[text].append(mask)
    assert {len(m) for m in by_text.values()} == {2} and sum(a != b for a, b in by_text.values()) > len(by_text) / 2
