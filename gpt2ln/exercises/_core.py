"""What every check shares: calling the student's function safely, failing with a
message that teaches, and a one-line success report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


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


def as_tensor(check: str, out: Any, like: torch.Tensor, what: str = "the output") -> torch.Tensor:
    """Check out is a tensor with like's shape (numpy arrays are accepted and converted)."""
    if not isinstance(out, torch.Tensor):
        try:
            import numpy as np

            if isinstance(out, np.ndarray):
                out = torch.from_numpy(out)
        except ImportError:  # pragma: no cover
            pass
    if not isinstance(out, torch.Tensor):
        fail(check, f"{what} should be a torch.Tensor, got {type(out).__name__}", "a missing `return`?")
    if tuple(out.shape) != tuple(like.shape):
        fail(
            check,
            f"{what} has shape {tuple(out.shape)}, expected {tuple(like.shape)}",
            "reducing without keepdim=True, or over the wrong axis",
        )
    return out.to(like.dtype)


def close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-6) -> bool:
    """Whether a and b agree to tol relative to b's size (NaNs never agree)."""
    if torch.isnan(a).any():
        return False
    return bool((a - b).abs().max() <= tol * (1.0 + b.abs().max()))
