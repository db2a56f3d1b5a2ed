"""The one pattern every exercise check follows, and the helpers it is built from.

How to write a check (copy this for a new chapter)::

    _FORMULA = "what the right answer computes, in one line"

    def _mistakes() -> list[Mistake]:          # each classic mistake: a label that names it,
        return [                               # the fix, and a function computing its output
            Mistake("forgot the bias b", "finish with y * g + b", lambda x, g, b: _ref(x, g) * g),
            ...
        ]

    def check_thing(fn) -> None:
        check = "check_thing"
        for what, args, tol in _cases():       # fixed, seeded inputs; each case told apart
            out = call_on_copies(check, fn, args, names=("x", "g", "b"), what=what)
            truth = _ref(*args)                # the reference (or a real implementation)
            compare(check, f"on {what}", out, truth, tol, _mistakes(), args, formula=_FORMULA)
        passed(check, "one line saying what was checked")

``call_on_copies`` calls the learner's function on copies of the inputs (turning "not
implemented yet" and crashes into a sentence, and failing if an input was changed in
place); ``compare`` returns when the output is the reference's and otherwise fails with the
label and fix of the :class:`Mistake` whose ``fn(*args)`` is nearest the output
(:func:`nearest_mistake`), or with "no single classic mistake explains it" and the formula.
Special failures that no mistake function can reproduce (NaN, a wrong shape, a float32
cancellation) are tested before ``compare`` (or passed to it as ``nonfinite=``/``hint=``).

Outputs that are not one tensor are made into one first: a pair or tuple with
:func:`as_tuple`, a number with :func:`as_float` or :func:`as_int`; several outputs are
stacked or concatenated (the mistakes' ``fn`` return the same layout), then
:func:`nearest_mistake` and :func:`fail_mistake` (or ``compare``) as above. Integer answers
(parameter counts) compare ``m.fn(config) == out`` exactly. Inputs that must be modules
(a block's sub-layers) are passed as they are; ``call_on_copies`` clones only tensors.

A check never patches torch or the package while the learner's code runs: it passes what
the code needs explicitly, or observes calls with a mode scoped to the call (chapter 5's
``_RefuseLayerNorm``, a ``TorchFunctionMode``). A check leaves the global random state
alone (seeded ``torch.Generator``; ``torch.random.fork_rng`` around module construction).

The tests of a check (``tests/test_exercises_chNN.py``) pass the right answer (and other
right answers: numpy output, a loop), each mistake (asserting its label's words appear),
a stub raising ``NotImplementedError`` ("not implemented yet"), and a ``None`` return.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any, TypeVar

import torch

MistakeT = TypeVar("MistakeT")


def fail(check: str, what: str, likely: str | None = None) -> None:
    """Raise AssertionError: which property failed and, if known, the likely mistake."""
    msg = f"{check}: {what}"
    if likely:
        msg += f"\n  Likely mistake: {likely}"
    raise AssertionError(msg)


def passed(check: str, summary: str) -> None:
    """Print the one-line success report."""
    print(f"✓ {check}: {summary}")


def call(check: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the student's fn; turn "not implemented yet" and crashes into teaching failures."""
    if not callable(fn):
        raise TypeError(f"{check}: expected a function, got {type(fn).__name__}")
    name = getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        fail(
            check,
            f"`{name}` is not implemented yet.",
            f"replace `raise NotImplementedError()` in `{name}` with your implementation, "
            "run that cell, then run this check again.",
        )
    except Exception as e:  # the student's bug, reported in a sentence, not a stack trace
        fail(check, f"`{name}` raised {type(e).__name__}: {e}")
    return None  # unreachable


def from_numpy(out: Any) -> Any:
    """out as a torch tensor if it is a numpy array; anything else is returned unchanged."""
    if not isinstance(out, torch.Tensor):
        try:
            import numpy as np

            if isinstance(out, np.ndarray):
                out = torch.from_numpy(out)
        except ImportError:  # pragma: no cover
            pass
    return out


def _shape_hint(out: torch.Tensor, like: torch.Tensor) -> str:
    """What a wrong shape most likely means: a reduction over too many or too few axes."""
    if out.dim() < like.dim():
        return "reducing without keepdim=True, or over the wrong axis"
    if out.dim() > like.dim():
        return "a sum over too few axes (reduce every axis but the features), or a stray keepdim=True"
    return "a reduction over the wrong axis, or a transpose"


