"""Checks for chapter 6 (attention and the MLP).

``check_causal_attention(fn)`` runs the learner's
``fn(x, c_attn_w, c_attn_b, c_proj_w, c_proj_b, n_head) -> y`` (weights in GPT-2's
``Conv1D`` layout ``[in, out]``) on inputs where each classic mistake gives a
different answer, and names the one it matches. ``check_gelu(fn)`` checks GPT-2's
tanh GELU the same way. ``check_padded_causal_mask(fn)`` runs the learner's
``fn(keep, dtype) -> mask``, an additive ``[B, 1, T, T]`` mask combining the causal
mask with a padding mask, inside attention in three dtypes, and names the mistake a
wrong mask matches. ``check_smallest_nan_fill(fill)`` and ``check_saturating_std(qk_std, w_std)``
check a number the learner predicts by running the computation it predicts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._core import (
    Mistake,
    as_tensor,
    call,
    call_on_copies,
    close,
    compare,
    fail,
    fail_mistake,
    from_numpy,
    passed,
    require_unchanged,
)

__all__ = [
    "check_causal_attention",
    "check_gelu",
    "check_padded_causal_mask",
    "check_saturating_std",
    "check_smallest_nan_fill",
]


_IN_PLACE = "an in-place operation such as `x *= ...` or `w.t_()`: compute new tensors instead"


# ---------------------------------------------------------------------------- attention
_ATTN_FORMULA = (
    "q, k, v = (x @ c_attn_w + c_attn_b).split(d, -1); heads [B, T, d] -> view [B, T, H, D] -> "
    "transpose(1, 2) -> [B, H, T, D]; softmax(mask(q @ k^T / sqrt(D)), -1) @ v; back to [B, T, d]; "
    "@ c_proj_w + c_proj_b"
)


def _attention(
    x: torch.Tensor,
    wa: torch.Tensor,
    ba: torch.Tensor,
    wp: torch.Tensor,
    bp: torch.Tensor,
    n_head: int,
    *,
    scale: str = "head_dim",
    mask: str = "before",
    split: str = "transpose",
    merge: str = "transpose",
    softmax_dim: int = -1,
    order: str = "qkv",
    proj: str = "conv1d",
    attn_bias: bool = True,
    proj_bias: bool = True,
) -> torch.Tensor:
    """GPT-2's causal self-attention, or one classic mistake. x: ``[B, T, d]`` -> ``[B, T, d]``.

    Weights in ``Conv1D`` layout: wa ``[d, 3d]``, ba ``[3d]``, wp ``[d, d]``, bp ``[d]``.
    """
    B, T, d = x.shape
    H, D = n_head, d // n_head
    qkv = x @ wa + (ba if attn_bias else 0.0)  # [B, T, 3d]
    parts = dict(zip("qkv", qkv.split(d, dim=-1), strict=True))
    q, k, v = (parts[c] for c in order)

    def heads(t: torch.Tensor) -> torch.Tensor:  # [B, T, d] -> [B, H, T, D]
        if split == "transpose":
            return t.view(B, T, H, D).transpose(1, 2)
        return t.reshape(B, H, T, D)  # no transpose: mixes positions and features

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(-2, -1)  # [B, H, T, T]
    factor = {"head_dim": 1 / math.sqrt(D), "n_embd": 1 / math.sqrt(d), "none": 1.0, "D": 1 / D}[scale]
    scores = scores * factor
    allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    if mask == "before":
        scores = scores.masked_fill(~allowed, float("-inf"))
    pattern = torch.softmax(scores, dim=softmax_dim)
    if mask == "after":
        pattern = pattern.masked_fill(~allowed, 0.0)
    y = pattern @ v  # [B, H, T, D]
    y = y.transpose(1, 2).reshape(B, T, d) if merge == "transpose" else y.reshape(B, T, d)
    if proj == "none":
        return y
    w = wp if proj == "conv1d" else wp.T
    return y @ w + (bp if proj_bias else 0.0)


def _attention_mistakes() -> list[Mistake]:
    def m(label: str, fix: str, **kw: Any) -> Mistake:
        return Mistake(label, fix, lambda *a: _attention(*a, **kw))

    split_fix = (
        "split the features into heads, then move the head axis forward: "
        "t.view(B, T, H, D).transpose(1, 2) -> [B, H, T, D]"
    )
    out = [
        m(
            "forgot the 1/sqrt(D) scale: the scores are q @ k^T without scaling",
            "multiply q @ k^T by 1 / sqrt(D), D = d // n_head the head dimension (0.125 in GPT-2)",
            scale="none",
        ),
        m(
            "scaled by 1/sqrt(d) (n_embd) instead of 1/sqrt(D), the head dimension",
            "D = d // n_head: each score is a dot product of D numbers, not d",
            scale="n_embd",
        ),
        m(
            "scaled by 1/D instead of 1/sqrt(D)",
            "a dot product of D unit-variance terms has variance D, standard deviation sqrt(D)",
            scale="D",
        ),
        m(
            "no causal mask: every query also attends to later positions",
            "before the softmax set the scores of keys j > i to -inf (masked_fill with a tril mask)",
            mask="none",
        ),
        m(
            "mask applied after softmax: the future was zeroed after normalizing, so the rows do not "
            "sum to 1 and the future still changed the normalization",
            "mask the scores (to -inf) before the softmax",
            mask="after",
        ),
        m(
            "wrong head split: reshaped [B, T, d] to [B, H, T, D] without the transpose "
            "(and merged back the same way)",
            split_fix,
            split="reshape",
            merge="reshape",
        ),
        m(
            "wrong head split: reshaped [B, T, d] to [B, H, T, D] without the transpose",
            split_fix,
            split="reshape",
        ),
        m(
            "wrong head merge: reshaped [B, H, T, D] back to [B, T, d] without transposing first",
            "y.transpose(1, 2).reshape(B, T, d) (or .contiguous().view(B, T, d))",
            merge="reshape",
        ),
        m(
            "softmax over the wrong axis: normalized over the queries (dim -2) instead of the keys",
            "torch.softmax(scores, dim=-1): each query's weights over the keys sum to 1",
            softmax_dim=-2,
        ),
        m(
            "used nn.Linear layout (transposed weights) for c_proj: y @ c_proj_w.T",
            "GPT-2's Conv1D weights are [in, out]: y @ c_proj_w + c_proj_b (not F.linear)",
            proj="linear",
        ),
        m(
            "forgot the output projection c_proj",
            "finish with y @ c_proj_w + c_proj_b",
            proj="none",
        ),
        m("forgot the bias c_attn_b", "x @ c_attn_w + c_attn_b", attn_bias=False),
        m("forgot the bias c_proj_b", "y @ c_proj_w + c_proj_b", proj_bias=False),
    ]
    for perm in itertools.permutations("qkv"):
        order = "".join(perm)
        if order != "qkv":
            out.append(
                m(
                    f"took q, k, v from c_attn's output in the wrong order ({', '.join(order)})",
                    "c_attn's output [B, T, 3d] holds q, then k, then v: q, k, v = qkv.split(d, dim=-1)",
                    order=order,
                )
            )
    return out


@dataclass
class _AttnCase:
    what: str
    args: tuple  # x, wa, ba, wp, bp, n_head
    tol: float


def _attn_cases() -> list[_AttnCase]:
    gen = torch.Generator().manual_seed(6)

    def case(what: str, B: int, T: int, d: int, H: int, dtype: torch.dtype, tol: float) -> _AttnCase:
        def r(*shape: int, std: float) -> torch.Tensor:
            return std * torch.randn(*shape, generator=gen, dtype=torch.float64)

        # q and k entries of standard deviation ~1.5: scores large enough that scale mistakes show.
        x = r(B, T, d, std=1.0)
        wa, ba = r(d, 3 * d, std=1.5 / math.sqrt(d)), r(3 * d, std=0.5)
        wp, bp = r(d, d, std=1.0 / math.sqrt(d)), r(d, std=0.5)
        args = tuple(t.to(dtype) for t in (x, wa, ba, wp, bp))
        return _AttnCase(what, (*args, H), tol)

    f32, f64 = torch.float32, torch.float64
    return [
        case("x of shape [2, 5, 12] (B, T, d) with n_head=3 (D=4), float64", 2, 5, 12, 3, f64, 1e-6),
        case("x of shape [1, 7, 16] with n_head=2 (D=8), float32", 1, 7, 16, 2, f32, 1e-5),
        case("x of shape [3, 6, 24] with n_head=4 (D=6), float64", 3, 6, 24, 4, f64, 1e-6),
    ]


def _linear_layout_explains(fn: Callable[..., Any], case: _AttnCase) -> bool:
    """Whether fn computes the right thing when handed the weights in nn.Linear layout."""
    x, wa, ba, wp, bp, H = case.args
    try:
        out = fn(x.clone(), wa.T.contiguous(), ba.clone(), wp.T.contiguous(), bp.clone(), H)
        out = torch.as_tensor(out)
    except Exception:
        return False
    truth = _attention(*(t.double() for t in case.args[:5]), H)
    return out.shape == truth.shape and close(out.detach().double(), truth, 1e-4)


def check_causal_attention(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, c_attn_w, c_attn_b, c_proj_w, c_proj_b, n_head)`` is GPT-2's attention.

    x: ``[B, T, d]``; ``c_attn_w`` ``[d, 3d]``, ``c_attn_b`` ``[3d]``, ``c_proj_w``
    ``[d, d]``, ``c_proj_b`` ``[d]`` in GPT-2's ``Conv1D`` layout (``x @ W + b``);
    returns ``[B, T, d]``. Three inputs (float64 and float32, 2 to 4 heads). A wrong
    output names the classic mistake it matches: no or wrong scale (1/sqrt(d), 1/D),
    no causal mask, mask after the softmax, head split or merge without the transpose,
    softmax over the queries, ``nn.Linear`` layout, q/k/v in the wrong order, a
    missing projection or bias.
    """
    check = "check_causal_attention"
    mistakes = _attention_mistakes()
    names = ("x", "c_attn_w", "c_attn_b", "c_proj_w", "c_proj_b")
    for case in _attn_cases():
        tensors, H = case.args[:5], case.args[5]
        args = [t.clone() for t in tensors]
        try:
            out = fn(*args, H)
        except NotImplementedError:
            out = call(check, fn, *args, H)  # reports "not implemented yet"
        except Exception as e:
            if _linear_layout_explains(fn, case):
                fail(
                    check,
                    f"on {case.what}, your function raised {type(e).__name__}, but computes the right "
                    "thing when given the weights transposed",
                    "used nn.Linear layout (transposed weights): F.linear(x, W) computes x @ W.T and "
                    "expects W of shape [out, in]. GPT-2's Conv1D weights are [in, out]: "
                    "use x @ c_attn_w + c_attn_b",
                )
            out = call(check, fn, *args, H)  # reports the exception in a sentence
        require_unchanged(check, names, list(tensors), args, case.what, _IN_PLACE)
        d64 = (*(t.double() for t in tensors), H)
        compare(
            check,
            f"on {case.what}",
            out,
            _attention(*d64),
            case.tol,
            mistakes,
            d64,
            formula=_ATTN_FORMULA,
            nonfinite="a row of the softmax with every score -inf? (mask only the keys j > i)",
        )
    passed(check, "matches GPT-2's causal self-attention on 3 inputs (2-4 heads, float32/float64)")


