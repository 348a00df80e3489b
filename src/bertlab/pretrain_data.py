"""Stage `pretrain_data`: the corpus as pretraining instances, built once and shared by every variant.

Writes `data/pretrain_data/{train,heldout}_{nsp,packed}/` (memory-mappable arrays: NSP sentence pairs for
BERT, contiguous packed text for No-NSP and LTR), with `pretrain_data.short_seq_length` also
`train_{nsp,packed}_short/` (the same text as instances of that length, for pretraining's first phase), `unigram_counts.npy` (each token id's count in the training
text, for the unigram floor) and `stats.json` (sizes, NotNext and shortened-target ratios, and the held-out
unigram perplexity on the positions pretraining scores: `nsp` and `packed` on the fixed held-out masks at the
default masking rate, `packed_next_token` on LTR's next-token positions; each run's own floor, on its own
positions, is in its `heldout_items.json`).

The held-out documents are the sample's first `corpus.heldout_documents` (the tokenizer never sees them either);
each format draws its `heldout_instances` uniformly from all of them, or the stage refuses in one line.
With `pretrain_data.reference` the instances are google's, static masks included (`bertlab.data.reference`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from omegaconf import DictConfig
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from bertlab import stage
from bertlab.data import unigram
from bertlab.errors import UserError
from bertlab.files import atomic_dir, read_tokenizer, require, write_json
from bertlab.data.corpus import (
    TextColumn, heldout_split, no_sentence_pairs, require_sentence_pairs, sample_documents, tokenize_documents,
)
from bertlab.data.instances import (
    NOT_NEXT, Documents, InstanceDataset, Instances, create_nsp_instances, create_packed_instances, save_instances,
)
from bertlab.data.masking import PretrainingCollator, continuation_table
from bertlab.data.reference import create_reference_nsp_instances, create_reference_packed_instances
from bertlab.data.shards import map_shards, merge, save_shard, shard_texts
from bertlab.task_text import added_documents

log = logging.getLogger(__name__)


def heldout_sample(instances: Instances, n: int, seed: int, what: str) -> Instances:
    """`n` of `instances`, drawn uniformly (seeded) so they spread over every held-out document, in their order;
    a UserError when there are fewer."""
    if len(instances) < n:
        raise UserError(f"pretrain_data.heldout_instances={n}: the held-out documents make only "
                        f"{len(instances)} {what} instances; raise corpus.heldout_documents or lower it")
    keep = np.sort(np.random.default_rng(seed).choice(len(instances), n, replace=False))
    return Instances(**{f.name: None if (v := getattr(instances, f.name)) is None else v[keep]
                        for f in dataclasses.fields(Instances)})


def builders(p: DictConfig, tokenizer: Tokenizer) -> tuple[Callable[..., Instances], Callable[..., Instances]]:
    """The NSP and packed instance builders, called as (documents, max_seq_length, dupe_factor=, seed=): the
    default ones or (`p.reference`) google's."""
    if p.reference:
        masking = dict(masked_lm_prob=p.masked_lm_prob, max_predictions_per_seq=p.max_predictions_per_seq,
                       vocab_size=tokenizer.get_vocab_size(),
                       continuation=continuation_table(tokenizer) if p.whole_word_mask else None)
        return (partial(create_reference_nsp_instances, short_seq_prob=p.short_seq_prob, **masking),
                partial(create_reference_packed_instances, **masking))
    return (partial(create_nsp_instances, short_seq_prob=p.short_seq_prob),
            lambda docs, length, dupe_factor, seed: create_packed_instances(docs, length))


def heldout_sets(docs: Documents, p: DictConfig, tokenizer: Tokenizer) -> dict[str, Instances]:
    """`heldout_instances` of each format, drawn from the same held-out documents."""
    nsp, packed = builders(p, tokenizer)
    n, length = p.heldout_instances, p.max_seq_length
    return {"heldout_nsp": heldout_sample(nsp(docs, length, dupe_factor=1, seed=p.seed), n, p.seed, "NSP"),
            "heldout_packed": heldout_sample(packed(docs, length, dupe_factor=1, seed=p.seed), n, p.seed, "packed")}


def train_shard(index: int, texts: list[str], *, p: DictConfig, tokenizer_file: str, out: Path) -> dict[str, Any]:
    """Shard `index` of the training text as instances of both formats under `out/<index>/` (seed + index); its
    documents, tokens and unigram counts."""
    tokenizer = Tokenizer.from_file(tokenizer_file)
    docs = tokenize_documents(texts, tokenizer)
    nsp, packed = builders(p, tokenizer)
    seed, sets = p.seed + index, {}
    for suffix, length in training_lengths(p).items():
        sets[f"train_nsp{suffix}"] = nsp(docs, length, dupe_factor=p.dupe_factor, seed=seed)
        sets[f"train_packed{suffix}"] = packed(docs, length, dupe_factor=p.dupe_factor, seed=seed)
    return {"documents": len(docs), "characters": sum(map(len, texts)), "instances": save_shard(sets, out / f"{index:05d}"),
            "multi_sentence": any(len(d) >= 2 for d in docs),
            "tokens": int(sum(s.size for doc in docs for s in doc)),
            "counts": unigram.token_counts(sets["train_packed"], tokenizer.get_vocab_size())}


