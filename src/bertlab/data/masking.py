"""Dynamic masked-LM masking per batch, and the collate function feeding every pretraining objective."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from tokenizers import Tokenizer

from bertlab.data.vocab import CONTINUATION_PREFIX, IGNORE_INDEX, MASK_ID, PAD_ID, SPECIAL_TOKENS

NUM_SPECIAL = len(SPECIAL_TOKENS)


def continuation_table(tokenizer: Tokenizer) -> torch.Tensor:
    """A vocabulary-sized bool table, True for word-continuation (`##`) pieces."""
    table = torch.zeros(tokenizer.get_vocab_size(), dtype=torch.bool)
    for token, index in tokenizer.get_vocab().items():
        table[index] = token.startswith(CONTINUATION_PREFIX)
    return table


def mask_tokens(
    input_ids: torch.Tensor, *, vocab_size: int, mask_id: int = MASK_ID, num_special: int = NUM_SPECIAL,
    mlm_probability: float = 0.15, mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1,
    continuation: torch.Tensor | None = None, generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption of a [B, L] batch; returns (masked input ids, labels).

    In each row, round(mlm_probability * n) of its n non-special tokens (ids >= `num_special`; at least one
    if n > 0) are chosen; with `continuation`, whole words are chosen instead (a word is a non-continuation
    token and the `##` pieces after it), covering that many tokens on average. Each chosen token becomes
    `mask_id` (`mask_replace_prob`, BERT's 80%), a uniformly random non-special token (`random_replace_prob`, 10%)
    or stays (the rest, 10%). Labels hold the original id at chosen positions and -100 elsewhere.
    """
    candidate = input_ids >= num_special
    starts = candidate.clone()
    if continuation is not None:
        # A `##` piece continues the word of the token before it, unless that token is special.
        starts[:, 1:] &= ~(continuation[input_ids[:, 1:]] & candidate[:, :-1])
    batch, length = input_ids.shape
    device = input_ids.device
    # Word w of a row occupies slot w; non-candidates go to the extra slot `length`.
    word = torch.where(candidate, starts.cumsum(1) - 1, length)
    word_len = torch.zeros(batch, length + 1, dtype=torch.long, device=device)
    word_len = word_len.scatter_add_(1, word, torch.ones_like(word))[:, :length]
    budget = (candidate.sum(1) * mlm_probability).round().long()
    budget = torch.where(candidate.any(1), budget.clamp(min=1), 0)
    # Take whole words in random order up to the budget; the word straddling it is taken with probability
    # equal to its share inside the budget. Exactly `budget` tokens without whole-word masking, `budget`
    # in expectation with it.
    score = torch.rand(batch, length, generator=generator, device=device).masked_fill_(word_len == 0, 2.0)
    order = score.argsort(1)
    sorted_len = word_len.gather(1, order)
    before = sorted_len.cumsum(1) - sorted_len
    share = torch.rand(batch, length, generator=generator, device=device)
    take = (before + share * sorted_len < budget[:, None]) & (sorted_len > 0)
    chosen_word = torch.zeros(batch, length + 1, dtype=torch.bool, device=device)
    chosen_word[:, :length].scatter_(1, order, take)
    chosen = chosen_word.gather(1, word)

    labels = torch.where(chosen, input_ids, IGNORE_INDEX)
    action = torch.rand(batch, length, generator=generator, device=device)
    masked = torch.where(chosen & (action < mask_replace_prob), mask_id, input_ids)
    replace = chosen & (action >= mask_replace_prob) & (action < mask_replace_prob + random_replace_prob)
    random_ids = torch.randint(num_special, vocab_size, (batch, length), generator=generator, device=device)
    masked = torch.where(replace, random_ids, masked)
    return masked, labels


def max_labels(length: int, mlm_probability: float, whole_word_masking: bool, causal: bool) -> int:
    """At least as many positions as a training row of `length` tokens has labelled: a left-to-right LM's next
    tokens (`length` - 1); `mask_tokens`'s budget of round(p n) for n <= `length` candidates (and google's
    min(max_predictions_per_seq, max(1, round(p n))), however either rounds), floor(p `length`) + 1; whole words
    can overshoot the budget by a word: `length`."""
    if causal:
        return length - 1
    return length if whole_word_masking else min(length, math.floor(mlm_probability * length) + 1)


