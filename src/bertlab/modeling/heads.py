"""Task heads and what sits between the encoder and them: layer features, the scalar mix, the BiLSTM.

- `LinearHead`: dropout + linear, on one vector per sequence (classification logits, or 1 regression score)
  or per token (CoNLL-2003 tags).
- `SpanHead`: start and end logits per token (SQuAD).
- `BiLSTM`: a randomly initialised bidirectional LSTM over the real (unpadded) tokens; gives per-token states
  and a sentence vector (forward state at the last real token ++ backward state at the first token).
- `LayerFeatures` + `ScalarMix`: the feature-based strategies of Table 7 over the encoder's hidden states
  (`hidden_states[0]` = embedding output, `hidden_states[i]` = output of transformer layer i).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bertlab.modeling.features import feature_signature


class ScalarMix(nn.Module):
    """ELMo's scalar mix: `gamma * sum_i softmax(w)_i * h_i`, with learned `w` (initially uniform) and `gamma`."""

    def __init__(self, num_inputs: int) -> None:
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_inputs))
        self.gamma = nn.Parameter(torch.ones(()))

    def weights(self) -> Tensor:
        """The softmax-normalised mixing weights (non-negative, sum to 1)."""
        return torch.softmax(self.scalars, dim=0)

    def forward(self, layers: Sequence[Tensor]) -> Tensor:
        if len(layers) != self.scalars.numel():
            raise ValueError(f"ScalarMix over {self.scalars.numel()} inputs got {len(layers)}")
        w = self.weights()
        return self.gamma * sum(w[i] * h for i, h in enumerate(layers))


class LayerFeatures(nn.Module):
    """Token features from a frozen encoder's hidden states, by one of `FEATURES` (Table 7).

    `embeddings`: the embedding output; `last` / `second_to_last`: the last / second-to-last transformer layer;
    `sum_last_four`: a scalar mix of the last four hidden states; `concat_last_four`: them concatenated (4 x H);
    `sum_all`: a scalar mix of every transformer layer, the embedding output excluded (the paper's "all 12 layers"
    of BERT-base). "Last four" counts from the top of `hidden_states`, so an encoder with fewer than four
    transformer layers contributes its embedding output too (and fewer than 4 states if there are not 4).
    """

    def __init__(self, strategy: str, num_layers: int, hidden_size: int) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.combine, self.reads = feature_signature(strategy, num_layers)
        self.mix = ScalarMix(len(self.reads)) if self.combine == "mix" else None
        self.output_size = (len(self.reads) if self.combine == "concat" else 1) * hidden_size

    def forward(self, hidden_states: Sequence[Tensor]) -> Tensor:
        if len(hidden_states) != self.num_layers + 1:
            raise ValueError(f"expected {self.num_layers + 1} hidden states, got {len(hidden_states)}")
        states = [hidden_states[i] for i in self.reads]
        if self.mix is not None:
            return self.mix(states)
        return torch.cat(states, dim=-1) if self.combine == "concat" else states[0]


class BiLSTM(nn.Module):
    """A bidirectional LSTM over the real tokens (padding packed away, so it never reaches the backward pass)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 2, dropout: float = 0.0) -> None:
        super().__init__()
        self.lstm = nn.LSTM(
            input_size, hidden_size, num_layers=num_layers, bidirectional=True, batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.output_size = 2 * hidden_size

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Per-token states (B, S, 2h), zero at padding, and the sentence vector (B, 2h)."""
        b, s, _ = x.shape
        if attention_mask is None:
            lengths = torch.full((b,), s, dtype=torch.long)
        else:
            lengths = attention_mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        tokens, _ = pad_packed_sequence(out, batch_first=True, total_length=s)
        return tokens, torch.cat([h_n[-2], h_n[-1]], dim=-1)  # last layer: forward, backward


class LinearHead(nn.Module):
    """Dropout + linear: `num_labels` logits per sequence (B, H) or per token (B, S, H); 1 = a regression score."""

    def __init__(self, input_size: int, num_labels: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(input_size, num_labels)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.dropout(x))


class SpanHead(nn.Module):
    """Start and end logits per token, as BERT's SQuAD head: one linear layer to 2, no dropout."""

    def __init__(self, input_size: int) -> None:
        super().__init__()
        self.out = nn.Linear(input_size, 2)

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(B, S) start and end logits; padding gets a large negative logit."""
        start, end = self.out(x).unbind(-1)
        if attention_mask is not None:
            pad = attention_mask == 0
            start, end = start.masked_fill(pad, -1e4), end.masked_fill(pad, -1e4)
        return start, end


def init_head(module: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation for a new head's linear layers (N(0, std) weights, zero biases); LSTMs keep torch's."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
