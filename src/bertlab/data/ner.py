"""CoNLL-2003 tagging: word-level tags onto sub-tokens and back (BERT labels each word's first sub-token)."""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from bertlab.data.encoding import configured
from bertlab.data.vocab import IGNORE_INDEX


def encode_words(
    tokenizer: Tokenizer, words: Sequence[Sequence[str]], tags: Sequence[Sequence[int]] | None, max_length: int
) -> dict[str, list[list]]:
    """`[CLS] sub-tokens [SEP]` of pre-split sentences, at most `max_length` tokens.

    Returns `input_ids`, `token_type_ids`, `word_ids` (per token, the index of its word, None for
    specials) and, with `tags`, `label_ids`: the word's tag on its first sub-token, -100 elsewhere.
    """
    with configured(tokenizer, max_length) as tok:
        encodings = tok.encode_batch([list(w) for w in words], is_pretokenized=True)
    out: dict[str, list[list]] = {
        "input_ids": [e.ids for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
        "word_ids": [e.word_ids for e in encodings],
    }
    if tags is not None:
        out["label_ids"] = [
            [sentence_tags[w] if first else IGNORE_INDEX for w, first in zip(word_ids, _first_subtokens(word_ids))]
            for word_ids, sentence_tags in zip(out["word_ids"], tags, strict=True)
        ]
    return out


def word_predictions(
    token_pred_ids: Sequence[int], word_ids: Sequence[int | None], num_words: int, outside_id: int = 0
) -> list[int]:
    """One tag per word of a sentence: the prediction at the word's first sub-token.

    Words without a sub-token (cut off by `max_length`, or empty after normalisation) get `outside_id`
    (`O`): entities in them count as missed. `token_pred_ids` may run on past `word_ids` (padding).
    """
    tags = [outside_id] * num_words
    for pred, w, first in zip(token_pred_ids, word_ids, _first_subtokens(word_ids)):
        if first:
            tags[w] = int(pred)
    return tags


def _first_subtokens(word_ids: Sequence[int | None]) -> list[bool]:
    """Whether each token starts a word (specials never do)."""
    return [w is not None and (t == 0 or word_ids[t - 1] != w) for t, w in enumerate(word_ids)]