def as_tensor(check: str, out: Any, like: torch.Tensor, what: str = "the output") -> torch.Tensor:
    """Check out is a tensor with like's shape (numpy arrays are accepted and converted)."""
    out = from_numpy(out)
    if not isinstance(out, torch.Tensor):
        fail(check, f"{what} should be a torch.Tensor, got {type(out).__name__}", "a missing `return`?")
    if tuple(out.shape) != tuple(like.shape):
        fail(
            check,
            f"{what} has shape {tuple(out.shape)}, expected {tuple(like.shape)}",
            _shape_hint(out, like),
        )
    return out.to(like.dtype)


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-6) -> bool:
    """Whether a and b agree to tol relative to b's size (NaNs never agree)."""
    if torch.isnan(a).any():
        return False
    return bool((a - b).abs().max() <= tol * (1.0 + b.abs().max()))


def as_int(check: str, out: Any, where: str) -> int:
    """The learner's count as an int (an integer one-element tensor is accepted); else fail.

    bool and floats are refused; ``where`` ends the message, e.g. ``"for config (...)"``.
    """
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, bool) or not isinstance(out, Integral):
        fail(
            check,
            f"expected an int, got {type(out).__name__} ({out!r}) {where}",
            "a missing `return`?" if out is None else "return an int (use int(...), or // not /)",
        )
    return int(out)


def as_float(check: str, out: Any, where: str, expected: str = "a number") -> float:
    """The learner's number as a float: a Python or numpy number, or a one-element tensor or array."""
    if out is not None and not isinstance(out, (bool, str)):
        try:
            if not hasattr(out, "shape"):
                return float(out)
            if math.prod(out.shape) == 1:
                return float(out.reshape(()))
        except (TypeError, ValueError):
            pass
    shape = f" of shape {tuple(out.shape)}" if hasattr(out, "shape") else ""
    fail(
        check,
        f"{where}, your function returned {type(out).__name__}{shape}, expected {expected}",
        "a missing `return`?" if out is None else "return a single number (float(...) makes one)",
    )
    return math.nan  # unreachable


def as_tuple(check: str, out: Any, names: Sequence[str], where: str = "") -> tuple[Any, ...]:
    """out (a tuple or list) as a tuple of ``len(names)`` values; else fail naming them."""
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        kind = "a pair (a tuple of 2)" if len(names) == 2 else "a tuple"
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        fail(
            check,
            f"{where}expected {kind} ({', '.join(names)}), got {got}",
            "a missing `return`?" if out is None else f"return all of them: `return {', '.join(names)}`",
        )
    return tuple(out)


def require_unchanged(
    check: str, names: Sequence[str], before: Sequence[Any], after: Sequence[Any], what: str, likely: str
) -> None:
    """Fail if the learner's function changed an input in place.

    ``before[i]`` is a copy kept by the check, ``after[i]`` the tensor the function was
    given (non-tensors are not compared); ``what`` names the input case, ``likely`` the fix.
    """
    for name, b, a in zip(names, before, after, strict=True):
        if isinstance(b, torch.Tensor) and not torch.equal(b, a):
            fail(check, f"your function changed its input `{name}` in place, on {what}", likely)


def fail_mistake(check: str, what: str, label: str, fix: str) -> None:
    """fail() naming the classic mistake the learner's output matches, and its fix (if any)."""
    fail(check, what, f"{label}. Fix: {fix}" if fix else label)


IN_PLACE = "an in-place operation such as `x -= ...` or `x.mul_(...)`: compute new tensors instead"


def call_on_copies(
    check: str,
    fn: Callable[..., Any],
    args: Sequence[Any],
    *,
    names: Sequence[str],
    what: str,
    kwargs: dict[str, Any] | None = None,
    likely: str = IN_PLACE,
) -> Any:
    """``fn(*copies of args, **kwargs)`` through :func:`call`; fail if fn changed an input in place.

    Tensors are cloned, other arguments passed as they are; ``names[i]`` names ``args[i]``.
    """
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    out = call(check, fn, *copies, **(kwargs or {}))
    require_unchanged(check, names, args, copies, what, likely)
    return out


@dataclass(frozen=True)
class Mistake:
    """A classic mistake: the label naming it, its fix, and a function computing its output."""

    label: str  # names the mistake (tests and learners look for these words)
    fix: str
    fn: Callable[..., Any]