# ---------------------------------------------------------------------------- GELU
_GELU_FORMULA = "0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))"
_K = math.sqrt(2.0 / math.pi)


def _gelu(
    x: torch.Tensor, *, k: float = _K, c: float = 0.044715, p: int = 3, half: float = 0.5
) -> torch.Tensor:
    """GPT-2's tanh GELU, or a variant with another constant, power or factor."""
    return half * x * (1.0 + torch.tanh(k * (x + c * x**p)))


def _gelu_mistakes() -> list[Mistake]:
    def m(label: str, fix: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Mistake:
        return Mistake(label, fix, fn)

    fix_c = "the cubic term is 0.044715 * x**3"
    out = [
        m(
            "used exact erf GELU x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))), "
            "not GPT-2's tanh approximation",
            f"GPT-2's gelu is {_GELU_FORMULA} (= F.gelu(x, approximate='tanh'), transformers' gelu_new)",
            lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
        ),
        m(
            "missing x³ term: tanh(sqrt(2/pi) * x) without + 0.044715 * x^3",
            fix_c,
            lambda x: _gelu(x, c=0.0),
        ),
        m("x² instead of x³ in the cubic term", fix_c, lambda x: _gelu(x, p=2)),
        m(
            "missing 0.5 factor: x * (1 + tanh(...)) is twice GELU",
            "multiply by 0.5: 0.5 * x * (1 + tanh(...))",
            lambda x: _gelu(x, half=1.0),
        ),
        m(
            "forgot to multiply by x: 0.5 * (1 + tanh(...)) approximates Phi(x), the gate, not GELU",
            "GELU is x * Phi(x): 0.5 * x * (1 + tanh(...))",
            lambda x: 0.5 * (1.0 + torch.tanh(_K * (x + 0.044715 * x**3))),
        ),
        m(
            "used the sigmoid approximation x * sigmoid(1.702 x) (quick GELU), not GPT-2's tanh form",
            f"use {_GELU_FORMULA}",
            lambda x: x * torch.sigmoid(1.702 * x),
        ),
        m("used ReLU, not GELU", f"use {_GELU_FORMULA}", torch.relu),
    ]
    for c in (0.0447, 0.04471, 0.04715, 0.44715, 0.0044715, 0.447):
        out.append(
            m(
                f"wrong constant 0.044715: the output matches x + {c:g} * x^3",
                fix_c,
                lambda x, c=c: _gelu(x, c=c),
            )
        )
    for name, k in (("2/pi", 2 / math.pi), ("sqrt(2*pi)", math.sqrt(2 * math.pi)), ("sqrt(pi/2)", None)):
        k = math.sqrt(math.pi / 2) if k is None else k
        out.append(
            m(
                f"wrong constant sqrt(2/pi) ≈ 0.79788: the output matches {name} ≈ {k:.5g}",
                "the factor inside tanh is math.sqrt(2 / math.pi)",
                lambda x, k=k: _gelu(x, k=k),
            )
        )
    return out


def _gelu_cases() -> list[tuple[str, torch.Tensor, float]]:
    gen = torch.Generator().manual_seed(6)
    grid = torch.linspace(-8.0, 8.0, 321, dtype=torch.float64)
    return [
        ("x = linspace(-8, 8, 321), float64", grid, 1e-7),
        (
            "x of shape [2, 4, 32] ([B, T, 4d]) with standard deviation 2, float32",
            (2.0 * torch.randn(2, 4, 32, generator=gen, dtype=torch.float64)).float(),
            1e-5,
        ),
        (
            "large |x| (±20, ±50, ±100), float32",
            torch.tensor([-100.0, -50.0, -20.0, 20.0, 50.0, 100.0]),
            1e-5,
        ),
    ]


def check_gelu(fn: Callable[..., Any]) -> None:
    """Check ``fn(x)`` is GPT-2's tanh GELU, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

    x: any shape; returns the same shape (torch tensor or numpy array). Inputs: a
    float64 grid over [-8, 8] (tolerance 1e-7, so that even the exact erf GELU, off by
    at most ~4.7e-4, is told apart), a float32 batch, and large |x| where a tanh
    written with exp overflows. A wrong output names the mistake it matches (exact erf
    GELU, missing x³ term, wrong constants, missing 0.5, missing x, sigmoid or ReLU).
    """
    check = "check_gelu"
    mistakes = _gelu_mistakes()
    for what, x, tol in _gelu_cases():
        out = call_on_copies(check, fn, (x,), names=("x",), what=what, likely=_IN_PLACE)
        truth = _gelu(x.double())
        y = as_tensor(check, out, truth).detach().double()
        if not torch.isfinite(y).all():
            fail(
                check,
                f"on {what}, your output contains NaN or inf (at x = {x[~torch.isfinite(y)][:3].tolist()})",
                "tanh written with exp overflows for large |x| (exp(2z) = inf, inf / inf = NaN): "
                "use torch.tanh",
            )
        near = (
            "close but not exact: compute sqrt(2/pi) as math.sqrt(2 / math.pi) (not a rounded literal) "
            "and use 0.044715"
        )
        hint = near if float((y - truth).abs().max()) < 1e-4 else None
        compare(check, f"on {what}", y, truth, tol, mistakes, (x.double(),), formula=_GELU_FORMULA, hint=hint)
    passed(check, f"matches {_GELU_FORMULA} on 3 inputs (float64 grid over [-8, 8], float32, |x| up to 100)")


# ---------------------------------------------------------------------------- padding mask
def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()


def _allowed(keep: torch.Tensor) -> torch.Tensor:
    """[B, 1, T, T]: query i may attend key j when j <= i and key j is a real token."""
    return _causal(keep.shape[-1])[None, None] & keep[:, None, None, :]


_PATTERN_MISTAKES: list[tuple[str, str, Callable[[torch.Tensor], torch.Tensor]]] = [
    (
        "the padding never reaches the keys: real tokens still attend to the padding (no padding part, "
        "or the padding applied to the queries (rows) instead of the keys (columns))",
        "a padding token must not be *attended to*: index keep as keep[:, None, None, :], the last "
        "axis of the scores is the keys",
        lambda keep: _causal(keep.shape[-1])[None, None].expand(keep.shape[0], 1, -1, -1),
    ),
    (
        "the keep flags inverted: real tokens attend only to the padding",
        "keep is True at a real token: allow the keys where keep is True",
        lambda keep: _causal(keep.shape[-1])[None, None] & ~keep[:, None, None, :],
    ),
    (
        "no causal part: every real token also attends to later positions",
        "combine the padding with the lower triangle: torch.ones(T, T, dtype=torch.bool).tril()",
        lambda keep: keep[:, None, None, :].expand(-1, 1, keep.shape[-1], -1),
    ),
    (
        "the upper triangle: queries attend to the future and not to the past",
        "query i may see keys j <= i: .tril(), not .triu()",
        lambda keep: (
            torch.ones(keep.shape[-1], keep.shape[-1], dtype=torch.bool).triu()[None, None]
            & keep[:, None, None, :]
        ),
    ),
    (
        "the diagonal masked: a query may not attend to its own token",
        "keys j <= i, the diagonal included: .tril() (diagonal=0)",
        lambda keep: _causal(keep.shape[-1]).tril(-1)[None, None] & keep[:, None, None, :],
    ),
]

_MASK_FORMULA = (
    "allowed = tril(ones(T, T))[None, None] & keep[:, None, None, :]; "
    "mask = zeros(B, 1, T, T, dtype).masked_fill(~allowed, torch.finfo(dtype).min)"
)


def _mask_cases() -> list[tuple[str, torch.Tensor]]:
    left = torch.tensor(
        [[0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool
    )
    right = torch.tensor(
        [[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool
    )
    return [
        ("a left-padded batch (keep of shape [3, 7])", left),
        ("a right-padded batch (keep of shape [3, 7])", right),
    ]


def _literal_fill(dtype: torch.dtype, what: str) -> str:
    """The likely mistake of a masked value that ``dtype`` cannot hold: a literal such as -1e10
    where it overflows (float16), else another dtype's ``finfo.min`` cast to it (float32's, in
    bfloat16)."""
    name = str(dtype).removeprefix("torch.")
    biggest = torch.finfo(dtype).max
    if biggest < 1e10:
        cause = (
            f"a literal such as -1e10 for the masked value: {name}'s largest finite number is "
            f"{biggest:,.0f}, so -1e10 {what} (the official formula's problem in float16)"
        )
    else:
        f32 = torch.finfo(torch.float32).min
        cause = (
            f"another dtype's most negative number cast to {name}: float32's finfo.min ({f32:.4g}) "
            f"is beyond {name}'s ({-biggest:.4g}), so it {what}"
        )
    return f"{cause}. Use the dtype's own most negative finite number, torch.finfo(dtype).min"


def check_padded_causal_mask(fn: Callable[..., Any]) -> None:
    """Check ``fn(keep, dtype)`` is the additive causal-and-padding mask ``[B, 1, T, T]``.

    ``keep``: ``[B, T]`` bool, True at a real token. The mask is added to scores
    ``[B, H, T, T]`` before the softmax, in float32, bfloat16 and float16, on a left- and a
    right-padded batch. Every softmax row must be finite (a left-padded padding query sees
    no key), and every real token's attention must be over exactly its earlier real tokens.
    A wrong mask names the mistake it matches: the padding on the queries or missing, keep inverted, no
    causal or no padding part, the upper triangle, the diagonal masked, -inf (NaN rows),
    inf * 0 (NaN), a literal such as -1e10 that float16 cannot hold, a masked value too small,
    a wrong shape or dtype.
    """
    check = "check_padded_causal_mask"
    gen = torch.Generator().manual_seed(6)
    H = 2
    for what, keep in _mask_cases():
        B, T = keep.shape
        allowed = _allowed(keep)
        real_rows = keep[:, None, :, None].expand(B, 1, T, T)  # rows of real queries
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            where = f"on {what}, dtype={dtype}"
            try:
                out = call_on_copies(check, fn, (keep, dtype), names=("keep", "dtype"), what=where)
            except AssertionError as e:  # a literal too large for the dtype: name it
                if dtype == torch.float32 or "overflow" not in str(e):
                    raise
                fail(check, f"{where}: {str(e).split(': ', 1)[1]}", _literal_fill(dtype, "cannot be stored"))
            out = from_numpy(out)
            if not isinstance(out, torch.Tensor):
                fail(
                    check,
                    f"{where}: expected a torch.Tensor, got {type(out).__name__}",
                    "a missing `return`?",
                )
            if out.dtype == torch.bool:
                fail(
                    check,
                    f"{where}: the mask is boolean",
                    "the exercise asks for an additive mask: 0 where allowed, a large negative number "
                    "elsewhere (zeros(..., dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min))",
                )
            if tuple(out.shape) != (B, 1, T, T):
                likely = (
                    "add the head axis: [B, 1, T, T], so that the mask broadcasts over the H heads"
                    if tuple(out.shape) == (B, T, T)
                    else "the mask is [B, 1, T, T]: batch, one for all heads, queries, keys"
                )
                fail(
                    check, f"{where}: the mask has shape {tuple(out.shape)}, expected {(B, 1, T, T)}", likely
                )
            if out.dtype != dtype:
                fail(
                    check,
                    f"{where}: the mask has dtype {out.dtype}, expected {dtype}",
                    "create it with dtype=dtype: a float32 mask added to float16 scores makes float32 "
                    "scores, and torch.finfo(torch.float32).min is -inf in float16",
                )
            out = out.detach()
            if torch.isnan(out).any():
                fail(
                    check,
                    f"{where}: the mask contains NaN",
                    "inf * 0: a large number cast to the dtype (1e10 is inf in float16) multiplied by "
                    "(1 - allowed). Select instead of multiplying: "
                    "masked_fill(~allowed, torch.finfo(dtype).min)",
                )
            if (out == float("inf")).any():
                fail(
                    check, f"{where}: the mask contains +inf", "the masked value must be large and *negative*"
                )
            scores = (2.0 * torch.randn(B, H, T, T, generator=gen, dtype=torch.float64)).to(dtype)
            weights = torch.softmax(scores + out, dim=-1)
            if not torch.isfinite(weights).all():
                bad = (~torch.isfinite(weights)).any(dim=-1)  # [B, H, T]
                b, _, i = (int(t) for t in bad.nonzero()[0])
                if not (out == float("-inf")).any():
                    likely = (
                        "a masked value that overflows when added to the scores; use torch.finfo(dtype).min"
                    )
                elif dtype == torch.float32:
                    likely = (
                        "-inf for the masked keys: a query that may see no key (a left-padded padding "
                        "token) gets a row of -inf, and softmax(-inf, ..., -inf) is NaN. Use the dtype's "
                        "most negative finite number, torch.finfo(dtype).min"
                    )
                else:  # finite in float32, -inf here: a large literal cast to this dtype
                    likely = _literal_fill(
                        dtype,
                        "becomes -inf, and a query that may see no key (a left-padded padding token) "
                        "gets softmax(-inf, ..., -inf) = NaN",
                    )
                fail(check, f"{where}: the softmax row of sequence {b}, query {i} is not finite", likely)
            # the learner's pattern: which keys each real query may see, read off the mask itself
            seen = out.double() > -100.0  # not masked (a masked entry is far below)
            truth = torch.softmax(
                scores.double().masked_fill(~allowed, float("-inf")).masked_fill(~real_rows, 0.0), dim=-1
            )
            tol = 1e-5 if dtype == torch.float32 else 2e-2
            err = ((weights.double() - truth).abs() * real_rows).max().item()
            if err <= tol:
                continue
            same_zeros = bool(((out == 0) == allowed)[real_rows].all())
            for label, fix, pattern in _PATTERN_MISTAKES:
                if bool((seen == pattern(keep))[real_rows].all()):
                    fail_mistake(
                        check, f"{where}: the real tokens' attention differs from the reference", label, fix
                    )
            if same_zeros:
                fail_mistake(
                    check,
                    f"{where}: masked keys still get weight (up to {err:.2g})",
                    "the masked value is not negative enough",
                    "use the dtype's most negative finite number, torch.finfo(dtype).min",
                )
            fail(
                check,
                f"{where}: the real tokens' attention differs from the reference by up to {err:.2g}; "
                "no single classic mistake explains it",
                f"expected {_MASK_FORMULA}",
            )
    passed(
        check,
        "finite in float32, bfloat16 and float16; each real token attends to exactly its earlier real "
        "tokens, on left- and right-padded batches",
    )


# ---------------------------------------------------------------------------- float16's fill
def _number(check: str, value: Any, name: str) -> float:
    """The learner's answer ``name`` as a float (a Python or numpy number, a one-element tensor)."""
    if value is not None and not isinstance(value, (bool, str)):
        try:
            return float(value.reshape(()) if hasattr(value, "reshape") else value)
        except (TypeError, ValueError, RuntimeError):
            pass
    fail(check, f"{name} is {value!r} ({type(value).__name__}): expected one number")
    return math.nan  # unreachable


def _stored(value: float) -> float:
    """value as float16 stores it."""
    return float(torch.tensor(value, dtype=torch.float16).item())


def _official_gives_nan(fill: float) -> bool:
    """Whether the official mask formula with ``fill`` in place of 1e10 makes a NaN in float16."""
    gen = torch.Generator().manual_seed(6)
    scores = torch.randn(2, 5, 5, generator=gen).half()
    b = torch.ones(5, 5).tril().half()  # the 0/1 lower triangle, in the scores' dtype
    w = scores * b - torch.tensor(fill, dtype=torch.float16) * (1 - b)
    return bool(torch.isnan(torch.softmax(w, dim=-1)).any())


def check_smallest_nan_fill(fill: Any) -> None:
    """Check ``fill`` is the smallest whole number that, in place of the official mask's 1e10
    (``w*b - cast(fill)*(1-b)``), makes the float16 softmax NaN.

    Runs the formula in float16 with ``fill`` and with ``fill - 1``: the first must give NaN,
    the second not. A wrong answer is told what float16 stores for it, and the likely mistake
    (float16's largest number taken for the answer, or 2**16, past the rounding threshold).
    """
    check = "check_smallest_nan_fill"
    value = _number(check, fill, "smallest_nan_fill")
    if not math.isfinite(value) or value != round(value):
        fail(
            check,
            f"smallest_nan_fill is {value!r}: the exercise asks for a whole number",
            "try whole numbers near float16's largest finite number, torch.finfo(torch.float16).max",
        )
    top = torch.finfo(torch.float16).max
    if not _official_gives_nan(value):
        likely = (
            f"{top:,.0f} is float16's largest finite number, and values a little above it are rounded "
            "down to it too: float16 rounds to its nearest number, and only from halfway to the next "
            "step (its numbers are 32 apart up there) does a value round up, past the largest, to inf"
            if value >= top
            else f"a fill below float16's largest finite number, {top:,.0f}, is stored as a finite number: "
            "the masked keys get minus that, and no inf appears"
        )
        fail(
            check,
            f"with {value:,.0f} in place of 1e10 the float16 softmax has no NaN: float16 stores "
            f"{value:,.0f} as {_stored(value):,.0f}, finite, so every allowed entry computes w - "
            f"{_stored(value):,.0f} * 0 = w",
            likely,
        )
    if _official_gives_nan(value - 1):
        likely = (
            "2**16 = 65,536 is the first power of two float16 cannot hold, but rounding to the nearest "
            "number sends values below it to inf as well: find where rounding up begins"
            if value == 2.0**16
            else "every value that float16 stores as inf gives NaN (inf * 0): find the smallest one that "
            f"rounds to inf (float16's largest finite number is {top:,.0f}; its numbers are 32 apart there)"
        )
        fail(
            check,
            f"{value:,.0f} gives NaN, but so does {value - 1:,.0f} (stored as {_stored(value - 1):g}): "
            f"{value:,.0f} is not the smallest",
            likely,
        )
    passed(
        check,
        f"float16 stores {value:,.0f} as {_stored(value):g} (inf * 0 = NaN), and {value - 1:,.0f} as "
        f"{_stored(value - 1):,.0f}, which leaves the softmax finite",
    )


# ---------------------------------------------------------------------------- saturating scores
_TARGET_STD = 8.0  # Figure 6.1's unscaled case: a saturated softmax
_WIDTH, _HEADS = 768, 12  # GPT-2 small


def _score_std_from_qk(qk_std: float) -> float:
    """The standard deviation of q . k / sqrt(D), D = 64, for q and k entries of std ``qk_std``."""
    gen = torch.Generator().manual_seed(6)
    q, k = (qk_std * torch.randn(20_000, 64, generator=gen, dtype=torch.float64) for _ in range(2))
    return float(((q * k).sum(dim=-1) / 8.0).std())


def _score_std_from_weights(w_std: float) -> float:
    """The scores' standard deviation at GPT-2 small's width for ln_1's output and c_attn weights
    of std ``w_std`` (biases 0)."""
    gen = torch.Generator().manual_seed(6)
    h = torch.nn.functional.layer_norm(torch.randn(8, 12, _WIDTH, generator=gen), (_WIDTH,))
    w = w_std * torch.randn(_WIDTH, 2 * _WIDTH, generator=gen)
    D = _WIDTH // _HEADS
    q, k = ((h @ w_part).view(8, 12, _HEADS, D).transpose(1, 2) for w_part in w.split(_WIDTH, dim=-1))
    return float((q @ k.transpose(-2, -1) / math.sqrt(D)).std())


def check_saturating_std(qk_std: Any, w_std: Any) -> None:
    """Check the two standard deviations that give scaled scores of std 8 (Figure 6.1's saturated
    case): ``qk_std`` for q and k entries (D = 64), ``w_std`` for c_attn's weights at GPT-2
    small's width (d = 768) reading ln_1's unit-variance output.

    Measures the scores' standard deviation with each answer (20,000 random q, k pairs; a layer
    of GPT-2 small's width on layer-normed random tokens) and wants it within 10 % of 8. A wrong
    answer gets the standard deviation it gives and its likely mistake.
    """
    check = "check_saturating_std"
    qk, w = _number(check, qk_std, "qk_std"), _number(check, w_std, "w_std")
    for name, v in (("qk_std", qk), ("w_std", w)):
        if not math.isfinite(v) or v <= 0:
            fail(check, f"{name} is {v!r}: a standard deviation is a positive number")
    got = _score_std_from_qk(qk)
    if abs(got / _TARGET_STD - 1) > 0.1:
        likely = (
            "8 is the score's standard deviation, and a score multiplies a q entry by a k entry: with the "
            "1/sqrt(D) scale its standard deviation is qk_std * qk_std, so solve qk_std**2 = 8"
            if abs(qk / _TARGET_STD - 1) < 0.05
            else "with the 1/sqrt(D) scale the score's standard deviation is qk_std**2 (D drops out): "
            "solve qk_std**2 = 8"
        )
        fail(check, f"q and k entries of std {qk:g} give scores of std {got:.3g}, not 8", likely)
    got = _score_std_from_weights(w)
    if abs(got / _TARGET_STD - 1) > 0.1:
        if abs(w / (qk / _WIDTH) - 1) < 0.05:
            likely = (
                "divided by d instead of sqrt(d): a q entry sums d products of a unit-variance feature "
                "and a weight, so its standard deviation is sqrt(d) * w_std"
            )
        elif abs(w / (_TARGET_STD / _WIDTH) - 1) < 0.05:
            likely = "d * w_std**2 = 8 gives w_std = sqrt(8 / d): the square root is missing"
        else:
            likely = (
                "q and k entries have standard deviation sqrt(d) * w_std, and the scores d * w_std**2: "
                "solve d * w_std**2 = 8 with d = 768"
            )
        fail(
            check,
            f"at d = {_WIDTH}, c_attn weights of std {w:g} give scores of std {got:.3g}, not 8",
            likely,
        )
    passed(
        check,
        f"q, k entries of std {qk:.3g} give scores of std {_score_std_from_qk(qk):.2f}; at d = {_WIDTH}, "
        f"weights of std {w:.3g} give {got:.2f} (GPT-2's 0.02 gives {_score_std_from_weights(0.02):.2f})",
    )
