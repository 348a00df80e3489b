"""Dynamic masking and the pretraining collator."""

import numpy as np
import pytest
import torch

from bertlab.data.instances import InstanceDataset, create_nsp_instances, create_packed_instances
from bertlab.data.masking import PretrainingCollator, continuation_table, mask_tokens, max_labels
from bertlab.data.vocab import CLS_ID, IGNORE_INDEX, MASK_ID, PAD_ID, SEP_ID
from bertlab.tokenizer import train_tokenizer

VOCAB = 30000
NUM_SPECIAL = 5


@pytest.fixture(scope="module")
def batch():
    """1024 rows of random ids: [CLS] ... [SEP] ... [SEP] then padding, random real lengths 16..128."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(NUM_SPECIAL, VOCAB, (1024, 128), generator=g)
    lengths = torch.randint(16, 129, (1024,), generator=g)
    rows = torch.arange(1024)
    ids[:, 0] = CLS_ID
    ids[rows, lengths // 2] = SEP_ID
    ids[rows, lengths - 1] = SEP_ID
    ids[torch.arange(128) >= lengths[:, None]] = PAD_ID
    ids[::7, 5] = 1  # some [UNK]s
    return ids


def test_mask_tokens_rates(batch):
    masked, labels = mask_tokens(batch, vocab_size=VOCAB, generator=torch.Generator().manual_seed(1))
    candidate = batch >= NUM_SPECIAL
    chosen = labels != IGNORE_INDEX
    assert not chosen[~candidate].any()  # pad, [UNK], [CLS], [SEP] never chosen
    assert torch.equal(labels[chosen], batch[chosen])
    assert torch.equal(masked[~chosen], batch[~chosen])
    # Exactly round(15%) of each row's candidates.
    assert torch.equal(chosen.sum(1), (candidate.sum(1) * 0.15).round().long().clamp(min=1))
    assert abs(chosen.sum() / candidate.sum() - 0.15) < 0.005
    n = chosen.sum()
    to_mask = (masked[chosen] == MASK_ID).sum() / n
    kept = (masked[chosen] == batch[chosen]).sum() / n
    replaced = masked[chosen][(masked[chosen] != MASK_ID) & (masked[chosen] != batch[chosen])]
    # n ~ 10k chosen: binomial std of the 10% shares is 0.3%; +-1.5% is 5 std.
    assert abs(to_mask - 0.8) < 0.015 and abs(kept - 0.1) < 0.015 and abs(len(replaced) / n - 0.1) < 0.015
    assert (replaced >= NUM_SPECIAL).all() and (replaced < VOCAB).all()


def test_random_replacements_never_special():
    ids = torch.full((64, 512), 7)
    masked, labels = mask_tokens(ids, vocab_size=NUM_SPECIAL + 3, mlm_probability=0.5,
                                 generator=torch.Generator().manual_seed(0))
    replaced = masked[(labels != IGNORE_INDEX) & (masked != MASK_ID)]
    assert len(replaced) > 1000 and set(replaced.unique().tolist()) == {5, 6, 7}


def words_of(ids: torch.Tensor, continuation: torch.Tensor) -> list[list[int]]:
    """Position groups of the words of one row (a word = a non-`##` token and the `##` tokens after it)."""
    words: list[list[int]] = []
    for position, token in enumerate(ids.tolist()):
        if token < NUM_SPECIAL:
            words.append([])
        elif continuation[token] and words and words[-1]:
            words[-1].append(position)
        else:
            words.append([position])
    return [w for w in words if w]


def test_whole_word_masking(batch):
    continuation = torch.rand(VOCAB, generator=torch.Generator().manual_seed(2)) < 0.4
    continuation[:NUM_SPECIAL] = False
    masked, labels = mask_tokens(batch, vocab_size=VOCAB, continuation=continuation,
                                 generator=torch.Generator().manual_seed(3))
    chosen = labels != IGNORE_INDEX
    for row in range(0, len(batch), 8):
        for word in words_of(batch[row], continuation):
            assert chosen[row, word].all() or not chosen[row, word].any()
    candidate = batch >= NUM_SPECIAL
    assert not chosen[~candidate].any() and torch.equal(labels[chosen], batch[chosen])
    # Words average ~1.7 tokens; coverage is 15% in expectation.
    assert abs(chosen.sum() / candidate.sum() - 0.15) < 0.01
    assert abs((masked[chosen] == MASK_ID).float().mean() - 0.8) < 0.02  # 80/10/10 is per token


def test_continuation_table():
    tok = train_tokenizer(["the walking talkers walked and talked unwalkable"] * 5, vocab_size=60, min_frequency=1)
    table = continuation_table(tok)
    vocab = tok.get_vocab()
    assert table.shape == (tok.get_vocab_size(),) and table.any()
    assert all(table[i] == t.startswith("##") for t, i in vocab.items())


def documents(seed: int = 0) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(NUM_SPECIAL, 1000, int(rng.integers(2, 20))) for _ in range(int(rng.integers(1, 8)))]
            for _ in range(100)]


def test_collator_mlm_nsp():
    dataset = InstanceDataset(create_nsp_instances(documents(), 64, dupe_factor=1))
    examples = [dataset[i] for i in range(16)]
    out = PretrainingCollator(nsp=True, vocab_size=1000)(examples)
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "mlm_labels", "next_sentence_label"}
    lengths = [int((ex["input_ids"] != PAD_ID).sum()) for ex in examples]
    assert out["input_ids"].shape == (16, max(lengths))  # trimmed to the longest example
    assert out["attention_mask"].sum(1).tolist() == lengths
    assert all(t.dtype == torch.long for t in out.values())
    original = torch.from_numpy(np.stack([ex["input_ids"][: max(lengths)] for ex in examples]).astype(np.int64))
    chosen = out["mlm_labels"] != IGNORE_INDEX
    assert chosen.any() and torch.equal(out["mlm_labels"][chosen], original[chosen])
    assert torch.equal(out["token_type_ids"], torch.from_numpy(
        np.stack([ex["token_type_ids"][: max(lengths)] for ex in examples]).astype(np.int64)))
    assert out["next_sentence_label"].tolist() == [ex["next_sentence_label"] for ex in examples]


def test_collator_ltr_labels_are_next_tokens():
    dataset = InstanceDataset(create_packed_instances(documents(), 64))
    examples = [dataset[i] for i in (0, 1, len(dataset) - 1)]  # the last one is padded
    out = PretrainingCollator(causal=True, vocab_size=1000)(examples)
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "mlm_labels"}
    ids, labels, attention = out["input_ids"], out["mlm_labels"], out["attention_mask"]
    assert torch.equal(ids[:, 0], torch.full((3,), CLS_ID))  # unmasked
    for row in range(3):
        n = int(attention[row].sum())
        assert torch.equal(labels[row, : n - 1], ids[row, 1:n])
        assert (labels[row, n - 1 :] == IGNORE_INDEX).all()


def test_fixed_mask_is_reproducible():
    dataset = InstanceDataset(create_packed_instances(documents(), 64))
    collate = PretrainingCollator(1000, fixed_mask_seed=7)
    first = collate([dataset[i] for i in range(8)])
    again = PretrainingCollator(1000, fixed_mask_seed=7)([dataset[i] for i in range(8)])
    assert torch.equal(first["input_ids"], again["input_ids"])
    assert torch.equal(first["mlm_labels"], again["mlm_labels"])
    # Independent of batch composition and padding: example 3 alone gets the same mask.
    alone = collate([dataset[len(dataset) - 1], dataset[3]])
    assert torch.equal(alone["mlm_labels"][1], first["mlm_labels"][3])
    other_seed = PretrainingCollator(1000, fixed_mask_seed=8)([dataset[i] for i in range(8)])
    assert not torch.equal(other_seed["mlm_labels"], first["mlm_labels"])
    dynamic = PretrainingCollator(1000)
    assert not torch.equal(dynamic([dataset[0]])["mlm_labels"], dynamic([dataset[0]])["mlm_labels"])


@pytest.mark.parametrize("p", [0.15, 0.4, 0.5, 0.9])
def test_max_labels_bounds_every_rows_labels_by_at_most_one_more(p):
    """Rows of every length up to 128 whose tokens are all candidates (the most a row can hold): none has more labels
    than `max_labels`, the full row at most one fewer; LTR labels every next token, whole words up to the row."""
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(NUM_SPECIAL, VOCAB, (128, 128), generator=g)
    ids[torch.arange(128) > torch.arange(128)[:, None]] = PAD_ID  # row i: i + 1 tokens
    bound = max_labels(128, p, whole_word_masking=False, causal=False)
    for seed in range(3):
        _, labels = mask_tokens(ids, vocab_size=VOCAB, mlm_probability=p, generator=g.manual_seed(seed))
        counts = (labels != IGNORE_INDEX).sum(1)
        assert int(counts.max()) <= bound <= int(counts[-1]) + 1
    assert max_labels(128, p, whole_word_masking=True, causal=False) == 128
    ltr = PretrainingCollator(VOCAB, causal=True)([{"input_ids": row.numpy(), "token_type_ids": np.zeros(128, np.int64)}
                                              for row in ids])
    assert int((ltr["mlm_labels"] != IGNORE_INDEX).sum(1).max()) == max_labels(128, p, False, causal=True) == 127