def rel_dist(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs difference relative to ref's size; inf when shapes differ or a has NaN/inf."""
    if a.shape != ref.shape or not torch.isfinite(a).all():
        return math.inf
    return float((a - ref).abs().max() / (1.0 + ref.abs().max()))


def nearest_mistake(
    mistakes: Iterable[MistakeT],
    output: Callable[[MistakeT], torch.Tensor],
    y: torch.Tensor,
    truth: torch.Tensor,
    tol: float,
    *,
    dist: Callable[[torch.Tensor, torch.Tensor], float] = rel_dist,
    skip: tuple[type[Exception], ...] = (RuntimeError,),
) -> tuple[MistakeT | None, bool]:
    """The mistake whose output (``output(m)``) is nearest y, and whether it explains y.

    Passed over: mistakes that raise one of ``skip`` on this input (e.g. a shape that does
    not broadcast), and those within ``tol`` of truth (not distinguishable here). The
    nearest explains y if it is within ``max(tol, 2% of y's distance from truth)``.
    """
    best, best_d = None, math.inf
    for m in mistakes:
        try:
            with torch.no_grad():
                ref = output(m)
        except skip:
            continue
        if dist(ref, truth) <= tol:
            continue
        d = dist(y, ref)
        if d < best_d:
            best, best_d = m, d
    off = dist(y, truth)  # inf when y's shape is not truth's: then only a near-exact match explains y
    return best, best is not None and best_d <= max(tol, 0.02 * off if math.isfinite(off) else tol)


def compare(
    check: str,
    where: str,
    out: Any,
    truth: torch.Tensor,
    tol: float,
    mistakes: Iterable[Mistake],
    args: Sequence[Any],
    *,
    formula: str,
    differs: str = "your output differs from the reference",
    nonfinite: str | None = None,
    hint: str | None = None,
    skip: tuple[type[Exception], ...] = (RuntimeError,),
) -> torch.Tensor:
    """The learner's output as a float64 tensor if it matches truth to tol; else fail naming why.

    ``out`` must be a tensor (or numpy array) of truth's shape. When it is not within tol
    (:func:`close`): a NaN/inf output fails with ``nonfinite`` (if given); then the
    :class:`Mistake` whose ``m.fn(*args)`` is nearest explains it (:func:`nearest_mistake`),
    or the failure shows where the largest error is and gives ``hint`` (default: no single
    mistake explains it, the nearest, and ``formula``). ``where`` starts the message, e.g.
    ``"on x of shape [2, 3]"``; ``differs`` says what differs from what; mistakes that raise
    one of ``skip`` on args are passed over.
    """
    y = as_tensor(check, out, truth, f"{where}, the output").detach().double()
    t = truth.detach().double()
    if close(y, t, tol) and torch.isfinite(y).all():
        return y
    if nonfinite is not None and not torch.isfinite(y).all():
        fail(check, f"{where}, your output contains NaN or inf", nonfinite)
    err = f"{float((y - t).abs().max()):.3g}"
    failed = f"{where}, {differs} by up to {err}"
    best, explains = nearest_mistake(
        mistakes, lambda m: torch.as_tensor(m.fn(*args), dtype=torch.float64), y, t, tol, skip=skip
    )
    if best is not None and explains:
        fail_mistake(check, failed, best.label, best.fix)
    diff = torch.nan_to_num((y - t).abs(), nan=math.inf)
    i = tuple(int(k) for k in torch.nonzero(diff == diff.max())[0])
    fail(
        check,
        f"{failed} ({f'at index {i}: ' if i else ''}got {float(y[i]):.6g}, expected {float(t[i]):.6g})",
        hint
        or "no single classic mistake explains it (maybe two at once"
        + (f"; the nearest is: {best.label}" if best is not None else "")
        + f"); compare each step with {formula}",
    )
    return y  # unreachable


def divide_by_root(num: torch.Tensor, s: torch.Tensor, eps: float, eps_at: str = "inside") -> torch.Tensor:
    """``num / sqrt(s + eps)``, or a classic misplacement of eps or the root.

    eps_at: ``"inside"`` (right), ``"outside"`` num / (sqrt(s) + eps), ``"no-sqrt"``
    num / (s + eps), ``"times"`` num * sqrt(s + eps).
    """
    if eps_at == "inside":
        return num / torch.sqrt(s + eps)
    if eps_at == "outside":
        return num / (torch.sqrt(s) + eps)
    if eps_at == "no-sqrt":
        return num / (s + eps)
    if eps_at == "times":
        return num * torch.sqrt(s + eps)
    raise ValueError(eps_at)


def random_rows(gen: torch.Generator, shape: tuple[int, ...], scale: float, offset: float) -> torch.Tensor:
    """float64 rows ``[..., d]``, each with its own mean (offset * N(0,1)) and spread ``scale``."""
    means = offset * torch.randn(*shape[:-1], 1, generator=gen, dtype=torch.float64)
    return means + scale * torch.randn(*shape, generator=gen, dtype=torch.float64)
