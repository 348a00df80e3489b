"""Pretraining instances: NSP sentence pairs (google-research/bert `create_pretraining_data.py`) and
packed single-segment sequences (No-NSP and left-to-right objectives), stored as memory-mappable arrays.

Masking is not part of these instances: it is drawn per batch by `bertlab.data.masking` (RoBERTa's dynamic
masking). `bertlab.data.reference` builds instances with google's static masks instead.
"""

from __future__ import annotations

import dataclasses
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertlab.data.corpus import token_dtype
from bertlab.data.vocab import CLS_ID, PAD_ID, SEP_ID

IS_NEXT, NOT_NEXT = 0, 1  # Hugging Face `next_sentence_label` convention
Documents = Sequence[Sequence[np.ndarray]]  # documents -> sentences -> token ids (no special tokens)
OPTIONAL = ("masked_input_ids", "mlm_mask")  # static masks: only reference-mode instances have them


@dataclass
class Instances:
    """N fixed-length instances, padded with the pad id.

    `input_ids` [N, L] uint16 (int32 for ids >= 65536); `token_type_ids` [N, L] uint8 (0 for `[CLS] A [SEP]`
    and padding, 1 for `B [SEP]`); `next_sentence_label` [N] int8 (IS_NEXT / NOT_NEXT; 0 for packed).
    Statistics: `document_index` [N] int32, the input document A (packed: the first token) comes from;
    `short_target` [N] bool, the document pass drew a shortened target length; `chunk_sentences` [N] uint16,
    the number of sentences accumulated into the chunk A was taken from (0 for packed).
    Static masks (`bertlab.data.reference`), else None: `masked_input_ids` [N, L], what the model reads, and
    `mlm_mask` [N, L] bool, the positions it predicts (their labels are `input_ids`).
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    next_sentence_label: np.ndarray
    document_index: np.ndarray
    short_target: np.ndarray
    chunk_sentences: np.ndarray
    masked_input_ids: np.ndarray | None = None
    mlm_mask: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


def save_instances(instances: Instances, directory: str | Path) -> None:
    """Write each field of `instances` (but absent static masks) to `directory/<field>.npy`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for field in dataclasses.fields(Instances):
        if (value := getattr(instances, field.name)) is not None:
            np.save(directory / f"{field.name}.npy", value)


def load_instances(directory: str | Path) -> Instances:
    """Memory-map the instances written by `save_instances`."""
    directory = Path(directory)
    files = {f.name: directory / f"{f.name}.npy" for f in dataclasses.fields(Instances)}
    return Instances(**{name: np.load(file, mmap_mode="r") for name, file in files.items()
                        if file.exists() or name not in OPTIONAL})


class InstanceDataset(torch.utils.data.Dataset):
    """Per-example dicts of numpy rows (views of the possibly memory-mapped arrays) for `PretrainingCollator`."""

    def __init__(self, instances: Instances):
        # Plain ndarray views of np.memmap arrays: indexing them skips memmap's per-item overhead.
        self.input_ids = np.asarray(instances.input_ids)
        self.token_type_ids = np.asarray(instances.token_type_ids)
        self.next_sentence_label = np.asarray(instances.next_sentence_label)
        self.static = {name: np.asarray(getattr(instances, name)) for name in OPTIONAL
                       if getattr(instances, name) is not None}

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, index: int) -> dict:
        return {
            "index": index,
            "input_ids": self.input_ids[index],
            "token_type_ids": self.token_type_ids[index],
            "next_sentence_label": int(self.next_sentence_label[index]),
            **{name: column[index] for name, column in self.static.items()},
        }


@dataclass
class _FlatCorpus:
    """The non-empty sentences concatenated: sentence s is `tokens[starts[s]:starts[s + 1]]`; document d
    holds sentences `doc_starts[d]:doc_starts[d + 1]` and is input document `doc_ids[d]`."""

    tokens: np.ndarray
    starts: list[int]
    doc_starts: list[int]
    doc_ids: np.ndarray

    @classmethod
    def of(cls, documents: Documents) -> _FlatCorpus:
        documents = [[s for s in doc if len(s)] for doc in documents]
        doc_ids = np.array([d for d, doc in enumerate(documents) if doc], dtype=np.int32)
        if not len(doc_ids):
            raise ValueError("no non-empty documents")
        sentences = [s for doc in documents for s in doc]
        starts = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in sentences], out=starts[1:])
        doc_starts = np.zeros(len(doc_ids) + 1, dtype=np.int64)
        np.cumsum([len(documents[d]) for d in doc_ids], out=doc_starts[1:])
        return cls(np.concatenate(sentences), starts.tolist(), doc_starts.tolist(), doc_ids)


