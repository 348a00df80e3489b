"""bertlab.modeling.export: plain round trip, Hugging Face layout loadable by transformers, HF -> bertlab import."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import torch
import yaml

from bertlab.modeling.export import bertlab_to_hf, config_to_hf, hf_to_bertlab, load_hf, load_plain, save_hf, save_plain
from bertlab.modeling.model import BertConfig, BertForPretraining, rotary_angles, rotate

VOCAB = 100


def tiny(nsp: bool = True, seed: int = 0, positions: str = "absolute") -> tuple[BertForPretraining, BertConfig]:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64,
                        max_position_embeddings=16, positions=positions)
    model = BertForPretraining(config, nsp=nsp).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms so a mis-mapped tensor shows
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model, config


def inputs() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, VOCAB, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    token_type = torch.zeros_like(ids)
    token_type[:, 5:] = 1
    return {"input_ids": ids, "token_type_ids": token_type, "attention_mask": mask}


@pytest.mark.parametrize("nsp", [True, False])
def test_plain_round_trip(tmp_path: Path, nsp: bool) -> None:
    model, config = tiny(nsp)
    save_plain(torch.compile(model), config, tmp_path)  # a compiled wrapper saves the plain names
    loaded, loaded_config = load_plain(tmp_path)
    assert loaded_config == config and (loaded.nsp is None) == (not nsp)
    assert json.loads((tmp_path / "config.json").read_text())["num_layers"] == 2
    for (k, a), (k2, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(a, b)


def test_load_plain_overrides_dropout(tmp_path: Path) -> None:
    """Fine-tuning sets its own dropout on an encoder pretrained without it; the weights are untouched."""
    model, config = tiny()
    save_plain(model, config, tmp_path)  # saved with dropout 0.1 (the default)
    loaded, loaded_config = load_plain(tmp_path, dropout=0.0, attention_dropout=0.0)
    assert loaded_config.dropout == 0.0 and loaded_config.attention_dropout == 0.0
    assert {m.p for m in loaded.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    assert all(layer.attention_dropout == 0.0 for layer in loaded.encoder.layers)
    loaded.train()  # no dropout left: training mode gives eval mode's outputs
    with torch.no_grad():
        assert torch.allclose(loaded.encoder(**inputs()).last_hidden_state, model.encoder(**inputs()).last_hidden_state)


@pytest.fixture
def hf_warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """transformers' own log records (it does not propagate them by default), at warning level and above."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_propagation()
    caplog.set_level(logging.WARNING, logger="transformers")
    yield caplog
    hf_logging.disable_propagation()


@pytest.mark.parametrize(("nsp", "causal", "positions", "architecture", "auto"), [
    (True, False, "absolute", "BertForMaskedLM", "AutoModelForMaskedLM"),
    (False, False, "absolute", "BertForMaskedLM", "AutoModelForMaskedLM"),
    (False, True, "absolute", "BertLMHeadModel", "AutoModelForCausalLM"),
    (True, False, "rotary", "RoFormerForMaskedLM", "AutoModelForMaskedLM"),
    (False, True, "rotary", "RoFormerForCausalLM", "AutoModelForCausalLM"),
])
def test_hf_export_loads_in_transformers_with_no_unused_or_missing_weight(
        tmp_path: Path, hf_warnings: pytest.LogCaptureFixture, nsp: bool, causal: bool, positions: str,
        architecture: str, auto: str) -> None:
    """The architecture config.json names and its Auto class both load every exported weight and need no other: no
    "unexpected"/"missing"/"not used"/"newly initialized" warning, empty loading info; the logits are ours."""
    transformers = pytest.importorskip("transformers")
    model, config = tiny(nsp, positions=positions)
    save_hf(model, config, tmp_path, causal=causal)
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["architectures"] == [architecture] and hf_config["is_decoder"] is causal
    assert hf_config["model_type"] == ("bert" if positions == "absolute" else "roformer")
    for kind in (getattr(transformers, architecture), getattr(transformers, auto)):
        hf, info = kind.from_pretrained(tmp_path, output_loading_info=True)
        assert type(hf).__name__ == architecture
        assert not any(info.values()), info  # no missing, unexpected or mismatched weights
        hf.eval()
        with torch.no_grad():
            theirs = hf(**inputs()).logits
            mlm, _ = model.logits(**inputs(), causal=causal)
        torch.testing.assert_close(mlm, theirs, atol=1e-5, rtol=0)
    warned = [r.getMessage() for r in hf_warnings.records if r.name.startswith("transformers")]
    noted = re.compile(r"load report|unexpected|missing|not used|newly initiali[sz]ed", re.I)
    assert not [w for w in warned if noted.search(w)], warned


