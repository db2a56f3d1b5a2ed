"""Checks for chapter 11 (beyond LayerNorm).

``check_dyt(fn)`` checks ``fn(x, alpha, weight, bias)``, Dynamic Tanh
``weight * tanh(alpha * x) + bias`` (Zhu et al. 2025), against ``gpt2ln.dyt`` and names
the classic mistake a wrong output matches (alpha outside the tanh, the gain or bias inside
it, a norm first, ...). ``check_peri_block(fn)`` checks the Peri-LN block
``x + ln_out(f(ln_in(x)))`` for attention and the MLP, written from the six sub-layers of a
``gpt2ln.Block(norm_position="peri")``, and names the placement it matches instead (pre-norm,
OLMo 2, post-norm style, swapped norms, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ...model.norms import dyt
from ._core import (
    Mistake,
    call_on_copies,
    compare,
    fail,
    from_numpy,
    passed,
)
from .ch07 import _check_block

__all__ = ["check_dyt", "check_peri_block"]

# ------------------------------------------------------------------------------------------ DyT
_DYT_FORMULA = "weight * tanh(alpha * x) + bias"


def _dyt_mistakes() -> list[Mistake]:
    def ln(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:])

    fix = f"DyT is {_DYT_FORMULA}: alpha scales x inside the tanh, weight and bias act after it"
    return [
        Mistake(
            "applied alpha after the tanh: alpha * tanh(x)", fix, lambda x, a, w, b: w * a * torch.tanh(x) + b
        ),
        Mistake(
            "left out alpha: tanh(x) instead of tanh(alpha * x)",
            fix,
            lambda x, a, w, b: w * torch.tanh(x) + b,
        ),
        Mistake("divided by alpha: tanh(x / alpha)", fix, lambda x, a, w, b: w * torch.tanh(x / a) + b),
        Mistake(
            "put the gain inside the tanh: tanh(alpha * weight * x)",
            fix,
            lambda x, a, w, b: torch.tanh(a * w * x) + b,
        ),
        Mistake(
            "put the bias inside the tanh: tanh(alpha * x + bias)",
            fix,
            lambda x, a, w, b: w * torch.tanh(a * x + b),
        ),
        Mistake("swapped weight and bias", fix, lambda x, a, w, b: b * torch.tanh(a * x) + w),
        Mistake("forgot the bias", fix, lambda x, a, w, b: w * torch.tanh(a * x)),
        Mistake("forgot the gain (weight)", fix, lambda x, a, w, b: torch.tanh(a * x) + b),
        Mistake(
            "normalized x first: DyT replaces the norm, it does not follow one",
            "no mean, no variance: apply the tanh to alpha * x directly",
            lambda x, a, w, b: w * torch.tanh(a * ln(x)) + b,
        ),
        Mistake(
            "used a sigmoid instead of tanh",
            "torch.tanh: an S-curve from -1 to 1, centered at 0",
            lambda x, a, w, b: w * torch.sigmoid(a * x) + b,
        ),
    ]


def _dyt_cases() -> list[tuple[str, torch.Tensor, Any, torch.Tensor, torch.Tensor, float]]:
    gen = torch.Generator().manual_seed(11)

    def affine(d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        w = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        b = 0.3 * torch.randn(d, generator=gen, dtype=torch.float64)
        return w.to(dtype), b.to(dtype)

    x1 = 2.0 * torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
    x2 = torch.randn(4, 16, generator=gen, dtype=torch.float64).float()
    x3 = 20.0 * torch.randn(3, 12, generator=gen, dtype=torch.float64) + 5.0  # saturates
    return [
        ("x of shape [2, 3, 8], alpha = 0.5 (a float), float64", x1, 0.5, *affine(8, torch.float64), 1e-9),
        (
            "x of shape [4, 16], alpha a 1-element tensor (as DyT.alpha), float32",
            x2,
            torch.tensor([1.7]),
            *affine(16, torch.float32),
            1e-5,
        ),
        (
            "large x (shape [3, 12], tanh saturates), alpha = 0.3, float64",
            x3,
            0.3,
            *affine(12, torch.float64),
            1e-9,
        ),
    ]


def check_dyt(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, alpha, weight, bias) -> y`` is Dynamic Tanh.

    x: ``[..., d]``; alpha: a float or a 1-element tensor; weight, bias: ``[d]``. y must
    equal ``weight * tanh(alpha * x) + bias`` (``gpt2ln.dyt``) with x's shape and dtype,
    on three inputs (one saturating the tanh), without changing x in place.
    """
    check = "check_dyt"
    mistakes = _dyt_mistakes()
    for what, x, alpha, w, b, tol in _dyt_cases():
        with torch.no_grad():
            out = call_on_copies(
                check,
                fn,
                (x, alpha, w, b),
                names=("x", "alpha", "weight", "bias"),
                what=what,
                likely="write y = ..., not x.mul_(...) or x *= ...",
            )
        raw = from_numpy(out)
        if isinstance(raw, torch.Tensor) and raw.dtype != x.dtype:
            fail(check, f"on {what}, your output has dtype {raw.dtype}, expected {x.dtype} (x's)")
        compare(
            check,
            f"on {what}",
            raw,
            dyt(x, alpha, w, b),
            tol,
            mistakes,
            (x, alpha, w, b),
            formula=_DYT_FORMULA,
            skip=(RuntimeError, TypeError),
        )
    passed(check, f"matches gpt2ln.dyt, {_DYT_FORMULA}, on 3 inputs (float64, float32, saturated)")