class _PairSpecs:
    """Compact growable columns describing NSP instances by token ranges of the flat corpus."""

    def __init__(self) -> None:
        self.a_start, self.b_start = array("q"), array("q")
        self.a_len, self.b_len, self.document = array("i"), array("i"), array("i")
        self.not_next, self.short, self.chunk = array("b"), array("b"), array("i")

    def add(self, a_start: int, a_len: int, b_start: int, b_len: int, not_next: bool, document: int,
            short: bool, chunk: int) -> None:
        self.a_start.append(a_start)
        self.a_len.append(a_len)
        self.b_start.append(b_start)
        self.b_len.append(b_len)
        self.not_next.append(not_next)
        self.document.append(document)
        self.short.append(short)
        self.chunk.append(chunk)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(col) for name, col in vars(self).items()}


def create_nsp_instances(
    documents: Documents, max_seq_length: int = 128, *, short_seq_prob: float = 0.1, dupe_factor: int = 10,
    seed: int = 12345, cls_id: int = CLS_ID, sep_id: int = SEP_ID, pad_id: int = PAD_ID,
) -> Instances:
    """`[CLS] A [SEP] B [SEP]` sentence-pair instances exactly as google-research/bert builds them.

    `dupe_factor` passes over all documents with different randomness; in each pass a document draws one
    target length (`max_seq_length - 3`, or with probability `short_seq_prob` a shorter one in
    [2, max_seq_length - 3]), accumulates sentences into chunks of that length, splits each chunk into A and
    B (the actual continuation, or with probability 0.5, or always for a one-sentence chunk, a random span
    of another document, the unused sentences being put back) and truncates the pair to fit.
    The instances are shuffled. Reproducible for a given `seed`.
    """
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]
    if max_num_tokens < 2:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for two segments")
    corpus = _FlatCorpus.of(documents)
    rng = random.Random(seed)
    specs = _PairSpecs()
    for _ in range(dupe_factor):
        for document in range(len(corpus.doc_starts) - 1):
            _document_instances(corpus, document, max_num_tokens, short_seq_prob, rng, specs)
    cols = specs.columns()
    order = np.random.default_rng(seed).permutation(len(cols["a_len"]))
    cols = {name: col[order] for name, col in cols.items()}
    input_ids, token_type_ids = _fill_pairs(corpus.tokens, cols, max_seq_length, cls_id, sep_id, pad_id)
    return Instances(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        next_sentence_label=cols["not_next"].astype(np.int8),
        document_index=corpus.doc_ids[cols["document"]],
        short_target=cols["short"].astype(bool),
        chunk_sentences=cols["chunk"].astype(np.uint16),
    )


def _document_instances(
    corpus: _FlatCorpus, document: int, max_num_tokens: int, short_seq_prob: float, rng: random.Random,
    specs: _PairSpecs,
) -> None:
    """One pass of `create_instances_from_document` over `document`, appending to `specs`."""
    starts, doc_starts = corpus.starts, corpus.doc_starts
    num_documents = len(doc_starts) - 1
    first, end = doc_starts[document], doc_starts[document + 1]
    short = rng.random() < short_seq_prob
    target_seq_length = rng.randint(2, max_num_tokens) if short else max_num_tokens
    chunk_first = i = first
    while i < end:
        if i == end - 1 or starts[i + 1] - starts[chunk_first] >= target_seq_length:
            chunk_len = i + 1 - chunk_first
            a_end = rng.randint(1, chunk_len - 1) if chunk_len >= 2 else 1
            a_start, b_start = starts[chunk_first], starts[chunk_first + a_end]
            a_len = b_start - a_start
            not_next = chunk_len == 1 or rng.random() < 0.5
            if not_next:
                target_b_length = target_seq_length - a_len
                for _ in range(10):
                    other = rng.randint(0, num_documents - 1)
                    if other != document:
                        break
                j = doc_starts[other] + rng.randint(0, doc_starts[other + 1] - doc_starts[other] - 1)
                b_start = starts[j]
                while j < doc_starts[other + 1] - 1 and starts[j + 1] - b_start < target_b_length:
                    j += 1
                b_len = starts[j + 1] - b_start
                i -= chunk_len - a_end  # put the unused sentences back
            else:
                b_len = starts[i + 1] - b_start
            a_start, a_len, b_start, b_len = _truncate_pair(a_start, a_len, b_start, b_len, max_num_tokens, rng)
            specs.add(a_start, a_len, b_start, b_len, not_next, document, short, chunk_len)
            chunk_first = i + 1
        i += 1


