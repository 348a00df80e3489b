"""Stage `tokenizer`: train a WordPiece (BERT's) or BPE subword vocabulary on the pretraining corpus."""

from __future__ import annotations

import itertools
import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import datasets
from omegaconf import DictConfig
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertlab import stage
from bertlab.data.corpus import TextColumn, heldout_split, sample_documents
from bertlab.task_text import added_documents
from bertlab.data.vocab import CLS_ID, CONTINUATION_PREFIX, SEP_ID, SPECIAL_TOKENS
from bertlab.errors import UserError
from bertlab.files import atomic_dir, require

log = logging.getLogger(__name__)


def new_tokenizer(kind: str, lowercase: bool) -> tuple[Tokenizer, trainers.Trainer]:
    """An untrained BERT-style tokenizer of `kind` ('wordpiece' or 'bpe') and its trainer (vocab size set later).

    Both kinds share BERT's normalizer and pre-tokenizer and mark word-continuation pieces with `##`,
    so whole-word masking and offsets work the same way for either.
    """
    if kind == "wordpiece":
        model = models.WordPiece(unk_token="[UNK]", continuing_subword_prefix=CONTINUATION_PREFIX)
        trainer_cls = trainers.WordPieceTrainer
    elif kind == "bpe":
        model = models.BPE(unk_token="[UNK]", continuing_subword_prefix=CONTINUATION_PREFIX)
        trainer_cls = trainers.BpeTrainer
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected 'wordpiece' or 'bpe'")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    trainer = trainer_cls(
        special_tokens=SPECIAL_TOKENS, continuing_subword_prefix=CONTINUATION_PREFIX,
        show_progress=sys.stderr.isatty(),  # in a terminal; in a log, blank lines
    )
    return tok, trainer


def train_tokenizer(
    texts: Iterable[str] | Callable[[], Iterable[str]], kind: str = "wordpiece", vocab_size: int = 30522,
    lowercase: bool = True, min_frequency: int = 2, length: int | None = None,
) -> Tokenizer:
    """Train a tokenizer of `kind` on `texts` (or on what a function returns each time it is called: the text is
    read twice); special tokens get ids 0..4 (`[PAD] [UNK] [CLS] [SEP] [MASK]`). The same text gives the same
    tokenizer in every process (`seeded_pieces`)."""
    read = texts if callable(texts) else (lambda kept=list(texts): kept)
    first, trainer = new_tokenizer(kind, lowercase)
    trainer.vocab_size = 1  # no merges: the alphabet and the continuation pieces only
    first.train_from_iterator(_batches(read()), trainer=trainer, length=length)
    tok, trainer = new_tokenizer(kind, lowercase)
    trainer.special_tokens = [*SPECIAL_TOKENS, *seeded_pieces(first)]
    trainer.vocab_size = vocab_size
    trainer.min_frequency = min_frequency
    tok.train_from_iterator(_batches(read()), trainer=trainer, length=length)
    tok = renumbered(tok)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    return tok


def seeded_pieces(first_pass: Tokenizer) -> list[str]:
    """The alphabet, then the continuation pieces (`##e`), each in code-point order: the vocabulary of a training
    pass that made no merges, which the real pass is given first, so that it numbers them this way.

    `tokenizers`' BPE trainer (WordPiece trains with it) numbers the alphabet in code-point order but the continuation
    pieces in the iteration order of a hash map seeded afresh in every process, and those numbers break ties between
    equally frequent merges (`Merge::cmp`): on a corpus where such ties decide, the same text learned different
    pieces (`##oy` vs `##yed`) from one run to the next (huggingface/tokenizers issue 1794, fix proposed in PR 2066;
    every release to 0.23.3). Given them as special tokens, the trainer finds them numbered and numbers no more, so
    each tie is broken the same way, one of the ways an unpatched run could break it; `renumbered` drops them from the
    added tokens again. Nothing else changes: the same tokens enter the vocabulary, in the same number.
    """
    learned = [t for t in first_pass.get_vocab() if t not in SPECIAL_TOKENS]  # str order is code-point order
    return [*sorted(t for t in learned if not t.startswith(CONTINUATION_PREFIX)),
            *sorted(t for t in learned if t.startswith(CONTINUATION_PREFIX))]


def renumbered(tok: Tokenizer) -> Tokenizer:
    """`tok` with its learned tokens numbered in sorted order after the special tokens.

    HF's trainers number the alphabet in hash-map order, so two runs on the same text learn the same tokens under
    different ids (and so different run keys and weights). Ids carry no meaning for WordPiece's longest match or
    BPE's ranked merges, so sorting changes no tokenization.
    """
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in SPECIAL_TOKENS]  # seeded_pieces'
    learned = sorted(t for t in spec["model"]["vocab"] if t not in SPECIAL_TOKENS)
    spec["model"]["vocab"] = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *learned])}
    return Tokenizer.from_str(json.dumps(spec))


def _batches(texts: Iterable[str], size: int = 256) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def training_texts(cfg: DictConfig, texts: Sequence[str]) -> Iterator[str]:
    """The tokenizer's training text: the corpus sample without its held-out documents (they stay unseen, as
    `pretrain_data` holds out the same first `corpus.heldout_documents`), then any tasks' text."""
    _, training = heldout_split(sample_documents(texts, cfg.tokenizer.max_chars, cfg.corpus.seed),
                                cfg.corpus.heldout_documents)
    added = added_documents(cfg.corpus, cfg.download.tasks, Path(cfg.data_dir) / "download" / "tasks")
    return itertools.chain(training, added)


@stage.main()
def run(cfg: DictConfig) -> None:
    t = cfg.tokenizer
    corpus = datasets.load_from_disk(str(require(Path(cfg.data_dir) / "download" / "corpus", "download")))
    tok = train_tokenizer(lambda: training_texts(cfg, TextColumn(corpus)), kind=t.kind, vocab_size=t.vocab_size,
                          lowercase=t.lowercase, min_frequency=t.min_frequency)
    if tok.get_vocab_size() > t.vocab_size:  # the trainer keeps every character it saw, whatever the size asked
        raise UserError(f"tokenizer.vocab_size={t.vocab_size} is below the {tok.get_vocab_size()} tokens that "
                        "the corpus's characters and the special tokens need alone: raise it")
    out = Path(cfg.data_dir) / "tokenizer"
    with atomic_dir(out) as tmp:
        tok.save(str(tmp / "tokenizer.json"))
    log.info("%s vocabulary of %d tokens -> %s", t.kind, tok.get_vocab_size(), out / "tokenizer.json")


if __name__ == "__main__":
    run()
