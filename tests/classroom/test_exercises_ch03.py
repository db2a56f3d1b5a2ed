"""Chapter 3 checks: a correct answer passes; each named mistake fails and is named.

The wrong answers here are written the way a student would write them, independently
of the references inside ``gpt2ln.exercises.ch03``.
"""

from __future__ import annotations

import pytest
import torch

from gpt2ln.exercises import check_layer_norm_backward, check_ln_jacobian
from gpt2ln.exercises.ch03 import (
    BACKWARD_MISTAKES,
    JACOBIAN_MISTAKES,
    RMS_BACKWARD_MISTAKES,
    check_rms_norm_backward,
)

# ---------------------------------------------------------------- layer_norm_backward


def _bwd(
    dy,
    x,
    g,
    eps=1e-5,
    *,
    sum_dims=None,
    average=False,
    dg_uses_x=False,
    use_g=True,
    mean_term=True,
    var_term=1.0,
    use_std=False,
    unbiased=False,
    with_eps=True,
):
    """A student's LayerNorm backward with switches for each mistake."""
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=unbiased, keepdim=True)
    rstd = (var + (eps if with_eps else 0.0)) ** -0.5
    xhat = (x - mu) * rstd
    dims = tuple(range(x.dim() - 1)) if sum_dims is None else sum_dims
    reduce = torch.mean if average else torch.sum
    db = reduce(dy, dim=dims)
    dg = reduce(dy * (x if dg_uses_x else xhat), dim=dims)
    dxhat = dy * g if use_g else dy
    inner = dxhat - (dxhat.mean(-1, keepdim=True) if mean_term else 0.0)
    inner = inner - var_term * xhat * (dxhat * xhat).mean(-1, keepdim=True)
    dx = (1.0 / rstd if use_std else rstd) * inner
    return dx, dg, db


def correct_backward(dy, x, g, eps=1e-5):
    return _bwd(dy, x, g, eps)


WRONG_BACKWARD = {
    "wrong sum axis": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, sum_dims=-1),
    "averaged instead of summed": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, average=True),
    "used x instead of x̂ in dg": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, dg_uses_x=True),
    "forgot to multiply dy by g": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, use_g=False),
    "forgot the mean(dx̂) term": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, mean_term=False),
    "forgot the x̂·mean(dx̂·x̂) term": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, var_term=0.0),
    "wrong sign on x̂·mean(dx̂·x̂)": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, var_term=-1.0),
    "used std instead of rstd": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, use_std=True),
    "Bessel-corrected variance": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, unbiased=True),
    "forgot eps": lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, with_eps=False),
}


def test_every_backward_mistake_has_a_wrong_implementation():
    assert set(WRONG_BACKWARD) == set(BACKWARD_MISTAKES)


def test_backward_correct_passes(capsys):
    check_layer_norm_backward(correct_backward)
    assert "✓ check_layer_norm_backward" in capsys.readouterr().out


def test_backward_via_autograd_passes():
    def by_autograd(dy, x, g, eps=1e-5):
        x, g = x.clone().requires_grad_(), g.clone().requires_grad_()
        b = torch.zeros_like(g, requires_grad=True)
        torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, eps).backward(dy)
        return x.grad, g.grad, b.grad

    check_layer_norm_backward(by_autograd)


@pytest.mark.parametrize("name", list(WRONG_BACKWARD))
def test_backward_mistake_is_named(name):
    with pytest.raises(AssertionError) as err:
        check_layer_norm_backward(WRONG_BACKWARD[name])
    assert name in str(err.value)


def test_backward_only_first_axis_is_a_sum_axis_mistake():
    with pytest.raises(AssertionError, match="wrong sum axis"):
        check_layer_norm_backward(lambda dy, x, g, eps=1e-5: _bwd(dy, x, g, eps, sum_dims=0))


