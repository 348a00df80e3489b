"""NSP and packed pretraining instances on synthetic documents.

Token ids encode corpus positions (id = NUM_SPECIAL + global position), so every token of an instance can
be traced back to its document and sentence.
"""

import random

import numpy as np
import pytest

from bertlab.data.instances import (
    NOT_NEXT, InstanceDataset, _truncate_pair, create_nsp_instances, create_packed_instances, load_instances,
    save_instances,
)
from bertlab.data.vocab import CLS_ID, PAD_ID, SEP_ID

NUM_SPECIAL = 5
MAX_SEQ = 64
MAX_NUM_TOKENS = MAX_SEQ - 3


class Corpus:
    """~480k tokens in 4000 documents of random sentence lengths; 10% are one-sentence documents."""

    def __init__(self, seed: int = 0, num_documents: int = 4000):
        rng = np.random.default_rng(seed)
        self.documents, sentence_lengths, doc_sizes = [], [], []
        position = NUM_SPECIAL
        for _ in range(num_documents):
            n = 1 if rng.random() < 0.1 else int(rng.integers(2, 17))
            lengths = rng.integers(1, 30, n)
            self.documents.append([np.arange(position + s - l, position + s, dtype=np.int32)
                                   for l, s in zip(lengths, np.cumsum(lengths))])
            position += int(lengths.sum())
            sentence_lengths.extend(lengths)
            doc_sizes.append(n)
        self.num_tokens = position - NUM_SPECIAL
        sentence_starts = np.concatenate([[0], np.cumsum(sentence_lengths)])
        self.sentence_boundaries = np.zeros(self.num_tokens + 1, dtype=bool)
        self.sentence_boundaries[sentence_starts] = True
        self.doc_starts = sentence_starts[np.concatenate([[0], np.cumsum(doc_sizes)])]

    def document_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.doc_starts, positions, side="right") - 1


@pytest.fixture(scope="module")
def corpus():
    return Corpus()


@pytest.fixture(scope="module")
def nsp(corpus):
    return create_nsp_instances(corpus.documents, MAX_SEQ, dupe_factor=1, seed=1)


