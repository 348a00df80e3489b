"""Save/load bertlab models: plain PyTorch (`model.pt`) and Hugging Face layout (no transformers).

The HF export writes `model.safetensors` + `config.json` that transformers loads as is, with no unused or missing
weight: the encoder and its language-model head only, as `BertForMaskedLM` (`BertLMHeadModel` for a left-to-right LM)
for absolute positions, `RoFormerForMaskedLM` (`RoFormerForCausalLM`) for rotary ones. The pooler and NSP head, which
no language model reads, stay in `model.pt` (fine-tuning reads that).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor, nn

from bertlab.data.vocab import SPECIAL_TOKENS
from bertlab.errors import UserError
from bertlab.files import read_json
from bertlab.modeling.model import BertConfig, BertEncoder, BertForPretraining

log = logging.getLogger(__name__)

PLAIN_WEIGHTS, HF_WEIGHTS, CONFIG = "model.pt", "model.safetensors", "config.json"
CARD_LICENSE = "cc-by-sa-3.0"  # the corpus's most restrictive terms (Wikipedia's and WikiText's text)
HF_SPECIAL_TOKENS = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS))

# bertlab name -> HF name, for everything but the fused qkv ("{i}" = layer index)
_LAYER_NAMES = {
    "attn_out": "attention.output.dense",
    "ln_attn": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ln_ffn": "output.LayerNorm",
}
_TOP_NAMES = {  # "{m}": the HF model's prefix (bert | roformer)
    "encoder.embeddings.word_embeddings.weight": "{m}.embeddings.word_embeddings.weight",
    "encoder.embeddings.position_embeddings.weight": "{m}.embeddings.position_embeddings.weight",
    "encoder.embeddings.token_type_embeddings.weight": "{m}.embeddings.token_type_embeddings.weight",
    "encoder.embeddings.ln.weight": "{m}.embeddings.LayerNorm.weight",
    "encoder.embeddings.ln.bias": "{m}.embeddings.LayerNorm.bias",
    "encoder.pooler.weight": "{m}.pooler.dense.weight",  # read from checkpoints that have them, never exported
    "encoder.pooler.bias": "{m}.pooler.dense.bias",
    "mlm_dense.weight": "cls.predictions.transform.dense.weight",
    "mlm_dense.bias": "cls.predictions.transform.dense.bias",
    "mlm_ln.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm_ln.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm_bias": "cls.predictions.bias",
    "nsp.weight": "cls.seq_relationship.weight",
    "nsp.bias": "cls.seq_relationship.bias",
}
_HF_CONFIG_KEYS = {  # BertConfig field -> HF config key
    "vocab_size": "vocab_size", "num_layers": "num_hidden_layers", "hidden_size": "hidden_size",
    "num_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
    "dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob",
    "layer_norm_eps": "layer_norm_eps", "initializer_range": "initializer_range", "pad_token_id": "pad_token_id",
}


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # a torch.compile'd model saves as the original


def save_plain(model: BertForPretraining, config: BertConfig, directory: str | Path) -> Path:
    """Write `model.pt` (plain state dict) and `config.json` (the BertConfig fields) into `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(_unwrap(model).state_dict(), out / PLAIN_WEIGHTS)
    (out / CONFIG).write_text(json.dumps(asdict(config), indent=2) + "\n")
    return out


def load_plain(
    directory: str | Path, map_location: str | torch.device = "cpu", **overrides: Any,
) -> tuple[BertForPretraining, BertConfig]:
    """Rebuild the model saved by `save_plain` (NSP head present iff it was saved); `overrides` replace
    config fields that hold no weights (e.g. dropout)."""
    d = Path(directory)
    config, _ = read_config(d / CONFIG, lambda raw: BertConfig(**{**raw, **overrides}))
    state = read_weights(d / PLAIN_WEIGHTS, lambda f: torch.load(f, map_location=map_location, weights_only=True))
    model = BertForPretraining(config, nsp="nsp.weight" in state)
    load_checked(model, state, d / PLAIN_WEIGHTS, d / CONFIG)
    return model, config


def load_encoder(
    directory: Path, dropout: float, vocab_size: int, tokenizer_file: Path,
) -> tuple[BertEncoder, str | None, bool]:
    """The encoder of the pretraining run in `directory` with the given dropout, its objective's name and whether it
    was pretrained left-to-right (its metrics.json's `objective` and `causal`). Its vocabulary must be the tokenizer's
    (`vocab_size` tokens, in `tokenizer_file`): ids beyond it would crash the embedding lookup, and a smaller tokenizer
    would silently map text to the wrong embeddings."""
    d = Path(directory)
    if not (d / PLAIN_WEIGHTS).exists() or not (d / CONFIG).exists():
        raise UserError(f"no pretrained model in {d} (the pretrain stage writes encoder <name> at seed <seed> in "
                        "pretrain/<name>/<name>-<seed>/: run it first)")
    if (vocab := plain_config(d / CONFIG).vocab_size) != vocab_size:
        raise UserError(f"{tokenizer_file} has {vocab_size} tokens but {d / CONFIG} has vocab_size {vocab}: "
                        f"the encoder was pretrained with another tokenizer (rerun pretrain with this one)")
    model, _ = load_plain(d, dropout=dropout, attention_dropout=dropout)
    record = read_json(d / "metrics.json") if (d / "metrics.json").exists() else {}
    if "causal" not in record:
        log.warning("%s has no metrics.json `causal`: treating the encoder as bidirectional", d)
    return model.encoder, record.get("objective"), bool(record.get("causal", False))


def hf_prefix(config: BertConfig) -> str:
    """The HF model whose layout the export takes: BERT, or RoFormer for rotary positions."""
    return "roformer" if config.positions == "rotary" else "bert"


def plain_config(path: Path) -> BertConfig:
    """The BertConfig that `save_plain` wrote to `path` (a UserError naming it when it is not one)."""
    return read_config(path, lambda raw: BertConfig(**raw))[0]


def read_config(path: Path, build: Callable[[dict], BertConfig]) -> tuple[BertConfig, dict]:
    """`build(the JSON in path)` and that JSON; a UserError naming `path` when it is missing, not JSON or not a model
    config."""
    if not path.is_file():
        raise UserError(f"{path} not found: no saved model there")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return build(raw), raw
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as err:  # JSONDecodeError: ValueError
        raise UserError(f"{path} is not a model config ({type(err).__name__}: {err})") from err


def read_weights(path: Path, load: Callable[[Path], Any]) -> dict[str, Tensor]:
    """`load(path)`, a state dict of tensors; a UserError naming `path` when it is missing or is not one (truncated,
    garbage, a pickle of anything but tensors and plain data)."""
    if not path.is_file():
        raise UserError(f"{path} not found: no saved model there")
    try:
        state = load(path)
    except Exception as err:  # torch.load and safetensors raise many types
        raise UserError(f"{path} is not a readable state dict ({str(err).splitlines()[0] if str(err) else err!r})"
                        ) from err
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise UserError(f"{path} is not a state dict (a mapping of names to tensors)")
    return state


def load_checked(model: nn.Module, state: dict[str, Tensor], path: Path, config: Path, strict: bool = True) -> list:
    """`model.load_state_dict(state)`; a UserError naming the weights file, the config and both shapes when a tensor
    does not fit the model the config describes (or, `strict`, when one is missing or extra). Returns the missing
    keys."""
    expected = model.state_dict()
    for name, tensor in state.items():
        if name in expected and tensor.shape != expected[name].shape:
            raise UserError(f"{path}: {name} has shape {tuple(tensor.shape)} but the model {config} describes needs "
                            f"{tuple(expected[name].shape)}: the two files are not of one model")
    missing = [k for k in expected if k not in state]
    extra = [k for k in state if k not in expected]
    if strict and (missing or extra):
        raise UserError(f"{path} does not fit the model {config} describes: "
                        + (f"it lacks {missing[0]}" if missing else f"it has {extra[0]}, which the model does not"))
    return model.load_state_dict(state, strict=strict).missing_keys


def bertlab_to_hf(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """bertlab state dict -> HF `BertForMaskedLM` (or `RoFormerForMaskedLM`) names (qkv split into query/key/value):
    the encoder and the MLM head, no pooler or NSP head."""
    m = hf_prefix(config)
    hf: dict[str, Tensor] = {}
    for i in range(config.num_layers):
        src, dst = f"encoder.layers.{i}.", f"{m}.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            for name, part in zip(("query", "key", "value"), state[f"{src}qkv.{kind}"].chunk(3)):
                hf[f"{dst}attention.self.{name}.{kind}"] = part
            for ours, theirs in _LAYER_NAMES.items():
                hf[f"{dst}{theirs}.{kind}"] = state[f"{src}{ours}.{kind}"]
    for ours, theirs in _TOP_NAMES.items():
        if ours in state and not ours.startswith(("encoder.pooler", "nsp.")):
            hf[theirs.format(m=m)] = state[ours]
    if m == "roformer":  # its fixed sinusoid table (a weight it saves, not a trained one): sin | cos halves
        head = config.hidden_size // config.num_heads
        angle = torch.arange(config.max_position_embeddings, dtype=torch.float64)[:, None] * 10000.0 ** (
            -torch.arange(0, head, 2, dtype=torch.float64) / head)
        hf["roformer.encoder.embed_positions.weight"] = torch.cat([angle.sin(), angle.cos()], dim=1).float()
    return {k: v.detach().cpu().contiguous() for k, v in hf.items()}


def hf_to_bertlab(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """HF `BertForPreTraining`/`BertModel` (or RoFormer) state dict -> bertlab names (query/key/value fused into qkv).

    Accepts names with or without the `bert.` (`roformer.`) prefix and old TF-converted `gamma`/`beta` LayerNorm
    names; ignores buffers and the tied `cls.predictions.decoder.*`. Head weights missing from the input (a bare
    `BertModel`) are missing from the output too.
    """
    m = hf_prefix(config)
    norm = {}
    for k, v in state.items():
        k = k.removeprefix(f"{m}.").replace("LayerNorm.gamma", "LayerNorm.weight")
        k = k.replace("LayerNorm.beta", "LayerNorm.bias")
        norm[k if k.startswith("cls.") else f"{m}.{k}"] = v
    ours: dict[str, Tensor] = {}
    for i in range(config.num_layers):
        src, dst = f"{m}.encoder.layer.{i}.", f"encoder.layers.{i}."
        for kind in ("weight", "bias"):
            qkv = [norm[f"{src}attention.self.{name}.{kind}"] for name in ("query", "key", "value")]
            ours[f"{dst}qkv.{kind}"] = torch.cat(qkv)
            for mine, theirs in _LAYER_NAMES.items():
                ours[f"{dst}{mine}.{kind}"] = norm[f"{src}{theirs}.{kind}"]
    for mine, theirs in _TOP_NAMES.items():
        if theirs.format(m=m) in norm:
            ours[mine] = norm[theirs.format(m=m)]
    return ours


def config_to_hf(config: BertConfig, causal: bool = False) -> dict:
    """HF `BertConfig` dict for `config` (exact-erf "gelu", absolute positions, tied decoder), or a `RoFormerConfig`
    one for rotary positions; its architecture is the masked LM, or with `causal` (a left-to-right LM) the causal
    one, with `is_decoder` set so that transformers applies the same causal attention mask.
    """
    hf = {theirs: getattr(config, ours) for ours, theirs in _HF_CONFIG_KEYS.items()}
    if config.positions == "rotary":
        return {
            "model_type": "roformer", "architectures": ["RoFormerForCausalLM" if causal else "RoFormerForMaskedLM"],
            "hidden_act": "gelu", "embedding_size": config.hidden_size, "rotary_value": False,
            "tie_word_embeddings": True, "dtype": "float32", "is_decoder": causal, **hf,
        }
    return {
        "model_type": "bert", "architectures": ["BertLMHeadModel" if causal else "BertForMaskedLM"],
        "hidden_act": "gelu", "position_embedding_type": "absolute", "tie_word_embeddings": True, "dtype": "float32",
        "is_decoder": causal, **hf,
    }


def config_from_hf(hf: dict) -> BertConfig:
    """BertConfig from an HF BERT `config.json` dict (absolute positions) or a RoFormer one (rotary); "gelu" only."""
    roformer = hf.get("model_type") == "roformer"
    if hf.get("hidden_act", "gelu") != "gelu" or hf.get("position_embedding_type", "absolute") != "absolute" or (
            roformer and (hf.get("rotary_value") or hf.get("embedding_size", hf["hidden_size"]) != hf["hidden_size"])):
        raise ValueError("bertlab supports hidden_act='gelu', BERT's absolute positions and RoFormer's rotary ones "
                         "(rotary_value false, embedding_size = hidden_size) only")
    fields = {ours: hf[theirs] for ours, theirs in _HF_CONFIG_KEYS.items() if theirs in hf}
    return BertConfig(**fields, positions="rotary" if roformer else "absolute")


def save_hf(model: BertForPretraining, config: BertConfig, directory: str | Path, causal: bool = False,
            tokenizer_file: str | Path | None = None, card: str | None = None) -> Path:
    """Write `model.safetensors` + `config.json` in the HF layout (`BertForMaskedLM`, or RoFormer's for rotary
    positions; the causal LM's for `causal`) into `directory`; with `tokenizer_file` (the tokenizer stage's
    `tokenizer.json`) also the files `AutoTokenizer` reads, with BERT's special tokens, so `pipeline("fill-mask",
    directory)` runs; with `card`, it as the model card `README.md`. Every file is readable by all (0644).

    Pass `causal=True` for a left-to-right LM so that transformers runs it with causal attention (`is_decoder`).
    """
    from safetensors.torch import save_file

    model = _unwrap(model)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    save_file(bertlab_to_hf(model.state_dict(), config), out / HF_WEIGHTS, metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(config_to_hf(config, causal=causal), indent=2) + "\n")
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, out / "tokenizer.json")
        (out / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", **HF_SPECIAL_TOKENS,
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
            "model_max_length": config.max_position_embeddings}, indent=2) + "\n")
        (out / "special_tokens_map.json").write_text(json.dumps(HF_SPECIAL_TOKENS, indent=2) + "\n")
    if card is not None:
        (out / "README.md").write_text(card)
    for f in out.iterdir():
        f.chmod(0o644)
    return out


def card_header(datasets: list[str], tags: list[str], causal: bool, license: str = CARD_LICENSE) -> str:
    """The Hub's metadata header of a model card (a `---`-fenced YAML block): English, `license`, the tags, the
    datasets it was pretrained on, and the pipeline its export serves (fill-mask, or text generation for `causal`)."""
    meta = {"language": ["en"], "license": license, "library_name": "transformers", "tags": tags,
            "datasets": list(dict.fromkeys(datasets)), "pipeline_tag": "text-generation" if causal else "fill-mask"}
    return f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n\n"


def load_hf(directory: str | Path) -> tuple[BertForPretraining, BertConfig]:
    """Load an HF BERT directory (ours, or e.g. Google's converted checkpoints) as a bertlab model.

    Reads `model.safetensors`, else `pytorch_model.bin`. The NSP head is kept when the checkpoint has one (a
    `BertForPreTraining`'s); a missing pooler or MLM-head weight keeps its fresh initialisation.
    """
    d = Path(directory)
    config, _ = read_config(d / CONFIG, config_from_hf)
    if (d / HF_WEIGHTS).exists():
        from safetensors.torch import load_file

        weights, state = d / HF_WEIGHTS, read_weights(d / HF_WEIGHTS, load_file)
    else:
        weights = d / "pytorch_model.bin"
        state = read_weights(weights, lambda f: torch.load(f, map_location="cpu", weights_only=True))
    nsp = config.positions == "absolute" and any(k.endswith("seq_relationship.weight") for k in state)
    model = BertForPretraining(config, nsp=nsp)
    try:
        ours = hf_to_bertlab(state, config)
    except KeyError as err:
        raise UserError(f"{weights} lacks the encoder weight {err.args[0]} that {d / CONFIG} implies") from err
    missing = load_checked(model, ours, weights, d / CONFIG, strict=False)
    lacking = [k for k in missing if k.startswith("encoder.") and not k.startswith("encoder.pooler")]
    if lacking:
        raise UserError(f"{weights} lacks encoder weights: {lacking}")
    return model, config