class PretrainingCollator:
    """Collate `InstanceDataset` examples into a batch for an objective: masked LM, with next-sentence labels where
    `nsp`, or, where `causal`, a left-to-right LM (the objective's config says which: `objective.causal`, `nsp`).

    Trims padding to the longest example and returns long tensors `input_ids`, `token_type_ids`,
    `attention_mask` and `mlm_labels` (+ `next_sentence_label` with `nsp`). For the masked objectives
    `input_ids` are masked by the static masks the examples carry (`masked_input_ids`, `mlm_mask`) if they do,
    else by `mask_tokens`: freshly per batch; or, with `fixed_mask_seed`, from a generator
    seeded by (seed, example index) on the example alone, so a held-out example gets the same mask in
    every epoch and run whatever the batching; or, with `seed`, for examples tagged with their global batch
    index ("batch", by `bertlab.data.sampler`), from a generator seeded by (seed, that index), so a resumed run
    draws the masks of an uninterrupted one. Tagged batches also return that index as `batch_index` (an int).
    Where `causal` inputs are left unmasked and `mlm_labels` are the next tokens (-100 at the last real position
    and on padding).
    Leave `generator` None when using DataLoader workers: each worker then draws from its own seeded RNG.
    """

    def __init__(
        self, vocab_size: int, *, causal: bool = False, nsp: bool = False, mlm_probability: float = 0.15,
        continuation: torch.Tensor | None = None, pad_id: int = PAD_ID, mask_id: int = MASK_ID,
        mask_replace_prob: float = 0.8, random_replace_prob: float = 0.1, num_special: int = NUM_SPECIAL,
        fixed_mask_seed: int | None = None, seed: int | None = None, generator: torch.Generator | None = None,
        mask_every_target: bool = False,
    ):
        if causal and nsp:
            raise ValueError("a left-to-right LM has no next-sentence labels: `causal` excludes `nsp`")
        self.causal, self.nsp = causal, nsp
        self.pad_id = pad_id
        self.fixed_mask_seed = fixed_mask_seed
        self.seed = seed
        self.generator = generator
        self.mask_every_target = mask_every_target
        self.mask_options = dict(
            vocab_size=vocab_size, mask_id=mask_id, num_special=num_special, mlm_probability=mlm_probability,
            mask_replace_prob=mask_replace_prob, random_replace_prob=random_replace_prob, continuation=continuation,
        )

    def __call__(self, examples: Sequence[dict]) -> dict[str, torch.Tensor]:
        input_ids = np.stack([ex["input_ids"] for ex in examples])
        real = input_ids != self.pad_id
        length = int(real.sum(1).max())
        input_ids = _long(input_ids[:, :length])
        attention_mask = _long(real[:, :length])
        token_type_ids = _long(np.stack([ex["token_type_ids"][:length] for ex in examples]))
        batch = {"token_type_ids": token_type_ids, "attention_mask": attention_mask}
        tag = {"batch_index": int(examples[0]["batch"])} if "batch" in examples[0] else {}
        if self.causal:
            labels = torch.full_like(input_ids, IGNORE_INDEX)
            labels[:, :-1] = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, IGNORE_INDEX)
            return {"input_ids": input_ids, **batch, "mlm_labels": labels, **tag}
        if "masked_input_ids" in examples[0]:  # static masks, made with the instances (`bertlab.data.reference`)
            masked = _long(np.stack([ex["masked_input_ids"][:length] for ex in examples]))
            labels = input_ids.masked_fill(~torch.from_numpy(np.stack([ex["mlm_mask"][:length] for ex in examples])),
                                           IGNORE_INDEX)
        elif self.fixed_mask_seed is not None:
            masked, labels = self._fixed_mask(input_ids, attention_mask, [ex["index"] for ex in examples])
        elif self.seed is not None:
            if not tag:
                raise ValueError("a seeded collator needs examples tagged with their batch index ('batch')")
            generator = torch.Generator().manual_seed(derive_seed(self.seed, tag["batch_index"]))
            masked, labels = mask_tokens(input_ids, generator=generator, **self.mask_options)
        else:
            masked, labels = mask_tokens(input_ids, generator=self.generator, **self.mask_options)
        if self.mask_every_target:
            masked = masked.masked_fill(labels != IGNORE_INDEX, self.mask_options["mask_id"])
        batch = {"input_ids": masked, **batch, "mlm_labels": labels, **tag}
        if self.nsp:
            batch["next_sentence_label"] = torch.tensor([ex["next_sentence_label"] for ex in examples])
        return batch

    def _fixed_mask(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, indices: Sequence[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        masked, labels = input_ids.clone(), torch.full_like(input_ids, IGNORE_INDEX)
        generator = torch.Generator()
        for row, (index, n) in enumerate(zip(indices, attention_mask.sum(1).tolist())):
            generator.manual_seed(derive_seed(self.fixed_mask_seed, index))
            one = slice(row, row + 1)
            masked[one, :n], labels[one, :n] = mask_tokens(input_ids[one, :n], generator=generator, **self.mask_options)
        return masked, labels


def derive_seed(*key: int) -> int:
    """A 32-bit seed derived from a tuple of integers (independent streams for different tuples)."""
    return int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0])


def _long(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array.astype(np.int64))
