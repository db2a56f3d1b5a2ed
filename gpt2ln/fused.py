"""One-pass norm kernels for the modules ``LayerNorm``, ``RMSNorm`` and ``DyT``, by ``torch.compile``.

A norm reads ``x`` ``[..., d]`` once and writes ``y`` once; on a large tensor its speed limit is
the memory bandwidth of a copy. PyTorch's CPU ``F.layer_norm`` is one fused kernel, but its CPU
``F.rms_norm`` is composed of several (square, mean, add, rsqrt, two products), and DyT written as
``tanh(alpha * x) * weight + bias`` is four: each reads and writes a tensor as large as ``x``.
``torch.compile`` turns the same few lines (the kernels below are the readable formulas) into one
C++ loop per row, so every element is read and written once.

Compiling costs time (seconds the first time in a process, more on a cold cache) and needs a C++
compiler on CPU, so :func:`run` uses a compiled kernel only where it pays and only where it works:

* on CPU (elsewhere PyTorch's kernels, or the eager formula, run as before);
* for inputs of at least :data:`MIN_NUMEL` elements (a few MB: below that a pass costs
  microseconds, and the small models of the training chapters never trigger a compile);
* when autograd is not recording (``torch.no_grad``/``inference_mode``, or nothing requires a
  gradient): training keeps PyTorch's differentiable kernels, so a training loop pays no compile
  warm-up and its gradients are exactly those of before;
* where inductor can vectorize its C++ loop (it finds a SIMD instruction set; with
  ``ATEN_CPU_CAPABILITY=default`` it does not, and a scalar compiled loop is slower than
  PyTorch's own kernels, measured: 4x for LayerNorm);
* unless the environment sets ``GPT2LN_COMPILE=0``.

The first call decides: it compiles (``dynamic=False``: one kernel per shape, a new shape compiles
again; a kernel for symbolic shapes measured 2x slower at ``[8, 1024, 768]``) and runs the
kernel; if that raises (no compiler, an unsupported platform), the decision "not available" and
its reason are cached in :data:`STATUS` and every later call returns ``None``, so the module
falls back to its eager path. Nothing here ever fails a forward pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

__all__ = ["MIN_NUMEL", "STATUS", "dyt_kernel", "layer_norm_kernel", "rms_norm_kernel", "run", "wanted"]

#: inputs smaller than this many elements (4 MiB of float32) run eagerly
MIN_NUMEL = 2**20

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def layer_norm_kernel(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """GPT-2's LayerNorm (two-pass variance) of x ``[..., d]``; half precision computed in float32."""
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    mean = xf.mean(dim=-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt((xc * xc).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    if bias is not None:
        y = y + bias.to(xf.dtype)
    return y.to(x.dtype)


def rms_norm_kernel(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm of x ``[..., d]``, eps inside the root; half precision computed in float32."""
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    y = xf * torch.rsqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    return y.to(x.dtype)


def dyt_kernel(
    x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """DyT of x ``[..., d]``: ``tanh(alpha * x) * weight + bias`` (alpha ``[1]``, weight, bias ``[d]``)."""
    return torch.tanh(alpha.to(x.dtype) * x) * weight.to(x.dtype) + bias.to(x.dtype)


_KERNELS: dict[str, Callable[..., torch.Tensor]] = {
    "layer_norm": layer_norm_kernel,
    "rms_norm": rms_norm_kernel,
    "dyt": dyt_kernel,
}
_COMPILED: dict[str, Callable[..., torch.Tensor]] = {}

#: per kernel name: "compiled" once it ran compiled, or "unavailable: <reason>" (the cached decision)
STATUS: dict[str, str] = {}


def wanted(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    """Whether a call on x should try the compiled kernel (see the module docstring)."""
    if x.device.type != "cpu" or x.numel() < MIN_NUMEL or os.environ.get("GPT2LN_COMPILE", "1") == "0":
        return False
    if torch.compiler.is_compiling():  # already inside someone's torch.compile: it fuses the eager path
        return False
    if torch.is_grad_enabled() and (
        x.requires_grad or any(p is not None and p.requires_grad for p in params)
    ):
        return False  # autograd: PyTorch's differentiable kernels, no compile warm-up in training
    return True


def _no_simd() -> str | None:
    """Why a compiled CPU loop would not be vectorized, or None if it would be."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        if not pick_vec_isa():
            return (
                "no SIMD instruction set for inductor's C++ (ATEN_CPU_CAPABILITY=default, or the CPU): "
                "a scalar compiled loop is slower than PyTorch's kernels"
            )
    except Exception as err:  # an inductor without this function: let the compile itself decide
        return None if isinstance(err, ImportError) else f"{type(err).__name__}: {err}"
    return None


def run(name: str, *args: torch.Tensor | float | None) -> torch.Tensor | None:
    """The compiled kernel ``name`` (``layer_norm``, ``rms_norm``, ``dyt``) on ``args``, or None
    where it is not available (then the caller runs its eager path)."""
    if STATUS.get(name, "").startswith("unavailable"):
        return None
    fn = _COMPILED.get(name)
    # detached: no gradient is wanted here, and a compiled call handed parameters that require
    # a gradient runs a slower wrapper (measured 4x slower at [8, 1024, 768])
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    try:
        if fn is None:
            why = _no_simd()
            if why is not None:
                STATUS[name] = f"unavailable: {why}"
                return None
            fn = _COMPILED[name] = torch.compile(_KERNELS[name], dynamic=False)
        y = fn(*args)
    except Exception as err:  # no C++ compiler, an unsupported platform, ...: never fail a forward
        first = str(err).splitlines()[0][:300] if str(err) else ""
        STATUS[name] = f"unavailable: {type(err).__name__}: {first}"
        return None
    STATUS[name] = "compiled"
    return y
