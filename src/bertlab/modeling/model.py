"""BERT (Devlin et al., 2019) in one file: encoder, pretraining heads and the FLOP count used for throughput.

Post-LN Transformer exactly as BERT/Hugging Face compute it (same weights give the same outputs), attention through
`F.scaled_dot_product_attention` with a fused qkv projection, and an MLM head evaluated only at the labelled
positions (cramming's "sparse prediction"), which is what makes the pretraining step fast.

Positions: BERT's learned absolute table added to the token embeddings (`positions="absolute"`), or rotary
(`"rotary"`, RoFormer: Su et al. 2021, as Hugging Face's `RoFormerModel` computes it): no table; in every layer each
head's query and key pairs (2i, 2i+1) at position p are rotated by the angle p * 10000^(-2i/d), so q_p . k_r depends
on the offset p - r only and attending to a neighbour is one pattern for every position, not one per pair of
absolute positions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertlab.data.vocab import IGNORE_INDEX


@dataclass
class BertConfig:
    """Architecture hyper-parameters (names match `conf/model/*.yaml`)."""

    vocab_size: int
    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    positions: str = "absolute"  # BERT's learned table, or "rotary"

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}")
        if self.positions not in ("absolute", "rotary"):
            raise ValueError(f"positions {self.positions!r}: expected absolute or rotary")
        if self.positions == "rotary" and (self.hidden_size // self.num_heads) % 2:
            raise ValueError(f"rotary positions need an even head size, not {self.hidden_size // self.num_heads}")


class Dropout(nn.Dropout):
    """`nn.Dropout` with cheaper masks on a CPU: four 16-bit uniform integers per 64-bit random draw, where
    `bernoulli_` draws one number per element, serially (on 2 CPU cores: dropout's forward + backward ~2x faster, the
    step ~3%). Other devices (CUDA) use the native, fused `F.dropout`.

    On a CPU an element is dropped with probability round(p * 2^16) / 2^16, within 8e-6 of p, and the kept ones are
    scaled by the inverse of that exact keep rate, so the expected output is the input, as with `nn.Dropout`.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        dropped = round(self.p * 2**16)
        bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device).random_(-(2**63), None)
        keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= dropped - 2**15
        scale = 2**16 / (2**16 - dropped) if dropped < 2**16 else 0.0
        return x * torch.where(keep, scale, 0.0).to(x.dtype)


class Embeddings(nn.Module):
    """Token + segment (+ learned absolute position) embeddings, then LayerNorm and dropout."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.position_embeddings = (nn.Embedding(c.max_position_embeddings, c.hidden_size)
                                    if c.positions == "absolute" else None)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.ln = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = Dropout(c.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings.weight[: input_ids.shape[1]]
        x = x + (self.token_type_embeddings(token_type_ids) if token_type_ids is not None
                 else self.token_type_embeddings.weight[0])
        return self.dropout(self.ln(x))


class Block(nn.Module):
    """One post-LN layer: x = LN(x + drop(attn(x))); x = LN(x + drop(W2 gelu(W1 x)))."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.num_heads, self.attention_dropout = c.num_heads, c.attention_dropout
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)  # rows: query, key, value
        self.attn_out = nn.Linear(c.hidden_size, c.hidden_size)
        self.ln_attn = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn_in = nn.Linear(c.hidden_size, c.intermediate_size)
        self.ffn_out = nn.Linear(c.intermediate_size, c.hidden_size)
        self.ln_ffn = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = Dropout(c.dropout)

    def forward(self, x: Tensor, mask: Tensor | None, causal: bool, rotary: tuple[Tensor, Tensor] | None = None
                ) -> Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.num_heads, h // self.num_heads).permute(2, 0, 3, 1, 4)
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        a = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal and mask is None,
            dropout_p=self.attention_dropout if self.training else 0.0,
        )
        x = self.ln_attn(x + self.dropout(self.attn_out(a.transpose(1, 2).reshape(b, s, h))))
        return self.ln_ffn(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))  # exact (erf) GELU


class EncoderOutput(NamedTuple):
    last_hidden_state: Tensor  # (B, S, H)
    pooled_output: Tensor  # (B, H): tanh(dense(h_[CLS]))
    hidden_states: tuple[Tensor, ...] | None  # embedding output + each layer's output, if requested


