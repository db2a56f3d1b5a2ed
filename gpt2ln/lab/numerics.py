"""How to compute a variance: the numerics of chapter 4.

Three ways to get the (biased, divide-by-``n``) variance of ``x`` along one axis:

* ``variance_one_pass``: ``E[x^2] - E[x]^2`` from one sweep of two running sums. Cheap, and
  catastrophically wrong when the mean is large next to the spread (both terms are huge and
  nearly equal, so their difference keeps only rounding noise).
* ``variance_two_pass``: the mean first, then the mean of squared deviations (what GPT-2's
  ``norm`` writes down).
* ``variance_welford``: Welford's streaming update, one sweep, never forming a large sum.
  ``variance_welford_parallel`` splits the axis over "threads" that each run Welford and then
  merges their partial statistics with Chan et al.'s formula (``welford_merge``), the way GPU
  kernels reduce a row.

**The accumulator.** Every running sum/mean here is an explicit loop over the reduction axis
whose state is held in ``acc_dtype`` (rounded to it after every update), vectorized over all
the other axes. That is deliberate: ``torch.sum`` on a float16/bfloat16 tensor accumulates in
float32 internally, which would hide what a half-precision accumulator does. ``acc_dtype``
defaults to the input's dtype, so ``variance_one_pass(x_fp16)`` really adds in float16 (and
overflows past 65504); pass ``acc_dtype=torch.float32`` for the usual fix. The loops make these
functions slow for wide axes: they are for studying numerics (``d`` up to a few thousand), not
for production. Results come back in ``acc_dtype``.

(How fast LayerNorm runs is measured with ``gpt2ln.lab.timing``.)
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "variance_one_pass",
    "variance_two_pass",
    "variance_welford",
    "variance_welford_parallel",
    "welford_merge",
]


def _rows(x: torch.Tensor, dim: int, acc_dtype: torch.dtype | None, name: str) -> tuple[torch.Tensor, int]:
    """Validate and lay x out as ``[n, R]`` in acc_dtype: the reduction axis first, contiguous.

    Returns the ``[n, R]`` tensor and the normalized ``dim``.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected x to be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{name}: expected x with at least one dimension, got a scalar")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name}: expected dim to be an int, got {type(dim).__name__}")
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"{name}: dim={dim} is out of range for x with {x.ndim} dimensions")
    if acc_dtype is not None and not (isinstance(acc_dtype, torch.dtype) and acc_dtype.is_floating_point):
        raise TypeError(f"{name}: expected acc_dtype to be a floating torch.dtype or None, got {acc_dtype!r}")
    dim = dim % x.ndim
    n = x.shape[dim]
    if n == 0:
        raise ValueError(f"{name}: the reduction axis (dim={dim}) is empty; a variance needs n >= 1")
    acc = x.dtype if acc_dtype is None else acc_dtype
    return x.to(acc).movedim(dim, 0).reshape(n, -1).contiguous(), dim


def _unrows(v: torch.Tensor, x: torch.Tensor, dim: int, keepdim: bool) -> torch.Tensor:
    """Reshape per-row results ``[R]`` back to x's shape with ``dim`` reduced."""
    shape = list(x.shape)
    shape[dim] = 1
    v = v.reshape(shape)
    return v if keepdim else v.squeeze(dim)


def _running_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``[n, R]`` over axis 0, one term at a time, the accumulator kept in t's dtype."""
    s = t[0].clone()
    for i in range(1, t.shape[0]):
        s = s + t[i]
    return s


def variance_one_pass(
    x: torch.Tensor, dim: int = -1, *, acc_dtype: torch.dtype | None = None, keepdim: bool = False
) -> torch.Tensor:
    """Biased variance as ``E[x^2] - E[x]^2`` (the "textbook one-pass" formula).

    x: any shape, reduced over ``dim`` (length ``n``). Running sums of ``x`` and ``x*x`` are kept
    in ``acc_dtype`` (default x's dtype). Returns x's shape without ``dim`` (or with it as 1 if
    keepdim), in acc_dtype. Can be negative: it is the difference of two rounded large numbers.
    """
    xr, dim = _rows(x, dim, acc_dtype, "variance_one_pass")
    n = xr.shape[0]
    s1 = _running_sum(xr)
    s2 = _running_sum(xr * xr)
    mean = s1 / n
    var = s2 / n - mean * mean
    return _unrows(var, x, dim, keepdim)


def variance_two_pass(
    x: torch.Tensor, dim: int = -1, *, acc_dtype: torch.dtype | None = None, keepdim: bool = False
) -> torch.Tensor:
    """Biased variance as ``mean((x - mean(x))^2)``: a sweep for the mean, a sweep for the rest.

    Same arguments and result as ``variance_one_pass``; both sweeps accumulate in acc_dtype.
    """
    xr, dim = _rows(x, dim, acc_dtype, "variance_two_pass")
    n = xr.shape[0]
    mean = _running_sum(xr) / n  # [R]
    dev = xr - mean  # [n, R]
    var = _running_sum(dev * dev) / n
    return _unrows(var, x, dim, keepdim)


