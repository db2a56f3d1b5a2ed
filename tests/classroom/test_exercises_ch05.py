"""Chapter 5 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln.exercises import check_center_writing_weights, check_rms_norm, check_rms_to_layer_norm


# ---------------------------------------------------------------------------- check_rms_norm
def _rms(x, g, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def test_rms_norm_passes_correct(capsys):
    check_rms_norm(_rms)
    assert "✓ check_rms_norm" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, g, eps=1e-6: F.rms_norm(x, (x.shape[-1],), g, eps),
        lambda x, g, eps=1e-6: gpt2ln.rms_norm(x, g, eps),
        lambda x, g, eps=1e-6: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g,
        lambda x, g, eps=1e-6: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)) * g,
        lambda x, g, eps=1e-6: (
            (x.numpy() / np.sqrt((x.numpy() ** 2).mean(-1, keepdims=True) + eps)) * g.numpy()
        ),
    ],
    ids=["F.rms_norm", "gpt2ln.rms_norm", "sqrt-divide", "computed-in-float32", "numpy"],
)
def test_rms_norm_passes_other_correct_forms(fn):
    check_rms_norm(fn)


def _ms(x, dim=-1, keepdim=True):
    return x.pow(2).mean(dim, keepdim=keepdim)


RMS_MISTAKES = {
    "eps outside the square root": lambda x, g, eps=1e-6: x / (_ms(x).sqrt() + eps) * g,
    "subtracted the mean": lambda x, g, eps=1e-6: F.layer_norm(x, (x.shape[-1],), g, None, eps),
    "standard deviation (or variance) instead of the RMS": (
        lambda x, g, eps=1e-6: x / torch.sqrt(x.var(-1, keepdim=True, correction=0) + eps) * g
    ),
    "standard deviation (or variance) instead of the RMS: x / std(x), Bessel": (
        lambda x, g, eps=1e-6: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * g
    ),
    "forgot the gain": lambda x, g, eps=1e-6: x / torch.sqrt(_ms(x) + eps),
    "wrong axis: the RMS over dim 0": lambda x, g, eps=1e-6: x / torch.sqrt(_ms(x, 0) + eps) * g,
    "wrong axis: the RMS over the whole tensor": lambda x, g, eps=1e-6: (
        x / torch.sqrt(x.pow(2).mean() + eps) * g
    ),
    "mean of |x| instead of x^2": lambda x, g, eps=1e-6: x / (x.abs().mean(-1, keepdim=True) + eps) * g,
    "sum instead of mean": lambda x, g, eps=1e-6: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * g,
    "forgot the square root": lambda x, g, eps=1e-6: x / (_ms(x) + eps) * g,
    "multiplied by the RMS": lambda x, g, eps=1e-6: x * torch.sqrt(_ms(x) + eps) * g,
    "gain g before normalizing": lambda x, g, eps=1e-6: _rms(x * g, 1.0, eps),
    "ignored the eps argument": lambda x, g, eps=1e-6: _rms(x, g, 1e-6),
    "no eps at all": lambda x, g, eps=1e-6: x / _ms(x).sqrt() * g,
}


@pytest.mark.parametrize("name", list(RMS_MISTAKES))
def test_rms_norm_names_mistake(name):
    with pytest.raises(AssertionError, match="check_rms_norm") as e:
        check_rms_norm(RMS_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_rms_norm_wrong_axis_keepdim_false():
    # keepdim=False on [2, 3, 16] does not broadcast: reported as the crash it is, not a pass.
    with pytest.raises(AssertionError, match="raised RuntimeError"):
        check_rms_norm(lambda x, g, eps=1e-6: x / torch.sqrt(_ms(x, keepdim=False) + eps) * g)


def test_rms_norm_not_implemented():
    def my_rms_norm(x, g, eps=1e-6):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet") as e:
        check_rms_norm(my_rms_norm)
    assert "my_rms_norm" in str(e.value)


def test_rms_norm_in_place_and_missing_return():
    def in_place(x, g, eps=1e-6):
        x.mul_(torch.rsqrt(_ms(x) + eps))
        return x * g

    with pytest.raises(AssertionError, match="in place"):
        check_rms_norm(in_place)
    with pytest.raises(AssertionError, match="missing `return`"):
        check_rms_norm(lambda x, g, eps=1e-6: None)


def test_rms_norm_unexplained_error_is_generic():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_rms_norm(lambda x, g, eps=1e-6: _rms(x, g, eps) + 0.01)


def test_rms_norm_mistakes_are_distinct():
    """No mistake in the table is invisible on the first input (each one fails the check)."""
    from gpt2ln.exercises import ch05

    case = ch05._rms_cases()[0]
    truth = ch05._rms_reference(case.x, case.g, None, case.eps)
    for m in ch05._rms_mistakes(case):
        try:
            y = m.fn(case.x, case.g, None, case.eps)
        except RuntimeError:  # keepdim=False does not broadcast here: the learner's code crashes too
            continue
        assert ch05._dist(y, truth) > 1e-3, m.label


# Lesson 004 (shared/seeds/004_*.txt), typed exactly as the lesson gives it.
def lesson_004_layer_norm(x, gamma, beta, eps=1e-5):  # x: (..., d)
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta


def lesson_004_rms_norm(x, gamma, eps=1e-5):
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * gamma


def test_lesson_004_rms_norm_passes_check_rms_norm(capsys):
    check_rms_norm(lesson_004_rms_norm)
    assert "✓ check_rms_norm" in capsys.readouterr().out


@pytest.mark.parametrize("default_eps", [1e-5, 1e-6, 1e-8])
def test_rms_norm_check_never_judges_the_learners_default_eps(default_eps):
    check_rms_norm(lambda x, g, eps=default_eps: _rms(x, g, eps))
    check_rms_to_layer_norm(lambda x, g, b, eps=default_eps: gpt2ln.rms_norm(_centre(x), g, eps) + b)


def test_package_rms_norm_defaults_to_gpt2s_layernorm_eps():
    """Lesson 004: RMSNorm with the same eps as GPT-2's LayerNorm, 1e-5, for a like-for-like comparison."""
    import inspect

    assert inspect.signature(gpt2ln.rms_norm).parameters["eps"].default == 1e-5
    assert inspect.signature(gpt2ln.layer_norm).parameters["eps"].default == 1e-5
    assert gpt2ln.RMSNorm(8).eps == gpt2ln.LayerNorm(8).eps == 1e-5
    x = torch.randn(3, 8, dtype=torch.float64) * 1e-3  # RMS ~ sqrt(1e-6): the eps shows
    torch.testing.assert_close(gpt2ln.rms_norm(x), lesson_004_rms_norm(x, torch.ones(8)))
    torch.testing.assert_close(gpt2ln.RMSNorm(8).double()(x), lesson_004_rms_norm(x, torch.ones(8)))


