"""Chapter 11 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpt2ln.exercises import check_dyt, check_peri_block


# ----------------------------------------------------------------------------------- check_dyt
def right_dyt(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def test_right_dyt_passes_and_prints_one_line(capsys):
    check_dyt(right_dyt)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_dyt")


def _numpy_dyt(x, alpha, weight, bias):
    a = float(alpha) if not isinstance(alpha, torch.Tensor) else alpha.item()
    return weight.numpy() * np.tanh(a * x.numpy()) + bias.numpy()


def _module_dyt(x, alpha, weight, bias):
    from gpt2ln import DyT

    m = DyT(x.shape[-1]).to(x.dtype)
    with torch.no_grad():
        m.alpha.fill_(float(alpha))
        m.weight.copy_(weight)
        m.bias.copy_(bias)
        return m(x)


@pytest.mark.parametrize("fn", [_numpy_dyt, _module_dyt], ids=["numpy", "gpt2ln.DyT"])
def test_other_right_dyts_pass(fn, capsys):
    check_dyt(fn)
    assert "✓" in capsys.readouterr().out


DYT_MISTAKES = {
    "alpha_outside": (lambda x, a, w, b: w * a * torch.tanh(x) + b, "applied alpha after the tanh"),
    "no_alpha": (lambda x, a, w, b: w * torch.tanh(x) + b, "left out alpha"),
    "divided": (lambda x, a, w, b: w * torch.tanh(x / a) + b, "divided by alpha"),
    "gain_inside": (lambda x, a, w, b: torch.tanh(a * w * x) + b, "put the gain inside the tanh"),
    "bias_inside": (lambda x, a, w, b: w * torch.tanh(a * x + b), "put the bias inside the tanh"),
    "swapped": (lambda x, a, w, b: b * torch.tanh(a * x) + w, "swapped weight and bias"),
    "no_bias": (lambda x, a, w, b: w * torch.tanh(a * x), "forgot the bias"),
    "no_gain": (lambda x, a, w, b: torch.tanh(a * x) + b, "forgot the gain"),
    "normalized": (
        lambda x, a, w, b: w * torch.tanh(a * F.layer_norm(x, x.shape[-1:])) + b,
        "normalized x first",
    ),
    "sigmoid": (lambda x, a, w, b: w * torch.sigmoid(a * x) + b, "used a sigmoid"),
}


@pytest.mark.parametrize("name", sorted(DYT_MISTAKES))
def test_each_dyt_mistake_is_named(name):
    fn, words = DYT_MISTAKES[name]
    with pytest.raises(AssertionError, match=words):
        check_dyt(fn)


def _in_place_dyt(x, alpha, weight, bias):
    x.mul_(alpha).tanh_()
    return weight * x + bias


def _clamped(x, alpha, weight, bias):
    return weight * torch.clamp(alpha * x, -1, 1) + bias


def test_dyt_other_failures_are_explained():
    with pytest.raises(AssertionError, match="changed its input `x` in place"):
        check_dyt(_in_place_dyt)
    with pytest.raises(AssertionError, match="no single classic mistake explains it"):
        check_dyt(_clamped)
    with pytest.raises(AssertionError, match="dtype torch.float64, expected torch.float32"):
        check_dyt(lambda x, a, w, b: right_dyt(x.double(), a, w.double(), b.double()))
    with pytest.raises(AssertionError, match="not implemented yet"):
        check_dyt(_not_implemented)
    with pytest.raises(AssertionError, match="should be a torch.Tensor, got NoneType"):
        check_dyt(lambda x, a, w, b: None)


def _not_implemented(*args):
    raise NotImplementedError()


# ---------------------------------------------------------------------------- check_peri_block
def right_peri(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
    x = x + lo_a(attn(ln_1(x)))
    return x + lo_m(mlp(ln_2(x)))


def test_right_peri_passes_and_prints_one_line(capsys):
    check_peri_block(right_peri)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_peri_block")


def _loop_peri(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
    for f, n_in, n_out in ((attn, ln_1, lo_a), (mlp, ln_2, lo_m)):
        x = x + n_out(f(n_in(x)))
    return x


def test_loop_peri_passes(capsys):
    check_peri_block(_loop_peri)
    assert "✓" in capsys.readouterr().out


def _h(x, attn, ln_in, ln_out):
    return x + ln_out(attn(ln_in(x)))


PERI_MISTAKES = {
    "pre": (lambda x, a, m, l1, l2, oa, om: (lambda h: h + m(l2(h)))(x + a(l1(x))), "that is pre-norm"),
    "olmo2": (lambda x, a, m, l1, l2, oa, om: (lambda h: h + om(m(h)))(x + oa(a(x))), "OLMo 2's block"),
    "stream": (
        lambda x, a, m, l1, l2, oa, om: (lambda h: om(h + m(l2(h))))(oa(x + a(l1(x)))),
        "normalized the stream",
    ),
    "in_out_swapped": (
        lambda x, a, m, l1, l2, oa, om: right_peri(x, a, m, oa, om, l1, l2),
        "swapped the input and output norms",
    ),
    "attn_mlp_swapped": (
        lambda x, a, m, l1, l2, oa, om: right_peri(x, a, m, l2, l1, om, oa),
        "swapped the attention and MLP norms",
    ),
    "no_residual": (lambda x, a, m, l1, l2, oa, om: om(m(l2(oa(a(l1(x)))))), "forgot the residual"),
    "mlp_reads_x": (
        lambda x, a, m, l1, l2, oa, om: _h(x, a, l1, oa) + om(m(l2(x))),
        "the MLP reads x instead of h",
    ),
    "parallel": (lambda x, a, m, l1, l2, oa, om: x + oa(a(l1(x))) + om(m(l2(x))), r"\(a parallel block\)"),
    "half": (lambda x, a, m, l1, l2, oa, om: _h(x, a, l1, oa), "forgot the MLP half"),
}


@pytest.mark.parametrize("name", sorted(PERI_MISTAKES))
def test_each_peri_mistake_is_named(name):
    fn, words = PERI_MISTAKES[name]
    with pytest.raises(AssertionError, match=words):
        check_peri_block(fn)


def _in_place_peri(x, attn, mlp, ln_1, ln_2, lo_a, lo_m):
    x += lo_a(attn(ln_1(x)))
    return x + lo_m(mlp(ln_2(x)))


def test_peri_other_failures_are_explained():
    with pytest.raises(AssertionError, match="changed its input `x` in place"):
        check_peri_block(_in_place_peri)
    with pytest.raises(AssertionError, match="no single classic mistake explains it"):
        check_peri_block(lambda x, a, m, l1, l2, oa, om: 2 * right_peri(x, a, m, l1, l2, oa, om))
    with pytest.raises(AssertionError, match=r"has shape \(2, 16\), expected \(2, 5, 16\)"):
        check_peri_block(lambda x, *subs: right_peri(x, *subs)[:, -1])


# ---------------------------------------------------------------------------- check_dyt_backward
def _grads(x, a, w, g, **mistake):
    from gpt2ln.exercises.ch11 import _dyt_grads

    return _dyt_grads(x, a, w, g, **mistake)


def right_dyt_backward(x, alpha, weight, grad_out):
    t = torch.tanh(alpha * x)
    s = grad_out * weight * (1 - t * t)
    lead = tuple(range(x.dim() - 1))
    return alpha * s, (s * x).sum(), (grad_out * t).sum(lead), grad_out.sum(lead)


def test_right_dyt_backward_passes(capsys):
    from gpt2ln.exercises.ch11 import check_dyt_backward

    check_dyt_backward(right_dyt_backward)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_dyt_backward")


def _float_alpha_grad(x, alpha, weight, grad_out):
    dx, da, dw, db = right_dyt_backward(x, alpha, weight, grad_out)
    return dx, float(da), dw.numpy(), db


DYT_GRAD_MISTAKES = {
    "no_alpha": (dict(dx_alpha=False), "dx: forgot the chain rule's alpha"),
    "no_gain": (dict(dx_w=False), "dx: forgot the gain"),
    "tanh_slope": (dict(dt=lambda t, a, x: t), "dx: used tanh"),
    "one_minus_tanh": (dict(dt=lambda t, a, x: 1 - t), r"dx: used 1 - tanh\(alpha x\) as tanh's derivative"),
    "no_alpha_inside": (dict(dt=lambda t, a, x: 1 - torch.tanh(x) ** 2), "without alpha inside"),
    "sech": (dict(dt=lambda t, a, x: 1 / torch.cosh(a * x)), "1 / cosh"),
    "dalpha_no_x": (dict(da_x=False), "dalpha: forgot the factor x"),
    "dweight_no_alpha": (dict(dw_t=False), "dweight: used tanh\\(x\\)"),
    "averaged": (dict(sum_w=False), "averaged over the tokens"),
}


@pytest.mark.parametrize("name", sorted(DYT_GRAD_MISTAKES))
def test_each_dyt_backward_mistake_is_named(name):
    from gpt2ln.exercises.ch11 import check_dyt_backward

    kw, words = DYT_GRAD_MISTAKES[name]
    with pytest.raises(AssertionError, match=words):
        check_dyt_backward(lambda x, a, w, g: _grads(x, a, w, g, **kw))


# the part of the answer that no message may print (the fix is a hint, not the solution)
DYT_GRAD_ANSWERS = ("weight * alpha * (1 - t", "sum(g * weight * x", "g * t summed", "g summed over")
DYT_GRAD_HINT_OF = {
    "no_alpha": "dx",
    "no_gain": "dx",
    "tanh_slope": "dx",
    "one_minus_tanh": "dx",
    "no_alpha_inside": "dx",
    "sech": "dx",
    "dalpha_no_x": "dalpha",
    "dweight_no_alpha": "dweight",
    "averaged": "dweight",
}


@pytest.mark.parametrize("name", sorted(DYT_GRAD_MISTAKES))
def test_each_dyt_backward_fix_is_a_hint_not_the_answer(name):
    from gpt2ln.exercises.ch11 import _DYT_GRAD_HINTS, check_dyt_backward

    kw, _ = DYT_GRAD_MISTAKES[name]
    with pytest.raises(AssertionError) as err:
        check_dyt_backward(lambda x, a, w, g: _grads(x, a, w, g, **kw))
    msg = str(err.value)
    assert "Fix: " + _DYT_GRAD_HINTS[DYT_GRAD_HINT_OF[name]] in msg
    assert not any(a in msg for a in DYT_GRAD_ANSWERS), msg


def test_dyt_backward_fallback_is_a_hint_not_the_answer():
    from gpt2ln.exercises.ch11 import _DYT_GRAD_FORMULA, check_dyt_backward

    def doubled(x, a, w, g):  # wrong in a way no named mistake matches
        dx, da, dw, db = right_dyt_backward(x, a, w, g)
        return dx + 1.0, da, dw, db

    with pytest.raises(AssertionError) as err:
        check_dyt_backward(doubled)
    msg = str(err.value)
    assert _DYT_GRAD_FORMULA in msg and "chain rule" in msg
    assert not any(a in msg for a in DYT_GRAD_ANSWERS), msg


def test_dyt_backward_other_failures_are_explained(capsys):
    from gpt2ln.exercises.ch11 import check_dyt_backward

    check_dyt_backward(_float_alpha_grad)  # a float dalpha and a numpy dweight are accepted
    assert "✓" in capsys.readouterr().out

    def unsummed(x, a, w, g):
        dx, _, dw, db = right_dyt_backward(x, a, w, g)
        t = torch.tanh(a * x)
        return dx, g * w * x * (1 - t * t), dw, db

    with pytest.raises(AssertionError, match="sum its gradient over all of them"):
        check_dyt_backward(unsummed)
    with pytest.raises(AssertionError, match="expected a tuple"):
        check_dyt_backward(lambda x, a, w, g: right_dyt_backward(x, a, w, g)[:3])


def test_dyt_backward_unreduced_dweight_is_told_to_sum_not_keepdim():
    from gpt2ln.exercises.ch11 import check_dyt_backward

    def unreduced(x, a, w, g):  # dweight left at x's shape: no sum over the leading axes
        dx, da, _, db = right_dyt_backward(x, a, w, g)
        return dx, da, g * torch.tanh(a * x), db

    with pytest.raises(AssertionError) as err:
        check_dyt_backward(unreduced)
    msg = str(err.value)
    assert "dweight" in msg and "a sum over too few axes" in msg and "reducing without keepdim" not in msg


# ------------------------------------------------------------------------ check_scale_embeddings
def right_scale(model):
    s = model.config.n_embd**0.5
    model.drop.register_forward_hook(lambda module, args, out: out * s)
    return model


def _first_block_pre_hook(model):
    s = model.config.n_embd**0.5
    model.h[0].register_forward_pre_hook(lambda module, args: (args[0] * s,))


def test_right_scale_embeddings_pass(capsys):
    from gpt2ln.exercises.ch11 import check_scale_embeddings

    check_scale_embeddings(right_scale)
    check_scale_embeddings(_first_block_pre_hook)  # the same function, another hook
    out = capsys.readouterr().out
    assert out.count("✓ check_scale_embeddings") == 2


def _hook(name, factor):
    def fn(model):
        s = factor(model.config.n_embd)
        module = model if name == "" else getattr(model, name)
        module.register_forward_hook(lambda m, args, out: out * s)

    return fn


SCALE_MISTAKES = {
    "tokens_only": (_hook("wte", lambda d: d**0.5), "token embeddings but not the position"),
    "positions_only": (_hook("wpe", lambda d: d**0.5), "position embeddings only"),
    "by_d": (_hook("drop", lambda d: float(d)), "multiplied by d instead of sqrt"),
    "inverse": (_hook("drop", lambda d: d**-0.5), "divided by sqrt"),
    "logits": (_hook("", lambda d: d**0.5), "scaled the logits"),
    "unchanged": (lambda model: None, "left the model unchanged"),
    "hooked_a_copy": (lambda model: right_scale(copy.deepcopy(model)) and None, "left the model unchanged"),
    "ln_f": (_hook("ln_f", lambda d: d**0.5), "scaled the logits \\(or ln_f's output"),
}


@pytest.mark.parametrize("name", sorted(SCALE_MISTAKES))
def test_each_scale_mistake_is_named(name):
    from gpt2ln.exercises.ch11 import check_scale_embeddings

    fn, words = SCALE_MISTAKES[name]
    with pytest.raises(AssertionError, match=words):
        check_scale_embeddings(fn)


def test_scale_embeddings_weights_and_new_models_are_refused():
    from gpt2ln import GPT2
    from gpt2ln.exercises.ch11 import check_scale_embeddings

    def scaled_weights(model):
        with torch.no_grad():
            model.wte.weight.mul_(model.config.n_embd**0.5)

    with pytest.raises(AssertionError, match="tied to the unembedding"):
        check_scale_embeddings(scaled_weights)
    with pytest.raises(AssertionError, match="returned a different model"):
        check_scale_embeddings(lambda model: right_scale(GPT2(model.config)))
    with pytest.raises(AssertionError, match="not implemented yet"):
        check_scale_embeddings(lambda model: (_ for _ in ()).throw(NotImplementedError()))


def test_dyt_backward_one_minus_tanh_only_in_dalpha_is_named():
    from gpt2ln.exercises.ch11 import check_dyt_backward

    def slip(x, a, w, g):  # dx right, dalpha with 1 - tanh
        dx, _, dw, db = right_dyt_backward(x, a, w, g)
        t = torch.tanh(a * x)
        return dx, (g * w * x * (1 - t)).sum(), dw, db

    with pytest.raises(AssertionError, match=r"dalpha: used 1 - tanh\(alpha x\) as tanh's derivative"):
        check_dyt_backward(slip)


def test_scale_embeddings_unchanged_model_is_not_called_a_factor_mistake():
    from gpt2ln.exercises.ch11 import check_scale_embeddings

    with pytest.raises(AssertionError) as err:
        check_scale_embeddings(lambda model: model)
    msg = str(err.value)
    assert "left the model unchanged" in msg and "multiplied by d" not in msg
