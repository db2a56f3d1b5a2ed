"""Normalization layers written from scratch, exactly as GPT-2's official code.

The official ``norm`` (openai/gpt-2, ``src/model.py``) is::

    u = mean(x, axis=-1)            # per token, over the d features
    s = mean(square(x - u), axis=-1)  # biased variance (divide by d, not d-1)
    x = (x - u) * rsqrt(s + 1e-5)   # epsilon inside the root
    x = x * g + b                   # gain g (ones), bias b (zeros)

``transformers`` calls ``g`` and ``b`` ``weight`` and ``bias``; papers call them
gamma and beta. Everything here works on any leading shape ``[..., d]``; in the
model that is ``[B, T, d]`` and the statistics have shape ``[B, T, 1]``.

Each norm comes twice: a readable function (``layer_norm``, ``rms_norm``, ``dyt``) and a
module (``LayerNorm``, ``RMSNorm``, ``DyT``) holding the parameters. The LayerNorm and
RMSNorm modules run a fast path by default (``fast=True``), the readable function with
``fast=False``; :func:`make_norm` builds the one a config asks for. The fast path is PyTorch's
fused ``F.layer_norm`` / ``F.rms_norm``. A one-pass kernel may plug in ahead of it
(:func:`register_one_pass`): ``gpt2ln.lab.fast`` registers its C kernels for large CPU inputs
without autograd when the package loads; this module imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import GPT2Config

_LOW_PRECISION = (torch.float16, torch.bfloat16)

#: ``kernel(name, x, *params) -> y or None``, name ``"layer_norm"``, ``"rms_norm"`` or ``"dyt"``:
#: a faster kernel for the modules' fast path, or None where it does not apply (set by
#: :func:`register_one_pass`; PyTorch's kernels otherwise).
_ONE_PASS: list[Callable[..., torch.Tensor | None]] = []


def register_one_pass(kernel: Callable[..., torch.Tensor | None] | None) -> None:
    """Plug ``kernel`` into the modules' fast path (None removes it). It is called with the
    module's input and parameters (LayerNorm: x, weight, bias, eps; RMSNorm: x, weight, eps; DyT:
    x, alpha, weight, bias) and returns the output, or None to leave it to PyTorch's kernel."""
    _ONE_PASS[:] = [] if kernel is None else [kernel]


def _one_pass(name: str, *args: torch.Tensor | float | None) -> torch.Tensor | None:
    return _ONE_PASS[0](name, *args) if _ONE_PASS else None


def _check_input(x: torch.Tensor, eps: float, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected x to be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(
            f"{name}: expected a floating-point tensor (float16/bfloat16/float32/float64), "
            f"got dtype {x.dtype}; convert with x.float() first"
        )
    if x.ndim == 0:
        raise ValueError(f"{name}: expected x with at least one dimension [..., d], got a scalar")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"{name}: expected eps to be a number, got {type(eps).__name__}")
    if not eps > 0:
        raise ValueError(f"{name}: expected eps > 0, got eps={eps}")