# ------------------------------------------------------------------------------- Peri-LN block
_PERI_FORMULA = "h = x + ln_attn_out(attn(ln_1(x))); y = h + ln_mlp_out(mlp(ln_2(h)))"


def _peri(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
    h = x + lo_a(attn(ln_1(x)))
    return h + lo_m(mlp(ln_2(h)))


def _peri_mistakes() -> list[Mistake]:
    def pre(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + attn(ln_1(x))
        return h + mlp(ln_2(h))

    def olmo2(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + lo_a(attn(x))
        return h + lo_m(mlp(h))

    def stream(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = lo_a(x + attn(ln_1(x)))
        return lo_m(h + mlp(ln_2(h)))

    def in_out_swapped(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return _peri(x, attn, mlp, lo_a, lo_m, ln_1, ln_2)

    def attn_mlp_swapped(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return _peri(x, attn, mlp, ln_2, ln_1, lo_m, lo_a)

    def no_residual(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = lo_a(attn(ln_1(x)))
        return lo_m(mlp(ln_2(h)))

    def mlp_reads_x(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + lo_a(attn(ln_1(x)))
        return h + lo_m(mlp(ln_2(x)))

    def half(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return x + lo_a(attn(ln_1(x)))

    fix = f"Peri-LN normalizes each sub-layer's input and its output, then adds: {_PERI_FORMULA}"
    return [
        Mistake("forgot the output norms: that is pre-norm, GPT-2's block", fix, pre),
        Mistake("forgot the input norms: x + ln_out(f(x)) is OLMo 2's block", fix, olmo2),
        Mistake(
            "normalized the stream: ln_out(x + f(...)) normalizes the sum (post-norm style), not the update",
            "apply the output norm to the sub-layer's output before adding it: x + ln_attn_out(attn(...))",
            stream,
        ),
        Mistake(
            "swapped the input and output norms (ln_1 <-> ln_attn_out, ln_2 <-> ln_mlp_out)",
            fix,
            in_out_swapped,
        ),
        Mistake(
            "swapped the attention and MLP norms (ln_1 <-> ln_2, ln_attn_out <-> ln_mlp_out)",
            fix,
            attn_mlp_swapped,
        ),
        Mistake("forgot the residual: dropped the x + ... of each sub-layer", fix, no_residual),
        Mistake(
            "the MLP reads x instead of h, the stream after attention (a parallel block)", fix, mlp_reads_x
        ),
        Mistake("forgot the MLP half: returned h", fix, half),
    ]


def check_peri_block(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, attn, mlp, ln_1, ln_2, ln_attn_out, ln_mlp_out)`` is the Peri-LN block.

    x: ``[B, T, d]``; the six others are functions ``[B, T, d] -> [B, T, d]``, the sub-layers
    of a ``gpt2ln.Block(norm_position="peri")`` with random weights, gains and biases. The
    output must equal the block's, ``h = x + ln_attn_out(attn(ln_1(x)))``,
    ``y = h + ln_mlp_out(mlp(ln_2(h)))``, on two inputs (float64, float32).
    """
    outs = ("ln_attn_out", "ln_mlp_out")
    _check_block("check_peri_block", fn, "peri", _peri_mistakes(), _PERI_FORMULA, outs)
