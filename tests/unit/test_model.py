"""bertlab.modeling.model: equivalence with transformers' BERT, masked-only MLM head, causal mode, init, FLOP count."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertlab.modeling.export import config_to_hf, hf_to_bertlab
from bertlab.modeling.model import (
    BertConfig, BertEncoder, BertForPretraining, DecoderCrossEntropy, Dropout, flops_per_token,
)

VOCAB = 120


def tiny_config(**kw) -> BertConfig:
    return BertConfig(vocab_size=VOCAB, num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64,
                      max_position_embeddings=24, **kw)


def batch(b: int = 3, s: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids with [CLS]/[SEP], two segments and right padding in all but the first row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (b, s), generator=g)
    ids[:, 0], ids[:, s // 2], ids[:, -1] = 2, 3, 3
    token_type = torch.zeros_like(ids)
    token_type[:, s // 2 + 1:] = 1
    mask = torch.ones_like(ids)
    for row in range(1, b):
        length = s - 2 * row
        mask[row, length:] = 0
        ids[row, length:] = 0
        ids[row, length - 1] = 3
    return ids, token_type, mask


@pytest.fixture
def model() -> BertForPretraining:
    torch.manual_seed(0)
    return BertForPretraining(tiny_config(), nsp=True).eval()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_encoder_matches_transformers(attn: str) -> None:
    transformers = pytest.importorskip("transformers")
    config = tiny_config()
    torch.manual_seed(1)
    hf = transformers.BertModel(transformers.BertConfig(**config_to_hf(config), attn_implementation=attn)).eval()
    assert hf.config._attn_implementation == attn
    ours = BertEncoder(config).eval()
    state = {k.removeprefix("encoder."): v for k, v in hf_to_bertlab(hf.state_dict(), config).items()}
    ours.load_state_dict(state)
    ids, token_type, mask = batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=token_type, attention_mask=mask, output_hidden_states=True)
        mine = ours(ids, token_type, mask, output_hidden_states=True)
    torch.testing.assert_close(mine.last_hidden_state, theirs.last_hidden_state, atol=1e-5, rtol=0)
    torch.testing.assert_close(mine.pooled_output, theirs.pooler_output, atol=1e-5, rtol=0)
    assert len(mine.hidden_states) == len(theirs.hidden_states) == config.num_layers + 1
    for a, b in zip(mine.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_no_padding_skips_mask_with_same_result(model: BertForPretraining) -> None:
    ids, token_type, _ = batch()
    with torch.no_grad():
        full = model.encoder(ids, token_type, torch.ones_like(ids)).last_hidden_state
        none = model.encoder(ids, token_type, None).last_hidden_state
    torch.testing.assert_close(full, none, atol=0, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_a_fixed_number_scored_per_row_gives_the_same_loss_and_gradients(causal: bool) -> None:
    """The step without host syncs (`padded` given, `scored_per_row` positions of every row: the compiled and GPU
    path) trains on what the exact path does: the same positions, loss, counts and gradients, padded rows included."""
    torch.manual_seed(0)
    model = BertForPretraining(tiny_config(dropout=0.0, attention_dropout=0.0), nsp=True).train()
    ids, token_type, mask = batch(b=4, s=16)
    if causal:
        labels = torch.where(mask.bool(), ids.roll(-1, dims=1), -100)
        labels[:, -1] = -100
    else:
        picked = (torch.rand(ids.shape, generator=torch.Generator().manual_seed(3)) < 0.4) & mask.bool()
        labels = torch.where(picked, torch.randint(5, VOCAB, ids.shape, generator=torch.Generator()), -100)
    nsp_label = torch.tensor([0, 1, 1, 0])
    most = int(labels.ne(-100).sum(1).max())

    def step(**fixed) -> tuple:
        model.zero_grad()
        out = model(ids, token_type, mask, labels, nsp_label, causal=causal, **fixed)
        out.loss.backward()
        return out, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    exact, exact_grads = step()
    for scored in (most, most + 3, 16):  # the bound, a looser one, every position
        out, grads = step(padded=True, scored_per_row=scored)
        torch.testing.assert_close(out.loss, exact.loss, rtol=1e-6, atol=0)
        torch.testing.assert_close(out.mlm_loss, exact.mlm_loss, rtol=1e-6, atol=0)
        assert int(out.mlm_count) == exact.mlm_count and int(out.mlm_correct) == int(exact.mlm_correct)
        torch.testing.assert_close(out.mlm_accuracy, exact.mlm_accuracy)
        assert len(grads) == len(exact_grads)
        for got, want in zip(grads, exact_grads):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_a_caller_that_knows_the_padding_gets_the_same_states(model: BertForPretraining) -> None:
    ids, token_type, mask = batch()
    with torch.no_grad():
        looked = model.encoder(ids, token_type, mask).last_hidden_state
        told = model.encoder(ids, token_type, mask, padded=True).last_hidden_state
        row = model.encoder(ids[:1], token_type[:1], mask[:1]).last_hidden_state  # row 0 has no padding
        row_told = model.encoder(ids[:1], token_type[:1], mask[:1], padded=False).last_hidden_state
    assert torch.equal(looked, told) and torch.equal(row, row_told)


def test_masked_only_loss_equals_full_cross_entropy(model: BertForPretraining) -> None:
    ids, token_type, mask = batch()
    labels = torch.full_like(ids, -100)
    picked = (torch.rand(ids.shape, generator=torch.Generator().manual_seed(3)) < 0.3) & mask.bool()
    labels[picked] = torch.randint(5, VOCAB, (int(picked.sum()),))
    nsp_label = torch.tensor([0, 1, 0])
    with torch.no_grad():
        out = model(ids, token_type, mask, labels, nsp_label)
        mlm_logits, nsp_logits = model.logits(ids, token_type, mask)
    full = F.cross_entropy(mlm_logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.mlm_loss, full, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out.nsp_loss, F.cross_entropy(nsp_logits, nsp_label))
    torch.testing.assert_close(out.loss, out.mlm_loss + out.nsp_loss)
    assert out.mlm_count == int(picked.sum())
    assert out.mlm_correct == (mlm_logits.argmax(-1)[picked] == labels[picked]).sum()
    assert out.nsp_count == 3 and out.nsp_correct == (nsp_logits.argmax(-1) == nsp_label).sum()
    assert 0 <= out.mlm_accuracy <= 1 and 0 <= out.nsp_accuracy <= 1


def test_mlm_only_model_and_empty_labels() -> None:
    model = BertForPretraining(tiny_config(), nsp=False)
    ids, token_type, mask = batch()
    out = model(ids, token_type, mask, torch.full_like(ids, -100), torch.zeros(3, dtype=torch.long))
    assert model.nsp is None and out.nsp_loss is None and out.mlm_count == 0
    assert out.loss.item() == 0.0
    out.loss.backward()  # a batch without labels is a no-op, not a NaN


@pytest.mark.parametrize("padded", [False, True])
def test_causal_mode_ignores_later_tokens(model: BertForPretraining, padded: bool) -> None:
    ids, token_type, mask = batch()
    if not padded:
        mask = None
    changed = ids.clone()
    changed[0, 8:] = 7  # row 0 is unpadded in both cases
    with torch.no_grad():
        a = model.encoder(ids, token_type, mask, causal=True).last_hidden_state
        b = model.encoder(changed, token_type, mask, causal=True).last_hidden_state
        c = model.encoder(changed, token_type, mask, causal=False).last_hidden_state
    torch.testing.assert_close(a[:, :8], b[:, :8], atol=1e-6, rtol=0)
    assert not torch.allclose(a[0, 8:], b[0, 8:])
    assert not torch.allclose(a[0, :8], c[0, :8])  # bidirectional: earlier positions do see the change


def test_left_to_right_lm_step_trains(model: BertForPretraining) -> None:
    ids, token_type, mask = batch()
    labels = torch.where(mask.bool(), ids.roll(-1, dims=1), -100)
    labels[:, -1] = -100
    model.train()
    out = model(ids, token_type, mask, labels, causal=True)
    out.loss.backward()
    assert torch.isfinite(out.loss) and out.mlm_count == int(labels.ne(-100).sum())
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_init_and_tied_decoder(model: BertForPretraining) -> None:
    emb = model.encoder.embeddings.word_embeddings.weight
    assert emb[0].abs().sum() == 0  # [PAD] row zeroed, as in Hugging Face
    assert abs(emb[1:].std().item() - 0.02) < 2e-3
    assert all(layer.qkv.bias.abs().sum() == 0 for layer in model.encoder.layers)
    assert model.mlm_bias.abs().sum() == 0 and model.encoder.layers[0].ln_attn.weight.eq(1).all()
    assert not any(p.shape == (VOCAB, 32) and p is not emb for p in model.parameters())  # decoder is tied
    counts = model.num_parameters()
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["non_embedding"] == (VOCAB + 24 + 2) * 32


def test_flops_per_token() -> None:
    c = BertConfig(vocab_size=30522)
    per_layer = 4 * 256 * 256 + 2 * 256 * 1024
    expected = 6 * 4 * per_layer + 12 * 4 * 128 * 256 + 6 * 0.15 * (256 * 256 + 256 * 30522)
    assert flops_per_token(c, 128, 0.15) == pytest.approx(expected)
    assert flops_per_token(c, 128, 1.0) > flops_per_token(c, 128, 0.15)


def test_config_rejects_bad_heads() -> None:
    with pytest.raises(ValueError):
        BertConfig(vocab_size=10, hidden_size=30, num_heads=4)


@pytest.mark.parametrize("vocab", [40, 37])  # a multiple of 8 and one the decoder pads
def test_decoder_cross_entropy_equals_torchs(vocab: int) -> None:
    g = torch.Generator().manual_seed(0)
    h, w, b = (torch.randn(*shape, generator=g, requires_grad=True) for shape in ((9, 16), (vocab, 16), (vocab,)))
    targets = torch.randint(0, vocab, (9,), generator=g)
    loss, correct = DecoderCrossEntropy.apply(h, w, b, targets)
    grads = torch.autograd.grad(3 * loss, (h, w, b))
    logits = F.linear(h, w, b)
    ref = F.cross_entropy(logits, targets, reduction="sum")
    torch.testing.assert_close(loss, ref)
    assert correct == (logits.argmax(-1) == targets).sum()
    for got, want in zip(grads, torch.autograd.grad(3 * ref, (h, w, b))):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_rate_scale_and_gradient(p: float) -> None:
    torch.manual_seed(0)
    drop = Dropout(p).train()
    x = torch.ones(1001, 997, requires_grad=True)  # numel not a multiple of 4
    y = drop(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - p) < 0.002  # binomial s.d. ~0.0005
    for lane in range(4):  # each 16-bit quarter of the 64-bit draws is uniform (no sign-bit bias)
        assert abs(1 - kept.flatten()[lane::4].float().mean().item() - p) < 0.004
    assert torch.allclose(y[kept], torch.tensor(1 / (1 - p)), rtol=1e-4)
    assert abs(y.mean().item() - 1) < 0.005
    y.backward(torch.full_like(y, 2.0))
    assert torch.equal(x.grad, y.detach() * 2)
    assert not torch.equal(drop(x), y)  # a fresh mask each call
    assert torch.equal(drop.eval()(x), x) and torch.equal(Dropout(0.0).train()(x), x)


def test_dropout_keeps_its_cpu_masks_and_uses_torchs_own_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3, 5, 7)
    torch.manual_seed(1)
    got = Dropout(0.1).train()(x)
    torch.manual_seed(1)  # the CPU masks as they always were: 4 x 16-bit lanes of one 64-bit draw
    bits = torch.empty((x.numel() + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    keep = bits.view(torch.int16)[: x.numel()].view(x.shape) >= round(0.1 * 2**16) - 2**15
    assert torch.equal(got, x * torch.where(keep, 2**16 / (2**16 - round(0.1 * 2**16)), 0.0))
    calls = []
    monkeypatch.setattr(F, "dropout", lambda t, p, training: calls.append((t.device.type, p, training)) or t)
    Dropout(0.1).train()(x)
    Dropout(0.1).train()(torch.empty(3, 5, 7, device="meta"))  # any non-CPU device, as CUDA
    assert calls == [("meta", 0.1, True)]
