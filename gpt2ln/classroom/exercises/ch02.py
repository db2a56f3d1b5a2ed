"""Checks for chapter 2 (LayerNorm as GPT-2 computes it).

``check_layer_norm(fn)`` runs the learner's ``fn(x, g, b, eps=1e-5)`` on inputs
built so that each classic mistake gives a different answer; when the output is
wrong it is compared with an implementation of each mistake, and the nearest one
is named. ``check_layernorm_param_count(fn)`` checks a parameter count against the
real ``gpt2ln.GPT2`` on small configs and against the same formula on the presets.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...model.config import GPT2Config
from ._core import (
    Mistake,
    as_int,
    as_tensor,
    call,
    call_on_copies,
    close,
    compare,
    divide_by_root,
    fail,
    passed,
    random_rows,
    rel_dist,
)

__all__ = ["check_layer_norm", "check_layernorm_param_count"]

_REFERENCE = "u = mean(x, -1); s = mean((x - u)^2, -1); (x - u) * rsqrt(s + eps) * g + b"


# ---------------------------------------------------------------------------- LayerNorm
def _variant(
    x: torch.Tensor,
    g: torch.Tensor,
    b: torch.Tensor,
    eps: float,
    *,
    dims: tuple[int, ...] = (-1,),
    keepdim: bool = True,
    var: str = "biased",
    eps_at: str = "inside",
    center: str = "yes",
    affine: str = "x*g+b",
) -> torch.Tensor:
    """LayerNorm, or one of its classic mistakes, computed in x's dtype. x: ``[..., d]``."""
    u = x.mean(dim=dims, keepdim=keepdim)
    if var == "one-pass":
        s = (x * x).mean(dim=dims, keepdim=keepdim) - u * u
    else:
        n = math.prod(x.shape[k] for k in dims)
        s = ((x - u) ** 2).sum(dim=dims, keepdim=keepdim) / (n - 1 if var == "unbiased" else n)
    if center == "rms":  # RMSNorm: no centering anywhere
        s, xc = (x * x).mean(dim=dims, keepdim=keepdim), x
    elif center == "no":  # right variance, but x instead of x - u in the output
        xc = x
    else:
        xc = x - u
    y = divide_by_root(xc, s, eps, eps_at)
    return {
        "x*g+b": lambda: y * g + b,
        "none": lambda: y,
        "g only": lambda: y * g,
        "b only": lambda: y + b,
        "(x+b)*g": lambda: (y + b) * g,
        "x*b+g": lambda: y * b + g,
    }[affine]()


def _m(label: str, fix: str, kwargs: dict[str, Any], eps: float | None = None) -> Mistake:
    """The mistake computing ``_variant(x, g, b, eps, **kwargs)``, with its own eps if given."""
    return Mistake(label, fix, lambda x, g, b, e: _variant(x, g, b, e if eps is None else eps, **kwargs))


