"""The normalization variants of chapter 11: DyT, Peri-LN, OLMo 2's reordered norm, DeepNorm and
no norm at all. Each block is checked against its paper's formula written out with the block's
own sub-layers, and each model for shapes, gradients, cached generation and bad configs."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from gpt2ln import GPT2, DyT, GPT2Config, LayerNorm, RMSNorm, dyt
from gpt2ln.model.loading import config_to_json

CFG = GPT2Config(vocab_size=61, n_ctx=32, n_embd=32, n_layer=3, n_head=4)
POSITIONS = ["pre", "post", "peri", "olmo2", "deepnorm"]
NORMS = ["layernorm", "rmsnorm", "dyt", "none"]


def dyt_f64(x, alpha, g, b):
    return np.tanh(alpha * np.asarray(x, np.float64)) * np.asarray(g, np.float64) + np.asarray(b, np.float64)


# ------------------------------------------------------------------------------------ DyT
def test_dyt_matches_the_paper_formula_in_float64():
    torch.manual_seed(0)
    x, g, b = torch.randn(2, 5, 16) * 4, torch.randn(16), torch.randn(16)
    ref = dyt_f64(x, 0.7, g, b)
    np.testing.assert_allclose(
        dyt(x.double(), 0.7, g.double(), b.double()).numpy(), ref, rtol=1e-12, atol=1e-12
    )
    m = DyT(16, alpha_init=0.7)
    with torch.no_grad():
        m.weight.copy_(g)
        m.bias.copy_(b)
    np.testing.assert_allclose(m(x).detach().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_dyt_parameters_init_and_gradients():
    m = DyT(8, alpha_init=0.5).double()
    assert m.alpha.shape == (1,) and m.alpha.item() == 0.5
    assert torch.equal(m.weight, torch.ones(8, dtype=torch.float64)) and torch.equal(
        m.bias, torch.zeros(8, dtype=torch.float64)
    )
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(m, (x,))
    m(x).sum().backward()
    assert m.alpha.grad is not None and m.alpha.grad.abs().item() > 0  # alpha is learned
    # DyT is bounded by |weight| + |bias| whatever the input scale: tanh saturates
    assert m(torch.full((1, 8), 1e6, dtype=torch.float64)).abs().max().item() <= 1.0


def test_dyt_bad_input_is_named():
    with pytest.raises(ValueError, match=r"alpha_init > 0, got -1"):
        DyT(4, alpha_init=-1)
    with pytest.raises(ValueError, match=r"expected x of shape \[\.\.\., 4\], got shape \(2, 3\)"):
        DyT(4)(torch.randn(2, 3))
    with pytest.raises(TypeError, match="alpha to be a number or a 1-element tensor, got str"):
        dyt(torch.randn(2, 4), "0.5")
    with pytest.raises(TypeError, match=r"got a tensor of shape \(4,\)"):
        dyt(torch.randn(2, 4), torch.ones(4))
    with pytest.raises(ValueError, match=r"weight of shape \(4,\)"):
        dyt(torch.randn(2, 4), 0.5, torch.ones(3))


# ---------------------------------------------------------------------------------- config
def test_config_constants_and_final_norm_defaults():
    c = GPT2Config(n_layer=12)
    assert math.isclose(c.deepnorm_alpha, 24**0.25) and math.isclose(c.deepnorm_beta, 96**-0.25)
    assert math.isclose(c.deepnorm_alpha, 2.2134, rel_tol=1e-4) and math.isclose(
        c.deepnorm_beta, 0.3195, rel_tol=1e-3
    )
    finals = {p: CFG.replace(norm_position=p).use_final_norm for p in POSITIONS}
    assert finals == {"pre": True, "post": False, "peri": True, "olmo2": True, "deepnorm": False}
    assert CFG.is_gpt2 and not CFG.replace(norm_position="peri").is_gpt2


def test_bad_variant_configs_are_named():
    with pytest.raises(ValueError, match="norm_position in"):
        CFG.replace(norm_position="sandwich")
    with pytest.raises(ValueError, match="norm in"):
        CFG.replace(norm="batchnorm")
    with pytest.raises(ValueError, match='qk_norm=True needs a norm; got norm="none"'):
        CFG.replace(norm="none", qk_norm=True)
    with pytest.raises(ValueError, match="dyt_alpha > 0, got 0"):
        CFG.replace(dyt_alpha=0)
    with pytest.raises(ValueError, match="norm_position='olmo2'"):
        config_to_json(CFG.replace(norm_position="olmo2"))


# -------------------------------------------------------------------- blocks vs formulas
def _block(position, norm="layernorm"):
    torch.manual_seed(0)
    model = GPT2(CFG.replace(norm_position=position, norm=norm))
    with torch.no_grad():  # non-trivial gains and biases so a misplaced norm shows
        for name, p in model.named_parameters():
            if ".ln_" in name or "alpha" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model.h[1].eval()


def _attn(block, x):
    return block.attn(x)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt"])
@pytest.mark.parametrize("position", POSITIONS)
def test_block_computes_its_papers_formula(position, norm):
    b = _block(position, norm)
    x = torch.randn(2, 7, CFG.n_embd) * 3
    attn, mlp, ln_1, ln_2 = (lambda h: _attn(b, h)), b.mlp, b.ln_1, b.ln_2
    a = CFG.deepnorm_alpha
    if position == "pre":  # GPT-2
        h = x + attn(ln_1(x))
        ref = h + mlp(ln_2(h))
    elif position == "post":  # Vaswani et al., GPT-1
        h = ln_1(x + attn(x))
        ref = ln_2(h + mlp(h))
    elif position == "peri":  # Peri-LN / Gemma 2: norm on each sub-layer's input and output
        h = x + b.ln_attn_out(attn(ln_1(x)))
        ref = h + b.ln_mlp_out(mlp(ln_2(h)))
    elif position == "olmo2":  # OLMo 2: x + Norm(f(x))
        h = x + ln_1(attn(x))
        ref = h + ln_2(mlp(h))
    else:  # DeepNorm: LN(alpha x + f(x))
        h = ln_1(a * x + attn(x))
        ref = ln_2(a * h + mlp(h))
    with torch.no_grad():
        out = b(x)
        torch.testing.assert_close(out, ref.detach(), atol=1e-5, rtol=1e-5)


def test_norm_types_and_counts_per_variant():
    expect = {"pre": 2, "post": 2, "peri": 4, "olmo2": 2, "deepnorm": 2}
    kinds = {"layernorm": LayerNorm, "rmsnorm": RMSNorm, "dyt": DyT}
    for position in POSITIONS:
        for norm, kind in kinds.items():
            model = GPT2(CFG.replace(norm_position=position, norm=norm))
            per_block = [m for m in model.h[0].modules() if isinstance(m, kind)]
            assert len(per_block) == expect[position], (position, norm)
            assert isinstance(model.ln_f, kind) == CFG.replace(norm_position=position).use_final_norm
    none = GPT2(CFG.replace(norm="none"))
    assert not any(isinstance(m, (LayerNorm, RMSNorm, DyT)) for m in none.modules())
    assert isinstance(none.ln_f, nn.Identity)


def test_no_norm_model_is_the_plain_residual_sum():
    torch.manual_seed(0)
    model = GPT2(CFG.replace(norm="none")).eval()
    idx = torch.randint(0, CFG.vocab_size, (2, 9))
    with torch.no_grad():
        x = model.wte(idx) + model.wpe(torch.arange(9))
        for b in model.h:
            x = x + _attn(b, x)
            x = x + b.mlp(x)
        torch.testing.assert_close(model(idx), x @ model.wte.weight.T, atol=1e-5, rtol=0)


@pytest.mark.parametrize("position", ["olmo2", "peri"])
def test_output_norms_make_each_update_unit_rms(position):
    """With RMSNorm (gain 1) on the sub-layer output, what is added to the stream has RMS 1 per token.

    (With a tiny eps: at init a sub-layer's output has RMS ~1e-3, so eps = 1e-6 inside the root
    would still damp it; the chapter shows this.)"""
    model = GPT2(CFG.replace(norm_position=position, norm="rmsnorm", layer_norm_epsilon=1e-20)).eval()
    _, cache = model.run_with_cache(torch.randint(0, CFG.vocab_size, (2, 11)))
    for layer in range(CFG.n_layer):
        for key in (f"attn_out.{layer}", f"mlp_out.{layer}"):
            rms = cache[key].pow(2).mean(-1).sqrt()
            torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-4, rtol=0)


def test_deepnorm_init_scales_values_outputs_and_mlp_by_beta():
    cfg = GPT2Config(vocab_size=61, n_ctx=32, n_embd=256, n_layer=6, n_head=4, norm_position="deepnorm")
    torch.manual_seed(0)
    model = GPT2(cfg)
    d, beta = cfg.n_embd, cfg.deepnorm_beta
    for block in model.h:
        w = block.attn.c_attn.weight
        assert abs(w[: 2 * d].std().item() - 0.02) < 0.001  # queries and keys: plain GPT-2 init
        assert abs(w[2 * d :].std().item() - 0.02 * beta) < 0.001  # values: beta
        for lin in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            assert abs(lin.weight.std().item() - 0.02 * beta) < 0.001
        assert block.alpha == cfg.deepnorm_alpha


# ------------------------------------------------------------------------ whole models
VARIANTS = [{"norm_position": p} for p in POSITIONS] + [
    {"norm": "dyt"},
    {"norm": "dyt", "norm_position": "peri"},
    {"norm": "none"},
    {"norm": "rmsnorm", "norm_position": "olmo2", "qk_norm": True},
    {"norm": "dyt", "qk_norm": True},
]


@pytest.mark.parametrize("changes", VARIANTS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_variant_forward_backward_and_cached_generation(changes):
    torch.manual_seed(0)
    model = GPT2(CFG.replace(**changes))
    idx = torch.randint(0, CFG.vocab_size, (2, 10))
    logits = model(idx)
    assert logits.shape == (2, 10, CFG.vocab_size) and torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} gets no gradient"
    model.eval()
    cached = model.generate(idx[:, :4], 12, temperature=0)
    assert torch.equal(cached, model.generate(idx[:, :4], 12, temperature=0, use_cache=False))