def _check_param(p: torch.Tensor | None, d: int, what: str, name: str) -> None:
    if p is not None and not isinstance(p, torch.Tensor):
        raise TypeError(f"{name}: expected {what} to be a torch.Tensor or None, got {type(p).__name__}")
    if p is not None and tuple(p.shape) != (d,):
        raise ValueError(
            f"{name}: expected {what} of shape ({d},) to match the last dimension of x, "
            f"got shape {tuple(p.shape)}"
        )


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """Half-precision inputs are accumulated in float32; others in their own dtype."""
    return torch.float32 if x.dtype in _LOW_PRECISION else x.dtype


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> torch.Tensor:
    """GPT-2's LayerNorm over the last axis.

    x: ``[..., d]``; weight, bias: ``[d]`` or None. Returns ``[..., d]`` in x's dtype.

    Two passes: the mean first, then the mean of squared deviations, so a large
    common offset (say 1e4 + N(0, 1)) does not cancel the way ``E[x^2] - E[x]^2``
    does. float16/bfloat16 inputs are computed in float32 and cast back.
    """
    _check_input(x, eps, "layer_norm")
    _check_param(weight, x.shape[-1], "weight", "layer_norm")
    _check_param(bias, x.shape[-1], "bias", "layer_norm")
    xf = x.to(_compute_dtype(x))
    mean = xf.mean(dim=-1, keepdim=True)  # [..., 1]
    xc = xf - mean  # [..., d]
    var = (xc * xc).mean(dim=-1, keepdim=True)  # [..., 1], biased
    y = xc * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    if bias is not None:
        y = y + bias.to(xf.dtype)
    return y.to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) over the last axis, eps inside the root.

    ``x / sqrt(mean(x^2) + eps) * weight``. x: ``[..., d]``; weight: ``[d]`` or None.
    eps defaults to 1e-5, GPT-2's LayerNorm eps, so the two norms compare like for like
    (Llama 2's code also uses 1e-5; Llama's ``RMSNorm`` class, T5, Gemma and Qwen use 1e-6).
    No centering, no bias. Half precision is accumulated in float32.
    """
    _check_input(x, eps, "rms_norm")
    _check_param(weight, x.shape[-1], "weight", "rms_norm")
    xf = x.to(_compute_dtype(x))
    y = xf * torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    return y.to(x.dtype)


def dyt(
    x: torch.Tensor,
    alpha: torch.Tensor | float,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Dynamic Tanh (Zhu et al. 2025): ``weight * tanh(alpha * x) + bias``, elementwise.

    x: ``[..., d]``; alpha: a number or a 1-element tensor; weight, bias: ``[d]`` or None.
    No statistics at all: each feature is squashed on its own, so DyT costs one
    elementwise pass and never looks across the d features the way a norm does.
    """
    _check_input(x, 1.0, "dyt")
    is_tensor = isinstance(alpha, torch.Tensor)
    if not (
        alpha.numel() == 1 if is_tensor else isinstance(alpha, (int, float)) and not isinstance(alpha, bool)
    ):
        got = f"a tensor of shape {tuple(alpha.shape)}" if is_tensor else type(alpha).__name__
        raise TypeError(f"dyt: expected alpha to be a number or a 1-element tensor, got {got}")
    _check_param(weight, x.shape[-1], "weight", "dyt")
    _check_param(bias, x.shape[-1], "bias", "dyt")
    y = torch.tanh(alpha * x)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _check_module_args(d: int, eps: float, name: str) -> None:
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"{name}: expected a positive integer width d, got {d!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"{name}: expected eps > 0, got eps={eps!r}")


