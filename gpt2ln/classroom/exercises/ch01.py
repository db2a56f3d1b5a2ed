"""Checks for chapter 1, "Why normalize?".

- ``check_residual_norms(fn)``: ``fn(cache, n_layer) -> [n_layer + 1]``, the mean per-token
  L2 norm of ``resid_pre.{l}`` for l = 0..n_layer.
- ``check_invariance(fn)``: ``fn(norm_fn, x) -> {"scale": bool, "shift": bool}``, whether a
  normalization is invariant to rescaling / shifting each token's features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...model.config import GPT2Config
from ...model.gpt2 import GPT2
from ._core import (
    Mistake,
    call,
    close,
    fail,
    fail_mistake,
    from_numpy,
    nearest_mistake,
    passed,
)

__all__ = ["check_invariance", "check_residual_norms"]

# ----------------------------------------------------------------- residual norms

_RESID = "check_residual_norms"


def _small_cache(n_layer: int, seed: int) -> dict[str, torch.Tensor]:
    """A random pre-norm GPT-2 with B=3, T=5, d=32 (all different, so a wrong axis shows)."""
    config = GPT2Config(vocab_size=50, n_ctx=16, n_embd=32, n_head=4, n_layer=n_layer, scale_resid_init=False)
    with torch.random.fork_rng(devices=[]):  # leave the learner's random state alone
        torch.manual_seed(seed)
        model = GPT2(config).eval()
    idx = torch.randint(0, config.vocab_size, (3, 5), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, cache = model.run_with_cache(idx)
    return cache


def _per_layer(cache: dict[str, torch.Tensor], n_layer: int, f: Callable[[torch.Tensor], torch.Tensor]):
    return torch.stack([f(cache[f"resid_pre.{l}"]) for l in range(n_layer + 1)])


def _to_1d(out: Any) -> torch.Tensor:
    if isinstance(out, (list, tuple)):
        try:
            out = torch.stack([torch.as_tensor(v) for v in out])
        except (TypeError, RuntimeError, ValueError):
            fail(_RESID, f"could not turn the returned {type(out).__name__} into a tensor")
    out = from_numpy(out)
    if not isinstance(out, torch.Tensor):
        fail(
            _RESID,
            f"expected a tensor of shape [n_layer + 1], got {type(out).__name__}",
            "a missing `return`?",
        )
    return out.detach().to(torch.float64).cpu()


def _first(v: torch.Tensor, n: int = 3) -> str:
    """The first n entries, 4 significant digits: '[0.1234, 0.1515, 0.1768, ...]'."""
    return "[" + ", ".join(f"{x:.4g}" for x in v[:n].tolist()) + (", ...]" if len(v) > n else "]")


def _resid_mistakes(n_layer: int) -> list[Mistake]:
    """Each mistake's fn(cache) -> what it returns."""

    def per_layer(f: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict], torch.Tensor]:
        return lambda cache: _per_layer(cache, n_layer, lambda x: f(x.double()))

    norms = per_layer(lambda x: x.norm(dim=-1).mean())

    def lnf_last(cache: dict[str, torch.Tensor]) -> torch.Tensor:
        out = norms(cache)
        out[-1] = cache["ln_f.out"].double().norm(dim=-1).mean()
        return out

    axis = "norm over the wrong axis"
    return [
        Mistake(
            "forgot the last entry",
            f"resid_pre.{n_layer} (the stream after the last block, the input to ln_f) also counts, "
            "so loop over range(n_layer + 1).",
            lambda cache: norms(cache)[:-1],
        ),
        Mistake(
            "skipped the first entry",
            "resid_pre.0 is the embeddings wte[idx] + wpe[pos], start at l = 0.",
            lambda cache: norms(cache)[1:],
        ),
        Mistake(
            "the values are in reverse order",
            "entry l must be resid_pre.{l}, from l = 0 upward.",
            lambda cache: norms(cache).flip(0),
        ),
        Mistake(
            "used ln_f.out for the last entry",
            f"that is after the final LayerNorm; use resid_pre.{n_layer}.",
            lnf_last,
        ),
        Mistake(
            axis,
            "took the norm over the batch axis (dim=0); a token's norm is over its features: dim=-1.",
            per_layer(lambda x: x.norm(dim=0).mean()),
        ),
        Mistake(
            axis,
            "took the norm over the token axis (dim=1); a token's norm is over its features: dim=-1.",
            per_layer(lambda x: x.norm(dim=1).mean()),
        ),
        Mistake(
            axis,
            "took one norm of the whole [B, T, d] tensor; take each token's norm (dim=-1), then the mean.",
            per_layer(lambda x: x.norm()),
        ),
        Mistake(
            "mean of squares instead of norm",
            "the L2 norm is sqrt(sum(x**2)) over the features.",
            per_layer(lambda x: x.pow(2).mean(dim=-1).mean()),
        ),
        Mistake(
            "squared norm instead of norm",
            "you summed the squares but forgot the square root.",
            per_layer(lambda x: x.pow(2).sum(dim=-1).mean()),
        ),
        Mistake(
            "RMS instead of norm",
            "sqrt(mean(x**2)) is the norm divided by sqrt(d); use sum, not mean.",
            per_layer(lambda x: x.pow(2).mean(dim=-1).sqrt().mean()),
        ),
        Mistake(
            "root of the mean squared norm instead of the mean norm",
            "take each token's norm first, then average the norms.",
            per_layer(lambda x: x.pow(2).sum(dim=-1).mean().sqrt()),
        ),
    ]


