"""The backward pass of LayerNorm, written out by hand.

With ``x̂ = (x - mean(x)) * rstd``, ``rstd = 1 / sqrt(var(x) + eps)`` (biased
variance, per token over the last axis) and ``y = x̂ * g + b``, the gradients
given the upstream gradient ``dy`` are (llm.c, ``doc/layernorm``)::

    dx̂ = dy * g
    dx = rstd * (dx̂ - mean(dx̂) - x̂ * mean(dx̂ * x̂))   # means over the last axis
    dg = sum(dy * x̂)                                    # sums over every leading axis
    db = sum(dy)

``layer_norm_backward`` computes them from ``x``; ``LayerNormFunction`` is an
``autograd.Function`` whose forward saves ``x̂`` and ``rstd`` so that its backward
only applies the formula above.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from .norms import _check_input, _check_param, _compute_dtype


def _normalize(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x: ``[..., d]`` (already in the compute dtype) -> (x̂ ``[..., d]``, rstd ``[..., 1]``)."""
    mean = x.mean(dim=-1, keepdim=True)  # [..., 1]
    xc = x - mean  # [..., d]
    var = (xc * xc).mean(dim=-1, keepdim=True)  # [..., 1], biased, two-pass
    rstd = torch.rsqrt(var + eps)  # [..., 1]
    return xc * rstd, rstd


def _sum_leading(t: torch.Tensor) -> torch.Tensor:
    """``[..., d]`` -> ``[d]``: sum over every axis but the last (batch, time, ...).

    Careful: ``t.sum(dim=())`` would sum over *everything*, so a single token ``[d]``
    is returned as it is.
    """
    return t.reshape(-1, t.shape[-1]).sum(dim=0)


def _backward_from_saved(
    dy: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The formula, all tensors in one compute dtype.

    dy, xhat: ``[..., d]``; rstd: ``[..., 1]``; weight: ``[d]`` or None (a gain of ones).
    Returns dx ``[..., d]``, dweight ``[d]``, dbias ``[d]``.
    """
    dbias = _sum_leading(dy)  # [d]
    dweight = _sum_leading(dy * xhat)  # [d]
    dxhat = dy * weight if weight is not None else dy  # [..., d]
    dx = rstd * (dxhat - dxhat.mean(dim=-1, keepdim=True) - xhat * (dxhat * xhat).mean(dim=-1, keepdim=True))
    return dx, dweight, dbias


def layer_norm_backward(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``gpt2ln.layer_norm(x, weight, bias, eps)`` given the upstream ``dy``.

    dy, x: ``[..., d]`` (say ``[B, T, d]``); weight: ``[d]`` or None (None means a gain of
    ones; the bias does not enter the gradients). Returns ``(dx, dweight, dbias)``: dx
    ``[..., d]`` in x's dtype; dweight and dbias ``[d]``, summed over every leading axis,
    in weight's dtype (x's if weight is None). dweight is returned even when weight is
    None: it is the gradient a gain of ones would receive.

    float16/bfloat16 inputs are computed in float32 and cast back.
    """
    _check_input(x, eps, "layer_norm_backward")
    d = x.shape[-1]
    _check_param(weight, d, "weight", "layer_norm_backward")
    if not isinstance(dy, torch.Tensor):
        raise TypeError(f"layer_norm_backward: expected dy to be a torch.Tensor, got {type(dy).__name__}")
    if not dy.is_floating_point():
        raise TypeError(f"layer_norm_backward: expected a floating-point dy, got dtype {dy.dtype}")
    if dy.shape != x.shape:
        raise ValueError(
            f"layer_norm_backward: expected dy of x's shape {tuple(x.shape)}, got {tuple(dy.shape)}"
        )
    dtype = _compute_dtype(x)
    xhat, rstd = _normalize(x.to(dtype), eps)
    w = weight.to(dtype) if weight is not None else None
    dx, dweight, dbias = _backward_from_saved(dy.to(dtype), xhat, rstd, w)
    pdtype = weight.dtype if weight is not None else x.dtype
    return dx.to(x.dtype), dweight.to(pdtype), dbias.to(pdtype)


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm with a hand-written backward.

    ``LayerNormFunction.apply(x, weight, bias, eps)``: x ``[..., d]``; weight, bias ``[d]``
    or None. Forward saves x̂ ``[..., d]`` and rstd ``[..., 1]`` (in the compute dtype:
    float32 for half inputs) plus weight; backward applies the formula in the module
    docstring without recomputing the statistics. Use ``layer_norm_fn`` for checked input.
    Double backward is not supported (``once_differentiable``).
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        eps: float,
    ) -> torch.Tensor:
        dtype = _compute_dtype(x)
        xhat, rstd = _normalize(x.to(dtype), eps)
        y = xhat
        if weight is not None:
            y = y * weight.to(dtype)
        if bias is not None:
            y = y + bias.to(dtype)
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.x_dtype = x.dtype
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xhat, rstd, weight = ctx.saved_tensors
        dtype = xhat.dtype
        w = weight.to(dtype) if weight is not None else None
        dx, dweight, dbias = _backward_from_saved(dy.to(dtype), xhat, rstd, w)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        return (
            dx.to(ctx.x_dtype) if need_x else None,
            dweight.to(weight.dtype) if need_w and weight is not None else None,
            dbias.to(ctx.bias_dtype) if need_b and ctx.bias_dtype is not None else None,
            None,  # eps
        )


def layer_norm_fn(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``LayerNormFunction.apply`` with the input checks of ``gpt2ln.layer_norm``.

    x: ``[..., d]``; weight, bias: ``[d]`` or None. Returns ``[..., d]`` in x's dtype,
    the same values as ``gpt2ln.layer_norm``, with the hand-written backward.
    """
    _check_input(x, eps, "layer_norm_fn")
    d = x.shape[-1]
    _check_param(weight, d, "weight", "layer_norm_fn")
    _check_param(bias, d, "bias", "layer_norm_fn")
    return LayerNormFunction.apply(x, weight, bias, float(eps))
