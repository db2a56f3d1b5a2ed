"""Checks for chapter 11 (beyond LayerNorm).

``check_dyt(fn)`` checks ``fn(x, alpha, weight, bias)``, Dynamic Tanh
``weight * tanh(alpha * x) + bias`` (Zhu et al. 2025), against ``gpt2ln.dyt`` and names
the classic mistake a wrong output matches (alpha outside the tanh, the gain or bias inside
it, a norm first, ...). ``check_peri_block(fn)`` checks the Peri-LN block
``x + ln_out(f(ln_in(x)))`` for attention and the MLP, written from the six sub-layers of a
``gpt2ln.Block(norm_position="peri")``, and names the placement it matches instead (pre-norm,
OLMo 2, post-norm style, swapped norms, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ...model.norms import dyt
from ._core import (
    Mistake,
    as_float,
    as_tuple,
    call,
    call_on_copies,
    compare,
    fail,
    from_numpy,
    passed,
)
from .ch07 import _check_block

__all__ = ["check_dyt", "check_dyt_backward", "check_peri_block", "check_scale_embeddings"]

# ------------------------------------------------------------------------------------------ DyT
_DYT_FORMULA = "weight * tanh(alpha * x) + bias"


def _dyt_mistakes() -> list[Mistake]:
    def ln(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:])

    fix = f"DyT is {_DYT_FORMULA}: alpha scales x inside the tanh, weight and bias act after it"
    return [
        Mistake(
            "applied alpha after the tanh: alpha * tanh(x)", fix, lambda x, a, w, b: w * a * torch.tanh(x) + b
        ),
        Mistake(
            "left out alpha: tanh(x) instead of tanh(alpha * x)",
            fix,
            lambda x, a, w, b: w * torch.tanh(x) + b,
        ),
        Mistake("divided by alpha: tanh(x / alpha)", fix, lambda x, a, w, b: w * torch.tanh(x / a) + b),
        Mistake(
            "put the gain inside the tanh: tanh(alpha * weight * x)",
            fix,
            lambda x, a, w, b: torch.tanh(a * w * x) + b,
        ),
        Mistake(
            "put the bias inside the tanh: tanh(alpha * x + bias)",
            fix,
            lambda x, a, w, b: w * torch.tanh(a * x + b),
        ),
        Mistake("swapped weight and bias", fix, lambda x, a, w, b: b * torch.tanh(a * x) + w),
        Mistake("forgot the bias", fix, lambda x, a, w, b: w * torch.tanh(a * x)),
        Mistake("forgot the gain (weight)", fix, lambda x, a, w, b: torch.tanh(a * x) + b),
        Mistake(
            "normalized x first: DyT replaces the norm, it does not follow one",
            "no mean, no variance: apply the tanh to alpha * x directly",
            lambda x, a, w, b: w * torch.tanh(a * ln(x)) + b,
        ),
        Mistake(
            "used a sigmoid instead of tanh",
            "torch.tanh: an S-curve from -1 to 1, centered at 0",
            lambda x, a, w, b: w * torch.sigmoid(a * x) + b,
        ),
    ]


def _dyt_cases() -> list[tuple[str, torch.Tensor, Any, torch.Tensor, torch.Tensor, float]]:
    gen = torch.Generator().manual_seed(11)

    def affine(d: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        w = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        b = 0.3 * torch.randn(d, generator=gen, dtype=torch.float64)
        return w.to(dtype), b.to(dtype)

    x1 = 2.0 * torch.randn(2, 3, 8, generator=gen, dtype=torch.float64)
    x2 = torch.randn(4, 16, generator=gen, dtype=torch.float64).float()
    x3 = 20.0 * torch.randn(3, 12, generator=gen, dtype=torch.float64) + 5.0  # saturates
    return [
        ("x of shape [2, 3, 8], alpha = 0.5 (a float), float64", x1, 0.5, *affine(8, torch.float64), 1e-9),
        (
            "x of shape [4, 16], alpha a 1-element tensor (as DyT.alpha), float32",
            x2,
            torch.tensor([1.7]),
            *affine(16, torch.float32),
            1e-5,
        ),
        (
            "large x (shape [3, 12], tanh saturates), alpha = 0.3, float64",
            x3,
            0.3,
            *affine(12, torch.float64),
            1e-9,
        ),
    ]


def check_dyt(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, alpha, weight, bias) -> y`` is Dynamic Tanh.

    x: ``[..., d]``; alpha: a float or a 1-element tensor; weight, bias: ``[d]``. y must
    equal ``weight * tanh(alpha * x) + bias`` (``gpt2ln.dyt``) with x's shape and dtype,
    on three inputs (one saturating the tanh), without changing x in place.
    """
    check = "check_dyt"
    mistakes = _dyt_mistakes()
    for what, x, alpha, w, b, tol in _dyt_cases():
        with torch.no_grad():
            out = call_on_copies(
                check,
                fn,
                (x, alpha, w, b),
                names=("x", "alpha", "weight", "bias"),
                what=what,
                likely="write y = ..., not x.mul_(...) or x *= ...",
            )
        raw = from_numpy(out)
        if isinstance(raw, torch.Tensor) and raw.dtype != x.dtype:
            fail(check, f"on {what}, your output has dtype {raw.dtype}, expected {x.dtype} (x's)")
        compare(
            check,
            f"on {what}",
            raw,
            dyt(x, alpha, w, b),
            tol,
            mistakes,
            (x, alpha, w, b),
            formula=_DYT_FORMULA,
            skip=(RuntimeError, TypeError),
        )
    passed(check, f"matches gpt2ln.dyt, {_DYT_FORMULA}, on 3 inputs (float64, float32, saturated)")