def _diagnose_residual_norms(out: torch.Tensor, cache: dict[str, torch.Tensor], n_layer: int) -> None:
    """Fail with the most likely named mistake; return only if out is right."""
    ref = _per_layer(cache, n_layer, lambda x: x.double().norm(dim=-1).mean())
    if out.shape == ref.shape and close(out, ref, 1e-5):
        return
    best, explains = nearest_mistake(_resid_mistakes(n_layer), lambda m: m.fn(cache), out, ref, 1e-5)
    if best is not None and explains:
        fail_mistake(_RESID, f"got {_first(out)}, expected {_first(ref)}", best.label, best.fix)
    if out.shape != ref.shape:
        fail(
            _RESID,
            f"expected shape [n_layer + 1] = [{n_layer + 1}], got {tuple(out.shape)}",
            "one number per residual stream: the mean over batch and tokens of each token's norm.",
        )
    l_bad = int((out - ref).abs().argmax())
    fail(
        _RESID,
        f"entry {l_bad} is {out[l_bad].item():.6g}, expected {ref[l_bad].item():.6g} "
        f"(the mean over batch and tokens of resid_pre.{l_bad}.norm(dim=-1))",
    )


def check_residual_norms(fn: Callable[[dict[str, torch.Tensor], int], Any]) -> None:
    """Check ``fn(cache, n_layer)`` -> ``[n_layer + 1]``: mean per-token L2 norm of each ``resid_pre.{l}``.

    ``cache`` is the dict from ``GPT2.run_with_cache``: ``resid_pre.{l}`` is ``[B, T, d]`` for
    l = 0..n_layer. Tried on two random models of different depths.
    """
    for n_layer, seed in ((4, 0), (2, 1)):
        cache = _small_cache(n_layer, seed)
        snapshot = {k: v.clone() for k, v in cache.items()}
        out = _to_1d(call(_RESID, fn, cache, n_layer))
        if any(not torch.equal(cache[k], snapshot[k]) for k in snapshot):
            fail(_RESID, "your function modified the cache in place.", "use x.norm(...), not in-place ops.")
        _diagnose_residual_norms(out, cache, n_layer)
    passed(_RESID, "mean per-token norms of resid_pre.0..n_layer match on models of depth 4 and 2")


# ----------------------------------------------------------------------- invariance

_INV = "check_invariance"
_EPS = 1e-12  # the check's norms, in float64: eps never matters for factors 1e-3..1e3


def _ln(x: torch.Tensor) -> torch.Tensor:
    xc = x - x.mean(dim=-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(dim=-1, keepdim=True) + _EPS)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + _EPS)


