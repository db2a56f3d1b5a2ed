"""gpt2ln.lab.fast.kernels: the norm modules' one-pass kernels (C from gpt2ln.lab.fast.native, or compiled by
torch.compile) give the readable functions' outputs, are used only where they pay (large CPU
inputs, no autograd), and fall back to the eager path, for good, when compiling fails."""

import shutil

import pytest
import torch

from gpt2ln import DyT, LayerNorm, RMSNorm, dyt, layer_norm, rms_norm
from gpt2ln.lab.fast import kernels as fused
from gpt2ln.lab.fast import native

D = 64
ROWS = fused.MIN_NUMEL // D  # [ROWS, D] is just large enough for the compiled kernel


def _modules():
    torch.manual_seed(0)
    ln, rms, dy = LayerNorm(D), RMSNorm(D, eps=1e-6), DyT(D, alpha_init=0.7)
    with torch.no_grad():
        for m in (ln, rms, dy):
            m.weight.copy_(torch.linspace(0.5, 1.5, D))
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(torch.linspace(-0.2, 0.2, D))
    return {
        "layer_norm": (ln, lambda x: layer_norm(x, ln.weight, ln.bias, ln.eps)),
        "rms_norm": (rms, lambda x: rms_norm(x, rms.weight, rms.eps)),
        "dyt": (dy, lambda x: dyt(x, dy.alpha, dy.weight, dy.bias)),
    }


@pytest.fixture
def fresh(monkeypatch):
    """No decision cached from an earlier test; the C kernels left out (GPT2LN_NATIVE=0), so the
    torch.compile path runs."""
    monkeypatch.setattr(fused, "STATUS", {})
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(native, "STATUS", {})
    monkeypatch.setattr(native, "_LIB", [])
    monkeypatch.delenv("GPT2LN_COMPILE", raising=False)
    monkeypatch.setenv("GPT2LN_NATIVE", "0")


@pytest.fixture
def with_native(fresh, monkeypatch):
    monkeypatch.delenv("GPT2LN_NATIVE")
    if native.load() is None:
        pytest.skip(f"no C library here: {native.STATUS['step']}")


@pytest.mark.parametrize("d", [64, 50, 2048])  # rows aligned for streaming stores, or not; chunked rows
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "dyt"])
def test_c_kernel_equals_the_readable_function(with_native, name, d):
    torch.manual_seed(0)
    ln, rms, dy = LayerNorm(d), RMSNorm(d, eps=1e-6), DyT(d, alpha_init=0.7)
    with torch.no_grad():
        for m in (ln, rms, dy):
            m.weight.copy_(torch.linspace(0.5, 1.5, d))
        ln.bias.copy_(torch.linspace(-0.2, 0.2, d))
        dy.bias.copy_(torch.linspace(-0.2, 0.2, d))
    module, readable = {
        "layer_norm": (ln, lambda x: layer_norm(x, ln.weight, ln.bias, ln.eps)),
        "rms_norm": (rms, lambda x: rms_norm(x, rms.weight, rms.eps)),
        "dyt": (dy, lambda x: dyt(x, dy.alpha, dy.weight, dy.bias)),
    }[name]
    x = torch.randn(-(-fused.MIN_NUMEL // d), d, generator=torch.Generator().manual_seed(1)) * 3 + 1
    with torch.no_grad():
        y = module(x)
        assert fused.STATUS[name] == "native", fused.STATUS  # the C kernel really ran
        torch.testing.assert_close(y, readable(x), atol=2e-5, rtol=2e-5)
        x3 = x.view(-1, 4, d)[:, 1:3]  # not contiguous: PyTorch's kernels
        torch.testing.assert_close(module(x3), readable(x3), atol=2e-5, rtol=2e-5)


def test_c_layer_norm_without_bias(with_native):
    ln = LayerNorm(D, bias=False)
    with torch.no_grad():
        ln.weight.copy_(torch.linspace(0.5, 1.5, D))
        x = torch.randn(ROWS, D)
        torch.testing.assert_close(ln(x), layer_norm(x, ln.weight, None, ln.eps), atol=2e-5, rtol=2e-5)
    assert fused.STATUS["layer_norm"] == "native"


@pytest.mark.skipif(
    (shutil.which("g++") is None and shutil.which("cc") is None) or fused._no_simd() is not None,
    reason="no C++ compiler, or no SIMD for inductor (ATEN_CPU_CAPABILITY=default): the eager path runs",
)
@pytest.mark.parametrize("name", ["rms_norm", "dyt"])  # LayerNorm's module calls F.layer_norm
def test_compiled_kernel_equals_the_readable_function(fresh, name):
    module, readable = _modules()[name]
    x = torch.randn(ROWS, D, generator=torch.Generator().manual_seed(1)) * 3 + 1
    with torch.no_grad():
        assert fused.wanted(x, *module.parameters())
        y = module(x)
        assert fused.STATUS[name] == "compiled", fused.STATUS  # the compiled kernel really ran
        torch.testing.assert_close(y, readable(x), atol=2e-5, rtol=2e-5)
        x16 = x.half()  # half precision: computed in float32, returned in float16 (norms)
        torch.testing.assert_close(module.half()(x16).float(), readable(x16).float(), atol=4e-3, rtol=4e-3)


def test_used_only_without_autograd_on_large_cpu_inputs(fresh, monkeypatch):
    w = torch.ones(D, requires_grad=True)
    big, small = torch.randn(ROWS, D), torch.randn(ROWS - 1, D)
    with torch.no_grad():
        assert fused.wanted(big, w) and not fused.wanted(small, w)
    assert not fused.wanted(big, w)  # autograd records: PyTorch's differentiable kernels
    assert fused.wanted(big, w.detach())  # nothing needs a gradient
    monkeypatch.setenv("GPT2LN_COMPILE", "0")
    with torch.no_grad():
        assert not fused.wanted(big, w)


@pytest.mark.parametrize("name", ["rms_norm", "dyt"])
def test_a_failing_compile_falls_back_once_and_for_good(fresh, monkeypatch, name):
    calls = []

    def broken(fn, **kw):
        calls.append(fn)
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    module, readable = _modules()[name]
    x = torch.randn(ROWS, D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(module(x), readable(x), atol=2e-5, rtol=2e-5)
    assert len(calls) == 1  # the decision is cached
    assert fused.STATUS[name] == "unavailable: RuntimeError: no C++ compiler here"


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "dyt"])
def test_module_gradients_equal_the_readable_functions(name):
    module, readable = _modules()[name]
    module = module.double()
    x = torch.randn(3, 5, D, dtype=torch.float64, requires_grad=True)
    up = torch.randn(3, 5, D, dtype=torch.float64)
    params = list(module.parameters())
    got = torch.autograd.grad((module(x) * up).sum(), [x, *params])
    want = torch.autograd.grad((readable(x) * up).sum(), [x, *params])
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_no_simd_means_no_compile(fresh, monkeypatch):
    monkeypatch.setattr(fused, "_no_simd", lambda: "scalar only")
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled without SIMD"))
    module, readable = _modules()["rms_norm"]
    x = torch.randn(ROWS, D)
    with torch.no_grad():
        torch.testing.assert_close(module(x), readable(x), atol=2e-5, rtol=2e-5)
    assert fused.STATUS["rms_norm"] == "unavailable: scalar only"
