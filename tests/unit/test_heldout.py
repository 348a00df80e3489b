"""The held-out set: the same documents for both instance formats, its size reached or refused, and never seen by
the tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from bertlab.data.corpus import heldout_split, sample_documents
from bertlab.errors import UserError
from bertlab.pretrain_data import heldout_sets
from bertlab.tokenizer import training_texts


def options(**overrides) -> OmegaConf:
    return OmegaConf.create(dict(max_seq_length=32, short_seq_prob=0.1, dupe_factor=1, seed=1, heldout_instances=100,
                                 reference=False) | overrides)


def docs(n: int, first_id: int) -> list[list[np.ndarray]]:
    """n documents of 20 sentences of 10 tokens; document d's ids are first_id + d (traceable)."""
    return [[np.full(10, first_id + d, dtype=np.uint16) for _ in range(20)] for d in range(n)]


@pytest.mark.parametrize("reference", [False, True])
def test_both_formats_are_drawn_from_every_heldout_document(reference: bool) -> None:
    p = options(reference=reference, masked_lm_prob=0.15, max_predictions_per_seq=5, whole_word_mask=False)
    tokenizer = type("Tok", (), {"get_vocab_size": lambda self: 400})()
    sets = heldout_sets(docs(20, 100), p, tokenizer)
    for fmt in ("nsp", "packed"):
        held = np.asarray(sets[f"heldout_{fmt}"].input_ids)
        assert len(held) == 100
        ids = set(np.unique(held).tolist()) - set(range(5))
        assert ids == set(range(100, 120)), fmt  # all 20 held-out documents (the first 100 rows: 15)


def test_a_heldout_set_smaller_than_asked_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match=r"pretrain_data.heldout_instances=500: the held-out documents make only "
                                        r"\d+ NSP instances; raise corpus.heldout_documents"):
        heldout_sets(docs(20, 100), options(heldout_instances=500), None)


def test_the_tokenizer_never_sees_a_heldout_document(tmp_path: Path) -> None:
    texts = [f"document {i} " * (i + 1) for i in range(50)]
    cfg = OmegaConf.create({"data_dir": str(tmp_path), "tokenizer": {"max_chars": None},
                            "corpus": {"seed": 3, "heldout_documents": 7, "task_text": []}, "download": {"tasks": {}}})
    heldout, training = heldout_split(sample_documents(texts, 10**9, 3), 7)  # as pretrain_data splits (its budget)
    seen = list(training_texts(cfg, texts))
    assert len(heldout) == 7 and not set(heldout) & set(seen) and set(heldout) | set(seen) == set(texts)
