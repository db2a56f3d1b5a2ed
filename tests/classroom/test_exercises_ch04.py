"""Chapter 4 checks: a correct answer passes; each named mistake fails and is named.

The wrong answers here are written the way a student would write them, independently
of the references inside ``gpt2ln.exercises.ch04``.
"""

from __future__ import annotations

import pytest
import torch

from gpt2ln.exercises import check_welford, check_welford_merge
from gpt2ln.exercises.ch04 import MERGE_MISTAKES, WELFORD_MISTAKES

# ---------------------------------------------------------------- streaming Welford


def _welford(x, *, unbiased=False, order="right", step="k", return_m2=False, swap=False):
    """A student's Welford loop over the last axis of x [R, d], with switches for each mistake."""
    n = x.shape[-1]
    mean = torch.zeros(x.shape[0], dtype=x.dtype)
    m2 = torch.zeros(x.shape[0], dtype=x.dtype)
    for k in range(1, n + 1):
        xk = x[:, k - 1]
        delta = xk - mean
        mean = mean + delta / (k if step == "k" else n)
        if order == "right":
            m2 = m2 + delta * (xk - mean)
        elif order == "old twice":
            m2 = m2 + delta * delta
        else:  # new twice
            m2 = m2 + (xk - mean) ** 2
    var = m2 if return_m2 else m2 / (n - 1 if unbiased else n)
    return (var, mean) if swap else (mean, var)


def _one_pass(x):
    mean = x.mean(dim=-1)
    return mean, (x * x).mean(dim=-1) - mean * mean


WRONG_WELFORD = {
    "unbiased variance": lambda x: _welford(x, unbiased=True),
    "returned m2 instead of the variance": lambda x: _welford(x, return_m2=True),
    "wrong update order": lambda x: _welford(x, order="old twice"),
    "divided by n instead of k": lambda x: _welford(x, step="n"),
    "returned (var, mean) swapped": lambda x: _welford(x, swap=True),
    "one-pass cancellation": _one_pass,
}


def test_every_welford_mistake_has_a_wrong_implementation():
    assert set(WRONG_WELFORD) == set(WELFORD_MISTAKES)


def test_welford_correct_passes(capsys):
    check_welford(_welford)
    assert "✓ check_welford" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x.mean(-1), x.var(-1, correction=0)),  # torch's own (two-pass/Welford inside)
        lambda x: (x.mean(-1, keepdim=True), x.var(-1, correction=0, keepdim=True)),  # keepdim is fine
        lambda x: _welford(x.double()),  # upcasting is fine
    ],
)
def test_welford_other_correct_answers_pass(fn):
    check_welford(fn)


@pytest.mark.parametrize("name", list(WRONG_WELFORD))
def test_welford_mistake_is_named(name):
    with pytest.raises(AssertionError) as err:
        check_welford(WRONG_WELFORD[name])
    assert name in str(err.value)


def test_welford_other_wrong_order_is_named():
    with pytest.raises(AssertionError, match="wrong update order"):
        check_welford(lambda x: _welford(x, order="new twice"))


def test_welford_unknown_mistake_still_fails():
    def off(x):
        mean, var = _welford(x)
        return mean, var * 1.01

    with pytest.raises(AssertionError, match="variance is wrong") as err:
        check_welford(off)
    assert "Likely mistake" not in str(err.value)


def test_welford_bad_returns():
    with pytest.raises(AssertionError, match="tuple"):
        check_welford(lambda x: x.var(-1))
    with pytest.raises(AssertionError, match="shape"):
        check_welford(lambda x: (x.mean(0), x.var(0, correction=0)))


def test_welford_in_place_is_caught():
    def mutate(x):
        out = _welford(x)
        x -= 1
        return out

    with pytest.raises(AssertionError, match="in place"):
        check_welford(mutate)


def test_welford_not_implemented():
    def student(x):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_welford(student)


# ---------------------------------------------------------------- merging partial statistics


def _merge(a, b, *, mean_rule="right", m2_rule="right", as_var=False, count="sum"):
    """A student's Chan et al. merge, with switches for each mistake."""
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    n = n_a + n_b if count == "sum" else max(n_a, n_b)
    delta = mean_b - mean_a
    if mean_rule == "right":
        mean = (n_a * mean_a + n_b * mean_b) / n
    elif mean_rule == "unweighted":
        mean = (mean_a + mean_b) / 2
    else:  # swapped
        mean = mean_a + delta * n_a / n
    if m2_rule == "right":
        m2 = m2_a + m2_b + delta**2 * n_a * n_b / n
    elif m2_rule == "no between":
        m2 = m2_a + m2_b
    elif m2_rule == "n squared":  # a derivation slip: squared the 1/n of (mu_a - mu) but summed no n_a
        m2 = m2_a + m2_b + (mean_a - mean_b) ** 2 * n_a * n_b / (n_a + n_b) ** 2
    elif m2_rule == "no 1/n":
        m2 = m2_a + m2_b + n_a * n_b * delta * delta
    else:  # no factor
        m2 = m2_a + m2_b + delta**2
    return n, mean, (m2 / n if as_var else m2)


WRONG_MERGE = {
    "unweighted mean of means": lambda a, b: _merge(a, b, mean_rule="unweighted"),
    "weights swapped": lambda a, b: _merge(a, b, mean_rule="swapped"),
    "forgot the between-group term": lambda a, b: _merge(a, b, m2_rule="no between"),
    "missing n_a·n_b/n factor": lambda a, b: _merge(a, b, m2_rule="no factor"),
    "between-group term over n²": lambda a, b: _merge(a, b, m2_rule="n squared"),
    "between-group term not divided by n": lambda a, b: _merge(a, b, m2_rule="no 1/n"),
    "returned a variance, not m2": lambda a, b: _merge(a, b, as_var=True),
    "wrong count": lambda a, b: _merge(a, b, count="max"),
}


def test_every_merge_mistake_has_a_wrong_implementation():
    assert set(WRONG_MERGE) == set(MERGE_MISTAKES)


def test_merge_correct_passes(capsys):
    check_welford_merge(_merge)
    assert "✓ check_welford_merge" in capsys.readouterr().out


def test_merge_package_reference_passes():
    from gpt2ln import welford_merge

    check_welford_merge(welford_merge)


@pytest.mark.parametrize("name", list(WRONG_MERGE))
def test_merge_mistake_is_named(name):
    with pytest.raises(AssertionError) as err:
        check_welford_merge(WRONG_MERGE[name])
    assert name in str(err.value)


def test_merge_divides_by_zero_on_empty_part():
    def fragile(a, b):
        n_a, mean_a, m2_a = a
        n_b, mean_b, m2_b = b
        n = n_a + n_b
        delta = mean_b - mean_a
        # divides by n_a: fails when part a is empty
        return n, mean_a + delta * (n_b / n_a) / (1 + n_b / n_a), m2_a + m2_b + delta**2 * n_a * n_b / n

    with pytest.raises(AssertionError, match="empty part"):
        check_welford_merge(fragile)


def test_merge_bad_return():
    with pytest.raises(AssertionError, match="tuple"):
        check_welford_merge(lambda a, b: (a[0] + b[0], a[1]))


def test_merge_not_implemented():
    def student(a, b):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_welford_merge(student)