def test_backward_unknown_mistake_still_fails():
    def off(dy, x, g, eps=1e-5):
        dx, dg, db = correct_backward(dy, x, g, eps)
        return 1.1 * dx, dg, db

    with pytest.raises(AssertionError, match="dx is off") as err:
        check_layer_norm_backward(off)
    assert "Likely mistake" not in str(err.value)


def test_backward_not_implemented():
    def student(dy, x, g, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_layer_norm_backward(student)


def test_backward_bad_return():
    with pytest.raises(AssertionError, match="tuple"):
        check_layer_norm_backward(lambda dy, x, g, eps=1e-5: dy)


# ---------------------------------------------------------------- Jacobian


def _jac(
    x,
    eps=1e-5,
    *,
    mean_term=True,
    var_term=True,
    var_div_d=True,
    centered_only=False,
    use_std=False,
    unbiased=False,
    with_eps=True,
):
    """A student's closed-form Jacobian with switches for each mistake."""
    d = x.numel()
    xc = x - x.mean()
    var = (xc**2).sum() / (d - 1 if unbiased else d)
    rstd = 1.0 / torch.sqrt(var + (eps if with_eps else 0.0))
    xhat = xc if centered_only else xc * rstd
    J = torch.eye(d, dtype=x.dtype)
    if mean_term:
        J = J - torch.ones(d, d, dtype=x.dtype) / d
    if var_term:
        J = J - torch.outer(xhat, xhat) / (d if var_div_d else 1)
    return (1.0 / rstd if use_std else rstd) * J


WRONG_JACOBIAN = {
    "forgot the 11ᵀ/d term": lambda x: _jac(x, mean_term=False),
    "forgot the x̂x̂ᵀ/d term": lambda x: _jac(x, var_term=False),
    "dropped the 1/d on x̂x̂ᵀ": lambda x: _jac(x, var_div_d=False),
    "used x − mean instead of x̂": lambda x: _jac(x, centered_only=True),
    "used std instead of rstd": lambda x: _jac(x, use_std=True),
    "Bessel-corrected variance": lambda x: _jac(x, unbiased=True),
    "forgot eps": lambda x: _jac(x, with_eps=False),
}


def test_every_jacobian_mistake_has_a_wrong_implementation():
    assert set(WRONG_JACOBIAN) == set(JACOBIAN_MISTAKES)


def test_jacobian_correct_passes(capsys):
    check_ln_jacobian(_jac)
    assert "✓ check_ln_jacobian" in capsys.readouterr().out


def test_jacobian_by_autograd_passes():
    def by_autograd(x):
        return torch.autograd.functional.jacobian(
            lambda t: torch.nn.functional.layer_norm(t, (t.shape[-1],), eps=1e-5), x
        )

    check_ln_jacobian(by_autograd)


@pytest.mark.parametrize("name", list(WRONG_JACOBIAN))
def test_jacobian_mistake_is_named(name):
    with pytest.raises(AssertionError) as err:
        check_ln_jacobian(WRONG_JACOBIAN[name])
    assert name in str(err.value)


def test_jacobian_wrong_shape():
    with pytest.raises(AssertionError, match="shape"):
        check_ln_jacobian(lambda x: _jac(x)[None])


def test_jacobian_not_implemented():
    def student(x):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_ln_jacobian(student)


# ---------------------------------------------------------------- RMSNorm's backward


def _rms(
    dy,
    x,
    g,
    eps=1e-5,
    *,
    sum_dims=None,
    average=False,
    dg_uses_x=False,
    use_g=True,
    mean_term=False,
    centre=False,
    var_term=1.0,
    var_sum=False,
    use_rms=False,
    with_eps=True,
):
    """A student's RMSNorm backward, derived step by step, with switches for each mistake."""
    d = x.shape[-1]
    xc = x - x.mean(-1, keepdim=True) if centre else x
    ms = (xc * xc).mean(-1, keepdim=True)
    r = (ms + (eps if with_eps else 0.0)) ** -0.5
    xhat = xc * r
    dims = tuple(range(x.dim() - 1)) if sum_dims is None else sum_dims
    reduce = torch.mean if average else torch.sum
    dg = reduce(dy * (x if dg_uses_x else xhat), dim=dims)
    dxhat = dy * g if use_g else dy
    # step by step: xhat = x * r; r = (ms + eps) ** -0.5; ms = mean(x ** 2)
    dr = (dxhat * xc).sum(-1, keepdim=True)
    dms = -0.5 * r**3 * dr
    through_r = (2.0 / d) * xc * dms * (d if var_sum else 1) * var_term
    dx = (1.0 / r if use_rms else r) * dxhat + through_r * (1.0 / r**2 if use_rms else 1.0)
    if mean_term or centre:
        dx = dx - (1.0 / r if use_rms else r) * dxhat.mean(-1, keepdim=True)
    return dx, dg


def correct_rms_backward(dy, x, g, eps=1e-5):
    return _rms(dy, x, g, eps)


WRONG_RMS = {
    "wrong sum axis": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, sum_dims=-1),
    "averaged instead of summed": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, average=True),
    "used x instead of x̂ in dg": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, dg_uses_x=True),
    "forgot to multiply dy by g": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, use_g=False),
    "kept LayerNorm's mean(dx̂) term": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, mean_term=True),
    "used LayerNorm's centred x̂": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, centre=True),
    "forgot the x̂·mean(dx̂·x̂) term": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, var_term=0.0),
    "wrong sign on x̂·mean(dx̂·x̂)": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, var_term=-1.0),
    "doubled the x̂·mean(dx̂·x̂) term": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, var_term=2.0),
    "summed instead of averaged in the x̂ term": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, var_sum=True),
    "used rms instead of r": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, use_rms=True),
    "forgot eps": lambda dy, x, g, eps=1e-5: _rms(dy, x, g, eps, with_eps=False),
}