class BertEncoder(nn.Module):
    """Embeddings, `num_layers` blocks and the tanh pooler on `[CLS]`: what fine-tuning reuses."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.apply(bert_init(config.initializer_range))

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
        causal: bool = False, output_hidden_states: bool = False, padded: bool | None = None,
    ) -> EncoderOutput:
        """`attention_mask` (B, S) is 1 for tokens, 0 for padding; `causal` lets position i see only <= i. `padded`
        says whether the mask has a 0 (a caller that knows spares the host sync of looking; None: look). Without
        padding there is no mask: attention takes its fastest kernel."""
        if padded is None:
            padded = attention_mask is not None and not bool(attention_mask.all())
        mask = None
        if padded:
            mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S_keys), True = may attend
            if causal:
                s = input_ids.shape[1]
                mask = mask & torch.ones(s, s, dtype=torch.bool, device=mask.device).tril()
        x = self.embeddings(input_ids, token_type_ids)
        rotary = None
        if self.config.positions == "rotary":
            rotary = rotary_angles(input_ids.shape[1], self.config.hidden_size // self.config.num_heads, x)
        hidden = [x]
        for layer in self.layers:
            x = layer(x, mask, causal, rotary)
            hidden.append(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return EncoderOutput(x, pooled, tuple(hidden) if output_hidden_states else None)


@dataclass
class PretrainingOutput:
    """Losses and detached counts; `loss` = mlm_loss (+ nsp_loss when the NSP head and labels are there)."""

    loss: Tensor
    mlm_loss: Tensor
    mlm_correct: Tensor
    mlm_count: Tensor | int  # a tensor where the scored positions were not counted on the host
    nsp_loss: Tensor | None = None
    nsp_correct: Tensor | None = None
    nsp_count: int = 0

    @property
    def mlm_accuracy(self) -> Tensor:
        count = self.mlm_count
        return self.mlm_correct / (count.clamp(min=1) if isinstance(count, Tensor) else max(count, 1))

    @property
    def nsp_accuracy(self) -> Tensor | None:
        return None if self.nsp_correct is None else self.nsp_correct / max(self.nsp_count, 1)


class DecoderCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of the logits `h @ weight.T + bias` against `targets`, and how many argmaxes hit them.

    The same numbers as `F.cross_entropy(F.linear(h, weight, bias), targets, reduction="sum")`, faster on a CPU: one
    (N, V) buffer holds the logits, then the probabilities, then their gradient (linear + log_softmax + nll make
    four), and V is padded to a multiple of 8 rows (logit -inf), on which MKL's AVX2 matmuls run much faster.
    """

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        pad = -weight.shape[0] % 8
        w, b = weight, bias  # saved for backward as they are: no copy when V is already a multiple of 8
        if pad:
            w, b = F.pad(weight, (0, 0, 0, pad)), F.pad(bias, (0, pad), value=float("-inf"))
        z = torch.addmm(b, h, w.t())
        correct = (z.argmax(1) == targets).sum()
        target_logit = z.gather(1, targets[:, None])
        top = z.amax(1, keepdim=True)
        z.sub_(top).exp_()
        total = z.sum(1, keepdim=True)
        loss = (total.log() + top - target_logit).sum()
        ctx.save_for_backward(h, w, z.div_(total), targets)
        ctx.vocab_size = weight.shape[0]
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        h, w, grad, targets = ctx.saved_tensors  # grad: the probabilities, made d loss / d logits in place
        grad[torch.arange(grad.shape[0]), targets] -= 1
        grad.mul_(grad_loss)
        v = ctx.vocab_size
        return grad @ w, (grad.t() @ h)[:v], grad.sum(0)[:v], None