def _rms_of(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean(dim=-1, keepdim=True).sqrt()


def _case_table() -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor], bool, bool, str]]:
    """(name, norm_fn, scale-invariant?, shift-invariant?, what a wrong answer suggests)."""
    strict = (
        "tolerance too strict: it is invariant up to float rounding (~1e-15 in float64), so compare with "
        "torch.allclose and a small atol such as 1e-8, not == or torch.equal. Other causes: a negative "
        "factor (norm(-x) = -norm(x); the invariance is for a > 0), or a factor so tiny that eps "
        "dominates (keep factors within 1e-2..1e2)."
    )
    loose = (
        "tolerance too loose: this norm changes the output by a few thousandths; a tolerance that "
        "large (1e-2, say) hides a real dependence. Use something like atol=1e-8."
    )
    one_sign = (
        "tested only one sign of shift: this norm ignores shifts of one sign but not of the other; "
        "try shifts of both signs, e.g. -3 and 3."
    )
    return [
        ("LayerNorm", _ln, True, True, strict),
        ("RMSNorm", _rms, True, False, strict),
        ("the identity (no normalization)", lambda x: x, False, False, "the output must change with x."),
        (
            "mean subtraction only (x - mean(x))",
            lambda x: x - x.mean(dim=-1, keepdim=True),
            False,
            True,
            "mean subtraction removes any shift, but a scaled input gives a scaled output.",
        ),
        (
            "a norm that removes 99.9% of the mean ((x - 0.999*mean) / std)",
            lambda x: (x - 0.999 * x.mean(dim=-1, keepdim=True)) / x.std(dim=-1, keepdim=True, correction=0),
            True,
            False,
            loose,
        ),
        (
            "a nearly scale-free norm (x / rms(x)**0.999)",
            lambda x: x / _rms_of(x).pow(0.999),
            False,
            False,
            loose,
        ),
        (
            "norm clipping at 1 (x / max(rms(x), 1))",
            lambda x: x / _rms_of(x).clamp(min=1.0),
            False,
            False,
            "tested only one direction: this is invariant to scaling UP (factors > 1) but not to shrinking; "
            "try factors both below and above 1, e.g. 0.1 and 10.",
        ),
        (
            "norm flooring at 1 (x / min(rms(x), 1))",
            lambda x: x / _rms_of(x).clamp(max=1.0),
            False,
            False,
            "tested only one direction: this is invariant to shrinking (factors < 1) but not to scaling "
            "UP; try factors both below and above 1, e.g. 0.1 and 10.",
        ),
        (
            "a norm that subtracts the mean only where it is positive ((x - max(mean, 0)) / std)",
            lambda x: (
                (x - x.mean(dim=-1, keepdim=True).clamp(min=0.0)) / x.std(dim=-1, keepdim=True, correction=0)
            ),
            True,
            False,
            one_sign,
        ),
        (
            "a norm that subtracts the mean only where it is negative ((x - min(mean, 0)) / std)",
            lambda x: (
                (x - x.mean(dim=-1, keepdim=True).clamp(max=0.0)) / x.std(dim=-1, keepdim=True, correction=0)
            ),
            True,
            False,
            one_sign,
        ),
    ]


def _as_bool(v: Any, key: str) -> bool:
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, bool):
        return v
    try:
        import numpy as np

        if isinstance(v, np.bool_):
            return bool(v)
    except ImportError:  # pragma: no cover
        pass
    fail(_INV, f'the value for "{key}" should be True or False, got {v!r}')
    return False  # unreachable


def check_invariance(fn: Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], Any]) -> None:
    """Check ``fn(norm_fn, x)`` -> ``{"scale": bool, "shift": bool}``.

    ``norm_fn`` maps ``[N, d]`` to ``[N, d]`` row by row; ``x`` is ``[N, d]`` float64 with
    per-row mean 0 and RMS 1. ``"scale"``: norm_fn(a * x) equals norm_fn(x) (up to rounding) for every
    factor a > 0; ``"shift"``: norm_fn(x + b) equals norm_fn(x) for every number b.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g, dtype=torch.float64)
    x = x - x.mean(dim=-1, keepdim=True)  # mean 0 per row: the one-sign shift norms sit at their kink
    x = x / _rms_of(x)  # RMS exactly 1 per row: the clipping and flooring norms sit at their kink
    for name, norm_fn, want_scale, want_shift, likely in _case_table():
        out = call(_INV, fn, norm_fn, x.clone())
        if not isinstance(out, dict) or not {"scale", "shift"} <= set(out):
            fail(
                _INV,
                f'expected a dict with keys "scale" and "shift", got {type(out).__name__}'
                + (f" with keys {sorted(out)}" if isinstance(out, dict) else ""),
                "a missing `return`?",
            )
        got = {"scale": _as_bool(out["scale"], "scale"), "shift": _as_bool(out["shift"], "shift")}
        for key, want in (("scale", want_scale), ("shift", want_shift)):
            if got[key] != want:
                fail(
                    _INV,
                    f'for {name} you reported "{key}": {got[key]}, but it is '
                    f"{'' if want else 'NOT '}invariant to {'scaling' if key == 'scale' else 'shifting'}.",
                    likely,
                )
    passed(_INV, f"right about scale and shift invariance for all {len(_case_table())} norms tried")
