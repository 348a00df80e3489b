"""Stage `pretrain_data`: the corpus as pretraining instances, built once and shared by every variant.

Writes `data/pretrain_data/{train,heldout}_{nsp,packed}/` (memory-mappable arrays: NSP sentence pairs for
BERT, contiguous packed text for No-NSP and LTR) and `stats.json` (sizes, NotNext and shortened-target
ratios, and the held-out unigram perplexity of the same tokenizer: the baseline pretraining must beat).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import datasets
import numpy as np
from omegaconf import DictConfig
from tokenizers import Tokenizer

from bertlab import stage
from bertlab.data.corpus import sample_documents, tokenize_documents
from bertlab.data.instances import (
    NOT_NEXT, Instances, create_nsp_instances, create_packed_instances, save_instances,
)
from bertlab.tokenizer import SPECIAL_TOKENS

log = logging.getLogger(__name__)


def head(instances: Instances, n: int) -> Instances:
    """The first `n` instances (they are shuffled already)."""
    return Instances(**{f.name: getattr(instances, f.name)[:n] for f in dataclasses.fields(Instances)})


def unigram_perplexity(train: list[list[np.ndarray]], heldout: Instances, vocab_size: int) -> float:
    """Perplexity of the held-out instances' non-special tokens under add-one-smoothed train unigram counts."""
    counts = np.bincount(np.concatenate([s for doc in train for s in doc]).astype(np.int64), minlength=vocab_size)
    logp = np.log((counts + 1) / (counts.sum() + vocab_size))
    tokens = np.asarray(heldout.input_ids).astype(np.int64).ravel()
    tokens = tokens[tokens >= len(SPECIAL_TOKENS)]
    return float(math.exp(-logp[tokens].mean()))


def nsp_stats(inst: Instances) -> dict[str, float]:
    """NotNext ratio (overall and among chunks of two or more sentences) and the share of instances from
    shortened-target passes (a pass draws its target once per document, so more than `short_seq_prob`)."""
    not_next = np.asarray(inst.next_sentence_label) == NOT_NEXT
    multi = np.asarray(inst.chunk_sentences) >= 2
    return {
        "not_next_ratio": float(not_next.mean()),
        "not_next_ratio_multi_sentence_chunks": float(not_next[multi].mean()),
        "shortened_target_instances": float(np.asarray(inst.short_target).mean()),
    }


@stage.main
def run(cfg: DictConfig) -> None:
    data_dir = Path(cfg.data_dir)
    tokenizer = Tokenizer.from_file(str(stage.require(data_dir / "tokenizer" / "tokenizer.json", "tokenizer")))
    corpus = datasets.load_from_disk(str(stage.require(data_dir / "download" / "corpus", "download")))
    c, p = cfg.corpus, cfg.pretrain_data
    texts = list(sample_documents(corpus["text"], c.max_chars, c.seed))
    if len(texts) <= c.heldout_documents:
        raise stage.UserError(f"the corpus sample has {len(texts)} documents; "
                              f"need more than heldout_documents={c.heldout_documents}")
    log.info("tokenizing %d documents (%.1f M characters)", len(texts), sum(map(len, texts)) / 1e6)
    heldout_docs = tokenize_documents(texts[: c.heldout_documents], tokenizer)
    train_docs = tokenize_documents(texts[c.heldout_documents :], tokenizer)
    vocab = tokenizer.get_vocab_size()

    sets = {
        "train_nsp": create_nsp_instances(train_docs, p.max_seq_length, short_seq_prob=p.short_seq_prob,
                                          dupe_factor=p.dupe_factor, seed=p.seed),
        "train_packed": create_packed_instances(train_docs, p.max_seq_length),
        "heldout_nsp": head(create_nsp_instances(heldout_docs, p.max_seq_length, short_seq_prob=p.short_seq_prob,
                                                 dupe_factor=1, seed=p.seed), p.heldout_instances),
        "heldout_packed": head(create_packed_instances(heldout_docs, p.max_seq_length), p.heldout_instances),
    }
    stats = {
        "documents": {"train": len(train_docs), "heldout": len(heldout_docs)},
        "train_tokens": int(sum(s.size for doc in train_docs for s in doc)),
        "instances": {name: len(inst) for name, inst in sets.items()},
        "nsp": nsp_stats(sets["train_nsp"]),
        "heldout_unigram_ppl": {
            f: unigram_perplexity(train_docs, sets[f"heldout_{f}"], vocab) for f in ("nsp", "packed")
        },
    }
    with stage.atomic_dir(data_dir / "pretrain_data") as tmp:
        for name, inst in sets.items():
            save_instances(inst, tmp / name)
        stage.write_json(tmp / "stats.json", stats)
    log.info("instances: %s; NSP: %s; held-out unigram perplexity: %s",
             stats["instances"], stats["nsp"], stats["heldout_unigram_ppl"])


if __name__ == "__main__":
    run()