def segments(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Corpus positions of segments A and B of an NSP instance."""
    first, second = np.flatnonzero(row == SEP_ID)
    return row[1:first].astype(np.int64) - NUM_SPECIAL, row[first + 1 : second].astype(np.int64) - NUM_SPECIAL


def test_nsp_layout(corpus, nsp):
    ids, types = nsp.input_ids, nsp.token_type_ids
    assert corpus.num_tokens >= 100_000 and len(nsp) > 10_000
    assert ids.shape == types.shape == (len(nsp), MAX_SEQ)
    assert ids.dtype == np.int32 and types.dtype == np.uint8 and nsp.next_sentence_label.dtype == np.int8
    assert (ids[:, 0] == CLS_ID).all() and (ids[:, 1:] != CLS_ID).all()
    assert ((ids == SEP_ID).sum(1) == 2).all()
    cols = np.arange(MAX_SEQ)
    sep = np.argsort(ids == SEP_ID, axis=1, kind="stable")[:, -2:]  # positions of the two [SEP]s
    first, second = sep[:, :1], sep[:, 1:]
    assert (first > 1).all() and (second > first + 1).all()  # both segments non-empty
    assert ((ids == PAD_ID) == (cols > second)).all()  # padding exactly after the second [SEP]
    assert (types == ((cols > first) & (cols <= second))).all()


def test_nsp_segments_trace_back_to_documents(corpus, nsp):
    max_num_tokens_hit = front_trimmed = back_trimmed = 0
    for row, label, doc in zip(nsp.input_ids, nsp.next_sentence_label, nsp.document_index):
        a, b = segments(row)
        assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all()  # contiguous runs
        assert (corpus.document_of(a) == doc).all()
        b_docs = corpus.document_of(b)
        assert (b_docs == b_docs[0]).all()
        truncated = len(a) + len(b) == MAX_NUM_TOKENS
        max_num_tokens_hit += truncated
        if label == NOT_NEXT:
            assert b_docs[0] != doc
        else:
            # A+B is a run of the document, except for tokens truncated around the A|B sentence boundary.
            assert b_docs[0] == doc
            boundary = corpus.sentence_boundaries[a[-1] + 1 : b[0] + 1]
            assert boundary.any()
            if not truncated:
                assert b[0] == a[-1] + 1 and boundary[0]
        if not truncated:
            assert corpus.sentence_boundaries[a[0]] and corpus.sentence_boundaries[b[-1] + 1]
        front_trimmed += not corpus.sentence_boundaries[a[0]]
        back_trimmed += not corpus.sentence_boundaries[a[-1] + 1]
    assert max_num_tokens_hit > len(nsp) / 2  # most instances fill the sequence
    assert front_trimmed > 500 and back_trimmed > 500  # truncation trims both ends


def test_truncation_matches_truncate_seq_pair():
    rng = random.Random(0)
    front_cuts = total_cuts = 0
    for _ in range(2000):
        a_len, b_len, max_tokens = rng.randint(1, 200), rng.randint(1, 200), rng.randint(2, 200)
        a, b = list(range(a_len)), list(range(b_len))
        while len(a) + len(b) > max_tokens:  # google-research/bert, lengths only
            (a if len(a) > len(b) else b).pop()  # the longer segment, B on ties
        a_start, a_new, b_start, b_new = _truncate_pair(1000, a_len, 5000, b_len, max_tokens, rng)
        assert (a_new, b_new) == (len(a), len(b))
        assert 1000 <= a_start <= 1000 + a_len - a_new and 5000 <= b_start <= 5000 + b_len - b_new
        front_cuts += a_start - 1000 + b_start - 5000
        total_cuts += a_len - a_new + b_len - b_new
    assert abs(front_cuts / total_cuts - 0.5) < 0.01  # each trimmed token: front or back with p = 1/2
    assert _truncate_pair(0, 10, 50, 10, 19, rng)[1::2] == (10, 9)  # equal lengths: B loses the token


def test_nsp_next_sentence_ratio(nsp):
    not_next = nsp.next_sentence_label == NOT_NEXT
    multi = nsp.chunk_sentences >= 2
    assert not_next[~multi].all() and (~multi).sum() > 100
    # Binomial std of the ratio is 0.5 / sqrt(n) < 0.5% for n > 10k chunks; +-2% is > 4 std.
    assert multi.sum() > 10_000
    assert abs(not_next[multi].mean() - 0.5) < 0.02
    print(f"NotNext: {not_next[multi].mean():.3f} of multi-sentence chunks, {not_next.mean():.3f} overall")


def test_nsp_short_target_ratio(corpus, nsp):
    # The target length is drawn once per document pass (as in google-research/bert): with dupe_factor=1
    # every document has one draw, shared by all its instances.
    docs, first = np.unique(nsp.document_index, return_index=True)
    assert len(docs) == len(corpus.documents)
    per_doc = nsp.short_target[first]
    assert (nsp.short_target == per_doc[np.searchsorted(docs, nsp.document_index)]).all()
    # Binomial std over 4000 draws is 0.47%; +-2% is > 4 std.
    assert abs(per_doc.mean() - 0.1) < 0.02
    lengths = (nsp.input_ids != PAD_ID).sum(1)
    assert lengths[nsp.short_target].mean() < 0.8 * lengths[~nsp.short_target].mean()
    print(f"shortened: {per_doc.mean():.3f} of document passes, {nsp.short_target.mean():.3f} of instances")


def test_nsp_dupe_factor_and_seed(corpus, nsp):
    triple = create_nsp_instances(corpus.documents, MAX_SEQ, dupe_factor=3, seed=1)
    assert 2.9 < len(triple) / len(nsp) < 3.1
    distinct = len(np.unique(np.asarray(triple.input_ids), axis=0))
    assert distinct > 0.9 * len(triple)  # the passes draw different instances
    again = create_nsp_instances(corpus.documents, MAX_SEQ, dupe_factor=1, seed=1)
    assert np.array_equal(again.input_ids, nsp.input_ids)
    other = create_nsp_instances(corpus.documents, MAX_SEQ, dupe_factor=1, seed=2)
    assert other.input_ids.shape != nsp.input_ids.shape or not np.array_equal(other.input_ids, nsp.input_ids)


def test_nsp_small_vocab_is_uint16():
    rng = np.random.default_rng(0)
    documents = [[rng.integers(5, 30522, int(rng.integers(1, 20))) for _ in range(5)] for _ in range(20)]
    inst = create_nsp_instances(documents, 32, dupe_factor=2)
    assert inst.input_ids.dtype == np.uint16 and inst.input_ids.max() < 30522


def test_save_load_round_trip(nsp, tmp_path):
    save_instances(nsp, tmp_path / "nsp")
    loaded = load_instances(tmp_path / "nsp")
    assert isinstance(loaded.input_ids, np.memmap)
    for name, original in vars(nsp).items():
        restored = getattr(loaded, name)
        if original is None:  # no static masks: none written, none loaded
            assert restored is None and not (tmp_path / "nsp" / f"{name}.npy").exists()
            continue
        assert restored.dtype == original.dtype and np.array_equal(restored, original), name
    example = InstanceDataset(loaded)[7]
    assert example["index"] == 7 and np.array_equal(example["input_ids"], nsp.input_ids[7])
    assert example["next_sentence_label"] == nsp.next_sentence_label[7]


def test_packed_instances(corpus):
    packed = create_packed_instances(corpus.documents, MAX_SEQ)
    ids = packed.input_ids
    lengths = (ids != PAD_ID).sum(1)
    assert (lengths[:-1] == MAX_SEQ).all() and 3 <= lengths[-1] <= MAX_SEQ
    assert (ids[:, 0] == CLS_ID).all() and (ids[np.arange(len(ids)), lengths - 1] == SEP_ID).all()
    assert not packed.token_type_ids.any() and not packed.next_sentence_label.any()
    body = np.concatenate([row[1 : n - 1] for row, n in zip(ids, lengths)])
    expected = np.concatenate([np.concatenate([*doc, [SEP_ID]]) for doc in corpus.documents])[:-1]
    assert np.array_equal(body, expected)  # the corpus in order, [SEP] between documents
    first_token = ids[:, 1].astype(np.int64)
    in_text = first_token != SEP_ID
    assert (packed.document_index[in_text] == corpus.document_of(first_token[in_text] - NUM_SPECIAL)).all()
