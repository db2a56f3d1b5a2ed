"""Checks for chapter 5 (RMSNorm).

``check_rms_norm(fn)`` runs the learner's ``fn(x, g, eps=1e-5)`` on inputs built so
that each classic mistake gives a different answer and names the one it matches. Every
call passes ``eps`` by keyword, so the learner's default eps (1e-5 as in lesson 004 and
``gpt2ln.rms_norm``, or 1e-6 as in Llama's code) is never judged: only whether the eps
passed is used, and where.
``check_rms_to_layer_norm(fn)`` checks ``fn(x, g, b, eps=1e-5)``, LayerNorm written
with ``rms_norm`` only. ``check_center_writing_weights(fn)`` checks ``fn(W, b) ->
(W_c, b_c)``: centring a linear layer ``x @ W + b`` so that a LayerNorm reading its
output can be replaced by an RMSNorm (plus the LayerNorm's bias).
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._core import (
    Mistake,
    as_tensor,
    as_tuple,
    call_on_copies,
    close,
    compare,
    divide_by_root,
    fail,
    fail_mistake,
    nearest_mistake,
    passed,
    random_rows,
    rel_dist,
)

__all__ = ["check_center_writing_weights", "check_rms_norm", "check_rms_to_layer_norm"]


@dataclass
class _Case:
    what: str
    x: torch.Tensor
    g: torch.Tensor
    b: torch.Tensor | None
    eps: float | None  # None: not passed, the default applies
    tol: float


_dist = rel_dist  # the name tests/test_exercises_ch05.py uses


def _gain(gen: torch.Generator, d: int) -> torch.Tensor:
    return 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)


def _set_rms(x: torch.Tensor, rms: float) -> torch.Tensor:
    """x ``[d]`` rescaled so that sqrt(mean(x^2)) == rms (keeps its direction)."""
    return x * (rms / x.pow(2).mean().sqrt())


def _run_cases(
    check: str,
    fn: Callable[..., Any],
    cases: list[_Case],
    reference: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None, float], torch.Tensor],
    mistakes: Callable[[_Case], list[Mistake]],
    default_eps: float,
    formula: str,
    mode: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> None:
    """Call fn (inside ``mode()``) on every case; fail naming the matching mistake, or generically."""
    for case in cases:
        args = (case.x, case.g) + (() if case.b is None else (case.b,))
        with mode():
            out = call_on_copies(
                check,
                fn,
                args,
                names=("x", "g", "b")[: len(args)],
                what=case.what,
                kwargs={} if case.eps is None else {"eps": case.eps},
                likely="an in-place operation such as `x /= rms` or `x.mul_(...)`: compute new tensors",
            )
        eps = default_eps if case.eps is None else case.eps
        x, g, b = (None if t is None else t.double() for t in (case.x, case.g, case.b))
        truth = reference(x, g, b, eps)
        compare(
            check,
            f"on {case.what}",
            out,
            truth,
            case.tol,
            mistakes(case),
            (x, g, b, eps),
            formula=formula,
            nonfinite="a division by zero: where is eps?",
        )


# ---------------------------------------------------------------------------- RMSNorm
_RMS_FORMULA = "x / sqrt(mean(x^2, -1) + eps) * g"


def _rms(
    x: torch.Tensor,
    g: torch.Tensor | None,
    eps: float,
    *,
    dims: tuple[int, ...] = (-1,),
    keepdim: bool = True,
    stat: str = "ms",
    eps_at: str = "inside",
    gain: str = "after",
) -> torch.Tensor:
    """RMSNorm, or one of its classic mistakes. x: ``[..., d]``, g: ``[d]`` or None."""
    if gain == "before":
        x = x * g
    num = x
    if stat == "ms":  # mean of squares: the right statistic
        s = x.pow(2).mean(dim=dims, keepdim=keepdim)
    elif stat == "sum":  # squared L2 norm: forgot to divide by d
        s = x.pow(2).sum(dim=dims, keepdim=keepdim)
    elif stat in ("var", "var_unbiased", "center"):
        u = x.mean(dim=dims, keepdim=keepdim)
        n = math.prod(x.shape[k] for k in dims)
        s = (x - u).pow(2).sum(dim=dims, keepdim=keepdim) / (n - 1 if stat == "var_unbiased" else n)
        if stat == "center":
            num = x - u
    elif stat == "abs_sq":  # mean(|x|) in place of the RMS
        s = x.abs().mean(dim=dims, keepdim=keepdim) ** 2
    elif stat == "abs":  # mean(|x|) in place of mean(x^2)
        s = x.abs().mean(dim=dims, keepdim=keepdim)
    else:
        raise ValueError(stat)
    y = divide_by_root(num, s, eps, eps_at)
    return y * g if gain == "after" and g is not None else y


def _rms_reference(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _rms(x, g, eps)


def _rms_mistakes(case: _Case) -> list[Mistake]:
    ndim = case.x.ndim

    def m(label: str, fix: str, eps: float | None = None, **kw: Any) -> Mistake:
        return Mistake(label, fix, lambda x, g, b, e: _rms(x, g, e if eps is None else eps, **kw))

    def both(label: str, fix: str, **kw: Any) -> list[Mistake]:
        """The mistake with eps inside the root, and the same mistake with eps outside."""
        return [m(label, fix, **kw), m(label, fix, eps_at="outside", **kw)]

    out = [
        m(
            "eps outside the square root: x / (sqrt(mean(x^2)) + eps), the paper's reference code, "
            "not torch's F.rms_norm",
            "add eps to the mean square, inside the root: x * rsqrt(mean(x^2) + eps)",
            eps_at="outside",
        ),
        *both(
            "subtracted the mean: (x - mean) / std is LayerNorm, RMSNorm does not centre",
            "divide x itself by sqrt(mean(x^2) + eps)",
            stat="center",
        ),
        *both(
            "used the standard deviation (or variance) instead of the RMS: x / std(x)",
            "the RMS is sqrt(mean(x^2)), with no mean subtracted; std(x) = sqrt(mean((x - mean)^2))",
            stat="var",
        ),
        *both(
            "used the standard deviation (or variance) instead of the RMS: x / std(x), "
            "Bessel-corrected (torch.std divides by d - 1)",
            "the RMS is sqrt(mean(x^2)), with no mean subtracted and divided by d",
            stat="var_unbiased",
        ),
        *both(
            "mean of |x| instead of x^2: divided by mean(|x|), not by sqrt(mean(x^2))",
            "square, average, then take the root: sqrt(mean(x^2) + eps)",
            stat="abs_sq",
        ),
        *both(
            "mean of |x| instead of x^2: sqrt(mean(|x|) + eps)",
            "square the entries: sqrt(mean(x^2) + eps)",
            stat="abs",
        ),
        *both(
            "sum instead of mean: divided by the L2 norm sqrt(sum(x^2)), not the RMS (forgot to divide by d)",
            "use the mean over the d features: x.pow(2).mean(-1, keepdim=True)",
            stat="sum",
        ),
        m(
            "forgot the square root: divided by mean(x^2) + eps",
            "divide by sqrt(mean(x^2) + eps), i.e. multiply by torch.rsqrt(...)",
            eps_at="no-sqrt",
        ),
        m(
            "multiplied by the RMS instead of dividing by it (sqrt where rsqrt was meant)",
            "x * torch.rsqrt(mean(x^2) + eps), or x / torch.sqrt(...)",
            eps_at="times",
        ),
        *both("forgot the gain g", "finish with y * g", gain="none"),
        *both(
            "applied the gain g before normalizing: RMSNorm(x * g) instead of RMSNorm(x) * g",
            "normalize x first, then multiply by g",
            gain="before",
        ),
        *both(
            "reduced without keepdim=True, so the RMS broadcast along the wrong axis",
            "use x.pow(2).mean(dim=-1, keepdim=True) (shape [..., 1])",
            keepdim=False,
        ),
        *both(
            "wrong axis: the RMS over the whole tensor instead of over each token's features",
            "reduce over dim=-1 only, with keepdim=True",
            dims=tuple(range(ndim)),
        ),
    ]
    for k in range(ndim - 1):
        out.extend(
            both(
                f"wrong axis: the RMS over dim {k} instead of the last axis (the d features of a token)",
                "reduce over dim=-1, with keepdim=True",
                dims=(k,),
            )
        )
    # Every case passes eps, so only ignoring it is a mistake; the learner's default is never judged.
    for e in (1e-6, 1e-5, 1e-8, 0.0):
        if case.eps is not None and e == case.eps:
            continue
        label = (
            f"ignored the eps argument: the output matches eps={e:g}, but the check passed eps={case.eps:g}"
            if e
            else "no eps at all: x / sqrt(mean(x^2))"
        )
        out.append(m(label, "use the eps argument: rsqrt(mean(x^2) + eps)", eps=e))
    return out


def _rms_cases() -> list[_Case]:
    gen = torch.Generator().manual_seed(5)
    x = random_rows(gen, (2, 3, 16), 1.5, 1.0)
    x[1, 2] = _set_rms(x[1, 2], 1e-5**0.5)  # mean(x^2) = eps: eps inside the root shrinks it by 1/sqrt(2)
    x[0, 1] = _set_rms(x[0, 1], 3e-6)  # far below sqrt(eps): eps inside and outside differ ~250x
    g = _gain(gen, 16)
    return [
        _Case(
            "x of shape [2, 3, 16] ([B, T, d]) with one token of RMS sqrt(1e-5) and one of RMS 3e-6, "
            "float64, called with eps=1e-5",
            x,
            g,
            None,
            1e-5,
            1e-6,
        ),
        _Case(
            "rows of RMS ~0.1, shape [4, 8], float64, called with eps=1e-2",
            random_rows(gen, (4, 8), 0.1, 0.1),
            _gain(gen, 8),
            None,
            1e-2,
            1e-6,
        ),
        _Case(
            "a single token x of shape [12], float64, called with eps=1e-6",
            random_rows(gen, (12,), 1.0, 1.0),
            _gain(gen, 12),
            None,
            1e-6,
            1e-6,
        ),
        _Case(
            "x of shape [2, 8, 768] (GPT-2 width), float32, called with eps=1e-5",
            random_rows(gen, (2, 8, 768), 1.0, 0.5).float(),
            _gain(gen, 768).float(),
            None,
            1e-5,
            1e-4,
        ),
    ]


def check_rms_norm(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, g, eps=1e-5)`` is RMSNorm over the last axis, eps inside the root.

    x: ``[..., d]``; g: ``[d]``; returns ``[..., d]`` (torch tensor or numpy array).
    Reference (torch's ``F.rms_norm``, Llama, T5): ``x / sqrt(mean(x^2) + eps) * g``.
    Inputs: float64 and float32, 1 to 3 axes, tokens with RMS near sqrt(eps) and far
    below it. Every call passes eps by keyword (1e-5, 1e-2, 1e-6), so any default the
    learner chose is accepted. A wrong output names the classic mistake it matches (eps
    outside the root, subtracted the mean, std instead of RMS, mean of |x|, sum instead
    of mean, forgot the root or the gain, wrong axis, ignored eps).
    """
    check = "check_rms_norm"
    cases = _rms_cases()
    _run_cases(check, fn, cases, _rms_reference, _rms_mistakes, 1e-5, _RMS_FORMULA)
    passed(
        check,
        f"matches {_RMS_FORMULA} on {len(cases)} inputs (float32/float64, 1-3 axes, "
        "tokens of RMS down to 3e-6, eps=1e-5, 1e-2 and 1e-6 passed)",
    )


