"""Checks for chapter 4, "Numerics and speed of LayerNorm".

- ``check_welford(fn)``: ``fn(x) -> (mean, var)``, a streaming (Welford) mean and *biased*
  variance over the last axis of ``x`` ``[R, d]``; both results ``[R]``.
- ``check_welford_merge(fn)``: ``fn((n_a, mean_a, m2_a), (n_b, mean_b, m2_b)) -> (n, mean, m2)``,
  Chan et al.'s merge of two partial statistics (``m2`` = sum of squared deviations from the
  part's own mean).

Each check compares with a float64 reference and, when the answer is wrong, with an
implementation of every classic mistake it knows (``WELFORD_MISTAKES``, ``MERGE_MISTAKES``),
so the failure message can name the mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._core import (
    Mistake,
    as_tuple,
    call,
    call_on_copies,
    close,
    fail,
    fail_mistake,
    nearest_mistake,
    passed,
    rel_dist,
)

__all__ = ["MERGE_MISTAKES", "WELFORD_MISTAKES", "check_welford", "check_welford_merge"]

TOL = 1e-9  # benign inputs are float64: a correct answer agrees to ~1e-14
OFFSET_TOL = 1e-3  # error (relative to the variance) allowed on the float32 input with a 1e4 offset


def _welford_loop(x: torch.Tensor, *, step: str = "k", m2_update: str = "right") -> tuple[torch.Tensor, ...]:
    """(mean, m2) of x ``[R, d]`` by Welford's loop, or with a classic slip in the loop."""
    d = x.shape[-1]
    mean, m2 = torch.zeros_like(x[:, 0]), torch.zeros_like(x[:, 0])
    for k in range(1, d + 1):
        xk = x[:, k - 1]
        delta = xk - mean
        mean = mean + delta / (k if step == "k" else d)
        m2 = m2 + {"right": delta * (xk - mean), "old": delta * delta, "new": (xk - mean) ** 2}[m2_update]
    return mean, m2


def _stacked(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return torch.stack([mean, var])  # [2, R]: what a Welford mistake returns, as one tensor


def _wel(f: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor], **loop: str) -> Callable:
    """x -> [mean; f(mean, m2, d)] from Welford's loop (with the given slip)."""
    return lambda x: (lambda mean, m2: _stacked(mean, f(mean, m2, x.shape[-1])))(*_welford_loop(x, **loop))


_ORDER = (
    "Welford's update is delta = x - mean_old; mean_new = mean_old + delta / k; "
    "m2 += delta * (x - mean_new): one factor from the old mean, one from the new. Using the same "
    "mean twice (delta * delta, or (x - mean_new)**2) gives the wrong m2."
)
# The name of each mistake appears verbatim in the failure it causes; fn(x [R, d]) -> [mean; var] [2, R].
WELFORD_MISTAKES: dict[str, Mistake] = {
    m.label: m
    for m in [
        Mistake(
            "unbiased variance",
            "LayerNorm's variance is biased: m2 / n, not m2 / (n - 1) (torch.var defaults to n - 1: "
            "pass correction=0).",
            _wel(lambda mean, m2, d: m2 / max(d - 1, 1)),
        ),
        Mistake(
            "returned m2 instead of the variance",
            "m2 is the sum of squared deviations; the variance is m2 / n.",
            _wel(lambda mean, m2, d: m2),
        ),
        Mistake("wrong update order", _ORDER, _wel(lambda mean, m2, d: m2 / d, m2_update="old")),
        Mistake(
            "divided by n instead of k",
            "inside the loop the running mean after k elements is mean += delta / k (k = 1, 2, ...), "
            "not delta / n: the mean of the elements seen so far.",
            _wel(lambda mean, m2, d: m2 / d, step="n"),
        ),
        Mistake(
            "returned (var, mean) swapped",
            "return (mean, var), in that order.",
            lambda x: _stacked(x.var(dim=-1, correction=0), x.mean(dim=-1)),
        ),
        Mistake(  # told by its own input (a 1e4 offset in float32), where rounding makes it garbage
            "one-pass cancellation",
            "E[x²] − E[x]² subtracts two huge, nearly equal numbers when the mean is large (1e4 here: "
            "E[x²] ≈ 1e8, where float32's spacing is 8), so only rounding noise is left. Welford's "
            "update never forms E[x²]: keep a running mean and m2 = Σ (x − mean)² instead.",
            lambda x: _stacked(x.mean(-1), (x * x).mean(-1) - x.mean(-1) ** 2),
        ),
    ]
}
_OTHER_ORDER = Mistake("wrong update order", _ORDER, _wel(lambda mean, m2, d: m2 / d, m2_update="new"))