def test_import_from_transformers_checkpoint(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    _, config = tiny()
    torch.manual_seed(2)
    hf = transformers.BertForPreTraining(transformers.BertConfig(**config_to_hf(config))).eval()
    hf.save_pretrained(tmp_path)
    model, loaded_config = load_hf(tmp_path)
    assert loaded_config == config and model.nsp is not None
    model.eval()
    with torch.no_grad():
        theirs = hf(**inputs())
        mlm, nsp_logits = model.logits(**inputs())
    torch.testing.assert_close(mlm, theirs.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(nsp_logits, theirs.seq_relationship_logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("nsp", "positions"), [(True, "absolute"), (False, "absolute"), (True, "rotary")])
def test_hf_round_trip_without_transformers(tmp_path: Path, nsp: bool, positions: str) -> None:
    """Back from the export: the encoder and MLM head as saved; no NSP head, and the pooler (not exported, which no
    language model reads) as initialised."""
    model, config = tiny(nsp, positions=positions)
    save_hf(model, config, tmp_path)
    loaded, loaded_config = load_hf(tmp_path)
    assert loaded_config == config and loaded.nsp is None
    for k, v in loaded.state_dict().items():
        assert k.startswith("encoder.pooler") or torch.equal(v, model.state_dict()[k]), k


def test_converters_are_inverse_and_accept_old_names() -> None:
    model, config = tiny()
    ours = {k: v for k, v in model.state_dict().items() if not k.startswith(("encoder.pooler", "nsp."))}
    hf = bertlab_to_hf(model.state_dict(), config)
    assert "bert.encoder.layer.1.attention.self.value.weight" in hf and "cls.predictions.bias" in hf
    assert not [k for k in hf if "pooler" in k or "seq_relationship" in k]  # the masked LM's weights only
    old_style = {k.removeprefix("bert.").replace("LayerNorm.weight", "LayerNorm.gamma"): v for k, v in hf.items()}
    old_style["cls.predictions.decoder.weight"] = hf["bert.embeddings.word_embeddings.weight"]
    for back in (hf_to_bertlab(hf, config), hf_to_bertlab(old_style, config)):
        assert back.keys() == ours.keys()
        assert all(torch.equal(back[k], ours[k]) for k in ours)


def test_model_card_starts_with_the_hubs_metadata_header() -> None:
    """The card's `---`-fenced YAML header carries what the Hub reads: language, license, tags, datasets, pipeline."""
    from omegaconf import OmegaConf

    from bertlab.training.pretraining import model_card

    cfg = OmegaConf.create({
        "model": {"num_layers": 2, "hidden_size": 32, "num_heads": 4}, "objective": {"name": "ltr"},
        "pretrain": {"positions": "absolute"},
        "corpus": {"sources": [{"hub_id": "bertlab/wiki-text"}, {"hub_id": "bertlab/gutenberg-books"},
                               {"hub_id": "bertlab/wiki-text"}]}})
    for causal, pipeline in ((False, "fill-mask"), (True, "text-generation")):
        card = model_card(cfg, steps=4, tokens_per_step=512, ppl=90.0, floor_ppl=300.0, causal=causal)
        assert card.startswith("---\n")
        header, body = card.removeprefix("---\n").split("\n---\n", 1)
        meta = yaml.safe_load(header)
        assert meta == {"language": ["en"], "license": "cc-by-sa-3.0", "library_name": "transformers",
                        "tags": ["bertlab", "bert", "ltr"], "pipeline_tag": pipeline,
                        "datasets": ["bertlab/wiki-text", "bertlab/gutenberg-books"]}
        assert body.lstrip().startswith("# A bertlab encoder: `ltr`, 2 layers of 32")
        assert "90.0, against 300.0 for a unigram model" in body


def test_rotary_scores_depend_on_offsets_only() -> None:
    """q_p . k_r after rotation is a function of p - r: the same vectors four positions later score the same."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 1, 16, generator=g).unbind(0)
    cos, sin = rotary_angles(12, 16, q)

    def score(p: int, r: int) -> torch.Tensor:
        return (rotate(q, cos[p : p + 1], sin[p : p + 1]) * rotate(k, cos[r : r + 1], sin[r : r + 1])).sum()

    assert torch.allclose(score(2, 5), score(6, 9), atol=1e-5) and torch.allclose(score(7, 1), score(11, 5), atol=1e-5)
    assert not torch.allclose(score(2, 5), score(2, 6), atol=1e-3)  # and it does depend on the offset


@pytest.mark.parametrize("positions", ["absolute", "rotary"])
def test_the_hf_export_is_a_folder_transformers_tokenizes_and_fills_masks_with(tmp_path: Path, positions: str) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    from bertlab.tokenizer import train_tokenizer

    words = ["the cat sat on the mat", "a dog ran in the park", "the bird sang on a tree"]
    tok = train_tokenizer([w for w in words for _ in range(20)], vocab_size=VOCAB, min_frequency=1)
    tok.save(str(tmp_path / "tokenizer.json"))
    model, config = tiny(nsp=positions == "absolute", positions=positions)
    out = save_hf(model, config, tmp_path / "hf", tokenizer_file=tmp_path / "tokenizer.json", card="# card\n")
    hf_tok = AutoTokenizer.from_pretrained(out)
    assert (hf_tok.mask_token, hf_tok.cls_token, hf_tok.sep_token, hf_tok.pad_token) == ("[MASK]", "[CLS]", "[SEP]",
                                                                                       "[PAD]")
    pair = hf_tok("the cat", "a dog")
    assert pair.input_ids == tok.encode("the cat", "a dog").ids and set(pair.token_type_ids) == {0, 1}
    assert hf_tok.convert_ids_to_tokens(pair.input_ids)[:3] == ["[CLS]", "the", "cat"]
    filled = pipeline("fill-mask", model=AutoModelForMaskedLM.from_pretrained(out), tokenizer=hf_tok)("the [MASK] sat")
    assert len(filled) == 5 and all(f["sequence"] for f in filled)
    assert (out / "README.md").read_text() == "# card\n"
    assert {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()} == dict.fromkeys(
        ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
         "README.md"], 0o644)