# ---------------------------------------------------------------------------- LayerNorm from rms_norm
_LN_FORMULA = "rms_norm(x - x.mean(-1, keepdim=True), g, eps) + b"


def _ln(
    x: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor | None,
    eps: float,
    *,
    centre: str = "before",
    dims: tuple[int, ...] = (-1,),
    affine: str = "y*g+b",
) -> torch.Tensor:
    """LayerNorm built from RMSNorm, or one of the classic slips. x: ``[..., d]``."""
    if centre == "before":
        y = _rms(x - x.mean(dim=dims, keepdim=True), None, eps)
    elif centre == "after":  # normalized by the RMS of x, then centred
        y = _rms(x, None, eps)
        y = y - y.mean(dim=-1, keepdim=True)
    else:
        y = _rms(x, None, eps)
    return {
        "y*g+b": lambda: y * g + b,
        "(y+b)*g": lambda: (y + b) * g,
        "y*g": lambda: y * g,
        "y+b": lambda: y + b,
        "y*g*g+b": lambda: y * g * g + b,
        "y*b+g": lambda: y * b + g,
    }[affine]()


def _ln_reference(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _ln(x, g, b, eps)


def _ln_mistakes(case: _Case) -> list[Mistake]:
    def m(label: str, fix: str, eps: float | None = None, **kw: Any) -> Mistake:
        return Mistake(label, fix, lambda x, g, b, e: _ln(x, g, b, e if eps is None else eps, **kw))

    out = [
        m(
            "forgot to centre: rms_norm(x) * g + b is RMSNorm with a bias, not LayerNorm",
            "subtract the per-token mean first: rms_norm(x - x.mean(-1, keepdim=True), ...)",
            centre="no",
        ),
        m(
            "centred after normalizing: (x - mean) / RMS(x) divides by the RMS of the uncentred x",
            "centre first, then normalize the centred vector (its RMS is the standard deviation)",
            centre="after",
        ),
        m(
            "added the bias before the gain: (y + b) * g",
            "scale first, then shift: y * g + b",
            affine="(y+b)*g",
        ),
        m("forgot the bias b", "finish with + b (rms_norm has no bias)", affine="y*g"),
        m("forgot the gain g", "pass g as rms_norm's weight (or multiply by it)", affine="y+b"),
        m(
            "applied the gain twice: passed g to rms_norm and multiplied by g again",
            "apply g once",
            affine="y*g*g+b",
        ),
        m("swapped g and b: y * b + g", "g multiplies, b adds: y * g + b", affine="y*b+g"),
    ]
    for k in range(case.x.ndim - 1):
        out.append(
            m(
                f"wrong axis: centred with the mean over dim {k} instead of each token's features",
                "x - x.mean(dim=-1, keepdim=True)",
                dims=(k,),
            )
        )
    # Every case passes eps: not passing it on to rms_norm (or F.rms_norm's own default) is the mistake.
    for e in (1e-6, 1e-5, 1e-8):
        if e == case.eps:
            continue
        label = (
            f"ignored the eps argument: the output matches eps={e:g}, the check passed {case.eps:g} "
            "(did you pass eps on to rms_norm?)"
        )
        out.append(m(label, "pass your eps on: rms_norm(..., eps=eps)", eps=e))
    return out


def _ln_cases() -> list[_Case]:
    gen = torch.Generator().manual_seed(6)
    x = random_rows(gen, (2, 3, 16), 1.5, 2.0)
    # A near-constant token: standard deviation 3e-3 (variance ~1e-5 = eps) on a mean of 2.
    x[1, 1] = 2.0 + 3e-3 * torch.randn(16, generator=gen, dtype=torch.float64)
    return [
        _Case(
            "x of shape [2, 3, 16] with one near-constant token (variance ~1e-5), float64, eps=1e-5 passed",
            x,
            _gain(gen, 16),
            0.5 * torch.randn(16, generator=gen, dtype=torch.float64),
            1e-5,
            1e-6,
        ),
        _Case(
            "rows with standard deviation ~0.1, shape [4, 8], float64, called with eps=1e-2",
            random_rows(gen, (4, 8), 0.1, 1.0),
            _gain(gen, 8),
            0.5 * torch.randn(8, generator=gen, dtype=torch.float64),
            1e-2,
            1e-6,
        ),
        _Case(
            "x of shape [2, 8, 768] (GPT-2 width), float32, called with eps=1e-6",
            random_rows(gen, (2, 8, 768), 1.0, 1.0).float(),
            _gain(gen, 768).float(),
            (0.5 * torch.randn(768, generator=gen, dtype=torch.float64)).float(),
            1e-6,
            1e-4,
        ),
    ]


class UsedLayerNormError(RuntimeError):
    """Raised when an exercise that must avoid LayerNorm calls a LayerNorm function."""


class _RefuseLayerNorm(TorchFunctionMode):
    """While active (around the learner's call only), torch's and gpt2ln's LayerNorm raise.

    Sees every torch function called: ``F.layer_norm``, ``torch.layer_norm`` and
    ``torch.native_layer_norm`` (which torch's and gpt2ln's fast LayerNorm modules use) by
    name, and gpt2ln's own ``layer_norm`` (plain tensor arithmetic) by its frame on the stack.
    Nothing is patched.
    """

    _FUNCS: ClassVar[dict[Any, str]] = {
        F.layer_norm: "F.layer_norm",
        torch.layer_norm: "torch.layer_norm",
        torch.native_layer_norm: "torch.native_layer_norm",
    }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        from ...model import norms

        name = self._FUNCS.get(func)
        frame = sys._getframe(1)
        while name is None and frame is not None:
            if frame.f_code in (norms.layer_norm.__code__, norms.LayerNorm.forward.__code__):
                name = "gpt2ln.layer_norm"
            frame = frame.f_back
        if name is not None:
            raise UsedLayerNormError(
                f"you called {name} (or a LayerNorm module); this exercise asks for LayerNorm "
                "built from rms_norm only"
            )
        return func(*args, **(kwargs or {}))


def check_rms_to_layer_norm(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, g, b, eps=1e-5)`` is LayerNorm, built from ``rms_norm`` only.

    x: ``[..., d]``; g, b: ``[d]``; returns ``[..., d]``. LayerNorm is RMSNorm of the
    centred input plus a bias: ``rms_norm(x - mean(x), g, eps) + b``. While ``fn``
    runs, torch's and gpt2ln's ``layer_norm`` raise (a function mode scoped to the call).
    Inputs include a near-constant token (variance ~ eps), where the eps matters; every
    call passes eps by keyword (1e-5, 1e-2, 1e-6), so the learner's default is not judged.
    A wrong output names the mistake it matches (forgot to centre, centred after
    normalizing, bias before gain, missing bias or gain, eps not passed on, wrong axis).
    """
    check = "check_rms_to_layer_norm"
    cases = _ln_cases()
    _run_cases(check, fn, cases, _ln_reference, _ln_mistakes, 1e-5, _LN_FORMULA, _RefuseLayerNorm)
    passed(
        check,
        f"equals F.layer_norm on {len(cases)} inputs (float32/float64, a near-constant token, "
        "eps=1e-5, 1e-2, 1e-6), "
        "using no LayerNorm function",
    )


# ---------------------------------------------------------------------------- centring writing weights
def _centre_mistakes() -> list[Mistake]:
    """Each slip (and each pair of a W slip with the bias slip): fn(W, b) -> [W_c.flatten(); b_c]."""
    fix_W = "subtract from each row of W its mean over the d output features: W - W.mean(dim=1, keepdim=True)"
    Ws = [
        ("did not centre W", lambda W: W),
        (
            "centred W over the wrong axis (the d_in input axis, dim 0) instead of the d output features",
            lambda W: W - W.mean(dim=0, keepdim=True),
        ),
        (
            "subtracted one overall mean of W (W - W.mean()), which does not zero each row's mean",
            lambda W: W - W.mean(),
        ),
        ("", lambda W: W - W.mean(dim=1, keepdim=True)),
    ]
    bs = [("did not centre the bias b", lambda b: b), ("", lambda b: b - b.mean())]
    fix_b = "centre the bias too: b - b.mean()"
    return [
        Mistake(
            " and ".join(s for s in (lw, lb) if s),
            "; ".join(s for s in (fix_W if lw else "", fix_b if lb else "") if s),
            lambda W, b, fw=fw, fb=fb: torch.cat([fw(W).flatten(), fb(b)]),
        )
        for lw, fw in Ws
        for lb, fb in bs
        if lw or lb
    ]


def check_center_writing_weights(fn: Callable[..., Any]) -> None:
    """Check ``fn(W, b) -> (W_c, b_c)`` centres a linear layer's output.

    The layer computes ``h = x @ W + b`` with W ``[d_in, d]`` (GPT-2's checkpoint
    layout) and b ``[d]``. With ``h_c = x @ W_c + b_c`` the check requires, for
    random x ``[B, T, d_in]``, gain g and bias beta::

        layer_norm(h, g, beta, eps) == rms_norm(h_c, g, eps) + beta

    which holds when every ``h_c`` has zero mean over its d features. W and b must
    not be changed in place.
    """
    check = "check_center_writing_weights"
    gen = torch.Generator().manual_seed(7)
    shapes = [(6, 10), (12, 8)]
    for d_in, d in shapes:
        # A large common component (+2) makes the layer's output far from zero-mean.
        W = 2.0 + torch.randn(d_in, d, generator=gen, dtype=torch.float64)
        b = 1.0 + torch.randn(d, generator=gen, dtype=torch.float64)
        x = torch.randn(2, 5, d_in, generator=gen, dtype=torch.float64)
        g = _gain(gen, d)
        beta = 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        what = f"W of shape [{d_in}, {d}] ([d_in, d]), b of shape [{d}], float64"
        out = call_on_copies(check, fn, (W, b), names=("W", "b"), what=what, likely="return new tensors")
        out = as_tuple(check, out, ("W_c", "b_c"))
        W_c = as_tensor(check, out[0], W, "W_c").detach().double()
        b_c = as_tensor(check, out[1], b, "b_c").detach().double()
        want = F.layer_norm(x @ W + b, (d,), g, beta, 1e-5)
        got = _rms(x @ W_c + b_c, g, 1e-5) + beta
        if close(got, want, 1e-7):
            continue
        failed = (
            f"on {what}, rms_norm(x @ W_c + b_c) + beta differs from layer_norm(x @ W + b) by up to "
            f"{rel_dist(got, want):.3g}"
        )
        y = torch.cat([W_c.flatten(), b_c])
        truth = torch.cat([(W - W.mean(dim=1, keepdim=True)).flatten(), b - b.mean()])
        best, explains = nearest_mistake(_centre_mistakes(), lambda m, a=(W, b): m.fn(*a), y, truth, 1e-9)
        if best is not None and explains:
            fail_mistake(check, failed, best.label, best.fix)
        mean = (x @ W_c + b_c).mean(dim=-1).abs().max()
        fail(
            check,
            f"{failed}; the outputs x @ W_c + b_c have per-token means up to {float(mean):.3g}",
            "every output x @ W_c + b_c must have zero mean over its d features, for every x, "
            "and keep the same centred part as x @ W + b",
        )
    passed(
        check,
        f"rms_norm(x @ W_c + b_c) + beta == layer_norm(x @ W + b) for W of shapes {shapes}",
    )