class BertForPretraining(nn.Module):
    """Encoder + MLM head (dense, GELU, LayerNorm, decoder tied to the token embeddings, output bias) + optional NSP.

    The same MLM head serves the left-to-right LM: labels = next tokens and `causal=True`.
    """

    def __init__(self, config: BertConfig, nsp: bool = True) -> None:
        super().__init__()
        self.config = config
        self.encoder = BertEncoder(config)
        self.mlm_dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.mlm_ln = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.nsp = nn.Linear(config.hidden_size, 2) if nsp else None
        self.apply(bert_init(config.initializer_range))  # re-initialises the encoder too: same distribution

    def mlm_transform(self, hidden: Tensor) -> Tensor:
        """The MLM head before its decoder: LayerNorm(GELU(dense(hidden)))."""
        return self.mlm_ln(F.gelu(self.mlm_dense(hidden)))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """Vocabulary logits for hidden states of any leading shape (..., H) -> (..., V)."""
        return F.linear(self.mlm_transform(hidden), self.encoder.embeddings.word_embeddings.weight, self.mlm_bias)

    def logits(
        self, input_ids: Tensor, token_type_ids: Tensor | None = None, attention_mask: Tensor | None = None,
        causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """MLM logits at all positions (B, S, V) and NSP logits (B, 2) or None: for checks and export, not training."""
        out = self.encoder(input_ids, token_type_ids, attention_mask, causal)
        return self.mlm_logits(out.last_hidden_state), None if self.nsp is None else self.nsp(out.pooled_output)

    def forward(
        self, input_ids: Tensor, token_type_ids: Tensor | None, attention_mask: Tensor | None, mlm_labels: Tensor,
        next_sentence_label: Tensor | None = None, causal: bool = False, padded: bool | None = None,
        scored_per_row: int | None = None,
    ) -> PretrainingOutput:
        """`mlm_labels` (B, S) holds target ids where a prediction is scored and -100 elsewhere; `padded` as the
        encoder's. The MLM head runs only where a row is labelled: at exactly those positions (found by `nonzero`, a
        host sync and a data-dependent shape), or, given `scored_per_row` (at least any row's number of labels), at
        that many positions of every row, a row's labelled ones first and the rest scoring nothing: a fixed shape and
        no sync, one graph under `torch.compile`, the same positions and loss."""
        out = self.encoder(input_ids, token_type_ids, attention_mask, causal, padded=padded)
        if scored_per_row is None:
            labels = mlm_labels.reshape(-1)
            where = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # score only these rows: the main speed win
            hidden = out.last_hidden_state.reshape(-1, self.config.hidden_size).index_select(0, where)
            targets = labels.index_select(0, where)
            count: Tensor | int = targets.shape[0]
        else:
            labelled = mlm_labels != IGNORE_INDEX
            k = min(scored_per_row, mlm_labels.shape[1])
            # each row's labelled positions first, in order
            rows = labelled.to(torch.uint8).argsort(dim=1, descending=True, stable=True)[:, :k]
            targets = mlm_labels.gather(1, rows).reshape(-1)
            hidden = out.last_hidden_state.gather(1, rows[..., None].expand(-1, -1, self.config.hidden_size))
            hidden = hidden.reshape(-1, self.config.hidden_size)
            count = labelled.sum()
        if torch.is_autocast_enabled(hidden.device.type) or scored_per_row is not None:  # torch's own ops: mixed
            logits = self.mlm_logits(hidden)  # precision leaves them the dtypes; they skip the -100 rows
            mlm_sum = F.cross_entropy(logits, targets, reduction="sum")
            correct = (logits.argmax(-1) == targets).sum()
        else:
            mlm_sum, correct = DecoderCrossEntropy.apply(
                self.mlm_transform(hidden), self.encoder.embeddings.word_embeddings.weight, self.mlm_bias, targets)
        mlm_loss = mlm_sum / (count.clamp(min=1) if isinstance(count, Tensor) else max(count, 1))
        result = PretrainingOutput(mlm_loss, mlm_loss, correct, count)
        if self.nsp is not None and next_sentence_label is not None:
            nsp_logits = self.nsp(out.pooled_output)
            result.nsp_loss = F.cross_entropy(nsp_logits, next_sentence_label)
            result.nsp_correct = (nsp_logits.detach().argmax(-1) == next_sentence_label).sum()
            result.nsp_count = next_sentence_label.shape[0]
            result.loss = mlm_loss + result.nsp_loss
        return result

    def num_parameters(self) -> dict[str, int]:
        """Total trainable parameters and those outside the embedding tables (the usual "model size")."""
        total = sum(p.numel() for p in self.parameters())
        embeddings = sum(p.numel() for p in self.encoder.embeddings.parameters() if p.dim() == 2)
        return {"total": total, "non_embedding": total - embeddings}


def bert_init(std: float) -> Callable[[nn.Module], None]:
    """BERT init as a `Module.apply` callback: N(0, std) weights, zero biases, LayerNorm 1/0, zero `[PAD]` row."""

    @torch.no_grad()
    def init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            m.weight[m.padding_idx].zero_()
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    return init


def rotary_angles(length: int, head_size: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin (S, d/2) of the angles p * 10000^(-2i/d), in `like`'s dtype and device."""
    inverse = 10000.0 ** (-torch.arange(0, head_size, 2, dtype=torch.float32, device=like.device) / head_size)
    angle = torch.arange(length, dtype=torch.float32, device=like.device)[:, None] * inverse
    return angle.cos().to(like.dtype), angle.sin().to(like.dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """(..., S, d) with each pair (2i, 2i+1) at position p rotated by its angle (RoFormer's interleaved pairs)."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def flops_per_token(config: BertConfig, seq_len: int, masked_fraction: float = 0.15) -> float:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward) per input token.

    6 * L * (4 H^2 + 2 H I)            encoder weights (qkv, attention output, FFN)
    + 12 * L * S * H                   attention scores q.k and weighted values (2 matmuls, 2 FLOPs/MAC, x3)
    + 6 * f * (H^2 + H V)              MLM transform + tied decoder, only at the fraction f of labelled positions
    Embedding lookups, pooler/NSP (one row per sequence), softmax and other elementwise ops are not counted.
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_layers
    encoder = 6 * layers * (4 * h * h + 2 * h * i)
    attention = 12 * layers * seq_len * h
    head = 6 * masked_fraction * (h * h + h * config.vocab_size)
    return float(encoder + attention + head)

