"""Checks for chapter 3, the backward pass of LayerNorm.

- ``check_layer_norm_backward(fn)``: ``fn(dy, x, g, eps=1e-5) -> (dx, dg, db)``.
- ``check_ln_jacobian(fn)``: ``fn(x) -> J``, the ``[d, d]`` Jacobian of LayerNorm without
  affine (eps = 1e-5) at one token ``x`` ``[d]``, in closed form.
- ``check_rms_norm_backward(fn)``: ``fn(dy, x, g, eps=1e-5) -> (dx, dg)`` for RMSNorm
  ``y = g·x·r``, ``r = 1/sqrt(mean(x²) + eps)``: the backward the learner derives with the
  chapter's method (``RMS_BACKWARD_MISTAKES``).

Each check compares with the correct formula and, when the answer is wrong, with a
reference implementation of every classic mistake it knows (``BACKWARD_MISTAKES``,
``JACOBIAN_MISTAKES``, ``RMS_BACKWARD_MISTAKES``), so the failure message can name the mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._core import (
    Mistake,
    as_tensor,
    as_tuple,
    call,
    close,
    fail,
    fail_mistake,
    nearest_mistake,
    passed,
)

EPS = 1e-5
TOL = 1e-8  # inputs are float64: a correct answer agrees to ~1e-15

# name -> its fix; every name appears verbatim in the failure message it causes
_BACKWARD_FIXES: dict[str, str] = {
    "wrong sum axis": (
        "dg and db are sums over every leading axis (batch and time), one number per feature: "
        "shape (d,). Summing over the feature axis, or over only the first axis, is wrong."
    ),
    "averaged instead of summed": (
        "dg = Σ dy·x̂ and db = Σ dy are sums over all tokens, not means: every token adds "
        "its own contribution to the shared parameters."
    ),
    "used x instead of x̂ in dg": "y = g·x̂ + b, so dg = Σ dy·x̂ uses the normalized input x̂, not x.",
    "forgot to multiply dy by g": (
        "the gradient reaching x̂ is dx̂ = dy·g (the gain scales it); use dx̂, not dy, in dx."
    ),
    "forgot the mean(dx̂) term": (
        "dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)): the mean(dx̂) term is the gradient "
        "that flows back through the mean μ."
    ),
    "forgot the x̂·mean(dx̂·x̂) term": (
        "dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)): the x̂·mean(dx̂·x̂) term is the gradient "
        "that flows back through the variance (through rstd)."
    ),
    "wrong sign on x̂·mean(dx̂·x̂)": (
        "the variance term is subtracted: dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)); "
        "d rstd / d var = −rstd³/2 is negative."
    ),
    "used std instead of rstd": (
        "dx is multiplied by rstd = 1/sqrt(var + eps), not by the standard deviation sqrt(var + eps)."
    ),
    "Bessel-corrected variance": (
        "LayerNorm's variance is biased: mean((x − μ)²), dividing by d, not d − 1 "
        "(torch.var defaults to d − 1: pass correction=0, or unbiased=False)."
    ),
    "forgot eps": (
        "rstd = 1/sqrt(var + eps): without eps the answer is off by a relative eps/(2·var), "
        "which is large when the variance is comparable to eps."
    ),
}

_JACOBIAN_FIXES: dict[str, str] = {
    "forgot the 11ᵀ/d term": (
        "J = rstd·(I − 11ᵀ/d − x̂x̂ᵀ/d): the −11ᵀ/d part comes from subtracting the mean; "
        "without it J·1 ≠ 0, yet shifting every feature by the same amount changes nothing."
    ),
    "forgot the x̂x̂ᵀ/d term": (
        "J = rstd·(I − 11ᵀ/d − x̂x̂ᵀ/d): the −x̂x̂ᵀ/d part comes from dividing by the standard "
        "deviation, which itself depends on x."
    ),
    "dropped the 1/d on x̂x̂ᵀ": (
        "the variance term is x̂x̂ᵀ/d: the variance is a mean over d features, so its derivative carries 1/d."
    ),
    "used x − mean instead of x̂": (
        "the outer product is of the normalized x̂ = (x − μ)·rstd, not of x − μ: "
        "rstd·(x−μ)(x−μ)ᵀ·rstd²/d = rstd·x̂x̂ᵀ/d."
    ),
    "used std instead of rstd": (
        "J is multiplied by rstd = 1/sqrt(var + eps), not by the standard deviation sqrt(var + eps)."
    ),
    "Bessel-corrected variance": (
        "LayerNorm's variance is biased: mean((x − μ)²), dividing by d, not d − 1 "
        "(torch.var defaults to d − 1: pass correction=0)."
    ),
    "forgot eps": (
        "rstd = 1/sqrt(var + eps): without eps J is off by a relative eps/(2·var), "
        "which is large when the variance is comparable to eps."
    ),
}


def _stats(x: torch.Tensor, eps: float, mistake: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x ``[..., d]`` -> (x̂ ``[..., d]``, rstd ``[..., 1]``), possibly with a mistake."""
    correction = 1 if mistake == "Bessel-corrected variance" else 0
    xc = x - x.mean(-1, keepdim=True)
    var = x.var(-1, correction=correction, keepdim=True)
    rstd = 1.0 / torch.sqrt(var + (0.0 if mistake == "forgot eps" else eps))
    return xc * rstd, rstd


