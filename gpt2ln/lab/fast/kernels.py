"""One-pass norm kernels for the modules ``LayerNorm``, ``RMSNorm`` and ``DyT`` on large CPU inputs.

A norm reads ``x`` ``[..., d]`` once and writes ``y`` once; on a large tensor its speed limit is
the memory bandwidth of a copy. PyTorch's CPU ``F.layer_norm`` is one fused kernel, but its CPU
``F.rms_norm`` is composed of several (square, mean, add, rsqrt, two products), and DyT written as
``tanh(alpha * x) * weight + bias`` is four: each reads and writes a tensor as large as ``x``.
:func:`run` runs one pass instead, in the first of two ways that works here:

1. the C kernels of ``csrc/norms.c`` (through :func:`gpt2ln.lab.fast.native.norm`: compiled with
   the system's C compiler once per machine, about a second), for float32: one loop per row,
   the output written with streaming stores, so a norm moves the bytes a copy moves; a row's
   statistics are summed in double precision, so the error does not grow with the width
   (no more than 2x PyTorch's own kernels' on any width tested, ``tests/test_kernel_accuracy.py``).
   This is the only one-pass path of ``LayerNorm``, which otherwise keeps ``F.layer_norm``;
2. for ``RMSNorm`` and ``DyT`` where there is no C library (or for half precision):
   ``torch.compile`` of the readable formulas below, which inductor turns into one C++ loop per
   row. DyT's tanh is :func:`tanh_rational` in both.

Either way, only where it pays and only where it works:

* on CPU (elsewhere PyTorch's kernels, or the eager formula, run as before);
* for inputs of at least :data:`MIN_NUMEL` elements (a few MB: below that a pass costs
  microseconds, and the small models of the training chapters never trigger a compile);
* when autograd is not recording (``torch.no_grad``/``inference_mode``, or nothing requires a
  gradient): training keeps PyTorch's differentiable kernels, so a training loop pays no compile
  warm-up and its gradients are exactly those of before;
* not on the portable float path (``ATEN_CPU_CAPABILITY=default``: PyTorch's kernels, and a
  scalar compiled loop would be slower than them, measured: 4x for LayerNorm);
* unless the environment sets ``GPT2LN_COMPILE=0`` (``GPT2LN_NATIVE=0`` leaves out the C kernels only).

The first call decides: it compiles (``dynamic=False``: one kernel per shape, a new shape compiles
again; a kernel for symbolic shapes measured 2x slower at ``[8, 1024, 768]``) and runs the
kernel; if that raises (no compiler, an unsupported platform), the decision "not available" and
its reason are cached in :data:`STATUS` and every later call returns ``None``, so the module
falls back to its eager path. Nothing here ever fails a forward pass. :data:`STATUS` says what
ran: ``"native"``, ``"compiled"`` or ``"unavailable: <why>"``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from . import native

__all__ = [
    "MIN_NUMEL",
    "STATUS",
    "dyt_kernel",
    "layer_norm_kernel",
    "rms_norm_kernel",
    "run",
    "tanh_rational",
    "wanted",
]

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
    """RMSNorm of x ``[..., d]``, eps inside the root; half precision computed in float32.

    The mean square is summed in float64 (then rounded to x's precision): inductor's float32
    reduction lets the rounding grow with the width (measured: 450x F.rms_norm's error at
    d = 2^20 on constant rows), float64 keeps it below float32's rounding at any width, at
    no measurable cost in this memory-bound loop."""
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    ms = xf.to(torch.float64).square().mean(dim=-1, keepdim=True)
    y = xf * torch.rsqrt(ms + eps).to(xf.dtype)
    if weight is not None:
        y = y * weight.to(xf.dtype)
    return y.to(x.dtype)


#: tanh(z) ~ z P(z^2) / Q(z^2) for |z| <= _TANH_CLAMP (the float32 approximation of the Eigen
#: library's ``ptanh_float``); beyond, tanh(z) rounds to +-1 in float32
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (
    -2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
    1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03,
)  # fmt: skip
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def tanh_rational(z: torch.Tensor) -> torch.Tensor:
    """tanh of a float32 z as a ratio of two polynomials (within 1e-6 of tanh, tested).

    ``torch.tanh`` in a compiled CPU loop calls a vectorized tanh that costs far more than the
    memory traffic of a norm (measured: DyT at 0.1x copy bandwidth with it at ``[8, 1024, 768]``);
    multiplications and additions vectorize into a few instructions per element, so DyT's kernel
    runs at the speed of memory. The same approximation is in ``csrc/decode_step.c``'s GELU.
    """
    z = z.clamp(-_TANH_CLAMP, _TANH_CLAMP)
    z2 = z * z
    p = z2 * _TANH_P[0] + _TANH_P[1]
    for c in _TANH_P[2:]:
        p = p * z2 + c
    q = z2 * _TANH_Q[0] + _TANH_Q[1]
    for c in _TANH_Q[2:]:
        q = q * z2 + c
    return z * p / q


def dyt_kernel(
    x: torch.Tensor, alpha: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """DyT of x ``[..., d]``: ``tanh(alpha * x) * weight + bias`` (alpha ``[1]``, weight, bias ``[d]``),
    tanh by :func:`tanh_rational` (float32; half precision computed in float32, float64 exactly)."""
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    z = alpha.to(xf.dtype) * xf
    t = torch.tanh(z) if xf.dtype == torch.float64 else tanh_rational(z)
    return (t * weight.to(xf.dtype) + bias.to(xf.dtype)).to(x.dtype)


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
    """The one-pass kernel ``name`` (``layer_norm``, ``rms_norm``, ``dyt``) on ``args``: the C
    kernel of ``gpt2ln.lab.fast.native`` for float32, else the compiled kernel (not for ``layer_norm``,
    whose compiled kernel does not beat ``F.layer_norm``); None where neither is available (then
    the caller runs its eager path)."""
    # detached: no gradient is wanted here, and a compiled call handed parameters that require
    # a gradient runs a slower wrapper (measured 4x slower at [8, 1024, 768])
    args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    y = native.norm(name, *args)
    if y is not None:
        STATUS[name] = "native"
        return y
    if name == "layer_norm" or STATUS.get(name, "").startswith("unavailable"):
        return None
    fn = _COMPILED.get(name)
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


def one_pass(name: str, x: torch.Tensor, *params: torch.Tensor | float | None) -> torch.Tensor | None:
    """What the norm modules call (registered with ``gpt2ln.model.norms.register_one_pass``): the
    one-pass kernel ``name`` on ``x`` and the module's parameters where :func:`wanted` says it
    pays, else None (the module then runs PyTorch's kernel)."""
    tensors = [p for p in params if isinstance(p, torch.Tensor) or p is None]
    return run(name, x, *params) if wanted(x, *tensors) else None
