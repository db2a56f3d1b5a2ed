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

from ._core import call, close, fail, passed

__all__ = ["MERGE_MISTAKES", "WELFORD_MISTAKES", "check_welford", "check_welford_merge"]

TOL = 1e-9  # benign inputs are float64: a correct answer agrees to ~1e-14
OFFSET_TOL = 1e-3  # relative error allowed on the float32 input with a 1e4 offset

# name -> what it means; every name appears verbatim in the failure message it causes
WELFORD_MISTAKES: dict[str, str] = {
    "unbiased variance": (
        "LayerNorm's variance is biased: m2 / n, not m2 / (n - 1) (torch.var defaults to n - 1: "
        "pass correction=0)."
    ),
    "returned m2 instead of the variance": "m2 is the sum of squared deviations; the variance is m2 / n.",
    "wrong update order": (
        "Welford's update is delta = x - mean_old; mean_new = mean_old + delta / k; "
        "m2 += delta * (x - mean_new): one factor from the old mean, one from the new. Using the same "
        "mean twice (delta * delta, or (x - mean_new)**2) gives the wrong m2."
    ),
    "divided by n instead of k": (
        "inside the loop the running mean after k elements is mean += delta / k (k = 1, 2, ...), "
        "not delta / n: the mean of the elements seen so far."
    ),
    "returned (var, mean) swapped": "return (mean, var), in that order.",
    "one-pass cancellation": (
        "E[x²] − E[x]² subtracts two huge, nearly equal numbers when the mean is large (1e4 here: "
        "E[x²] ≈ 1e8, where float32's spacing is 8), so only rounding noise is left. Welford's "
        "update never forms E[x²]: keep a running mean and m2 = Σ (x − mean)² instead."
    ),
}

MERGE_MISTAKES: dict[str, str] = {
    "unweighted mean of means": (
        "the parts have different counts: mean = (n_a·mean_a + n_b·mean_b) / n, not (mean_a + mean_b) / 2."
    ),
    "weights swapped": "mean = mean_a + delta · n_b / n (the weight of b's mean is b's share n_b / n).",
    "forgot the between-group term": (
        "m2 = m2_a + m2_b + delta² · n_a · n_b / n: the parts' own m2 measure spread around their "
        "own means; the last term adds the spread between the two means."
    ),
    "missing n_a·n_b/n factor": "the between-group term is delta² · n_a · n_b / n, not delta².",
    "returned a variance, not m2": (
        "keep m2 as a sum of squared deviations (do not divide by n): merges compose only that way."
    ),
    "wrong count": "the merged count is n = n_a + n_b.",
}


# ----------------------------------------------------------------------- helpers


def _to64(check: str, v: Any, what: str) -> torch.Tensor:
    try:
        t = torch.as_tensor(v.detach() if isinstance(v, torch.Tensor) else v)
    except (TypeError, ValueError, RuntimeError):
        fail(check, f"{what} should be a tensor or a number, got {type(v).__name__}", "a missing `return`?")
    return t.to(torch.float64).cpu()


