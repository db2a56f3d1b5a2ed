"""layer_norm / rms_norm against float64 transcriptions of the official formulas,
against torch's own kernels, on hard inputs, and on bad input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln import LayerNorm, RMSNorm, layer_norm, rms_norm


def official_norm_f64(x, g, b, eps=1e-5):
    """openai/gpt-2 src/model.py `norm`, transcribed in numpy float64."""
    x = np.asarray(x, dtype=np.float64)
    u = x.mean(axis=-1, keepdims=True)
    s = np.square(x - u).mean(axis=-1, keepdims=True)
    x = (x - u) * (1.0 / np.sqrt(s + eps))
    return x * np.asarray(g, np.float64) + np.asarray(b, np.float64)


def rms_norm_f64(x, g, eps=1e-5):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps) * np.asarray(g, np.float64)


def _affine(d):
    return torch.randn(d) * 0.5 + 1.0, torch.randn(d) * 0.1


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 5, 64), (2, 3, 4, 32)])
def test_layer_norm_matches_official_formula_in_float64(shape):
    x = torch.randn(shape, dtype=torch.float64) * 3 + 1
    g, b = (t.double() for t in _affine(shape[-1]))
    ref = official_norm_f64(x.numpy(), g.numpy(), b.numpy())
    np.testing.assert_allclose(layer_norm(x, g, b).numpy(), ref, rtol=0, atol=1e-12)


def test_layer_norm_matches_torch_layer_norm_float32():
    x = torch.randn(4, 10, 768)
    g, b = _affine(768)
    torch.testing.assert_close(layer_norm(x, g, b), F.layer_norm(x, (768,), g, b, 1e-5), rtol=0, atol=2e-5)


def test_layer_norm_defaults_are_gpt2_eps_and_no_affine():
    x = torch.randn(3, 32)
    torch.testing.assert_close(layer_norm(x), F.layer_norm(x, (32,), eps=1e-5))
    # eps=1e-5 is really used: on a near-constant row it bounds the output
    flat = torch.full((1, 32), 2.0)
    flat[0, 0] += 1e-3
    expected = official_norm_f64(flat.double().numpy(), np.ones(32), np.zeros(32))
    np.testing.assert_allclose(layer_norm(flat.double()).numpy(), expected, atol=1e-12)


def test_layer_norm_is_two_pass_so_a_large_offset_does_not_cancel():
    x = 1e4 + torch.randn(8, 768)
    y = layer_norm(x)
    ref = official_norm_f64(x.double().numpy(), np.ones(768), np.zeros(768))
    assert torch.isfinite(y).all()
    np.testing.assert_allclose(y.numpy(), ref, atol=5e-3)
    # the one-pass formula really does fail here, so the test can tell them apart
    one_pass_var = (x * x).mean(-1) - x.mean(-1) ** 2
    assert (one_pass_var - 1.0).abs().max() > 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_half_precision_accumulates_in_float32(dtype):
    x32 = torch.randn(4, 768) * 1e3 + 500  # x^2 ~ 1e6 overflows float16 (max 65504)
    x = x32.to(dtype)
    g, b = _affine(768)
    y = layer_norm(x, g.to(dtype), b.to(dtype))
    assert y.dtype == dtype
    ref = official_norm_f64(x.double().numpy(), g.to(dtype).double().numpy(), b.to(dtype).double().numpy())
    tol = 1e-2 if dtype == torch.float16 else 5e-2  # one rounding of the output
    np.testing.assert_allclose(y.double().numpy(), ref, atol=tol)
    # and it agrees with torch's own kernel
    ref_torch = F.layer_norm(x, (768,), g.to(dtype), b.to(dtype))
    torch.testing.assert_close(y.float(), ref_torch.float(), atol=tol, rtol=0)


@pytest.mark.parametrize("shape", [(5,), (2, 3, 32), (2, 2, 2, 16)])
def test_rms_norm_matches_formula_and_torch(shape):
    x = torch.randn(shape, dtype=torch.float64) * 2 + 0.5
    g = torch.randn(shape[-1], dtype=torch.float64)
    np.testing.assert_allclose(rms_norm(x, g).numpy(), rms_norm_f64(x.numpy(), g.numpy()), atol=1e-12)
    torch.testing.assert_close(rms_norm(x, g), F.rms_norm(x, (shape[-1],), g, eps=1e-5))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_half_precision(dtype):
    x = (torch.randn(4, 768) * 1e3).to(dtype)
    y = rms_norm(x)
    assert y.dtype == dtype and torch.isfinite(y).all()
    np.testing.assert_allclose(y.double().numpy(), rms_norm_f64(x.double().numpy(), np.ones(768)), atol=2e-2)


def test_gradcheck_float64():
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    g = torch.randn(8, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(layer_norm, (x, g, b))
    assert torch.autograd.gradcheck(rms_norm, (x, g))


def test_modules_have_gpt2_parameters():
    ln = LayerNorm(768)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert sum(p.numel() for p in ln.parameters()) == 1536
    assert torch.equal(ln.weight, torch.ones(768)) and torch.equal(ln.bias, torch.zeros(768))
    assert ln.eps == 1e-5
    assert sum(p.numel() for p in LayerNorm(768, bias=False).parameters()) == 768
    rn = RMSNorm(768)
    assert [n for n, _ in rn.named_parameters()] == ["weight"] and rn.eps == 1e-5
    x = torch.randn(2, 3, 768)
    torch.testing.assert_close(ln(x), F.layer_norm(x, (768,)), atol=1e-5, rtol=0)
    torch.testing.assert_close(rn(x), F.rms_norm(x, (768,), eps=1e-5))


@pytest.mark.parametrize("fn", [layer_norm, rms_norm])
def test_bad_input_is_named(fn):
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"expected weight of shape \(8,\).*got shape \(7,\)"):
        fn(x, torch.ones(7))
    with pytest.raises(ValueError, match="eps > 0"):
        fn(x, eps=0.0)
    with pytest.raises(ValueError, match="eps > 0"):
        fn(x, eps=-1e-5)
    with pytest.raises(TypeError, match="floating-point.*torch.int64"):
        fn(torch.arange(8).reshape(1, 8))
    with pytest.raises(TypeError, match=r"torch.Tensor.*list"):
        fn([1.0, 2.0])
    with pytest.raises(ValueError, match="scalar"):
        fn(torch.tensor(1.0))


def test_bad_bias_and_module_arguments():
    with pytest.raises(ValueError, match=r"expected bias of shape \(4,\)"):
        layer_norm(torch.randn(3, 4), torch.ones(4), torch.zeros(3))
    with pytest.raises(ValueError, match="positive integer width"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="eps > 0"):
        RMSNorm(8, eps=0)


def test_get_device_returns_an_available_device():
    dev = gpt2ln.get_device()
    assert dev.type in ("cuda", "mps", "cpu")
    torch.zeros(1, device=dev)  # usable


# ---------------------------------------------------------------- fast paths
@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
@pytest.mark.parametrize(
    ("dtype", "tol"),
    [(torch.float64, 1e-12), (torch.float32, 2e-6), (torch.bfloat16, 3e-2), (torch.float16, 4e-3)],
)
def test_module_fast_path_equals_the_readable_function(cls, dtype, tol):
    torch.manual_seed(0)
    d = 64
    fast, slow = cls(d), cls(d, fast=False)
    assert fast.fast and not slow.fast
    with torch.no_grad():
        for m in (fast, slow):
            m.weight.copy_(torch.linspace(0.5, 1.5, d))
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(torch.linspace(-0.2, 0.2, d))
    fast, slow = fast.to(dtype), slow.to(dtype)
    x = (torch.randn(3, 5, d, dtype=torch.float64) * 3 + 1).to(dtype)
    y_fast, y_slow = fast(x), slow(x)
    assert y_fast.dtype == y_slow.dtype == dtype
    torch.testing.assert_close(y_fast.double(), y_slow.double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_module_fast_path_gradients_equal_the_readable_ones(cls):
    torch.manual_seed(1)
    d = 32
    fast, slow = cls(d).double(), cls(d, fast=False).double()
    slow.load_state_dict(fast.state_dict())
    with torch.no_grad():
        for m in (fast, slow):
            m.weight.add_(0.3)
    x = torch.randn(4, 7, d, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(4, 7, d, dtype=torch.float64)
    grads = []
    for m in (fast, slow):
        (gx,) = torch.autograd.grad((m(x) * upstream).sum(), x)
        grads.append((gx, *torch.autograd.grad((m(x) * upstream).sum(), list(m.parameters()))))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    assert torch.autograd.gradcheck(fast, (x,))


def test_set_fast_switches_every_norm_in_a_model():
    model = gpt2ln.GPT2(
        gpt2ln.GPT2Config(vocab_size=50, n_ctx=16, n_embd=32, n_layer=2, n_head=4, qk_norm=True)
    )
    norms = [m for m in model.modules() if isinstance(m, (LayerNorm, RMSNorm))]
    assert len(norms) == 2 * 2 + 2 * 2 + 1 and all(m.fast for m in norms)
    idx = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        fast = model(idx)
        assert gpt2ln.set_fast(model, False) is model
        assert not any(m.fast for m in norms)
        slow = model(idx)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_module_bad_input_is_named_on_the_fast_path(cls):
    m = cls(8)
    with pytest.raises(ValueError, match=r"expected x of shape \[\.\.\., 8\], got shape \(2, 7\)"):
        m(torch.randn(2, 7))
    with pytest.raises(TypeError, match="floating-point"):
        m(torch.ones(2, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        m([1.0] * 8)
