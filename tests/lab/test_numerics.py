"""gpt2ln.lab.numerics: the three variance algorithms and the parallel merge."""

from __future__ import annotations

import pytest
import torch

from gpt2ln import (
    variance_one_pass,
    variance_two_pass,
    variance_welford,
    variance_welford_parallel,
    welford_merge,
)

METHODS = [variance_one_pass, variance_two_pass, variance_welford, variance_welford_parallel]
STABLE = [variance_two_pass, variance_welford, variance_welford_parallel]


def _rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() - b).abs() / b.abs()


@pytest.mark.parametrize("fn", METHODS, ids=lambda f: f.__name__)
def test_all_agree_in_float64_on_benign_input(fn):
    x = torch.randn(3, 5, 96, dtype=torch.float64) * 2 + 0.5
    ref = x.var(dim=-1, correction=0)
    out = fn(x)
    assert out.shape == (3, 5) and out.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn", METHODS, ids=lambda f: f.__name__)
def test_dim_and_keepdim(fn):
    x = torch.randn(4, 37, 6, dtype=torch.float64)
    ref = x.var(dim=1, correction=0, keepdim=True)
    torch.testing.assert_close(fn(x, dim=1, keepdim=True), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fn(x, dim=-2), ref.squeeze(1), rtol=1e-12, atol=1e-12)


def test_one_pass_breaks_at_offset_1e4_in_float32():
    x = (1e4 + torch.randn(64, 768, dtype=torch.float64)).float()
    ref = x.double().var(dim=-1, correction=0)
    one = variance_one_pass(x)
    assert one.dtype == torch.float32
    assert bool((one < 0).any()) or float(_rel(one, ref).max()) > 1.0
    assert float(_rel(one, ref).median()) > 1.0  # not just an unlucky row: typical rows are >100% off


@pytest.mark.parametrize("fn", STABLE, ids=lambda f: f.__name__)
def test_stable_methods_survive_offset_1e4_in_float32(fn):
    x = (1e4 + torch.randn(64, 768, dtype=torch.float64)).float()
    ref = x.double().var(dim=-1, correction=0)
    assert float(_rel(fn(x), ref).max()) < 1e-3


def test_acc_dtype_float16_overflows_and_float32_fixes_it():
    x = (10.0 + torch.randn(8, 768)).half()  # sum of squares ~ 77,000 > 65,504
    assert torch.isinf(variance_one_pass(x)).all()
    ref = x.double().var(dim=-1, correction=0)
    fixed = variance_two_pass(x, acc_dtype=torch.float32)
    assert fixed.dtype == torch.float32
    assert float(_rel(fixed, ref).max()) < 1e-5


def test_bfloat16_accumulator_stalls():
    ones = torch.ones(1, 768, dtype=torch.bfloat16)
    # the running sum sticks at 256 (256 + 1 rounds back to 256), so the mean of 768 ones comes out
    # as 1/3 and a constant row gets a variance far from 0
    assert float(variance_two_pass(ones)) > 0.1
    assert float(variance_two_pass(ones, acc_dtype=torch.float32)) == 0.0
    x = (1.0 + torch.randn(16, 768)).bfloat16()
    ref = x.double().var(dim=-1, correction=0)
    assert float(_rel(variance_two_pass(x), ref).median()) > 0.05
    assert float(_rel(variance_welford(x, acc_dtype=torch.float32), ref).max()) < 1e-5


@pytest.mark.parametrize("threads", [1, 3, 32, 100, 1000])
def test_parallel_welford_any_thread_count(threads):
    x = torch.randn(5, 97, dtype=torch.float64) + 3
    torch.testing.assert_close(
        variance_welford_parallel(x, threads=threads), x.var(dim=-1, correction=0), rtol=1e-12, atol=1e-12
    )


def test_welford_merge_matches_concatenation():
    a, b = torch.randn(4, 3, dtype=torch.float64) + 5, torch.randn(4, 11, dtype=torch.float64)

    def stats(t):
        return t.shape[-1], t.mean(-1), ((t - t.mean(-1, keepdim=True)) ** 2).sum(-1)

    n, mean, m2 = welford_merge(stats(a), stats(b))
    full = torch.cat([a, b], dim=-1)
    assert n == 14
    torch.testing.assert_close(mean, full.mean(-1))
    torch.testing.assert_close(m2, full.var(-1, correction=0) * 14)
    # an empty part changes nothing
    n0, mean0, m20 = welford_merge((0, torch.zeros(4), torch.zeros(4)), stats(b))
    assert n0 == 11
    torch.testing.assert_close(mean0, b.mean(-1))
    torch.testing.assert_close(m20, stats(b)[2])
    # python floats work too
    assert welford_merge((1, 0.0, 0.0), (1, 2.0, 0.0)) == (2, 1.0, 2.0)


@pytest.mark.parametrize("fn", METHODS, ids=lambda f: f.__name__)
def test_input_validation(fn):
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point"):
        fn(torch.arange(4))
    with pytest.raises(ValueError, match="scalar"):
        fn(torch.tensor(1.0))
    with pytest.raises(ValueError, match="out of range"):
        fn(torch.zeros(2, 3), dim=2)
    with pytest.raises(ValueError, match="empty"):
        fn(torch.zeros(2, 0))
    with pytest.raises(TypeError, match="acc_dtype"):
        fn(torch.zeros(2, 3), acc_dtype=torch.int32)


def test_helper_validation():
    with pytest.raises(ValueError, match="threads"):
        variance_welford_parallel(torch.zeros(2, 3), threads=0)
    with pytest.raises(TypeError, match="count, mean, m2"):
        welford_merge((1, 0.0), (1, 0.0, 0.0))
    with pytest.raises(ValueError, match="counts"):
        welford_merge((-1, 0.0, 0.0), (1, 0.0, 0.0))