def test_every_rms_mistake_has_a_wrong_implementation():
    assert set(WRONG_RMS) == set(RMS_BACKWARD_MISTAKES) | {"wrong sum axis"}


def test_rms_correct_passes(capsys):
    check_rms_norm_backward(correct_rms_backward)
    assert "✓ check_rms_norm_backward" in capsys.readouterr().out


def test_rms_compact_formula_passes():
    def compact(dy, x, g, eps=1e-5):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        xhat, dxhat = x * r, dy * g
        dx = r * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        return dx, (dy * xhat).flatten(0, -2).sum(0)

    check_rms_norm_backward(compact)


def test_rms_via_autograd_passes():
    from gpt2ln import rms_norm

    def by_autograd(dy, x, g, eps=1e-5):
        x, g = x.clone().requires_grad_(), g.clone().requires_grad_()
        rms_norm(x, g, eps).backward(dy)
        return x.grad, g.grad

    check_rms_norm_backward(by_autograd)


@pytest.mark.parametrize("name", list(WRONG_RMS))
def test_rms_mistake_is_named(name):
    with pytest.raises(AssertionError) as err:
        check_rms_norm_backward(WRONG_RMS[name])
    assert name in str(err.value)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_rms_small_error_fails_on_both_signs(sign):
    def off(dy, x, g, eps=1e-5):
        dx, dg = correct_rms_backward(dy, x, g, eps)
        return dx * (1 + sign * 1e-6), dg

    with pytest.raises(AssertionError, match="dx is off") as err:
        check_rms_norm_backward(off)
    assert "Likely mistake" not in str(err.value)


def test_rms_not_implemented():
    def student(dy, x, g, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_rms_norm_backward(student)


def test_rms_bad_return():
    with pytest.raises(AssertionError, match="pair"):
        check_rms_norm_backward(lambda dy, x, g, eps=1e-5: dy)
    with pytest.raises(AssertionError, match="missing `return`"):
        check_rms_norm_backward(lambda dy, x, g, eps=1e-5: None)