def _truncate_pair(
    a_start: int, a_len: int, b_start: int, b_len: int, max_num_tokens: int, rng: random.Random
) -> tuple[int, int, int, int]:
    """`truncate_seq_pair` on token ranges: trim the longer segment (B on ties) one token at a time, each
    from the front or the back with probability 1/2, until the pair fits `max_num_tokens`. The same lengths as
    google's; the front/back draws come from a different stream (`bertlab.data.reference` has google's)."""
    excess = a_len + b_len - max_num_tokens
    if excess <= 0:
        return a_start, a_len, b_start, b_len
    cut_a = min(excess, max(a_len - b_len, 0))
    cut_b = min(excess - cut_a, max(b_len - a_len, 0))
    rest = excess - cut_a - cut_b  # the lengths are now equal: trim alternately, B first
    cut_b += (rest + 1) // 2
    cut_a += rest // 2
    # The number of front trims among k fair coin flips is the bit count of k random bits.
    a_start += rng.getrandbits(cut_a).bit_count()
    b_start += rng.getrandbits(cut_b).bit_count()
    return a_start, a_len - cut_a, b_start, b_len - cut_b


def _fill_pairs(
    tokens: np.ndarray, cols: dict[str, np.ndarray], max_seq_length: int, cls_id: int, sep_id: int, pad_id: int,
    block: int = 1 << 16,
) -> tuple[np.ndarray, np.ndarray]:
    """Materialise `[CLS] A [SEP] B [SEP] pad...` rows and their segment ids from token ranges."""
    n = len(cols["a_len"])
    input_ids = np.full((n, max_seq_length), pad_id, dtype=_ids_dtype(tokens, cls_id, sep_id, pad_id))
    token_type_ids = np.zeros((n, max_seq_length), dtype=np.uint8)
    columns = np.arange(max_seq_length)
    for lo in range(0, n, block):
        rows = slice(lo, min(lo + block, n))
        a_len, b_len = cols["a_len"][rows], cols["b_len"][rows]
        out = input_ids[rows]
        out[:, 0] = cls_id
        _scatter_segments(out, tokens, cols["a_start"][rows], a_len, 1)
        _scatter_segments(out, tokens, cols["b_start"][rows], b_len, a_len + 2)
        index = np.arange(len(a_len))
        out[index, a_len + 1] = sep_id
        out[index, a_len + b_len + 2] = sep_id
        b_first = (a_len + 2)[:, None]
        token_type_ids[rows] = (columns >= b_first) & (columns <= b_first + b_len[:, None])
    return input_ids, token_type_ids


def _scatter_segments(out: np.ndarray, tokens: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                      offset: np.ndarray | int) -> None:
    """out[r, offset[r] + k] = tokens[starts[r] + k] for k < lengths[r], for every row r."""
    row = np.repeat(np.arange(len(lengths)), lengths)
    k = np.arange(len(row)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, np.broadcast_to(offset, lengths.shape)[row] + k] = tokens[starts[row] + k]


def _ids_dtype(tokens: np.ndarray, *special_ids: int) -> np.dtype:
    return token_dtype(int(max(tokens.max(initial=0), *special_ids)) + 1)


def create_packed_instances(
    documents: Documents, max_seq_length: int = 128, *, cls_id: int = CLS_ID, sep_id: int = SEP_ID,
    pad_id: int = PAD_ID,
) -> Instances:
    """Contiguous single-segment instances `[CLS] t1 ... tn [SEP]`, n = max_seq_length - 2, for the No-NSP and
    left-to-right objectives: the corpus in order, crossing sentence and document boundaries (a `[SEP]`
    between documents); every instance is full except possibly the last."""
    corpus = _FlatCorpus.of(documents)
    doc_token_starts = np.asarray(corpus.starts)[corpus.doc_starts]
    # Insert one [SEP] before every document but the first.
    stream = np.insert(corpus.tokens, doc_token_starts[1:-1], sep_id)
    doc_stream_starts = doc_token_starts[:-1] + np.arange(len(doc_token_starts) - 1)
    body = max_seq_length - 2
    n = -(-len(stream) // body)
    input_ids = np.full((n, max_seq_length), pad_id, dtype=_ids_dtype(stream, cls_id, pad_id))
    input_ids[:, 0] = cls_id
    full = len(stream) // body
    input_ids[:full, 1:-1] = stream[: full * body].reshape(full, body)
    tail = stream[full * body :]
    input_ids[full:, 1 : len(tail) + 1] = tail
    sep_positions = np.full(n, body + 1)
    sep_positions[full:] = len(tail) + 1
    input_ids[np.arange(n), sep_positions] = sep_id
    first_document = np.searchsorted(doc_stream_starts, np.arange(n) * body, side="right") - 1
    return Instances(
        input_ids=input_ids,
        token_type_ids=np.zeros_like(input_ids, dtype=np.uint8),
        next_sentence_label=np.zeros(n, dtype=np.int8),
        document_index=corpus.doc_ids[first_document],
        short_target=np.zeros(n, dtype=bool),
        chunk_sentences=np.zeros(n, dtype=np.uint16),
    )