# ---------------------------------------------------------------------------- check_rms_to_layer_norm
def _centre(x):
    return x - x.mean(-1, keepdim=True)


def test_rms_to_layer_norm_passes(capsys):
    check_rms_to_layer_norm(lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), g, eps) + b)
    check_rms_to_layer_norm(lambda x, g, b, eps=1e-5: F.rms_norm(_centre(x), (x.shape[-1],), g, eps) + b)
    assert "✓ check_rms_to_layer_norm" in capsys.readouterr().out


LN_MISTAKES = {
    "forgot to centre": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(x, g, eps) + b,
    "centred after normalizing": lambda x, g, b, eps=1e-5: _centre(gpt2ln.rms_norm(x, None, eps)) * g + b,
    "added the bias before the gain": lambda x, g, b, eps=1e-5: (
        (gpt2ln.rms_norm(_centre(x), None, eps) + b) * g
    ),
    "forgot the bias": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), g, eps),
    "forgot the gain": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), None, eps) + b,
    "applied the gain twice": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), g, eps) * g + b,
    "swapped g and b": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), b, eps) + g,
    "ignored the eps argument": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(_centre(x), g) + b,
    "wrong axis": lambda x, g, b, eps=1e-5: gpt2ln.rms_norm(x - x.mean(0, keepdim=True), g, eps) + b,
}


