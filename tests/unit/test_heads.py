"""Task heads, the BiLSTM, the scalar mix and the feature-based layer strategies."""

import pytest
import torch

from bertlab.modeling.features import FEATURES, feature_signature
from bertlab.modeling.heads import BiLSTM, LayerFeatures, LinearHead, ScalarMix, SpanHead

H, L = 8, 5  # hidden size, transformer layers


def hidden_states(batch: int = 2, seq: int = 3) -> tuple[torch.Tensor, ...]:
    """Embedding output + L layers; state i is filled with the value i (to see which ones a strategy uses)."""
    return tuple(torch.full((batch, seq, H), float(i)) for i in range(L + 1))


def test_scalar_mix_weights_are_softmax_normalised_and_learn() -> None:
    mix = ScalarMix(4)
    w = mix.weights()
    assert torch.allclose(w, torch.full((4,), 0.25)) and torch.isclose(w.sum(), torch.tensor(1.0))
    layers = [torch.randn(2, 3, H, requires_grad=False) for _ in range(4)]
    out = mix(layers)
    assert torch.allclose(out, sum(layers) / 4, atol=1e-6)
    (out * torch.randn_like(out)).sum().backward()
    assert mix.scalars.grad is not None and mix.scalars.grad.abs().sum() > 0
    assert mix.gamma.grad is not None
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([3.0, -1.0, 0.5, 2.0]))
    assert torch.isclose(mix.weights().sum(), torch.tensor(1.0)) and (mix.weights() > 0).all()


@pytest.mark.parametrize(
    "strategy, expected",
    [("embeddings", 0.0), ("last", 5.0), ("second_to_last", 4.0),
     ("sum_last_four", (2 + 3 + 4 + 5) / 4), ("sum_all", (1 + 2 + 3 + 4 + 5) / 5)],
)
def test_strategies_use_the_right_layers(strategy: str, expected: float) -> None:
    features = LayerFeatures(strategy, L, H)
    out = features(hidden_states())
    assert features.output_size == H and out.shape == (2, 3, H)
    assert torch.allclose(out, torch.full_like(out, expected))  # mixes start uniform


def test_sum_all_excludes_the_embeddings_and_concat_is_four_times_wider() -> None:
    assert LayerFeatures("sum_all", L, H).mix.scalars.numel() == L
    assert LayerFeatures("sum_last_four", L, H).mix.scalars.numel() == 4
    concat = LayerFeatures("concat_last_four", L, H)
    out = concat(hidden_states())
    assert concat.output_size == 4 * H and out.shape == (2, 3, 4 * H)
    assert [float(out[0, 0, i * H]) for i in range(4)] == [2.0, 3.0, 4.0, 5.0]
    assert {s for s in FEATURES} == {"embeddings", "last", "second_to_last", "sum_last_four", "concat_last_four",
                                     "sum_all"}


def test_unknown_strategy_and_wrong_depth_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown feature strategy"):
        LayerFeatures("sum_first_four", L, H)
    with pytest.raises(ValueError, match="hidden states"):
        LayerFeatures("last", L + 1, H)(hidden_states())


def test_bilstm_ignores_padding() -> None:
    torch.manual_seed(0)
    lstm = BiLSTM(H, 6, num_layers=2).eval()
    x = torch.randn(1, 4, H)
    padded = torch.cat([x, torch.randn(1, 3, H)], dim=1)  # 3 junk padding positions
    tokens, sentence = lstm(x, torch.ones(1, 4, dtype=torch.long))
    tokens_p, sentence_p = lstm(padded, torch.tensor([[1, 1, 1, 1, 0, 0, 0]]))
    assert tokens.shape == (1, 4, 12) and sentence.shape == (1, 12) and lstm.output_size == 12
    assert torch.allclose(tokens, tokens_p[:, :4], atol=1e-6) and torch.allclose(sentence, sentence_p, atol=1e-6)
    assert (tokens_p[:, 4:] == 0).all()
    # the sentence vector = forward state at the last real token ++ backward state at the first
    assert torch.allclose(sentence[:, :6], tokens[:, -1, :6], atol=1e-6)
    assert torch.allclose(sentence[:, 6:], tokens[:, 0, 6:], atol=1e-6)


def test_heads_shapes_and_span_padding() -> None:
    x = torch.randn(2, 5, H)
    assert LinearHead(H, 3)(x[:, 0]).shape == (2, 3)
    assert LinearHead(H, 9)(x).shape == (2, 5, 9)
    start, end = SpanHead(H)(x, torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))
    assert start.shape == end.shape == (2, 5)
    assert (start[0, 3:] < -1e3).all() and (end[0, 3:] < -1e3).all()


def test_feature_signatures_name_what_a_strategy_computes() -> None:
    """Only `sum_all` and `sum_last_four` of a 4-layer encoder coincide; at 5 layers every strategy differs."""
    four = {s: feature_signature(s, 4) for s in FEATURES}
    assert four["sum_all"] == four["sum_last_four"] == ("mix", [1, 2, 3, 4])
    assert four["concat_last_four"] == ("concat", [1, 2, 3, 4]) and four["embeddings"] == ("one", [0])
    assert len(set(map(str, four.values()))) == len(FEATURES) - 1
    assert len({str(feature_signature(s, L)) for s in FEATURES}) == len(FEATURES)
