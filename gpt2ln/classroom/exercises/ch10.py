"""Checks for chapter 10 (the norms inside GPT-2).

``check_fold_ln(fn)`` checks ``fn(g, b, W, c) -> (W_f, c_f)``: folding a LayerNorm's
gain ``g`` ``[d]`` and bias ``b`` ``[d]`` into the ``nn.Linear`` that reads it
(weight ``W`` ``[out, d]``, bias ``c`` ``[out]``), so that
``normalize(x) @ W_f.T + c_f == layer_norm(x, g, b) @ W.T + c``.
``check_logit_lens(fn)`` checks ``fn(resid, ln_f, wte) -> logits``: the logit lens,
``ln_f(resid) @ wte.T`` for a residual stream ``resid`` ``[..., d]``, a LayerNorm
module ``ln_f`` and a tied embedding ``wte`` ``[vocab, d]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ...model.norms import LayerNorm
from ._core import (
    IN_PLACE,
    Mistake,
    as_tensor,
    as_tuple,
    call_on_copies,
    close,
    compare,
    fail,
    fail_mistake,
    nearest_mistake,
    passed,
    rel_dist,
)

__all__ = ["check_fold_ln", "check_logit_lens"]


# ---------------------------------------------------------------------------- folding
_FOLD_MISTAKES = [  # fn(g, b, W, c) -> (W_f, c_f)
    Mistake(
        "scaled the wrong axis of W (its rows, the outputs, instead of its columns, the inputs)",
        "nn.Linear stores W as [out, in] and g multiplies the inputs: W_f = W * g[None, :]",
        lambda g, b, W, c: (W * g[:, None], c + W @ b),
    ),
    Mistake(
        "forgot to move the LayerNorm's bias through W (c_f = c)",
        "the bias b enters the layer as W @ b: c_f = c + W @ b",
        lambda g, b, W, c: (W * g[None, :], c.clone()),
    ),
    Mistake(
        "added b without W (c_f = c + b)",
        "b is an input of the layer, so it reaches the output as W @ b: c_f = c + W @ b",
        lambda g, b, W, c: (W * g[None, :], c + b),
    ),
    Mistake(
        "moved the bias through the folded W_f (c_f = c + W_f @ b), so g multiplies b too",
        "b is added after the gain in the LayerNorm: use the original W, c_f = c + W @ b",
        lambda g, b, W, c: (W * g[None, :], c + (W * g[None, :]) @ b),
    ),
    Mistake(
        "moved the bias through W transposed (c_f = c + W.T @ b)",
        "W is [out, in] and b lives on the inputs: c_f = c + W @ b",
        lambda g, b, W, c: (W * g[None, :], c + W.T @ b),
    ),
    Mistake(
        "forgot the gain (W_f = W)",
        "the gain multiplies each input feature: W_f = W * g[None, :]",
        lambda g, b, W, c: (W.clone(), c + W @ b),
    ),
]


def check_fold_ln(fn: Callable[..., Any]) -> None:
    """Check ``fn(g, b, W, c) -> (W_f, c_f)``, a LayerNorm's gain and bias folded into
    the following ``nn.Linear`` (``W`` ``[out, d]``, ``c`` ``[out]``, applied as
    ``y @ W.T + c``). Tries a square layer first (so every classic mistake runs) and
    then a wider one; a wrong answer names the mistake it matches."""
    check = "check_fold_ln"
    gen = torch.Generator().manual_seed(10)
    shapes = [(12, 12), (40, 12), (6, 24)]
    for out_f, d in shapes:
        g = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        b = 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        W = torch.randn(out_f, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        c = 0.3 * torch.randn(out_f, generator=gen, dtype=torch.float64)
        x = 2.0 + 3.0 * torch.randn(3, 5, d, generator=gen, dtype=torch.float64)
        what = f"g, b of shape [{d}], W of shape [{out_f}, {d}] ([out, in]), c of shape [{out_f}], float64"
        out = call_on_copies(check, fn, (g, b, W, c), names="gbWc", what=what, likely=IN_PLACE)
        W_f, c_f = as_tuple(check, out, ("W_f", "c_f"), f"on {what}, ")
        W_f = as_tensor(check, W_f, W, "W_f").detach().double()
        c_f = as_tensor(check, c_f, c, "c_f").detach().double()
        want = F.layer_norm(x, (d,), g, b, 1e-5) @ W.T + c
        got = F.layer_norm(x, (d,), None, None, 1e-5) @ W_f.T + c_f
        if close(got, want, 1e-9):
            continue
        failed = (
            f"on {what}, normalize(x) @ W_f.T + c_f differs from layer_norm(x, g, b) @ W.T + c by up to "
            f"{rel_dist(got, want):.3g}"
        )
        best, explains = nearest_mistake(
            _FOLD_MISTAKES,
            lambda m, a=(g, b, W, c): torch.cat([t.flatten() for t in m.fn(*a)]),
            torch.cat([W_f.flatten(), c_f]),
            torch.cat([(W * g).flatten(), c + W @ b]),
            1e-9,
        )
        if best is not None and explains:
            fail_mistake(check, failed, best.label, best.fix)
        fail(
            check,
            f"{failed} ({'W_f is right, c_f is not' if close(W_f, W * g, 1e-9) else 'W_f is wrong'})",
            "write layer_norm(x, g, b) = normalize(x) * g + b and push both terms through W: "
            "W_f = W * g[None, :] (g scales W's input columns), c_f = c + W @ b",
        )
    passed(check, f"normalize(x) @ W_f.T + c_f == layer_norm(x, g, b) @ W.T + c for W of shapes {shapes}")


# ---------------------------------------------------------------------------- logit lens
def _lens_mistakes() -> list[Mistake]:  # fn(resid, ln_f, wte) -> logits
    def plain(r: torch.Tensor, ln: Any) -> torch.Tensor:
        return F.layer_norm(r, (r.shape[-1],), None, None, ln.eps)

    def rms(r: torch.Tensor, ln: Any) -> torch.Tensor:
        return r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + ln.eps) * ln.weight + ln.bias

    return [
        Mistake(
            "forgot ln_f (logits = resid @ wte.T)",
            "the unembedding was trained to read ln_f's output, not the raw stream: ln_f(resid) @ wte.T",
            lambda r, ln, w: r @ w.T,
        ),
        Mistake(
            "used ln_f without its affine (normalized, but no gain g and bias b)",
            "call the module itself, ln_f(resid), which applies ln_f.weight and ln_f.bias",
            lambda r, ln, w: plain(r, ln) @ w.T,
        ),
        Mistake(
            "used ln_f's gain but not its bias",
            "ln_f(resid) = normalize(resid) * ln_f.weight + ln_f.bias",
            lambda r, ln, w: (plain(r, ln) * ln.weight) @ w.T,
        ),
        Mistake(
            "normalized without subtracting the mean (an RMSNorm, not ln_f's LayerNorm)",
            "use ln_f itself: it centres each token before dividing by the standard deviation",
            lambda r, ln, w: rms(r, ln) @ w.T,
        ),
        Mistake(
            "untied/transposed wte: multiplied by wte instead of wte.T",
            "wte is [vocab, d]; the logits are ln_f(resid) @ wte.T, one per vocabulary entry",
            lambda r, ln, w: ln(r) @ w,
        ),
    ]


def check_logit_lens(fn: Callable[..., Any]) -> None:
    """Check ``fn(resid, ln_f, wte) -> logits``: ``ln_f(resid) @ wte.T``.

    resid ``[B, T, d]``, ln_f a ``gpt2ln.LayerNorm`` with random gain and bias, wte
    ``[vocab, d]`` -> logits ``[B, T, vocab]``. The first case has ``vocab == d`` (so
    a transposed ``wte`` runs and is named), the stream has a large norm and a
    non-zero mean (so forgetting ``ln_f`` or its mean subtraction shows)."""
    check = "check_logit_lens"
    gen = torch.Generator().manual_seed(11)
    shapes = [(16, 16), (16, 50)]
    for d, vocab in shapes:
        ln = LayerNorm(d).double()
        with torch.no_grad():
            ln.weight.copy_(1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64))
            ln.bias.copy_(0.5 * torch.randn(d, generator=gen, dtype=torch.float64))
        wte = torch.randn(vocab, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        resid = 3.0 + 20.0 * torch.randn(2, 4, d, generator=gen, dtype=torch.float64)
        norm = float(resid.norm(dim=-1).mean())
        what = f"resid [2, 4, {d}] of norm ~{norm:.0f}, wte [{vocab}, {d}], float64"
        with torch.no_grad():
            out = call_on_copies(check, fn, (resid, ln, wte), names=("resid", "ln_f", "wte"), what=what)
            compare(
                check,
                f"on {what}",
                out,
                ln(resid) @ wte.T,
                1e-7,
                _lens_mistakes(),
                (resid, ln, wte),
                formula="ln_f(resid) @ wte.T",
                differs="your logits differ from ln_f(resid) @ wte.T",
                hint="apply the final LayerNorm module ln_f to the stream, then the tied unembedding wte.T",
            )
    passed(check, f"logits == ln_f(resid) @ wte.T for (d, vocab) in {shapes}")