def variance_welford(
    x: torch.Tensor, dim: int = -1, *, acc_dtype: torch.dtype | None = None, keepdim: bool = False
) -> torch.Tensor:
    """Biased variance by Welford's streaming update, one element at a time along ``dim``.

    For k = 1..n: ``delta = x_k - mean; mean += delta / k; m2 += delta * (x_k - mean)``
    (the second factor uses the *updated* mean); the variance is ``m2 / n``. The running mean
    stays near the data and ``m2`` grows only with the spread, so nothing large cancels.
    Same arguments and result as ``variance_one_pass``.
    """
    xr, dim = _rows(x, dim, acc_dtype, "variance_welford")
    mean = torch.zeros_like(xr[0])
    m2 = torch.zeros_like(xr[0])
    for k in range(xr.shape[0]):
        xk = xr[k]
        delta = xk - mean
        mean = mean + delta / (k + 1)
        m2 = m2 + delta * (xk - mean)
    var = m2 / xr.shape[0]
    return _unrows(var, x, dim, keepdim)


def welford_merge(a: tuple[Any, Any, Any], b: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """Merge two partial statistics ``(count, mean, m2)`` into those of the union (Chan et al.).

    ``m2`` is the sum of squared deviations from the part's own mean. With
    ``n = n_a + n_b`` and ``delta = mean_b - mean_a``::

        mean = mean_a + delta * n_b / n
        m2   = m2_a + m2_b + delta^2 * n_a * n_b / n

    Counts may be ints or tensors (broadcastable against the means); a part with count 0
    contributes nothing. Means and m2 may be floats or tensors of any (broadcastable) shape.
    """
    for name, part in (("a", a), ("b", b)):
        if not (isinstance(part, tuple | list) and len(part) == 3):
            raise TypeError(f"welford_merge: expected {name} = (count, mean, m2), got {part!r}")
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    n = n_a + n_b
    if isinstance(n, torch.Tensor):
        safe_n = torch.clamp(n, min=1)
    else:
        if n_a < 0 or n_b < 0:
            raise ValueError(f"welford_merge: counts must be >= 0, got n_a={n_a}, n_b={n_b}")
        safe_n = max(n, 1)
    if isinstance(safe_n, torch.Tensor):  # integer count tensors: divide in float64, not float32
        frac_b = n_b.to(torch.float64) / safe_n if isinstance(n_b, torch.Tensor) else n_b / safe_n.double()
    else:
        frac_b = n_b / safe_n
    weight = n_a * frac_b  # n_a * n_b / n
    if isinstance(mean_a, torch.Tensor) and isinstance(frac_b, torch.Tensor):
        # then round the weights to the means' dtype: the merge itself runs in the accumulator's dtype
        frac_b, weight = frac_b.to(mean_a.dtype), weight.to(mean_a.dtype)
    delta = mean_b - mean_a
    mean = mean_a + delta * frac_b
    m2 = m2_a + m2_b + delta * delta * weight
    return n, mean, m2


def variance_welford_parallel(
    x: torch.Tensor,
    dim: int = -1,
    *,
    threads: int = 32,
    acc_dtype: torch.dtype | None = None,
    keepdim: bool = False,
) -> torch.Tensor:
    """Biased variance the way a GPU block reduces a row: strided Welford, then a merge tree.

    "Thread" ``j`` of ``threads`` streams through elements ``j, j + threads, j + 2*threads, ...``
    with Welford's update; then pairs of threads merge their ``(count, mean, m2)`` with
    ``welford_merge`` until one is left (log2(threads) rounds, like a warp shuffle reduction).
    Same arguments and result as ``variance_one_pass``.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"variance_welford_parallel: expected a positive int threads, got {threads!r}")
    xr, dim = _rows(x, dim, acc_dtype, "variance_welford_parallel")
    n_el, r = xr.shape
    t = min(threads, n_el)
    steps = -(-n_el // t)  # ceil
    pad = steps * t - n_el
    if pad:
        xr = torch.cat([xr, xr.new_zeros(pad, r)])
    xs = xr.reshape(steps, t, r)  # xs[s, j] is element s*t + j
    lane = torch.arange(t)
    count = torch.zeros(t, 1, dtype=torch.int64)
    mean = xr.new_zeros(t, r)
    m2 = xr.new_zeros(t, r)
    for s in range(steps):
        valid = (s * t + lane < n_el).unsqueeze(1)  # [t, 1]
        count = count + valid.long()
        delta = xs[s] - mean
        new_mean = mean + delta / count.clamp(min=1).to(xr.dtype)
        mean = torch.where(valid, new_mean, mean)
        m2 = torch.where(valid, m2 + delta * (xs[s] - mean), m2)
    while count.shape[0] > 1:  # tree merge: lane j takes lane j + half
        half = count.shape[0] // 2
        odd = count.shape[0] % 2
        lo = (count[:half], mean[:half], m2[:half])
        hi = (count[half : 2 * half], mean[half : 2 * half], m2[half : 2 * half])
        c, m, q = welford_merge(lo, hi)
        if odd:
            c, m, q = (torch.cat([c, count[-1:]]), torch.cat([m, mean[-1:]]), torch.cat([q, m2[-1:]]))
        count, mean, m2 = c, m, q
    var = m2[0] / n_el
    return _unrows(var, x, dim, keepdim)