def _merged(
    a: tuple, b: tuple, *, mean: str = "right", m2: str = "right", count: str = "sum"
) -> torch.Tensor:
    """Chan et al.'s merge, or a classic slip, as one tensor ``[n; mean; m2]`` ``[3, R]``."""
    (n_a, ma, qa), (n_b, mb, qb) = a, b
    n = n_a + n_b
    delta = mb - ma
    means = {"right": ma + delta * n_b / n, "unweighted": (ma + mb) / 2, "swapped": ma + delta * n_a / n}
    m2s = {
        "right": qa + qb + delta**2 * n_a * n_b / n,
        "no between": qa + qb,
        "no factor": qa + qb + delta**2,
        "over n squared": qa + qb + delta**2 * n_a * n_b / n**2,
        "not over n": qa + qb + delta**2 * n_a * n_b,
    }
    m2s["variance"] = m2s["right"] / n
    return torch.stack([means[mean], m2s[m2]])


MERGE_MISTAKES: dict[str, Mistake] = {
    m.label: m
    for m in [
        Mistake(
            "unweighted mean of means",
            "the parts have different counts: mean = (n_a·mean_a + n_b·mean_b) / n, "
            "not (mean_a + mean_b) / 2.",
            lambda a, b: _merged(a, b, mean="unweighted"),
        ),
        Mistake(
            "weights swapped",
            "mean = mean_a + delta · n_b / n (the weight of b's mean is b's share n_b / n).",
            lambda a, b: _merged(a, b, mean="swapped"),
        ),
        Mistake(
            "forgot the between-group term",
            "m2 = m2_a + m2_b + delta² · n_a · n_b / n: the parts' own m2 measure spread around their "
            "own means; the last term adds the spread between the two means.",
            lambda a, b: _merged(a, b, m2="no between"),
        ),
        Mistake(
            "missing n_a·n_b/n factor",
            "the between-group term is delta² · n_a · n_b / n, not delta².",
            lambda a, b: _merged(a, b, m2="no factor"),
        ),
        Mistake(  # a derivation slip: (mu_a - mu)² summed over part a is n_a (delta n_b / n)²
            "between-group term over n²",
            "summing (mu_a - mu)² = (delta · n_b / n)² over the n_a elements of a, and (delta · n_a / n)² "
            "over the n_b of b, gives delta² · n_a · n_b · (n_b + n_a) / n² = delta² · n_a · n_b / n: "
            "one factor of n cancels.",
            lambda a, b: _merged(a, b, m2="over n squared"),
        ),
        Mistake(
            "between-group term not divided by n",
            "the between-group term is delta² · n_a · n_b / n: mu_a - mu = -delta · n_b / n carries a 1/n.",
            lambda a, b: _merged(a, b, m2="not over n"),
        ),
        Mistake(
            "returned a variance, not m2",
            "keep m2 as a sum of squared deviations (do not divide by n): merges compose only that way.",
            lambda a, b: _merged(a, b, m2="variance"),
        ),
        # named by its count alone (checked first): its mean and m2 are right
        Mistake("wrong count", "the merged count is n = n_a + n_b.", _merged),
    ]
}


# ----------------------------------------------------------------------- helpers


