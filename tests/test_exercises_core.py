"""The helpers every chapter's checks share (gpt2ln.exercises._core)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpt2ln.exercises._core import (
    Mistake,
    as_int,
    divide_by_root,
    fail_mistake,
    from_numpy,
    nearest_mistake,
    random_rows,
    rel_dist,
    require_unchanged,
)


def test_from_numpy_converts_arrays_only():
    t = from_numpy(np.arange(3.0))
    assert isinstance(t, torch.Tensor) and t.tolist() == [0.0, 1.0, 2.0]
    x = torch.ones(2)
    assert from_numpy(x) is x
    assert from_numpy([1, 2]) == [1, 2] and from_numpy(None) is None


@pytest.mark.parametrize("out", [7, np.int64(7), torch.tensor(7), torch.tensor([7])])
def test_as_int_accepts_integers(out):
    n = as_int("c", out, "for config (a)")
    assert n == 7 and type(n) is int


@pytest.mark.parametrize(
    "out, words",
    [
        (None, "got NoneType (None) for config (a)\n  Likely mistake: a missing `return`?"),
        (7.0, "got float (7.0) for config (a)\n  Likely mistake: return an int"),
        (True, "got bool (True) for config (a)"),
        (torch.tensor(7.0), "got Tensor"),
    ],
)
def test_as_int_refuses_the_rest(out, words):
    with pytest.raises(AssertionError, match="c: expected an int") as info:
        as_int("c", out, "for config (a)")
    assert words in str(info.value)


def test_require_unchanged_names_the_changed_input():
    a, b = torch.ones(3), torch.zeros(2)
    require_unchanged("c", ("a", "b"), (a, b), (a.clone(), b.clone()), "case 1", "copy it")
    require_unchanged("c", ("n",), (3,), (4,), "case 1", "copy it")  # non-tensors are not compared
    with pytest.raises(AssertionError) as info:
        require_unchanged("c", ("a", "b"), (a, b), (a.clone(), b + 1), "case 1", "copy it")
    assert str(info.value) == (
        "c: your function changed its input `b` in place, on case 1\n  Likely mistake: copy it"
    )


def test_fail_mistake_names_it_and_its_fix():
    m = Mistake("forgot eps", "add eps", lambda x: x)
    with pytest.raises(AssertionError) as info:
        fail_mistake("c", "on case 1, wrong", m.label, m.fix)
    assert str(info.value) == "c: on case 1, wrong\n  Likely mistake: forgot eps. Fix: add eps"


def test_rel_dist():
    ref = torch.tensor([1.0, -3.0])
    assert rel_dist(ref + 0.4, ref) == pytest.approx(0.1)  # 0.4 / (1 + 3)
    assert rel_dist(ref, ref) == 0.0
    assert rel_dist(torch.tensor([math.nan, 0.0]), ref) == math.inf
    assert rel_dist(torch.ones(3), ref) == math.inf  # another shape


def test_nearest_mistake():
    truth = torch.zeros(4)
    mistakes = ["half", "double", "same", "crash"]
    outputs = {"half": torch.full((4,), 0.5), "double": torch.full((4,), 2.0), "same": truth.clone()}

    def output(m: str) -> torch.Tensor:
        if m == "crash":
            raise RuntimeError("does not broadcast")
        return outputs[m]

    # y = 1.9 is nearest "double", and close to it compared with its distance from the truth
    assert nearest_mistake(mistakes, output, torch.full((4,), 1.9), truth, 1e-6) == ("double", True)
    # y = 0.9 is nearest "half" ("same" cannot be told from the truth), too far to be explained by it
    assert nearest_mistake(mistakes, output, torch.full((4,), 0.9), truth, 1e-6) == ("half", False)
    assert nearest_mistake([], output, torch.ones(4), truth, 1e-6) == (None, False)
    with pytest.raises(RuntimeError):
        nearest_mistake(mistakes, output, torch.ones(4), truth, 1e-6, skip=(ValueError,))
    # a custom distance: every mistake is infinitely far
    assert nearest_mistake(["half"], output, torch.ones(4), truth, 1e-6, dist=lambda a, b: math.inf) == (
        None,
        False,
    )


def test_divide_by_root():
    num, s = torch.tensor([2.0]), torch.tensor([3.0])
    assert divide_by_root(num, s, 1.0).item() == pytest.approx(1.0)  # 2 / sqrt(4)
    assert divide_by_root(num, s, 1.0, "outside").item() == pytest.approx(2 / (math.sqrt(3) + 1))
    assert divide_by_root(num, s, 1.0, "no-sqrt").item() == pytest.approx(0.5)
    assert divide_by_root(num, s, 1.0, "times").item() == pytest.approx(4.0)
    with pytest.raises(ValueError):
        divide_by_root(num, s, 1.0, "elsewhere")


def test_random_rows():
    x = random_rows(torch.Generator().manual_seed(0), (200, 3, 64), 0.01, 5.0)
    assert x.shape == (200, 3, 64) and x.dtype == torch.float64
    assert float(x.std(-1).max()) < 0.02  # each row: spread ~scale around its own mean
    means = x.mean(-1)
    assert 3.0 < float(means.std()) < 7.0  # the means: offset * N(0, 1)
    y = random_rows(torch.Generator().manual_seed(0), (200, 3, 64), 0.01, 5.0)
    assert torch.equal(x, y)  # reproducible from the generator