def training_lengths(p: DictConfig) -> dict[str, int]:
    """The training sets' name suffix -> instance length: `max_seq_length`, and `short_seq_length` if set."""
    return {"": p.max_seq_length} | ({"_short": p.short_seq_length} if p.short_seq_length else {})


def unigram_perplexity(heldout: Instances, causal: bool, logp: np.ndarray, mask_seed: int) -> float:
    """The unigram perplexity of `heldout` on the positions an objective scores there (next tokens where `causal`,
    else masked ones), with the held-out masks pretraining draws (`fixed_mask_seed`)."""
    collate = PretrainingCollator(len(logp), causal=causal, fixed_mask_seed=mask_seed)
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


@stage.main(reads=("impl.data_processes",))
def run(cfg: DictConfig) -> None:
    data_dir = Path(cfg.data_dir)
    tokenizer_file = require(data_dir / "tokenizer" / "tokenizer.json", "tokenizer")
    tokenizer = read_tokenizer(tokenizer_file)
    corpus = datasets.load_from_disk(str(require(data_dir / "download" / "corpus", "download")))
    c, p = cfg.corpus, cfg.pretrain_data
    texts = TextColumn(corpus)
    heldout_texts, training = heldout_split(sample_documents(texts, c.max_chars, c.seed), c.heldout_documents)
    heldout_docs = tokenize_documents(heldout_texts, tokenizer)
    require_sentence_pairs(heldout_docs, f"the {c.heldout_documents} held-out documents (corpus.heldout_documents)")
    added = added_documents(c, cfg.download.tasks, data_dir / "download" / "tasks")
    with atomic_dir(data_dir / "pretrain_data") as tmp:
        build = partial(train_shard, p=p, tokenizer_file=str(tokenizer_file), out=tmp / "shards")
        shards = []
        for shard in map_shards(build, shard_texts(itertools.chain(training, added), p.shard_chars),
                                cfg.impl.data_processes):
            shards.append(shard)
            log.info("shard %d: %d documents, %.1f M characters -> %s", len(shards) - 1, shard["documents"],
                     shard["characters"] / 1e6, shard["instances"])
        if not any(shard["multi_sentence"] for shard in shards):
            raise UserError(no_sentence_pairs("the training documents", sum(s["documents"] for s in shards)))
        sets = {name: merge(sorted((tmp / "shards").glob(f"*/{name}")), tmp / name)
                for suffix in training_lengths(p) for name in (f"train_nsp{suffix}", f"train_packed{suffix}")}
        sets |= heldout_sets(heldout_docs, p, tokenizer)
        counts = np.sum([shard["counts"] for shard in shards], axis=0)
        finish(sets, counts, shards, heldout_docs, added, p, tmp)
        warn_if_repeated(cfg, len(sets["train_nsp"]))
        shutil.rmtree(tmp / "shards")


def finish(sets: dict[str, Instances], counts: np.ndarray, shards: list[dict[str, Any]], heldout_docs: Documents,
           added: list[str], p: DictConfig, out: Path) -> None:
    """Write the held-out sets, the unigram counts and `stats.json` beside the merged training sets."""
    logp = unigram.log_probs(counts)
    stats = {
        "documents": {"train": sum(shard["documents"] for shard in shards), "heldout": len(heldout_docs),
                      "from_task_text": len(added)},
        "shards": len(shards),
        "train_tokens": sum(shard["tokens"] for shard in shards),
        "instances": {name: len(inst) for name, inst in sets.items()},
        "nsp": nsp_stats(sets["train_nsp"]),
        "heldout_unigram_ppl": {
            key: unigram_perplexity(sets[f"heldout_{fmt}"], causal, logp, p.seed)
            for key, fmt, causal in (("nsp", "nsp", False), ("packed", "packed", False),
                                     ("packed_next_token", "packed", True))
        },
    }
    for name in ("heldout_nsp", "heldout_packed"):
        save_instances(sets[name], out / name)
    np.save(out / "unigram_counts.npy", counts)
    write_json(out / "stats.json", stats)
    log.info("instances: %s; NSP: %s; held-out unigram perplexity: %s",
             stats["instances"], stats["nsp"], stats["heldout_unigram_ppl"])


def warn_if_repeated(cfg: DictConfig, instances: int, limit: float = 4.0) -> None:
    """One warning line when the profile's longest pretraining run reads its NSP instances more than `limit` times
    (Muennighoff et al. 2023: beyond ~4 passes repeated text is worth less than fresh)."""
    steps = max(cfg.pretrain.max_steps, cfg.pretrain.size_study_steps)
    passes = steps * cfg.pretrain.batch_size / instances
    if passes > limit:
        log.warning("pretrain.max_steps=%d x batch %d reads the %d training instances %.0f times (more than %g): "
                    "the corpus is small for this profile", steps, cfg.pretrain.batch_size, instances, passes, limit)


if __name__ == "__main__":
    run()
