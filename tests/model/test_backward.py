"""The hand-written LayerNorm backward: gradcheck, agreement with autograd, dtypes, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck

import gpt2ln
from gpt2ln import LayerNormFunction, layer_norm_backward, layer_norm_fn


def _inputs(shape, dtype=torch.float64, seed=0, offset=0.5, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = offset + scale * torch.randn(shape, generator=g, dtype=torch.float64)
    w = 1.0 + 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
    b = 0.1 * torch.randn(d, generator=g, dtype=torch.float64)
    dy = torch.randn(shape, generator=g, dtype=torch.float64)
    return x.to(dtype), w.to(dtype), b.to(dtype), dy.to(dtype)


def _autograd_grads(norm, x, w, b, dy, eps=1e-5):
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    b = b.detach().clone().requires_grad_()
    y = norm(x, w, b, eps)
    y.backward(dy)
    return y.detach(), x.grad, w.grad, b.grad


def _torch_ln(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


# ---------------------------------------------------------------- gradcheck (float64)


def test_gradcheck_x_weight_bias():
    x, w, b, _ = _inputs((2, 3, 6))
    args = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), 1e-5)
    assert gradcheck(LayerNormFunction.apply, args, eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("use_w,use_b", [(False, False), (True, False), (False, True)])
def test_gradcheck_without_affine(use_w, use_b):
    x, w, b, _ = _inputs((3, 5))
    args = (
        x.requires_grad_(),
        w.requires_grad_() if use_w else None,
        b.requires_grad_() if use_b else None,
        1e-5,
    )
    assert gradcheck(LayerNormFunction.apply, args, eps=1e-6, atol=1e-8)


def test_gradcheck_tiny_variance_where_eps_matters():
    x, w, b, _ = _inputs((4, 7), scale=3e-3)
    args = (x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), 1e-5)
    assert gradcheck(LayerNormFunction.apply, args, eps=1e-9, atol=1e-6)


def test_only_needed_grads_are_computed():
    x, w, b, dy = _inputs((2, 4))
    x.requires_grad_()
    y = layer_norm_fn(x, w, b)
    y.backward(dy)
    assert x.grad is not None and w.grad is None and b.grad is None


def test_double_backward_is_refused():
    x, w, b, dy = _inputs((2, 4))
    x.requires_grad_()
    (gx,) = torch.autograd.grad(layer_norm_fn(x, w, b), x, dy, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


# ---------------------------------------------------------------- agreement with autograd


@pytest.mark.parametrize("reference", [gpt2ln.layer_norm, _torch_ln], ids=["gpt2ln", "torch"])
@pytest.mark.parametrize("shape", [(2, 16, 768), (4, 7, 64)])
def test_matches_autograd_float32(reference, shape):
    x, w, b, dy = _inputs(shape, torch.float32)
    y_ref, dx_ref, dw_ref, db_ref = _autograd_grads(reference, x, w, b, dy)
    y, dx, dw, db = _autograd_grads(layer_norm_fn, x, w, b, dy)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, dw_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, db_ref, rtol=1e-4, atol=1e-4)
    # the standalone function gives the same gradients
    dx2, dw2, db2 = layer_norm_backward(dy, x, w)
    torch.testing.assert_close(dx2, dx, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dw2, dw, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(db2, db, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(8,), (5, 8), (2, 3, 8), (2, 2, 3, 8)])
def test_leading_shapes_float64(shape):
    x, w, b, dy = _inputs(shape)
    _, dx_ref, dw_ref, db_ref = _autograd_grads(gpt2ln.layer_norm, x, w, b, dy)
    dx, dw, db = layer_norm_backward(dy, x, w)
    assert dx.shape == x.shape and dw.shape == (8,) and db.shape == (8,)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw, dw_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, db_ref, rtol=1e-12, atol=1e-12)
    _, dx3, dw3, db3 = _autograd_grads(layer_norm_fn, x, w, b, dy)
    torch.testing.assert_close(dx3, dx_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dw3, dw_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db3, db_ref, rtol=1e-12, atol=1e-12)


def test_weight_none_means_gain_of_ones():
    x, _, _, dy = _inputs((3, 4, 8))
    ones = torch.ones(8, dtype=torch.float64)
    for a, b in zip(layer_norm_backward(dy, x, None), layer_norm_backward(dy, x, ones), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    xr = x.clone().requires_grad_()
    layer_norm_fn(xr).backward(dy)
    torch.testing.assert_close(xr.grad, layer_norm_backward(dy, x)[0], rtol=1e-12, atol=1e-12)


def test_gradient_structure():
    """dx sums to zero per token; with eps = 0 it is also orthogonal to x̂."""
    x, w, _, dy = _inputs((4, 5, 32))
    dx, _, _ = layer_norm_backward(dy, x, w, eps=1e-300)
    assert dx.sum(-1).abs().max() < 1e-12
    xhat = (x - x.mean(-1, keepdim=True)) / x.std(-1, correction=0, keepdim=True)
    assert (dx * xhat).sum(-1).abs().max() < 1e-12


# ---------------------------------------------------------------- half precision


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_half_precision_consistent_with_float32(dtype, tol):
    x, w, b, dy = _inputs((2, 8, 64), dtype)
    # the reference: the same half-precision values, computed in float32
    ref = _autograd_grads(gpt2ln.layer_norm, x.float(), w.float(), b.float(), dy.float())
    _, dx_ref, dw_ref, db_ref = ref
    y, dx, dw, db = _autograd_grads(layer_norm_fn, x, w, b, dy)
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == dtype
    assert torch.isfinite(dx).all()
    torch.testing.assert_close(dx.float(), dx_ref, rtol=tol, atol=tol)
    torch.testing.assert_close(dw.float(), dw_ref, rtol=tol, atol=tol * 10)
    torch.testing.assert_close(db.float(), db_ref, rtol=tol, atol=tol * 10)
    dx2, dw2, db2 = layer_norm_backward(dy, x, w)
    assert dx2.dtype == dw2.dtype == db2.dtype == dtype
    torch.testing.assert_close(dx2, dx, rtol=0, atol=0)
    torch.testing.assert_close(dw2, dw, rtol=0, atol=0)


def test_half_precision_large_values_do_not_overflow():
    """Squares of 300 overflow float16 (max 65504); float32 statistics do not."""
    x, w, _, dy = _inputs((2, 768), torch.float16, offset=300.0, scale=300.0)
    dx, dw, _ = layer_norm_backward(dy, x, w)
    assert torch.isfinite(dx).all() and torch.isfinite(dw).all()
    dx_ref, dw_ref, _ = layer_norm_backward(dy.float(), x.float(), w.float())
    torch.testing.assert_close(dx.float(), dx_ref, rtol=2e-3, atol=1e-5)
    torch.testing.assert_close(dw.float(), dw_ref, rtol=2e-3, atol=2e-2)


def test_half_precision_saves_float32_statistics():
    x, w, b, _ = _inputs((3, 16), torch.float16)
    x.requires_grad_()
    y = layer_norm_fn(x, w, b)
    xhat, rstd, weight = y.grad_fn.saved_tensors
    assert xhat.dtype == rstd.dtype == torch.float32
    assert xhat.shape == (3, 16) and rstd.shape == (3, 1) and weight is w


# ---------------------------------------------------------------- bad input


def test_bad_input_errors():
    x, w, _, dy = _inputs((2, 8))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer_norm_fn([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point"):
        layer_norm_fn(torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="scalar"):
        layer_norm_fn(torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        layer_norm_fn(x, torch.ones(7, dtype=x.dtype))
    with pytest.raises(ValueError, match="bias"):
        layer_norm_fn(x, w, torch.ones(2, 8, dtype=x.dtype))
    with pytest.raises(ValueError, match="eps > 0"):
        layer_norm_fn(x, eps=0.0)
    with pytest.raises(TypeError, match="eps"):
        layer_norm_fn(x, eps="1e-5")
    with pytest.raises(ValueError, match="dy of x's shape"):
        layer_norm_backward(dy[:, :4], x, w)
    with pytest.raises(TypeError, match="dy"):
        layer_norm_backward(dy.numpy(), x, w)
    with pytest.raises(TypeError, match="floating-point dy"):
        layer_norm_backward(dy.long(), x, w)
    with pytest.raises(ValueError, match="weight"):
        layer_norm_backward(dy, x, torch.ones(3, dtype=x.dtype))
    with pytest.raises(TypeError, match="layer_norm_backward"):
        layer_norm_backward(dy, x.long(), w)
