"""Checks for chapter 10 (the norms inside GPT-2).

``check_fold_ln(fn)`` checks ``fn(g, b, W, c) -> (W_f, c_f)``: folding a LayerNorm's
gain ``g`` ``[d]`` and bias ``b`` ``[d]`` into the ``nn.Linear`` that reads it
(weight ``W`` ``[out, d]``, bias ``c`` ``[out]``), so that
``normalize(x) @ W_f.T + c_f == layer_norm(x, g, b) @ W.T + c``.
``check_logit_lens(fn)`` checks ``fn(resid, ln_f, wte) -> logits``: the logit lens,
``ln_f(resid) @ wte.T`` for a residual stream ``resid`` ``[..., d]``, a LayerNorm
module ``ln_f`` and a tied embedding ``wte`` ``[vocab, d]``.
``check_center_unembed(fn)`` checks ``fn(W_U, b_U) -> (W_c, b_c)``: TransformerLens's
``center_unembed``, the unembedding ``W_U`` ``[vocab, d]`` and bias ``b_U`` ``[vocab]``
with their means over the vocabulary removed (the same probabilities, logits of mean 0).
``check_logit_attribution(fn)`` checks ``fn(writes, W_U, b_U, token) -> contributions``:
direct logit attribution through a folded ``ln_f`` (gain 1, bias 0, eps 1e-5): each
write ``w_i`` (a row of ``writes`` ``[n, d]``; the rows sum to ``ln_f``'s input ``x``)
contributes ``(w_i - mean(w_i)) / sigma(x) @ W_U[token]``, and the contributions plus
``b_U[token]`` add up to the logit.
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

__all__ = ["check_center_unembed", "check_fold_ln", "check_logit_attribution", "check_logit_lens"]


def _no_known_mistake(check: str, failed: str, hint: str) -> None:
    """Fail saying that no known mistake matches, with a hint that leaves the answer to the learner."""
    fail(check, f"{failed}.\n  No known mistake matches this answer. Hint: {hint}")


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
        _no_known_mistake(
            check,
            f"{failed} ({'W_f is right, c_f is not' if close(W_f, W * g, 1e-9) else 'W_f is wrong'})",
            "write layer_norm(x, g, b) as normalize(x) * g + b and push each of the two terms through "
            "the layer on its own. Which axis of W meets g? Is b added before or after W?",
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


# ---------------------------------------------------------------------------- center_unembed
_CENTER_MISTAKES = [  # fn(W_U, b_U) -> (W_c, b_c), concatenated
    Mistake(
        "centred over d (each row's mean) instead of over the vocabulary",
        "the same number must be added to every logit of a position: subtract W_U.mean(dim=0), "
        "the mean over the vocab rows",
        lambda W, b: (W - W.mean(1, keepdim=True), b - b.mean()),
    ),
    Mistake(
        "forgot the bias (b_c = b_U), so the logits' mean over the vocabulary is not 0",
        "centre the bias too: b_c = b_U - b_U.mean()",
        lambda W, b: (W - W.mean(0, keepdim=True), b.clone()),
    ),
    Mistake(
        "centred the bias but not W_U",
        "W_c = W_U - W_U.mean(dim=0, keepdim=True)",
        lambda W, b: (W.clone(), b - b.mean()),
    ),
    Mistake(
        "subtracted one number, the mean of all of W_U, instead of a mean per feature",
        "each input feature j has its own mean over the vocabulary: W_U.mean(dim=0, keepdim=True)",
        lambda W, b: (W - W.mean(), b - b.mean()),
    ),
]


def check_center_unembed(fn: Callable[..., Any]) -> None:
    """Check ``fn(W_U, b_U) -> (W_c, b_c)``: ``W_U - W_U.mean(0)``, ``b_U - b_U.mean()``.

    ``W_U`` ``[vocab, d]`` is read as ``logits = y @ W_U.T + b_U``. The check says how much the
    probabilities moved (not at all, when right) and the largest mean of a row of logits over the
    vocabulary (0, when right), on inputs ``y`` that are not centred, so a centring over the
    wrong axis changes the probabilities."""
    check = "check_center_unembed"
    gen = torch.Generator().manual_seed(12)
    shapes = [(20, 8), (50, 16)]
    for vocab, d in shapes:
        W = 0.5 + torch.randn(vocab, d, generator=gen, dtype=torch.float64)
        b = 1.0 + torch.randn(vocab, generator=gen, dtype=torch.float64)
        y = 1.0 + 2.0 * torch.randn(6, d, generator=gen, dtype=torch.float64)
        what = f"W_U [{vocab}, {d}], b_U [{vocab}], float64"
        out = call_on_copies(check, fn, (W, b), names=("W_U", "b_U"), what=what, likely=IN_PLACE)
        W_c, b_c = as_tuple(check, out, ("W_c", "b_c"), f"on {what}, ")
        W_c = as_tensor(check, W_c, W, "W_c").detach().double()
        b_c = as_tensor(check, b_c, b, "b_c").detach().double()
        want_W, want_b = W - W.mean(0, keepdim=True), b - b.mean()
        if close(W_c, want_W, 1e-9) and close(b_c, want_b, 1e-9):
            continue
        logits, new = y @ W.T + b, y @ W_c.T + b_c
        dp = float((new.softmax(-1) - logits.softmax(-1)).abs().max())
        mean = float(new.mean(-1).abs().max())
        failed = (
            f"on {what}, the probabilities moved by up to {dp:.3g} (they must not move) and the "
            f"logits' mean over the vocabulary is up to {mean:.3g} (it must be 0)"
        )
        best, explains = nearest_mistake(
            _CENTER_MISTAKES,
            lambda m, a=(W, b): torch.cat([t.flatten() for t in m.fn(*a)]),
            torch.cat([W_c.flatten(), b_c]),
            torch.cat([want_W.flatten(), want_b]),
            1e-9,
        )
        if best is not None and explains:
            fail_mistake(check, failed, best.label, best.fix)
        _no_known_mistake(
            check,
            failed,
            "adding the same number to every logit of a position leaves its probabilities alone. "
            "Which mean of W_U (over which axis) changes every logit of a position by the same number, "
            "and what must happen to b_U?",
        )
    passed(
        check,
        f"the same probabilities, logits of mean 0 over the vocabulary, for (vocab, d) in {shapes}",
    )


# ---------------------------------------------------------------------------- logit attribution
def _ln_sigma(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps)


def _centred(w: torch.Tensor) -> torch.Tensor:
    return w - w.mean(-1, keepdim=True)


def _attribution_mistakes() -> list[Mistake]:  # fn(writes, W_U, b_U, token) -> [n]
    def ref(w: torch.Tensor, W: torch.Tensor, b: torch.Tensor, t: int) -> torch.Tensor:
        return _centred(w) / _ln_sigma(w.sum(0)) @ W[t]

    return [
        Mistake(
            "forgot to divide by ln_f's sigma (the contributions are in the stream's units, not the logits')",
            "ln_f divides the whole stream by one sigma, that of x = writes.sum(0): "
            "divide each centred write by it",
            lambda w, W, b, t: _centred(w) @ W[t],
        ),
        Mistake(
            "normalized each write by its own sigma (the lens applied to each part), which does not add up",
            "ln_f sees only the sum x: use x's sigma for every write, so the parts add up to the logit",
            lambda w, W, b, t: F.layer_norm(w, (w.shape[-1],), None, None, 1e-5) @ W[t],
        ),
        Mistake(
            "forgot to subtract each write's mean over d",
            "ln_f subtracts the mean of x, which is the sum of the writes' means: centre each write",
            lambda w, W, b, t: w / _ln_sigma(w.sum(0)) @ W[t],
        ),
        Mistake(
            "added b_U[token] to every contribution",
            "b_U[token] is one term of its own: the contributions add up to logit - b_U[token]",
            lambda w, W, b, t: ref(w, W, b, t) + b[t],
        ),
        Mistake(
            "used the stream up to each write (the logit lens) instead of the write itself",
            "take each row of writes on its own: it is what that component added to the stream",
            lambda w, W, b, t: F.layer_norm(w.cumsum(0), (w.shape[-1],), None, None, 1e-5) @ W[t],
        ),
    ]


def check_logit_attribution(fn: Callable[..., Any]) -> None:
    """Check ``fn(writes, W_U, b_U, token) -> contributions`` ``[n]``.

    ``writes`` ``[n, d]``: what each component wrote to the stream at one position (the rows
    sum to ``ln_f``'s input ``x``); ``W_U`` ``[vocab, d]``, ``b_U`` ``[vocab]``: the folded
    unembedding (``ln_f`` has gain 1, bias 0, eps 1e-5); ``token`` an int. The answer is
    ``(writes - writes.mean(-1)) / sigma(x) @ W_U[token]``; its sum plus ``b_U[token]`` is
    the logit. The writes are not centred (so a forgotten centring shows)."""
    check = "check_logit_attribution"
    gen = torch.Generator().manual_seed(13)
    cases = [(5, 16, 30, 7), (9, 24, 40, 0)]
    for n, d, vocab, token in cases:
        scale = torch.logspace(0, 1.5, n, dtype=torch.float64)[:, None]  # later writes larger
        writes = scale * (0.3 + torch.randn(n, d, generator=gen, dtype=torch.float64))
        W = torch.randn(vocab, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        b = 0.5 * torch.randn(vocab, generator=gen, dtype=torch.float64)
        x = writes.sum(0)
        logit = float(F.layer_norm(x, (d,), None, None, 1e-5) @ W[token] + b[token])
        what = f"{n} writes of d = {d}, vocab {vocab}, token {token}, float64"
        with torch.no_grad():
            out = call_on_copies(
                check, fn, (writes, W, b, token), names=("writes", "W_U", "b_U", "token"), what=what
            )
        truth = _centred(writes) / _ln_sigma(x) @ W[token]
        y = as_tensor(check, out, truth, "the contributions").detach().double()
        total = float(y.sum()) + float(b[token])
        where = f"on {what} (contributions + b_U[token] = {total:.4g}, the logit is {logit:.4g})"
        if not close(y, truth, 1e-7):
            best, explains = nearest_mistake(
                _attribution_mistakes(),
                lambda m, a=(writes, W, b, token): torch.as_tensor(m.fn(*a), dtype=torch.float64),
                y,
                truth,
                1e-7,
            )
            if best is None or not explains:
                _no_known_mistake(
                    check,
                    f"{where}, your contributions differ from the direct logit attribution "
                    f"by up to {float((y - truth).abs().max()):.3g}",
                    "write ln_f's output for the sum x of the writes, (x - mean(x)) / sigma(x), "
                    "and split it into one term per write. Which parts of it are shared by all writes?",
                )
        compare(
            check,
            where,
            y,
            truth,
            1e-7,
            _attribution_mistakes(),
            (writes, W, b, token),
            formula="(writes - writes.mean(-1, keepdim=True)) / sigma(writes.sum(0)) @ W_U[token]",
            differs="your contributions differ from the direct logit attribution",
        )
    passed(
        check, f"the contributions plus b_U[token] add up to the logit, for (n, d, vocab, token) in {cases}"
    )