def _pair(check: str, out: Any, names: str, n: int) -> tuple[Any, ...]:
    if not isinstance(out, tuple | list) or len(out) != n:
        fail(
            check,
            f"expected a tuple {names}, got {type(out).__name__}"
            + (f" of length {len(out)}" if isinstance(out, tuple | list) else ""),
            "a missing `return`, or returning only one of them?",
        )
    return tuple(out)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max relative error of a against b (NaN counts as infinitely wrong)."""
    if a.shape != b.shape or not torch.isfinite(a).all():
        return float("inf")
    return float(((a - b).abs() / b.abs().clamp(min=1e-300)).max())


# ----------------------------------------------------------------------- Welford

_WEL = "check_welford"


def _welford_variants(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """What each named mistake returns as the variance for x [R, d] (float64)."""
    r, d = x.shape
    mean = torch.zeros(r, dtype=x.dtype)
    m2_same_old = torch.zeros(r, dtype=x.dtype)
    m2_same_new = torch.zeros(r, dtype=x.dtype)
    mean_n = torch.zeros(r, dtype=x.dtype)
    m2_n = torch.zeros(r, dtype=x.dtype)
    for k in range(d):
        xk = x[:, k]
        delta = xk - mean
        mean = mean + delta / (k + 1)
        m2_same_old = m2_same_old + delta * delta
        m2_same_new = m2_same_new + (xk - mean) ** 2
        delta_n = xk - mean_n
        mean_n = mean_n + delta_n / d
        m2_n = m2_n + delta_n * (xk - mean_n)
    m2 = x.var(dim=-1, correction=0) * d
    return {
        "unbiased variance": m2 / max(d - 1, 1),
        "returned m2 instead of the variance": m2,
        "wrong update order (delta * delta)": m2_same_old / d,
        "wrong update order ((x - mean_new)**2)": m2_same_new / d,
        "divided by n instead of k": m2_n / d,
    }


def _diagnose_welford(mean: torch.Tensor, var: torch.Tensor, x: torch.Tensor, label: str) -> None:
    ref_mean = x.mean(dim=-1)
    ref_var = x.var(dim=-1, correction=0)
    if _rel(mean, ref_var) < 1e-6 and _rel(var, ref_mean) < 1e-6:
        fail(_WEL, "returned (var, mean) swapped.", WELFORD_MISTAKES["returned (var, mean) swapped"])
    if not close(mean, ref_mean, TOL):
        if torch.isfinite(mean).all():
            d = x.shape[-1]
            running = torch.zeros_like(ref_mean)
            for k in range(d):
                running = running + (x[:, k] - running) / d
            if close(mean, running, 1e-9):
                fail(
                    _WEL,
                    f"divided by n instead of k: the mean is wrong on {label}.",
                    WELFORD_MISTAKES["divided by n instead of k"],
                )
        fail(_WEL, f"the mean is wrong on {label}: got {mean[:3].tolist()}, expected {ref_mean[:3].tolist()}")
    if close(var, ref_var, TOL):
        return
    for name, v in _welford_variants(x).items():
        if _rel(var, v) < 1e-6:
            key = name.split(" (")[0]
            fail(_WEL, f"{name}: the variance is wrong on {label}.", WELFORD_MISTAKES[key])
    fail(_WEL, f"the variance is wrong on {label}: got {var[:3].tolist()}, expected {ref_var[:3].tolist()}")


def _call_welford(fn: Callable[..., Any], x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    snapshot = x.clone()
    out = _pair(_WEL, call(_WEL, fn, x), "(mean, var)", 2)
    if not torch.equal(x, snapshot):
        fail(_WEL, "your function modified x in place.", "work on copies: mean = mean + ..., not x -= ...")
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
    mean, var = _call_welford(fn, x)
    _diagnose_welford(mean, var, x, "benign float64 rows")

    x1 = torch.randn(3, 1, generator=g, dtype=torch.float64)
    mean, var = _call_welford(fn, x1)
    if _rel(mean, x1[:, 0]) > TOL or not torch.isfinite(var).all() or var.abs().max() > TOL:
        fail(
            _WEL,
            f"rows of length d = 1 should give mean = x and var = 0, got mean {mean.tolist()}, "
            f"var {var.tolist()}",
            WELFORD_MISTAKES["unbiased variance"] if not torch.isfinite(var).all() else None,
        )

    xo = (1e4 + torch.randn(8, 256, generator=g, dtype=torch.float64)).to(torch.float32)
    ref = xo.double().var(dim=-1, correction=0)
    mean, var = _call_welford(fn, xo)
    err = _rel(var, ref)
    if err > OFFSET_TOL:
        fail(
            _WEL,
            f"one-pass cancellation: on float32 rows with a mean of 1e4 the variance is off by a relative "
            f"{err:.3g} (got {var[:3].tolist()}, expected {ref[:3].tolist()}).",
            WELFORD_MISTAKES["one-pass cancellation"],
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


def _merge_variants(a, b) -> dict[str, tuple[Any, torch.Tensor, torch.Tensor]]:
    n_a, ma, qa = a
    n_b, mb, qb = b
    n = n_a + n_b
    delta = mb - ma
    mean = ma + delta * n_b / n
    m2 = qa + qb + delta**2 * n_a * n_b / n
    return {
        "unweighted mean of means": (n, (ma + mb) / 2, m2),
        "weights swapped": (n, ma + delta * n_a / n, m2),
        "forgot the between-group term": (n, mean, qa + qb),
        "missing n_a·n_b/n factor": (n, mean, qa + qb + delta**2),
        "returned a variance, not m2": (n, mean, m2 / n),
    }


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
    out = _pair(_MERGE, result, "(n, mean, m2)", 3)
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
            fail(
                _MERGE,
                f"wrong count on {label}: got n = {n:g}, expected {ref_n}",
                MERGE_MISTAKES["wrong count"],
            )
        if _rel(mean, ref_mean) <= TOL and _rel(m2, ref_m2) <= TOL:
            continue
        if a[0] and b[0]:
            for name, (_, v_mean, v_m2) in _merge_variants(a, b).items():
                if _rel(mean, v_mean) < 1e-9 and _rel(m2, v_m2) < 1e-9:
                    fail(_MERGE, f"{name}: wrong result on {label}.", MERGE_MISTAKES[name])
        which = "mean" if _rel(mean, ref_mean) > TOL else "m2"
        got, exp = (mean, ref_mean) if which == "mean" else (m2, ref_m2)
        fail(
            _MERGE,
            f"{which} is wrong on {label}: got {got[:3].tolist()}, expected {exp[:3].tolist()}",
            "with an empty part, the merge must return the other part unchanged (watch for 0/0)"
            if not (a[0] and b[0])
            else None,
        )

    # fold a row chunk by chunk: the running statistics must stay exact
    y = 100.0 + torch.randn(2, 64, generator=g, dtype=torch.float64)
    acc = _stats(y[:, :8])
    for s in range(8, 64, 8):
        n, mean, m2 = _call_merge(fn, acc, _stats(y[:, s : s + 8]))
        acc = (round(n), mean, m2)
    ref_n, ref_mean, ref_m2 = _stats(y)
    if _rel(acc[1], ref_mean) > TOL or _rel(acc[2], ref_m2) > 1e-7:
        fail(_MERGE, "folding 8 chunks of 8 one after another does not reproduce the statistics of all 64")
    passed(
        _MERGE,
        "merged (n, mean, m2) match the whole data for unequal parts, an empty part, "
        "and 8 chunks folded in turn",
    )
