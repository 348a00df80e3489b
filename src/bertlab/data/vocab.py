"""The vocabulary's fixed part, which every tokenizer shares: BERT's special tokens at ids 0-4, the prefix of
word-continuation pieces, and the label of positions that carry no loss."""

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, in this order
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
CONTINUATION_PREFIX = "##"
IGNORE_INDEX = -100  # label of positions that carry no loss (padding, special tokens, non-first sub-tokens, unmasked)