def _to64(check: str, v: Any, what: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(v.detach() if isinstance(v, torch.Tensor) else v)
    except (TypeError, ValueError, RuntimeError):
        fail(check, f"{what} should be a tensor or a number, got {type(v).__name__}", "a missing `return`?")
    return t.to(torch.float64).cpu()


# ----------------------------------------------------------------------- Welford

_WEL = "check_welford"


def _diagnose(
    check: str, y: torch.Tensor, truth: torch.Tensor, mistakes: list[Mistake], args: tuple, label: str, names
) -> None:
    """Fail naming the mistake whose output (``[2 or 3, R]``) is nearest y, or the first wrong row of y."""
    best, explains = nearest_mistake(mistakes, lambda m: m.fn(*args), y, truth, TOL)
    if best is not None and explains:
        fail_mistake(check, f"{best.label}: wrong result on {label}", best.label, best.fix)
    i = next(i for i in range(len(names)) if rel_dist(y[i], truth[i]) > TOL)
    fail(check, f"{names[i]} is wrong on {label}: got {y[i][:3].tolist()}, expected {truth[i][:3].tolist()}")


def _call_welford(fn: Callable[..., Any], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = call_on_copies(_WEL, fn, (x,), names="x", what="x", likely="work on copies: not x -= ...")
    out = as_tuple(_WEL, out, ("mean", "var"))
    r = x.shape[0]
    res = []
    for v, what in zip(out, ("mean", "var"), strict=True):
        t = _to64(_WEL, v, what)
        if t.numel() == r and t.ndim in (1, 2):
            t = t.reshape(r)
        else:
            fail(
                _WEL,
                f"{what} has shape {tuple(t.shape)}, expected ({r},): one value per row of x [R, d]",
                "reduce over the last axis (the d features), one result per row",
            )
        res.append(t)
    return res[0], res[1]


def check_welford(fn: Callable[[torch.Tensor], Any]) -> None:
    """Check ``fn(x) -> (mean, var)``: the mean and biased variance over the last axis of ``[R, d]``.

    Tried on benign float64 rows, on rows of length 1, and on float32 rows with a common
    offset of 1e4 (where ``E[x²] − E[x]²`` loses every digit).
    """
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 40, generator=g, dtype=torch.float64) * 2.0 + 0.5
    x[1] += 3.0  # rows with different means
    y, truth = _stacked(*_call_welford(fn, x)), _stacked(x.mean(-1), x.var(-1, correction=0))
    if not close(y, truth, TOL):
        mistakes = [*WELFORD_MISTAKES.values(), _OTHER_ORDER]
        _diagnose(_WEL, y, truth, mistakes, (x,), "benign float64 rows", ("the mean", "the variance"))

    x1 = torch.randn(3, 1, generator=g, dtype=torch.float64)
    mean, var = _call_welford(fn, x1)
    if rel_dist(mean, x1[:, 0]) > TOL or not torch.isfinite(var).all() or var.abs().max() > TOL:
        fail(
            _WEL,
            f"rows of length d = 1 should give mean = x and var = 0, got mean {mean.tolist()}, "
            f"var {var.tolist()}",
            WELFORD_MISTAKES["unbiased variance"].fix if not torch.isfinite(var).all() else None,
        )

    xo = (1e4 + torch.randn(8, 256, generator=g, dtype=torch.float64)).to(torch.float32)
    ref = xo.double().var(dim=-1, correction=0)
    mean, var = _call_welford(fn, xo)
    err = rel_dist(var, ref)
    if err > OFFSET_TOL:
        fail(
            _WEL,
            f"one-pass cancellation: on float32 rows with a mean of 1e4 the variance is off by a relative "
            f"{err:.3g} (got {var[:3].tolist()}, expected {ref[:3].tolist()}).",
            WELFORD_MISTAKES["one-pass cancellation"].fix,
        )
    passed(
        _WEL,
        "mean and biased variance match float64 on benign rows, d = 1, and a 1e4 offset in float32 "
        f"(relative error {err:.1e})",
    )


# ----------------------------------------------------------------------- merge

_MERGE = "check_welford_merge"


def _stats(x: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(count, mean, m2) over the last axis of x [R, n]."""
    n = x.shape[-1]
    if n == 0:
        z = torch.zeros(x.shape[0], dtype=x.dtype)
        return 0, z, z.clone()
    mean = x.mean(dim=-1)
    return n, mean, ((x - mean[:, None]) ** 2).sum(dim=-1)


def _call_merge(fn, a, b) -> tuple[float, torch.Tensor, torch.Tensor]:
    snap = [t.clone() for t in (a[1], a[2], b[1], b[2])]
    try:
        result = call(_MERGE, fn, a, b)
    except AssertionError as e:
        if "not implemented yet" in str(e) or (a[0] and b[0]):
            raise
        fail(
            _MERGE,
            f"with an empty part (n_a = {a[0]}, n_b = {b[0]}): {str(e).removeprefix(_MERGE + ': ')}",
            "an empty part must leave the other unchanged: avoid dividing by n_a or n_b alone "
            "(n = n_a + n_b is never 0 here), e.g. mean = mean_a + delta * n_b / n.",
        )
    out = as_tuple(_MERGE, result, ("n", "mean", "m2"))
    if any(not torch.equal(s, t) for s, t in zip(snap, (a[1], a[2], b[1], b[2]), strict=True)):
        fail(_MERGE, "your function modified its inputs in place.", "build new tensors: mean = mean_a + ...")
    n = _to64(_MERGE, out[0], "n")
    mean = _to64(_MERGE, out[1], "mean")
    m2 = _to64(_MERGE, out[2], "m2")
    r = a[1].shape[0]
    for t, what in ((mean, "mean"), (m2, "m2")):
        if t.numel() not in (1, r):
            fail(_MERGE, f"{what} has shape {tuple(t.shape)}, expected ({r},) like mean_a")
    n_out = float(n.reshape(-1)[0]) if n.numel() else float("nan")
    return n_out, mean.reshape(-1).expand(r).clone(), m2.reshape(-1).expand(r).clone()


def check_welford_merge(fn: Callable[[tuple, tuple], Any]) -> None:
    """Check ``fn((n_a, mean_a, m2_a), (n_b, mean_b, m2_b)) -> (n, mean, m2)``.

    Counts are Python ints; means and m2 are float64 tensors ``[R]`` (one statistic per row).
    Tried on parts of unequal size and different means, with an empty part, and by folding
    eight chunks of a row one after another.
    """
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 16, generator=g, dtype=torch.float64) * 1.5
    x[:, :3] += 4.0  # part a: 3 elements, shifted; part b: 13 elements
    cases = [("parts of 3 and 13 elements with different means", x[:, :3], x[:, 3:])]
    cases.append(("an empty part a (n_a = 0)", x[:, :0], x[:, 3:]))
    cases.append(("an empty part b (n_b = 0)", x[:, 3:], x[:, :0]))
    for label, xa, xb in cases:
        a, b = _stats(xa), _stats(xb)
        n, mean, m2 = _call_merge(fn, a, b)
        full = torch.cat([xa, xb], dim=-1)
        ref_n, ref_mean, ref_m2 = _stats(full)
        if n != ref_n:
            m = MERGE_MISTAKES["wrong count"]
            fail(_MERGE, f"{m.label} on {label}: got n = {n:g}, expected {ref_n}", m.fix)
        y, truth = torch.stack([mean, m2]), torch.stack([ref_mean, ref_m2])
        if close(y, truth, TOL):
            continue
        if not (a[0] and b[0]):
            which = "mean" if rel_dist(mean, ref_mean) > TOL else "m2"
            fail(
                _MERGE,
                f"{which} is wrong on {label}",
                "with an empty part, the merge must return the other part unchanged (watch for 0/0)",
            )
        _diagnose(_MERGE, y, truth, list(MERGE_MISTAKES.values()), (a, b), label, ("mean", "m2"))

    # fold a row chunk by chunk: the running statistics must stay exact
    y = 100.0 + torch.randn(2, 64, generator=g, dtype=torch.float64)
    acc = _stats(y[:, :8])
    for s in range(8, 64, 8):
        n, mean, m2 = _call_merge(fn, acc, _stats(y[:, s : s + 8]))
        acc = (round(n), mean, m2)
    ref_n, ref_mean, ref_m2 = _stats(y)
    if rel_dist(acc[1], ref_mean) > TOL or rel_dist(acc[2], ref_m2) > 1e-7:
        fail(_MERGE, "folding 8 chunks of 8 one after another does not reproduce the statistics of all 64")
    passed(
        _MERGE,
        "merged (n, mean, m2) match the whole data for unequal parts, an empty part, "
        "and 8 chunks folded in turn",
    )