def _mistakes(ndim: int, eps_passed: bool) -> list[Mistake]:
    """Every classic mistake that can be told apart on an input with ``ndim`` axes."""
    eps_label = (
        "ignores the eps argument: the output matches eps={e:g} although the check passed another eps"
        if eps_passed
        else "wrong default eps: with eps not passed the output matches eps={e:g}, GPT-2 uses 1e-5"
    )
    out = [
        _m(
            "Bessel-corrected (unbiased) variance: divided by d - 1 instead of d",
            "GPT-2 uses the biased variance mean((x - u)^2); note torch.var/torch.std divide by d - 1 "
            "by default (use correction=0, or unbiased=False)",
            {"var": "unbiased"},
        ),
        _m(
            "eps outside the square root: (x - u) / (sqrt(var) + eps)",
            "add eps to the variance inside the root: (x - u) * rsqrt(var + eps)",
            {"eps_at": "outside"},
        ),
        _m(
            "divided by the variance instead of the standard deviation (forgot the square root)",
            "divide by sqrt(var + eps)",
            {"eps_at": "no-sqrt"},
        ),
        _m(
            "no mean subtraction: divided by the root mean square, which is RMSNorm, not LayerNorm",
            "subtract the mean u = x.mean(-1, keepdim=True) first and use the variance of x - u",
            {"center": "rms"},
        ),
        _m(
            "no mean subtraction: the variance is right but the output scales x instead of x - u",
            "normalize the centered input: (x - u) * rsqrt(var + eps)",
            {"center": "no"},
        ),
        _m(
            "forgot the affine gain g and bias b",
            "finish with y * g + b",
            {"affine": "none"},
        ),
        _m("forgot the bias b (applied only the gain g)", "finish with y * g + b", {"affine": "g only"}),
        _m("forgot the gain g (applied only the bias b)", "finish with y * g + b", {"affine": "b only"}),
        _m(
            "added b before multiplying by g: (y + b) * g",
            "scale first, then shift: y * g + b",
            {"affine": "(x+b)*g"},
        ),
        _m("swapped g and b: y * b + g", "g multiplies, b adds: y * g + b", {"affine": "x*b+g"}),
        _m(
            "reduced without keepdim=True, so the mean and variance broadcast along the wrong axis",
            "use x.mean(dim=-1, keepdim=True) (shape [..., 1]) for both statistics",
            {"keepdim": False},
        ),
        _m(
            "wrong axis: statistics over the whole tensor instead of over the last axis of each token",
            "reduce over dim=-1 only (the d features of one token), with keepdim=True",
            {"dims": tuple(range(ndim))},
        ),
    ]
    for k in range(ndim - 1):
        axis = "the token axis" if k == ndim - 2 else ("the batch axis" if k == 0 else f"axis {k}")
        out.append(
            _m(
                f"wrong axis: statistics over dim {k} ({axis}) instead of the last axis (the features)",
                "reduce over dim=-1 (the d features of one token), with keepdim=True",
                {"dims": (k,)},
            )
        )
    for e in (1e-5, 1e-6, 1e-8, 1e-12, 0.0):
        label = eps_label.format(e=e) if e else "no eps at all: divided by sqrt(var) alone"
        out.append(_m(label, "use the eps argument, default 1e-5: rsqrt(var + eps)", {}, eps=e))
    return out


@dataclass
class _Case:
    what: str
    x: torch.Tensor
    g: torch.Tensor
    b: torch.Tensor
    eps: float | None  # None: not passed, the default 1e-5 applies
    tol: float
    kind: str = ""  # "constant": has a constant row; "offset": the 1e4 offset