def _backward(
    dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor, eps: float, mistake: str | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The correct (dx, dg, db), or what one named mistake gives."""
    xhat, rstd = _stats(x, eps, mistake)
    lead = dy.reshape(-1, dy.shape[-1])  # [N, d]
    n = lead.shape[0]
    db = lead.sum(0)
    dg = (dy * (x if mistake == "used x instead of x̂ in dg" else xhat)).reshape(-1, dy.shape[-1]).sum(0)
    if mistake == "averaged instead of summed":
        db, dg = db / n, dg / n
    dxhat = dy if mistake == "forgot to multiply dy by g" else dy * g
    term_mean = dxhat.mean(-1, keepdim=True)
    term_var = xhat * (dxhat * xhat).mean(-1, keepdim=True)
    if mistake == "forgot the mean(dx̂) term":
        term_mean = torch.zeros_like(term_mean)
    if mistake == "forgot the x̂·mean(dx̂·x̂) term":
        term_var = torch.zeros_like(term_var)
    if mistake == "wrong sign on x̂·mean(dx̂·x̂)":
        term_var = -term_var
    scale = 1.0 / rstd if mistake == "used std instead of rstd" else rstd
    dx = scale * (dxhat - term_mean - term_var)
    return dx, dg, db


def _flat(outs: Any) -> torch.Tensor:
    """(dx, dg, db) or (J,) as one float64 vector, so one distance compares them all."""
    return torch.cat([t.reshape(-1).double() for t in outs])


def _diagnose(
    check: str, what: str, y: torch.Tensor, truth: torch.Tensor, mistakes: Any, args: tuple
) -> None:
    """Fail naming the mistake whose outputs (``m.fn(*args)``, flattened) are nearest y, or generically."""
    best, explains = nearest_mistake(mistakes.values(), lambda m: _flat(m.fn(*args)), y, truth, TOL)
    if best is not None and explains:
        fail_mistake(check, what, best.label, best.fix)
    fail(check, what)


# fn(dy, x, g, eps) -> (dx, dg, db) with that mistake; "wrong sum axis" is told by dg's shape
BACKWARD_MISTAKES: dict[str, Mistake] = {
    k: Mistake(k, v, lambda dy, x, g, eps, k=k: _backward(dy, x, g, eps, k))
    for k, v in _BACKWARD_FIXES.items()
}


def _cases(seed: int, specs: list[tuple[str, tuple[int, ...], float, float]]) -> list[tuple]:
    """``(label, dy, x, g)`` per spec ``(label, shape, offset, scale)``: x = offset + scale·N(0, 1),
    g = 1 + 0.5·N(0, 1), dy = N(0, 1), float64, from one seeded generator."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for label, shape, offset, scale in specs:
        d = shape[-1]
        x = offset + scale * torch.randn(shape, generator=gen, dtype=torch.float64)
        g = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        dy = torch.randn(shape, generator=gen, dtype=torch.float64)
        cases.append((label, dy, x, g))
    return cases


def _backward_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    return _cases(3, [
        ("x of shape [2, 3, 8], features 1 + 3·N(0, 1)", (2, 3, 8), 1.0, 3.0),
        ("x of shape [5, 6], features 0.5 + 0.003·N(0, 1) (variance near eps)", (5, 6), 0.5, 3e-3),
    ])


def check_layer_norm_backward(fn: Callable[..., Any]) -> None:
    """Check ``fn(dy, x, g, eps=1e-5) -> (dx, dg, db)`` for LayerNorm ``y = g·x̂ + b``.

    dy, x: ``[..., d]`` float64; g: ``[d]``. Expected: dx ``[..., d]``, dg and db ``[d]``
    (summed over every leading axis).
    """
    check = "check_layer_norm_backward"
    for label, dy, x, g in _backward_cases():
        d = x.shape[-1]
        out = call(check, fn, dy.clone(), x.clone(), g.clone(), eps=EPS)
        out = as_tuple(check, out, ("dx", "dg", "db"))
        dx = as_tensor(check, out[0], x, "dx")
        flat = torch.empty(d, dtype=x.dtype)
        for what, t in (("dg", out[1]), ("db", out[2])):
            shape = tuple(t.shape) if hasattr(t, "shape") else None
            if shape != (d,):
                why = f"wrong sum axis: {_BACKWARD_FIXES['wrong sum axis']}"
                fail(check, f"on {label}, {what} has shape {shape}, expected ({d},)", why)
        dg, db = as_tensor(check, out[1], flat, "dg"), as_tensor(check, out[2], flat, "db")
        outs, refs = (dx, dg, db), _backward(dy, x, g, EPS)
        for o, r, what in zip(outs, refs, ("dx", "dg", "db"), strict=True):
            if not close(o, r, TOL):
                what_failed = f"on {label}, {what} is off by up to {(o - r).abs().max().item():.3g}"
                _diagnose(check, what_failed, _flat(outs), _flat(refs), BACKWARD_MISTAKES, (dy, x, g, EPS))
    passed(check, "dx, dg and db match the reference on [2, 3, 8] and [5, 6] inputs, eps included")


def _jacobian(x: torch.Tensor, eps: float, mistake: str | None = None) -> torch.Tensor:
    """The ``[d, d]`` Jacobian of LayerNorm without affine at x ``[d]``, or a mistaken one."""
    d = x.shape[-1]
    xhat, rstd = _stats(x, eps, mistake)
    if mistake == "used x − mean instead of x̂":
        xhat = x - x.mean()
    eye = torch.eye(d, dtype=x.dtype)
    ones = torch.full((d, d), 1.0 / d, dtype=x.dtype)
    outer = torch.outer(xhat, xhat) / (1 if mistake == "dropped the 1/d on x̂x̂ᵀ" else d)
    if mistake == "forgot the 11ᵀ/d term":
        ones = torch.zeros_like(ones)
    if mistake == "forgot the x̂x̂ᵀ/d term":
        outer = torch.zeros_like(outer)
    scale = 1.0 / rstd if mistake == "used std instead of rstd" else rstd
    return scale * (eye - ones - outer)


JACOBIAN_MISTAKES: dict[str, Mistake] = {
    k: Mistake(k, v, lambda x, eps, k=k: (_jacobian(x, eps, k),)) for k, v in _JACOBIAN_FIXES.items()
}


def check_ln_jacobian(fn: Callable[..., Any]) -> None:
    """Check ``fn(x) -> J``: the ``[d, d]`` Jacobian dLN(x)/dx of LayerNorm without affine.

    x: one token ``[d]`` float64; eps = 1e-5. ``J[i, j] = d y_i / d x_j``.
    """
    check = "check_ln_jacobian"
    gen = torch.Generator().manual_seed(4)
    for label, d, offset, scale in [
        ("a token of width 8, features 1 + 2·N(0, 1)", 8, 1.0, 2.0),
        ("a token of width 5, features −0.3 + 0.003·N(0, 1) (variance near eps)", 5, -0.3, 3e-3),
    ]:
        x = offset + scale * torch.randn(d, generator=gen, dtype=torch.float64)
        want = _jacobian(x, EPS)
        got = as_tensor(check, call(check, fn, x.clone()), want, "J")
        if not close(got, want, TOL):
            err = (got - want).abs().max().item()
            what = f"on {label}, J is off by up to {err:.3g}"
            _diagnose(check, what, _flat([got]), _flat([want]), JACOBIAN_MISTAKES, (x, EPS))
    passed(check, "J = rstd·(I − 11ᵀ/d − x̂x̂ᵀ/d) on tokens of width 8 and 5, eps included")


# ---------------------------------------------------------------- RMSNorm's backward (derived)

_RMS_FORMULA = "dx = r·(dx̂ − x̂·mean(dx̂·x̂)), dx̂ = dy·g, dg = Σ dy·x̂, with x̂ = x·r, r = 1/sqrt(mean(x²) + eps)"

_RMS_FIXES: dict[str, str] = {
    "wrong sum axis": (
        "dg is a sum over every leading axis (batch and time), one number per feature: shape (d,)."
    ),
    "averaged instead of summed": "dg = Σ dy·x̂ is a sum over all tokens, not a mean.",
    "used x instead of x̂ in dg": "y = g·x̂, so dg = Σ dy·x̂ uses the normalized input x̂ = x·r, not x.",
    "forgot to multiply dy by g": "the gradient reaching x̂ is dx̂ = dy·g; use dx̂, not dy, in dx.",
    "kept LayerNorm's mean(dx̂) term": (
        "RMSNorm does not subtract the mean, so no gradient flows back through a mean: "
        "dx = r·(dx̂ − x̂·mean(dx̂·x̂)), with no − mean(dx̂)."
    ),
    "used LayerNorm's centred x̂": (
        "RMSNorm does not centre: x̂ = x·r with r = 1/sqrt(mean(x²) + eps), not (x − μ)·rstd; "
        "and with no mean there is no mean(dx̂) term either."
    ),
    "forgot the x̂·mean(dx̂·x̂) term": (
        "r depends on x: the gradient that flows back through r (through mean(x²)) is −r·x̂·mean(dx̂·x̂)."
    ),
    "wrong sign on x̂·mean(dx̂·x̂)": ("the term through r is subtracted: dr/d mean(x²) = −r³/2 is negative."),
    "doubled the x̂·mean(dx̂·x̂) term": (
        "d/dm (m + eps)^(−1/2) = −½·r³ and d mean(x²)/dx = 2x/d: the ½ and the 2 cancel, "
        "leaving −r·x̂·mean(dx̂·x̂), not twice it."
    ),
    "summed instead of averaged in the x̂ term": (
        "mean(x²) divides by d, so the term through r carries 1/d: x̂·mean(dx̂·x̂), not x̂·Σ dx̂·x̂."
    ),
    "used rms instead of r": (
        "dx is multiplied by r = 1/sqrt(mean(x²) + eps), not by the root mean square sqrt(mean(x²) + eps)."
    ),
    "forgot eps": (
        "r = 1/sqrt(mean(x²) + eps): without eps the answer is off by a relative eps/(2·mean(x²)), "
        "which is large when mean(x²) is comparable to eps."
    ),
}


def _rms_backward(
    dy: torch.Tensor, x: torch.Tensor, g: torch.Tensor, eps: float, mistake: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The correct (dx, dg) of RMSNorm, or what one named mistake gives."""
    if mistake == "used LayerNorm's centred x̂":
        dx, dg, _ = _backward(dy, x, g, eps)
        return dx, dg
    r = 1.0 / torch.sqrt((x * x).mean(-1, keepdim=True) + (0.0 if mistake == "forgot eps" else eps))
    xhat = x * r
    dg = (dy * (x if mistake == "used x instead of x̂ in dg" else xhat)).reshape(-1, dy.shape[-1]).sum(0)
    if mistake == "averaged instead of summed":
        dg = dg / dy.reshape(-1, dy.shape[-1]).shape[0]
    dxhat = dy if mistake == "forgot to multiply dy by g" else dy * g
    reduce = torch.sum if mistake == "summed instead of averaged in the x̂ term" else torch.mean
    term = xhat * reduce(dxhat * xhat, -1, keepdim=True)
    term = {
        "forgot the x̂·mean(dx̂·x̂) term": 0.0 * term,
        "wrong sign on x̂·mean(dx̂·x̂)": -term,
        "doubled the x̂·mean(dx̂·x̂) term": 2.0 * term,
    }.get(mistake, term)
    if mistake == "kept LayerNorm's mean(dx̂) term":
        term = term + dxhat.mean(-1, keepdim=True)
    scale = 1.0 / r if mistake == "used rms instead of r" else r
    return scale * (dxhat - term), dg


RMS_BACKWARD_MISTAKES: dict[str, Mistake] = {
    k: Mistake(k, v, lambda dy, x, g, eps, k=k: _rms_backward(dy, x, g, eps, k))
    for k, v in _RMS_FIXES.items()
    if k != "wrong sum axis"  # told by dg's shape
}


def _rms_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    return _cases(5, [
        ("x of shape [2, 3, 8], features 1 + 3·N(0, 1)", (2, 3, 8), 1.0, 3.0),
        ("x of shape [5, 6], features −0.002 + 0.003·N(0, 1) (mean(x²) near eps)", (5, 6), -2e-3, 3e-3),
    ])


def check_rms_norm_backward(fn: Callable[..., Any]) -> None:
    """Check ``fn(dy, x, g, eps=1e-5) -> (dx, dg)`` for RMSNorm ``y = g·x̂``, ``x̂ = x/sqrt(mean(x²) + eps)``.

    dy, x: ``[..., d]`` float64; g: ``[d]``. Expected: dx ``[..., d]``, dg ``[d]`` (summed over
    every leading axis).
    """
    check = "check_rms_norm_backward"
    for label, dy, x, g in _rms_cases():
        d = x.shape[-1]
        out = call(check, fn, dy.clone(), x.clone(), g.clone(), eps=EPS)
        out = as_tuple(check, out, ("dx", "dg"))
        dx = as_tensor(check, out[0], x, "dx")
        shape = tuple(out[1].shape) if hasattr(out[1], "shape") else None
        if shape != (d,):
            why = f"wrong sum axis: {_RMS_FIXES['wrong sum axis']}"
            fail(check, f"on {label}, dg has shape {shape}, expected ({d},)", why)
        dg = as_tensor(check, out[1], torch.empty(d, dtype=x.dtype), "dg")
        outs, refs = (dx, dg), _rms_backward(dy, x, g, EPS)
        for o, r, what in zip(outs, refs, ("dx", "dg"), strict=True):
            if not close(o, r, TOL):
                what_failed = f"on {label}, {what} is off by up to {(o - r).abs().max().item():.3g}"
                best, explains = nearest_mistake(
                    RMS_BACKWARD_MISTAKES.values(),
                    lambda m, args=(dy, x, g, EPS): _flat(m.fn(*args)),
                    _flat(outs),
                    _flat(refs),
                    TOL,
                )
                if best is not None and explains:
                    fail_mistake(check, what_failed, best.label, best.fix)
                fail(check, f"{what_failed} (no single classic mistake explains it); expected {_RMS_FORMULA}")
    passed(check, "dx and dg match the derived formula on [2, 3, 8] and [5, 6] inputs, eps included")