def _check_module_input(x: torch.Tensor, d: int, name: str) -> None:
    """What a module's fast path needs: a float tensor ``[..., d]`` (TypeError/ValueError otherwise)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        _check_input(x, 1.0, name)
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(f"{name}: expected x of shape [..., {d}], got shape {tuple(x.shape)}")


def _cast(p: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """p in dtype (no call at all when it already is: these run once per norm per token)."""
    return p if p is None or p.dtype == dtype else p.to(dtype)


class LayerNorm(nn.Module):
    """LayerNorm with gain ``weight`` (GPT-2's ``g``) and ``bias`` (``b``), both ``[d]``.

    ``fast=True`` (the default) runs PyTorch's fused kernel ``F.layer_norm``, one pass
    over memory (or a kernel plugged in with :func:`register_one_pass`); ``fast=False`` runs the
    readable :func:`layer_norm` above, seven elementwise kernels. They compute the same formula
    (tested to float32 rounding, and in float16/bfloat16 both accumulate in float32), so the model
    can be read with the slow path and run with the fast one.
    """

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True, fast: bool = True) -> None:
        super().__init__()
        _check_module_args(d, eps, "LayerNorm")
        self.d, self.eps, self.fast = d, float(eps), bool(fast)
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., d]`` -> ``[..., d]``."""
        if not self.fast:
            return layer_norm(x, self.weight, self.bias, self.eps)
        _check_module_input(x, self.d, "LayerNorm")
        y = _one_pass("layer_norm", x, self.weight, self.bias, self.eps)  # a plugged-in kernel, if any
        if y is not None:
            return y
        # PyTorch's fused kernel, one pass over memory (on CPU at least as fast as a compiled one)
        return F.layer_norm(x, (self.d,), _cast(self.weight, x.dtype), _cast(self.bias, x.dtype), self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}, bias={self.bias is not None}, fast={self.fast}"


class RMSNorm(nn.Module):
    """RMSNorm with gain ``weight`` ``[d]`` (initialized to ones) and no bias; eps 1e-5 by
    default, the same as :class:`LayerNorm` (see :func:`rms_norm`).

    ``fast=True`` runs ``F.rms_norm`` (a fused kernel on GPUs; on CPU PyTorch composes it from a
    few kernels; a kernel plugged in with :func:`register_one_pass` may run instead), ``fast=False``
    the readable :func:`rms_norm`.
    """

    def __init__(self, d: int, eps: float = 1e-5, fast: bool = True) -> None:
        super().__init__()
        _check_module_args(d, eps, "RMSNorm")
        self.d, self.eps, self.fast = d, float(eps), bool(fast)
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., d]`` -> ``[..., d]``."""
        if not self.fast or not hasattr(F, "rms_norm"):  # F.rms_norm: torch >= 2.4
            return rms_norm(x, self.weight, self.eps)
        _check_module_input(x, self.d, "RMSNorm")
        y = _one_pass("rms_norm", x, self.weight, self.eps)
        if y is not None:
            return y
        return F.rms_norm(x, (self.d,), _cast(self.weight, x.dtype), self.eps)

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}, fast={self.fast}"


class DyT(nn.Module):
    """Dynamic Tanh, a drop-in replacement for a norm: ``weight * tanh(alpha * x) + bias``.

    ``alpha`` is one learnable scalar (shape ``[1]``, starting at ``alpha_init``);
    ``weight`` (ones) and ``bias`` (zeros) are ``[d]``, the same roles as LayerNorm's
    ``g`` and ``b``. Four elementwise kernels, or one plugged in with :func:`register_one_pass`.
    """

    def __init__(self, d: int, alpha_init: float = 0.5) -> None:
        super().__init__()
        _check_module_args(d, 1.0, "DyT")
        if isinstance(alpha_init, bool) or not isinstance(alpha_init, (int, float)) or not alpha_init > 0:
            raise ValueError(f"DyT: expected alpha_init > 0, got {alpha_init!r}")
        self.d, self.alpha_init = d, float(alpha_init)
        self.alpha = nn.Parameter(torch.full((1,), self.alpha_init))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., d]`` -> ``[..., d]``."""
        _check_module_input(x, self.d, "DyT")
        y = _one_pass("dyt", x, self.alpha, self.weight, self.bias)
        if y is not None:
            return y
        return torch.tanh(self.alpha.to(x.dtype) * x) * self.weight.to(x.dtype) + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d}, alpha_init={self.alpha_init}"


def make_norm(config: GPT2Config, d: int) -> nn.Module:
    """The norm ``config.norm`` asks for, of width d (``nn.Identity`` for ``norm="none"``)."""
    if config.norm == "rmsnorm":
        return RMSNorm(d, eps=config.layer_norm_epsilon)
    if config.norm == "dyt":
        return DyT(d, alpha_init=config.dyt_alpha)
    return nn.Identity() if config.norm == "none" else LayerNorm(d, eps=config.layer_norm_epsilon)


def set_fast(module: nn.Module, fast: bool) -> nn.Module:
    """Switch every :class:`LayerNorm`/:class:`RMSNorm` inside ``module`` to the fused
    (``fast=True``) or the readable (``fast=False``) path; returns ``module``."""
    for m in module.modules():
        if isinstance(m, (LayerNorm, RMSNorm)):
            m.fast = bool(fast)
    return module
