"""Table 7's feature-based strategies: how each combines a frozen encoder's hidden states and which it reads
(`hidden_states[0]` = embedding output, `hidden_states[i]` = output of layer i). Free of torch, so the run keys of
frozen-feature cells (`bertlab.runs`, which the torch-free `configs` stage imports) read the same table as the model
(`bertlab.modeling.heads.LayerFeatures`)."""

from __future__ import annotations

# Each strategy: how it combines hidden states, and which it reads (a slice of embedding output, layer 1, ..., L).
_STRATEGIES = {
    "embeddings": ("one", slice(0, 1)), "last": ("one", slice(-1, None)), "second_to_last": ("one", slice(-2, -1)),
    "sum_last_four": ("mix", slice(-4, None)), "concat_last_four": ("concat", slice(-4, None)),
    "sum_all": ("mix", slice(1, None)),
}
FEATURES = tuple(_STRATEGIES)


def feature_signature(strategy: str, num_layers: int) -> tuple[str, list[int]]:
    """What `LayerFeatures(strategy, num_layers, ...)` computes: how it combines hidden states ("mix", "concat" or
    "one") and which it reads. Equal signatures are one model (`sum_all` and `sum_last_four` of 4 layers)."""
    if strategy not in _STRATEGIES:
        raise ValueError(f"unknown feature strategy {strategy!r}; expected one of {', '.join(FEATURES)}")
    combine, reads = _STRATEGIES[strategy]
    return combine, list(range(num_layers + 1))[reads]
