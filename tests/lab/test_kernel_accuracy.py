"""The norm modules' one-pass kernels are no less accurate than PyTorch's own kernels.

On a grid of widths (1 to beyond 2^21, aligned and not) and input regimes (N(0,1), large offsets,
tiny and huge scales, constant rows, mixed scales), the max error of ``gpt2ln.LayerNorm`` /
``RMSNorm`` / ``DyT`` against a float64 reference is compared with the error of ``F.layer_norm`` /
``F.rms_norm`` / ``torch.tanh(alpha * x) * weight + bias`` on the same float32 input: a case fails
where ``module_err > 2 * torch_err + 2e-6``. Each case checks that the kernel under test really
ran (``fused.STATUS``): the C kernels, and the torch.compile fallback (``GPT2LN_NATIVE=0``) of
RMSNorm and DyT. ``fused.MIN_NUMEL`` is lowered so that a few rows take the kernel's path.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln.lab.fast import kernels as fused
from gpt2ln.lab.fast import native

WIDTHS = [1, 2, 3, 7, 64, 768, 1000, 4096, 16384, 65536, 2**20, 2**21 + 13]
REGIMES = ["normal", "offset1e3", "offset1e4", "tiny", "huge", "constant", "mixed"]


def make_input(d: int, regime: str, seed: int = 0) -> torch.Tensor:
    """A float32 input [rows, d]: a few rows, fewer for wide ones (about 2^18 elements at least)."""
    rows = max(2, min(64, 2**14 // d)) if d < 2**20 else 1
    g = torch.Generator().manual_seed(seed + d)
    z = torch.randn(rows, d, generator=g, dtype=torch.float64)
    x = {
        "normal": lambda: z,
        "offset1e3": lambda: 1e3 + z,
        "offset1e4": lambda: 1e4 + z,
        "tiny": lambda: 1e-20 * z,
        "huge": lambda: 1e18 * z,
        "constant": lambda: torch.full_like(z, 3.7).add_(torch.arange(rows, dtype=z.dtype)[:, None]),
        # each element at its own scale, from 1e-6 to 1e6
        "mixed": lambda: z * 10 ** (12 * torch.rand(rows, d, generator=g, dtype=z.dtype) - 6),
    }[regime]()
    return x.float().contiguous()


def params(d: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.linspace(0.5, 1.5, d), torch.linspace(-0.2, 0.2, d)


def _modules(d: int) -> dict[str, torch.nn.Module]:
    w, b = params(d)
    ln, rms, dy = gpt2ln.LayerNorm(d), gpt2ln.RMSNorm(d, eps=1e-6), gpt2ln.DyT(d, alpha_init=0.7)
    with torch.no_grad():
        for m in (ln, rms, dy):
            m.weight.copy_(w)
        ln.bias.copy_(b)
        dy.bias.copy_(b)
    return {"layer_norm": ln, "rms_norm": rms, "dyt": dy}


def torch_outputs(name: str, m: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's own kernel on float32 x, and the float64 reference (same formula, same input)."""
    d = x.shape[-1]
    if name == "layer_norm":
        f = lambda t: F.layer_norm(t, (d,), m.weight.to(t.dtype), m.bias.to(t.dtype), m.eps)  # noqa: E731
    elif name == "rms_norm":
        f = lambda t: F.rms_norm(t, (d,), m.weight.to(t.dtype), m.eps)  # noqa: E731
    else:
        f = lambda t: torch.tanh(m.alpha.to(t.dtype) * t) * m.weight.to(t.dtype) + m.bias.to(t.dtype)  # noqa: E731
    return f(x), f(x.double())


def errors(name: str, m: torch.nn.Module, x: torch.Tensor, expect: str) -> tuple[float, float]:
    """(module's max error, PyTorch's max error), both against float64; asserts that the module
    ran the kernel ``expect`` ("native" or "compiled")."""
    fused.STATUS.pop(name, None)
    with torch.no_grad():
        y = m(x)
        assert fused.STATUS.get(name) == expect, (name, x.shape, fused.STATUS)  # the kernel really ran
        y_torch, ref = torch_outputs(name, m, x)
    err = (y.double() - ref).abs().max().item()
    torch_err = (y_torch.double() - ref).abs().max().item()
    return err, torch_err


def check(err: float, torch_err: float, what: str) -> None:
    assert math.isfinite(err), f"{what}: the module's output is not finite"
    if math.isnan(torch_err):
        torch_err = math.inf  # PyTorch's kernel failed outright: any finite answer is no worse
    assert err <= 2 * torch_err + 2e-6, f"{what}: module error {err:.3g}, PyTorch's {torch_err:.3g}"


@pytest.fixture
def small_min_numel(monkeypatch):
    """Kernels for inputs of any size (the grid's inputs are a few rows); no decision cached."""
    monkeypatch.setattr(fused, "MIN_NUMEL", 1)
    monkeypatch.setattr(fused, "STATUS", {})
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(native, "STATUS", {})
    monkeypatch.setattr(native, "_LIB", [])
    monkeypatch.delenv("GPT2LN_COMPILE", raising=False)
    monkeypatch.delenv("GPT2LN_NATIVE", raising=False)


@pytest.fixture
def with_native(small_min_numel):
    if native.load() is None:
        pytest.skip(f"no C library here: {native.STATUS['step']}")


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "dyt"])
def test_c_kernel_no_less_accurate_than_pytorch(with_native, name, d):
    m = _modules(d)[name]
    for regime in REGIMES:
        x = make_input(d, regime)
        check(*errors(name, m, x, "native"), f"C {name}, d={d}, {regime}")


#: the compiled kernels compile once per shape: two widths (GPT-2's, and wide and unaligned)
COMPILED_WIDTHS = [768, 2**20 + 3]


@pytest.mark.parametrize("name", ["rms_norm", "dyt"])
def test_compiled_kernel_no_less_accurate_than_pytorch(small_min_numel, monkeypatch, name):
    monkeypatch.setenv("GPT2LN_NATIVE", "0")
    for d in COMPILED_WIDTHS:
        m = _modules(d)[name]
        for regime in REGIMES:
            x = make_input(d, regime)
            try:
                err, torch_err = errors(name, m, x, "compiled")
            except AssertionError:
                if fused.STATUS.get(name, "").startswith("unavailable"):
                    pytest.skip(f"no compiled kernel here: {fused.STATUS[name]}")
                raise
            check(err, torch_err, f"compiled {name}, d={d}, {regime}")
