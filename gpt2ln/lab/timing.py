"""Timing tools: median wall time, interleaved comparisons, the copy bandwidth.

Chapter 4 and the benchmark (``python -m gpt2ln.lab.bench``) time kernels with these:
``time_fn`` (median wall time of a call), ``time_interleaved`` (several functions timed in
turns, so a busy spell of a shared machine slows all of them alike) and ``copy_bandwidth``
(GB/s of a plain copy, the speed limit of a memory-bound kernel such as LayerNorm).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["copy_bandwidth", "time_fn", "time_interleaved"]


def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 10, warmup: int = 2, **kwargs: Any) -> float:
    """Median wall-clock seconds of ``fn(*args, **kwargs)`` over ``repeats`` calls.

    ``warmup`` untimed calls go first (caches, lazy init, compilation). Uses
    ``time.perf_counter``; on CUDA, synchronizes around each call.
    """
    if not callable(fn):
        raise TypeError(f"time_fn: expected a callable, got {type(fn).__name__}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"time_fn: expected repeats >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"time_fn: expected warmup >= 0, got {warmup!r}")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        fn(*args, **kwargs)
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_interleaved(
    fns: dict[str, Callable[..., Any]], *args: Any, repeats: int = 10, warmup: int = 1
) -> dict[str, float]:
    """Median seconds per call of several functions on the same ``args``, timed in turns.

    Each round calls every function once (in order), so a slow spell of a shared machine
    hits all of them alike; returns ``{name: median seconds}``. ``warmup`` untimed rounds first.
    """
    if not isinstance(fns, dict) or not fns or not all(callable(f) for f in fns.values()):
        raise TypeError("time_interleaved: expected a non-empty dict {name: callable}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"time_interleaved: expected repeats >= 1, got {repeats!r}")
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(warmup + repeats):
        for name, fn in fns.items():
            seconds = time_fn(fn, *args, repeats=1, warmup=0)
            if r >= warmup:
                times[name].append(seconds)
    return {name: statistics.median(ts) for name, ts in times.items()}


def copy_bandwidth(
    nbytes: int = 64 * 2**20, repeats: int = 10, device: str | torch.device = "cpu", warmup: int = 2
) -> float:
    """Measured memory bandwidth in GB/s (1e9 bytes/s) of ``torch.empty_like(x).copy_(x)``.

    x is a float32 tensor of ``nbytes`` bytes; a copy reads and writes it, so it moves
    ``2 * nbytes``. Returns ``2 * nbytes / median_seconds / 1e9``. The allocation of the output
    is timed too, as it is for any out-of-place operation; above glibc's mmap threshold (32 MB
    at most) every allocation gets fresh pages whose first touch is slow, so compare a kernel
    with the copy bandwidth measured at the kernel's own tensor size.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 4:
        raise ValueError(f"copy_bandwidth: expected nbytes to be an int >= 4, got {nbytes!r}")
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    seconds = time_fn(lambda: torch.empty_like(x).copy_(x), repeats=repeats, warmup=warmup)
    return 2 * x.numel() * 4 / seconds / 1e9
