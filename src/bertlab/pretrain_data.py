"""Stage `pretrain_data`: the corpus as pretraining instances, built once and shared by every variant.

Writes `data/pretrain_data/{train,heldout}_{nsp,packed}/` (memory-mappable arrays: NSP sentence pairs for
BERT, contiguous packed text for No-NSP and LTR), `unigram_counts.npy` (each token id's count in the training
text, for the unigram floor) and `stats.json` (sizes, NotNext and shortened-target ratios, and the held-out
unigram perplexity on the positions pretraining scores: `nsp` and `packed` on the fixed held-out masks at the
default masking rate, `packed_next_token` on LTR's next-token positions; each run's own floor, on its own
positions, is in its `heldout_items.json`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import datasets
import numpy as np
from omegaconf import DictConfig
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from bertlab import stage
from bertlab.data import unigram
from bertlab.data.corpus import require_sentence_pairs, sample_documents, tokenize_documents
from bertlab.data.instances import (
    NOT_NEXT, InstanceDataset, Instances, create_nsp_instances, create_packed_instances, save_instances,
)
from bertlab.data.masking import PretrainingCollator
from bertlab.data.task_text import added_documents

log = logging.getLogger(__name__)


def head(instances: Instances, n: int) -> Instances:
    """The first `n` instances (they are shuffled already)."""
    return Instances(**{f.name: getattr(instances, f.name)[:n] for f in dataclasses.fields(Instances)})


def unigram_perplexity(heldout: Instances, objective: str, logp: np.ndarray, mask_seed: int) -> float:
    """The unigram perplexity of `heldout` on the positions `objective` scores there, with the held-out masks
    pretraining draws (`fixed_mask_seed`)."""
    collate = PretrainingCollator(objective, len(logp), fixed_mask_seed=mask_seed)
    batches = DataLoader(InstanceDataset(heldout), batch_size=256, collate_fn=collate)
    return unigram.perplexity(*unigram.item_losses(batches, logp))


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
    added = added_documents(c, cfg.download.tasks, data_dir / "download" / "tasks")
    train_docs = tokenize_documents(texts[c.heldout_documents :] + added, tokenizer)
    require_sentence_pairs(train_docs, "the training documents")
    require_sentence_pairs(heldout_docs, f"the {c.heldout_documents} held-out documents (corpus.heldout_documents)")
    vocab = tokenizer.get_vocab_size()

    sets = {
        "train_nsp": create_nsp_instances(train_docs, p.max_seq_length, short_seq_prob=p.short_seq_prob,
                                          dupe_factor=p.dupe_factor, seed=p.seed),
        "train_packed": create_packed_instances(train_docs, p.max_seq_length),
        "heldout_nsp": head(create_nsp_instances(heldout_docs, p.max_seq_length, short_seq_prob=p.short_seq_prob,
                                                 dupe_factor=1, seed=p.seed), p.heldout_instances),
        "heldout_packed": head(create_packed_instances(heldout_docs, p.max_seq_length), p.heldout_instances),
    }
    counts = unigram.token_counts(sets["train_packed"], vocab)
    logp = unigram.log_probs(counts)
    stats = {
        "documents": {"train": len(train_docs), "heldout": len(heldout_docs), "from_task_text": len(added)},
        "train_tokens": int(sum(s.size for doc in train_docs for s in doc)),
        "instances": {name: len(inst) for name, inst in sets.items()},
        "nsp": nsp_stats(sets["train_nsp"]),
        "heldout_unigram_ppl": {
            key: unigram_perplexity(sets[f"heldout_{fmt}"], objective, logp, p.seed)
            for key, fmt, objective in (("nsp", "nsp", "mlm_nsp"), ("packed", "packed", "mlm"),
                                        ("packed_next_token", "packed", "ltr"))
        },
    }
    with stage.atomic_dir(data_dir / "pretrain_data") as tmp:
        for name, inst in sets.items():
            save_instances(inst, tmp / name)
        np.save(tmp / "unigram_counts.npy", counts)
        stage.write_json(tmp / "stats.json", stats)
    log.info("instances: %s; NSP: %s; held-out unigram perplexity: %s",
             stats["instances"], stats["nsp"], stats["heldout_unigram_ppl"])


if __name__ == "__main__":
    run()