@pytest.mark.parametrize("name", list(LN_MISTAKES))
def test_rms_to_layer_norm_names_mistake(name):
    with pytest.raises(AssertionError, match="check_rms_to_layer_norm") as e:
        check_rms_to_layer_norm(LN_MISTAKES[name])
    assert name in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, g, b, eps=1e-5: F.layer_norm(x, (x.shape[-1],), g, b, eps),
        lambda x, g, b, eps=1e-5: gpt2ln.layer_norm(x, g, b, eps),
        lambda x, g, b, eps=1e-5: torch.layer_norm(x, (x.shape[-1],), g, b, eps),
    ],
    ids=["F.layer_norm", "gpt2ln.layer_norm", "torch.layer_norm"],
)
def test_rms_to_layer_norm_refuses_layer_norm(fn):
    with pytest.raises(AssertionError, match="built from rms_norm only"):
        check_rms_to_layer_norm(fn)
    # ... and puts the real functions back afterwards.
    x = torch.randn(3, 8)
    assert torch.allclose(F.layer_norm(x, (8,)), gpt2ln.layer_norm(x), atol=1e-6)
    assert torch.allclose(torch.layer_norm(x, (8,)), gpt2ln.model.norms.layer_norm(x), atol=1e-6)


def test_rms_to_layer_norm_layernorm_module_refused():
    def fn(x, g, b, eps=1e-5):
        ln = gpt2ln.LayerNorm(x.shape[-1], eps).to(x.dtype)
        with torch.no_grad():
            ln.weight.copy_(g)
            ln.bias.copy_(b)
        return ln(x)

    with pytest.raises(AssertionError, match="built from rms_norm only"):
        check_rms_to_layer_norm(fn)


def test_rms_to_layer_norm_not_implemented():
    def my_layer_norm(x, g, b, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_rms_to_layer_norm(my_layer_norm)


# ---------------------------------------------------------------------------- check_center_writing_weights
def test_center_writing_weights_passes(capsys):
    check_center_writing_weights(lambda W, b: (W - W.mean(1, keepdim=True), b - b.mean()))
    assert "✓ check_center_writing_weights" in capsys.readouterr().out


CENTRE_MISTAKES = {
    "did not centre W and did not centre the bias": lambda W, b: (W.clone(), b.clone()),
    "did not centre the bias b": lambda W, b: (W - W.mean(1, keepdim=True), b.clone()),
    "did not centre W": lambda W, b: (W.clone(), b - b.mean()),
    "centred W over the wrong axis": lambda W, b: (W - W.mean(0, keepdim=True), b - b.mean()),
    "subtracted one overall mean of W": lambda W, b: (W - W.mean(), b - b.mean()),
}


@pytest.mark.parametrize("name", list(CENTRE_MISTAKES))
def test_center_writing_weights_names_mistake(name):
    with pytest.raises(AssertionError, match="check_center_writing_weights") as e:
        check_center_writing_weights(CENTRE_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_center_writing_weights_other_failures():
    def in_place(W, b):
        W -= W.mean(1, keepdim=True)
        b -= b.mean()
        return W, b

    with pytest.raises(AssertionError, match="in place"):
        check_center_writing_weights(in_place)
    with pytest.raises(AssertionError, match="expected a pair"):
        check_center_writing_weights(lambda W, b: W - W.mean(1, keepdim=True))
    with pytest.raises(AssertionError, match="zero mean"):
        check_center_writing_weights(lambda W, b: (W - W.mean(1, keepdim=True) + 0.1, b - b.mean()))

    def my_centre(W, b):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_center_writing_weights(my_centre)