def _affine(gen: torch.Generator, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
    b = 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
    return g.to(dtype), b.to(dtype)


def _cases() -> list[_Case]:
    """The inputs, in order: each later one catches what the earlier ones cannot."""
    gen = torch.Generator().manual_seed(2)
    f64, f32 = torch.float64, torch.float32

    def case(
        what: str,
        shape: tuple[int, ...],
        scale: float,
        offset: float,
        dtype: torch.dtype = f64,
        eps: float | None = None,
        tol: float = 1e-5,
        kind: str = "",
    ) -> _Case:
        x = random_rows(gen, shape, scale, offset)
        if kind == "constant":
            x[1] = 7.0
        if kind == "offset":
            x = x + 1e4
        return _Case(what, x.to(dtype), *_affine(gen, shape[-1], dtype), eps, tol, kind)

    return [
        # 2-D and square: Bessel (d=4), centering, affine, axis and keepdim mistakes all differ.
        case("x of shape [4, 4] (T=4 tokens, d=4), float64", (4, 4), 2.0, 3.0),
        case("x of shape [2, 3, 8] ([B, T, d]), float64", (2, 3, 8), 1.5, 2.0),
        # Variance 1e-6 < eps = 1e-5: where eps goes and which eps is used dominate the output.
        case(
            "near-constant rows (variance ~1e-6, smaller than eps), float64, eps not passed",
            (3, 8),
            1e-3,
            2.0,
        ),
        case("rows with variance ~1e-2, float64, called with eps=1e-2", (3, 8), 0.1, 2.0, eps=1e-2),
        case(
            "x of shape [3, 8] whose second row is constant (variance exactly 0), float64",
            (3, 8),
            1.0,
            2.0,
            kind="constant",
        ),
        case("x of shape [2, 2, 3, 16], float64", (2, 2, 3, 16), 1.0, 1.0),
        case("a single token x of shape [16], float32", (16,), 1.0, 1.0, f32, tol=1e-4),
        case("x of shape [2, 5, 32], float32", (2, 5, 32), 1.0, 1.0, f32, tol=1e-4),
        # Last: fine for two-pass variance, catastrophic cancellation for E[x^2] - E[x]^2 in float32.
        case(
            "x = 1e4 + N(0, 1) of shape [2, 8, 768], float32 (a large common offset)",
            (2, 8, 768),
            1.0,
            0.0,
            f32,
            tol=5e-3,
            kind="offset",
        ),
    ]


def check_layer_norm(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, g, b, eps=1e-5)`` is GPT-2's LayerNorm over the last axis.

    x: ``[..., d]``; g, b: ``[d]``; returns ``[..., d]`` (a torch tensor, or a numpy
    array). Reference: ``u = mean(x)``, ``s = mean((x - u)^2)`` (biased), ``(x - u) *
    rsqrt(s + eps) * g + b``, all over the last axis. Inputs are float64 and float32,
    of 1 to 4 axes; they include near-constant rows, a constant row, ``eps=1e-2``
    passed by keyword, and a 1e4 offset in float32. A wrong output names the
    classic mistake it matches (Bessel-corrected variance, eps outside the root,
    wrong or ignored eps, wrong axis, no mean subtraction, missing or misplaced
    affine, one-pass variance).
    """
    check = "check_layer_norm"
    for case in _cases():
        out = call_on_copies(
            check,
            fn,
            (case.x, case.g, case.b),
            names=("x", "g", "b"),
            what=case.what,
            kwargs={} if case.eps is None else {"eps": case.eps},
            likely="an in-place operation such as `x -= mean` or `x.sub_(...)`: compute new tensors instead",
        )
        eps = 1e-5 if case.eps is None else case.eps
        x, g, b = (t.double() for t in (case.x, case.g, case.b))
        truth = _variant(x, g, b, eps)
        where = f"on {case.what}"
        if case.kind == "offset":
            y = as_tensor(check, out, case.x).detach().double()
            if not (close(y, truth, case.tol) and torch.isfinite(y).all()):
                fail(
                    check,
                    f"{where}, your output "
                    + (
                        "contains NaN"
                        if torch.isnan(y).any()
                        else f"is wrong (max error {rel_dist(y, truth):.3g})"
                    )
                    + ", although it was right on every smaller input",
                    "one-pass variance cancels: E[x^2] - E[x]^2 subtracts two numbers near 1e8 in float32 "
                    "(spacing 8), so the variance is garbage (even negative: NaN). Compute the mean first, "
                    "then the mean of (x - u)^2 (two passes), as GPT-2 does",
                )
            continue
        compare(
            check,
            where,
            out,
            truth,
            case.tol,
            _mistakes(x.ndim, case.eps is not None),
            (x, g, b, eps),
            formula=_REFERENCE,
            differs="your output differs from GPT-2's LayerNorm",
            nonfinite="dividing by zero on the constant row: eps must be added to the variance, "
            "inside the square root"
            if case.kind == "constant"
            else "a square root of a negative number or a division by zero",
        )
    passed(
        check,
        "matches GPT-2's LayerNorm on 9 inputs (float32/float64, 1-4 axes, d=4..768, "
        "near-constant and constant rows, eps=1e-2, a 1e4 offset)",
    )


# ---------------------------------------------------------------------------- parameter count
_BIG = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")


def _small(**changes: Any) -> GPT2Config:
    return GPT2Config(vocab_size=97, n_ctx=16, n_embd=12, n_layer=3, n_head=3).replace(**changes)


def _count_in_model(config: GPT2Config) -> int:
    """Norm parameters of a real ``gpt2ln.GPT2(config)`` (names with ``ln_`` or ``norm``)."""
    from ...model.gpt2 import GPT2

    with torch.random.fork_rng(devices=[]):  # leave the learner's random state alone
        model = GPT2(config)
    return sum(p.numel() for n, p in model.named_parameters() if "ln_" in n or "norm" in n)


def _count(
    config: GPT2Config,
    *,
    gain_only: bool = False,
    rms_bias: bool = False,
    one_per_block: bool = False,
    flip_lnf: bool = False,
    qk: str = "right",
) -> int:
    """The norm-parameter count by formula, or with one of the classic slips."""
    per = 1 if config.norm == "rmsnorm" and not rms_bias else 2  # gain (+ bias) per feature
    if gain_only:
        per = 1
    L, d = config.n_layer, config.n_embd
    total = L * (1 if one_per_block else 2) * per * d  # ln_1, ln_2 in every block
    if config.use_final_norm != flip_lnf:
        total += per * d  # ln_f
    if config.qk_norm:
        width = {"right": config.head_dim, "n_embd": d, "forgot": 0, "once": config.head_dim}[qk]
        total += (1 if qk == "once" else L) * 2 * per * width  # q_norm and k_norm over head_dim
    return total


def _count_mistakes(config: GPT2Config) -> tuple[list[Mistake], list[Mistake]]:
    """(single slips, pairs of slips), each a Mistake whose fn(config) is its count."""
    lnf = (
        "counted ln_f although this config has none (config.use_final_norm is False: final_norm=False, "
        "or post-norm, whose last sub-block already ends in a norm)"
        if not config.use_final_norm
        else "forgot ln_f, the final LayerNorm after the last block"
    )
    singles: list[tuple[str, dict[str, Any]]] = [
        (lnf, {"flip_lnf": True}),
        (
            "counted one LayerNorm per block instead of two (ln_1 before attention, ln_2 before the MLP)",
            {"one_per_block": True},
        ),
    ]
    if config.norm == "layernorm":
        singles.append(
            ("counted only the gain, not the bias: LayerNorm has g and b, 2 per feature", {"gain_only": True})
        )
    else:
        singles.append(
            ("counted a bias for RMSNorm: it has only a gain, 1 parameter per feature", {"rms_bias": True})
        )
    if config.qk_norm:
        singles += [
            ("forgot the QK norms: config.qk_norm adds q_norm and k_norm to every block", {"qk": "forgot"}),
            (
                "QK norms counted over n_embd: they normalize each head's vectors, width head_dim",
                {"qk": "n_embd"},
            ),
            ("counted the QK norms once instead of in every block", {"qk": "once"}),
        ]
    pairs = [
        (f"{a}; and {c}", {**ka, **kc})
        for (a, ka), (c, kc) in itertools.combinations(singles, 2)
        if not (set(ka) & set(kc))
    ]

    def m(label: str, kw: dict[str, Any]) -> Mistake:
        return Mistake(label, "", lambda c: _count(c, **kw))

    return [m(*s) for s in singles], [m(*p) for p in pairs]


def _describe(config: GPT2Config) -> str:
    s = f"n_layer={config.n_layer}, n_embd={config.n_embd}, n_head={config.n_head}, norm={config.norm!r}"
    if config.norm_position != "pre":
        s += f", norm_position={config.norm_position!r}"
    if config.final_norm is not None:
        s += f", final_norm={config.final_norm}"
    if config.qk_norm:
        s += ", qk_norm=True"
    return s


def check_layernorm_param_count(fn: Callable[[GPT2Config], Any], *, variants: bool = False) -> None:
    """Check ``fn(config) -> int`` counts the normalization parameters of ``GPT2(config)``.

    GPT-2 has two LayerNorms per block (``ln_1``, ``ln_2``) and ``ln_f`` after the
    last block, each with a gain and a bias of ``n_embd`` entries. Checked on the
    four GPT-2 sizes and two small configs (answers compared with a real
    ``gpt2ln.GPT2``). Compute from the config's fields: don't build the model
    (gpt2-xl alone is 1.5 billion parameters). With ``variants=True`` it also
    checks ``final_norm=False`` and post-norm (no ``ln_f``: see
    ``config.use_final_norm``), ``norm="rmsnorm"`` (gain only) and
    ``qk_norm=True`` (q_norm and k_norm of width ``head_dim`` in every block).
    """
    check = "check_layernorm_param_count"
    small = [_small(), _small(n_layer=1, n_embd=8, n_head=2)]
    if variants:
        small += [
            _small(final_norm=False),
            _small(norm_position="post"),
            _small(norm="rmsnorm"),
            _small(qk_norm=True),
            _small(norm="rmsnorm", qk_norm=True, n_layer=2),
        ]
    configs = [(c, _count_in_model(c)) for c in small]
    configs += [(GPT2Config.from_preset(p), _count(GPT2Config.from_preset(p))) for p in _BIG]
    for config, truth in configs:
        out = as_int(check, call(check, fn, config.replace()), f"for config {_describe(config)}")
        if out == truth:
            continue
        singles, pairs = _count_mistakes(config)
        names = [m.label for m in singles if m.fn(config) == out][:1]
        names = names or [m.label for m in pairs if m.fn(config) == out]  # maybe several
        fail(
            check,
            f"for config {_describe(config)}: you counted {out:,}, "
            f"a GPT2 with this config has {truth:,} normalization parameters",
            "\n    or: ".join(names) if names else None,
        )
    n = len(configs)
    passed(
        check,
        f"right on {n} configs, e.g. gpt2: {_count(GPT2Config.from_preset('gpt2')):,} "
        f"and gpt2-xl: {_count(GPT2Config.from_preset('gpt2-xl')):,}",
    )