# ------------------------------------------------------------------------------- Peri-LN block
_PERI_FORMULA = "h = x + ln_attn_out(attn(ln_1(x))); y = h + ln_mlp_out(mlp(ln_2(h)))"


def _peri(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
    h = x + lo_a(attn(ln_1(x)))
    return h + lo_m(mlp(ln_2(h)))


def _peri_mistakes() -> list[Mistake]:
    def pre(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + attn(ln_1(x))
        return h + mlp(ln_2(h))

    def olmo2(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + lo_a(attn(x))
        return h + lo_m(mlp(h))

    def stream(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = lo_a(x + attn(ln_1(x)))
        return lo_m(h + mlp(ln_2(h)))

    def in_out_swapped(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return _peri(x, attn, mlp, lo_a, lo_m, ln_1, ln_2)

    def attn_mlp_swapped(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return _peri(x, attn, mlp, ln_2, ln_1, lo_m, lo_a)

    def no_residual(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = lo_a(attn(ln_1(x)))
        return lo_m(mlp(ln_2(h)))

    def mlp_reads_x(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        h = x + lo_a(attn(ln_1(x)))
        return h + lo_m(mlp(ln_2(x)))

    def half(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
        return x + lo_a(attn(ln_1(x)))

    fix = f"Peri-LN normalizes each sub-layer's input and its output, then adds: {_PERI_FORMULA}"
    return [
        Mistake("forgot the output norms: that is pre-norm, GPT-2's block", fix, pre),
        Mistake("forgot the input norms: x + ln_out(f(x)) is OLMo 2's block", fix, olmo2),
        Mistake(
            "normalized the stream: ln_out(x + f(...)) normalizes the sum (post-norm style), not the update",
            "apply the output norm to the sub-layer's output before adding it: x + ln_attn_out(attn(...))",
            stream,
        ),
        Mistake(
            "swapped the input and output norms (ln_1 <-> ln_attn_out, ln_2 <-> ln_mlp_out)",
            fix,
            in_out_swapped,
        ),
        Mistake(
            "swapped the attention and MLP norms (ln_1 <-> ln_2, ln_attn_out <-> ln_mlp_out)",
            fix,
            attn_mlp_swapped,
        ),
        Mistake("forgot the residual: dropped the x + ... of each sub-layer", fix, no_residual),
        Mistake(
            "the MLP reads x instead of h, the stream after attention (a parallel block)", fix, mlp_reads_x
        ),
        Mistake("forgot the MLP half: returned h", fix, half),
    ]


def check_peri_block(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, attn, mlp, ln_1, ln_2, ln_attn_out, ln_mlp_out)`` is the Peri-LN block.

    x: ``[B, T, d]``; the six others are functions ``[B, T, d] -> [B, T, d]``, the sub-layers
    of a ``gpt2ln.Block(norm_position="peri")`` with random weights, gains and biases. The
    output must equal the block's, ``h = x + ln_attn_out(attn(ln_1(x)))``,
    ``y = h + ln_mlp_out(mlp(ln_2(h)))``, on two inputs (float64, float32).
    """
    outs = ("ln_attn_out", "ln_mlp_out")
    _check_block("check_peri_block", fn, "peri", _peri_mistakes(), _PERI_FORMULA, outs)


# ------------------------------------------------------------------------------- DyT backward
# Hints, not the answer: the messages name the rule to apply, never the four formulas.
_DYT_GRAD_FORMULA = (
    "the chain rule through y = weight * tanh(alpha * x) + bias, with tanh' = 1 - tanh**2; "
    "a parameter shared across tokens sums its gradient over them"
)
_DYT_GRAD_HINTS = {
    "dx": "dx: follow g back through each factor that multiplies x on its way to y, in order",
    "dalpha": "dalpha: the same path as dx, except the last step differentiates alpha * x by alpha; "
    "alpha is one number, so add up every element's share",
    "dweight": "dweight: what does weight multiply? Each token adds its own term",
    "dbias": "dbias: bias is added per feature; each token adds its own term",
}
_DYT_GRAD_NAMES = ("dx", "dalpha", "dweight", "dbias")


def _dyt_grads(x, a, w, g, *, dt=None, dx_alpha=True, dx_w=True, da_x=True, dw_t=True, sum_w=True):
    """DyT's four gradients, or a classic mistake in one of them (the keywords)."""
    t = torch.tanh(a * x)
    slope = (1 - t * t) if dt is None else dt(t, a, x)
    dx = g * (w if dx_w else 1.0) * (a if dx_alpha else 1.0) * slope
    da = (g * w * (x if da_x else 1.0) * slope).sum()
    lead = tuple(range(x.dim() - 1))
    dw = g * (t if dw_t else torch.tanh(x))
    dw = dw.sum(lead) if sum_w else dw.mean(lead)
    db = g.sum(lead) if sum_w else g.mean(lead)
    return dx, da.reshape(()), dw, db


def _dyt_grad_mistakes() -> dict[str, list[Mistake]]:
    hint = _DYT_GRAD_HINTS

    def pick(i, **kw):
        return lambda x, a, w, g: _dyt_grads(x, a, w, g, **kw)[i]

    return {
        "dx": [
            Mistake(
                "dx: forgot the chain rule's alpha (d tanh(alpha x)/dx = alpha (1 - tanh^2))",
                hint["dx"],
                pick(0, dx_alpha=False),
            ),
            Mistake(
                "dx: forgot the gain: the upstream gradient passes through weight first",
                hint["dx"],
                pick(0, dx_w=False),
            ),
            Mistake(
                "dx: used tanh(alpha x) as its derivative; the derivative is 1 - tanh(alpha x)**2",
                hint["dx"],
                pick(0, dt=lambda t, a, x: t),
            ),
            Mistake(
                "dx: used 1 - tanh(alpha x) as tanh's derivative; it is 1 - tanh(alpha x)**2 (squared)",
                hint["dx"],
                pick(0, dt=lambda t, a, x: 1 - t),
            ),
            Mistake(
                "dx: used 1 - tanh(x)**2 without alpha inside the tanh",
                hint["dx"],
                pick(0, dt=lambda t, a, x: 1 - torch.tanh(x) ** 2),
            ),
            Mistake(
                "dx: used 1 / cosh(alpha x) instead of 1 / cosh(alpha x)**2 = 1 - tanh**2",
                hint["dx"],
                pick(0, dt=lambda t, a, x: 1 / torch.cosh(a * x)),
            ),
        ],
        "dalpha": [
            Mistake(
                "dalpha: forgot the factor x (d tanh(alpha x)/d alpha = x (1 - tanh^2))",
                hint["dalpha"],
                pick(1, da_x=False),
            ),
            Mistake(
                "dalpha: used tanh(alpha x) as its derivative; the derivative is 1 - tanh(alpha x)**2",
                hint["dalpha"],
                pick(1, dt=lambda t, a, x: t),
            ),
            Mistake(
                "dalpha: used 1 - tanh(alpha x) as tanh's derivative; it is 1 - tanh(alpha x)**2 (squared)",
                hint["dalpha"],
                pick(1, dt=lambda t, a, x: 1 - t),
            ),
        ],
        "dweight": [
            Mistake("dweight: used tanh(x), without alpha", hint["dweight"], pick(2, dw_t=False)),
            Mistake(
                "dweight: averaged over the tokens instead of summing (the loss adds every token's term)",
                hint["dweight"],
                pick(2, sum_w=False),
            ),
        ],
        "dbias": [
            Mistake(
                "dbias: averaged over the tokens instead of summing", hint["dbias"], pick(3, sum_w=False)
            ),
        ],
    }


def check_dyt_backward(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, alpha, weight, grad_out) -> (dx, dalpha, dweight, dbias)``, DyT's backward.

    x, grad_out: ``[..., d]``; alpha: a float; weight: ``[d]``. The four gradients of
    ``sum(grad_out * (weight * tanh(alpha * x) + bias))``: dx of x's shape, dalpha a number (a
    float or a one-element tensor), dweight and dbias of shape ``[d]``; compared with autograd
    on three inputs (one saturating the tanh), naming the classic mistake a wrong one matches.
    """
    check = "check_dyt_backward"
    mistakes = _dyt_grad_mistakes()
    gen = torch.Generator().manual_seed(111)
    cases = [
        (
            "x of shape [2, 3, 8], alpha = 0.5",
            2.0 * torch.randn(2, 3, 8, generator=gen, dtype=torch.float64),
            0.5,
        ),
        ("x of shape [5, 16], alpha = 1.7", torch.randn(5, 16, generator=gen, dtype=torch.float64), 1.7),
        (
            "large x of shape [4, 12] (tanh saturates), alpha = 0.3",
            20.0 * torch.randn(4, 12, generator=gen, dtype=torch.float64) + 5.0,
            0.3,
        ),
    ]
    for what, x, alpha in cases:
        d = x.shape[-1]
        w = 1.0 + 0.5 * torch.randn(d, generator=gen, dtype=torch.float64)
        g = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        xr = x.clone().requires_grad_(True)
        ar = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
        wr = w.clone().requires_grad_(True)
        br = torch.zeros(d, dtype=torch.float64, requires_grad=True)
        (g * dyt(xr, ar, wr, br)).sum().backward()
        truths = (xr.grad, ar.grad.reshape(()), wr.grad, br.grad)
        with torch.no_grad():
            out = call_on_copies(
                check, fn, (x, alpha, w, g), names=("x", "alpha", "weight", "grad_out"), what=what
            )
        out = as_tuple(check, out, _DYT_GRAD_NAMES, f"on {what}, ")
        for name, got, truth in zip(_DYT_GRAD_NAMES, out, truths, strict=True):
            got = from_numpy(got)
            if name == "dalpha":
                if isinstance(got, torch.Tensor) and got.numel() != 1:
                    fail(
                        check,
                        f"on {what}, dalpha has shape {tuple(got.shape)}, expected one number",
                        "alpha is one scalar shared by every element: sum its gradient over all of them",
                    )
                got = torch.as_tensor(as_float(check, got, f"on {what}, for dalpha"), dtype=torch.float64)
            compare(
                check,
                f"on {what}, {name}",
                got,
                truth,
                1e-8,
                mistakes[name],
                (x, alpha, w, g),
                formula=_DYT_GRAD_FORMULA,
            )
    passed(check, "dx, dalpha, dweight and dbias match autograd on 3 inputs (one saturated)")


# ------------------------------------------------------------------------ sqrt(d) embeddings
_SQRT_D = "the blocks read sqrt(n_embd) * (wte(idx) + wpe(pos)); the tied unembedding keeps wte as it is"


def _scale_ref(model: torch.nn.Module, factor: float) -> None:
    model.drop.register_forward_hook(lambda module, args, out: out * factor)


def _scale_mistakes() -> list[Mistake]:
    def tokens_only(m):  # scaled the token embeddings, not the positions
        s = m.config.n_embd**0.5
        m.wte.register_forward_hook(lambda module, args, out: out * s)

    def positions_only(m):
        s = m.config.n_embd**0.5
        m.wpe.register_forward_hook(lambda module, args, out: out * s)

    def by_d(m):
        _scale_ref(m, float(m.config.n_embd))

    def by_inverse(m):
        _scale_ref(m, m.config.n_embd**-0.5)

    def logits(m):
        s = m.config.n_embd**0.5
        m.register_forward_hook(lambda module, args, out: out * s)

    def unchanged(m):  # e.g. hooked a copy of the model, or built a hook and never registered it
        pass

    fix = _SQRT_D
    return [
        Mistake(
            "left the model unchanged: its logits are those of the model before your function ran "
            "(did it change a copy, or create a hook without registering it on the model?)",
            "change the model it is given, in place: register a forward hook on model.drop (or set "
            f"an attribute); {_SQRT_D}",
            unchanged,
        ),
        Mistake("scaled the token embeddings but not the position embeddings", fix, tokens_only),
        Mistake("scaled the position embeddings only", fix, positions_only),
        Mistake("multiplied by d instead of sqrt(d)", fix, by_d),
        Mistake("divided by sqrt(d) instead of multiplying", fix, by_inverse),
        Mistake(
            "scaled the logits (or ln_f's output, the same thing): the end of the model, not its input",
            fix,
            logits,
        ),
    ]


def check_scale_embeddings(fn: Callable[..., Any]) -> None:
    """Check ``fn(model)`` makes a ``gpt2ln.GPT2`` multiply its embeddings by sqrt(d), as Gemma.

    After ``fn(model)`` (which changes the model in place and may return it), the blocks must
    read ``sqrt(n_embd) * (wte(idx) + wpe(pos))`` while the weights, and so the tied
    unembedding, stay as they were. Checked on two small models (a pre-norm and a post-norm
    one) by their logits; a wrong answer is matched against the classic mistakes.
    """
    from ...model import GPT2, GPT2Config

    check = "check_scale_embeddings"
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(7))
    for position in ("pre", "post"):
        config = GPT2Config(vocab_size=64, n_ctx=16, n_embd=16, n_layer=2, n_head=2, norm_position=position)

        def fresh(config=config):
            torch.manual_seed(3)
            m = GPT2(config).double().eval()
            with torch.no_grad():  # embeddings of a trained scale, so the blocks see the change
                m.wte.weight.mul_(20.0)
                m.wpe.weight.mul_(20.0)
            return m

        what = f"a {position}-norm GPT2 of width 16"
        model = fresh()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        returned = call(check, fn, model)
        if returned is not None and returned is not model:
            fail(
                check,
                f"on {what}, your function returned a different model",
                "change the model it is given (register a hook, or set an attribute) and return it or None",
            )
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
        if changed:
            fail(
                check,
                f"on {what}, your function changed the weights {changed[:3]}",
                "wte is tied to the unembedding: scaling wte.weight scales the logits too. "
                f"Scale the embeddings' output in the forward pass instead: {_SQRT_D}",
            )
        with torch.no_grad():
            got = model(idx)
            ref_model = fresh()
            _scale_ref(ref_model, config.n_embd**0.5)
            truth = ref_model(idx)

        def mistaken(m_fn):
            m = fresh()
            m_fn(m)
            return m(idx)

        mistakes = [Mistake(m.label, m.fix, lambda m_fn=m.fn: mistaken(m_fn)) for m in _scale_mistakes()]
        compare(
            check,
            f"on {what}",
            got,
            truth,
            1e-9,
            mistakes,
            (),
            formula=_SQRT_D,
            differs="your model's logits differ from the reference's",
        )
    passed(check, "the blocks read sqrt(d) times the embeddings, and the weights are unchanged (2 models)")
