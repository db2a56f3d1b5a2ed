"""The helpers every chapter's checks share (gpt2ln.exercises._core)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpt2ln.exercises._core import (
    Mistake,
    as_float,
    as_int,
    as_tuple,
    call_on_copies,
    compare,
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


def test_nearest_mistake_needs_a_near_exact_match_for_another_shape():
    truth = torch.zeros(4)
    outputs = {"short": torch.ones(3), "long": torch.ones(5)}
    # y has 3 entries (truth 4): its distance from the truth is infinite, so only "short" at 0 explains it
    assert nearest_mistake(["short", "long"], outputs.get, torch.ones(3), truth, 1e-6) == ("short", True)
    assert nearest_mistake(["short"], outputs.get, torch.full((3,), 1.5), truth, 1e-6) == ("short", False)


def _double(x):
    return 2 * x


_MISTAKES = [
    Mistake("forgot to double", "return 2 * x", lambda x: x),
    Mistake("tripled", "2, not 3", lambda x: 3 * x),
    Mistake("needs a square input", "", lambda x: x @ x),  # RuntimeError on [2, 3]: passed over
]


def test_compare_returns_the_output_when_it_matches():
    x = torch.arange(6.0).reshape(2, 3)
    y = compare("c", "on x", np.asarray(2 * x), 2 * x, 1e-9, _MISTAKES, (x,), formula="2 * x")
    assert y.dtype == torch.float64 and torch.equal(y, 2 * x.double())


@pytest.mark.parametrize(
    "out, words",
    [
        (
            lambda x: x,
            "on x, your output differs from the reference by up to 5\n  Likely mistake: forgot to double",
        ),
        (lambda x: 3 * x, "Likely mistake: tripled. Fix: 2, not 3"),
        (lambda x: 2 * x + 0.5, "no single classic mistake explains it (maybe two at once; the nearest is:"),
        (lambda x: torch.full_like(x, math.nan), "contains NaN or inf\n  Likely mistake: no NaN please"),
        (lambda x: None, "should be a torch.Tensor, got NoneType"),
        (lambda x: x[0], "has shape (3,), expected (2, 3)"),
    ],
)
def test_compare_fails_naming_the_nearest_mistake_or_why(out, words):
    x = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(AssertionError) as info:
        compare("c", "on x", out(x), 2 * x, 1e-9, _MISTAKES, (x,), formula="2 * x", nonfinite="no NaN please")
    assert str(info.value).startswith("c: ") and words in str(info.value), str(info.value)


def test_compare_hint_and_differs_replace_the_defaults():
    x = torch.ones(3)
    with pytest.raises(AssertionError) as info:
        compare(
            "c",
            "on x",
            x + 0.5,
            2 * x,
            1e-9,
            [],
            (x,),
            formula="f",
            differs="your y differs from 2x",
            hint="h",
        )
    assert (
        str(info.value) == "c: on x, your y differs from 2x by up to 0.5 (at index (0,): got 1.5, expected 2)"
        "\n  Likely mistake: h"
    )


def test_call_on_copies_passes_copies_and_catches_in_place_changes():
    x, n = torch.ones(3), 4
    seen = []
    assert call_on_copies("c", lambda a, k: seen.append(a) or k, (x, n), names=("x", "n"), what="case 1") == 4
    assert seen[0] is not x and torch.equal(seen[0], x)

    def in_place(a, k):
        a.mul_(2)

    with pytest.raises(AssertionError, match="changed its input `x` in place, on case 1"):
        call_on_copies("c", in_place, (x, n), names=("x", "n"), what="case 1")
    assert torch.equal(x, torch.ones(3))

    def stub(a, k):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="`stub` is not implemented yet"):
        call_on_copies("c", stub, (x, n), names=("x", "n"), what="case 1", kwargs={})


@pytest.mark.parametrize(
    "out", [2.5, np.float32(2.5), np.array([2.5]), torch.tensor(2.5), torch.tensor([[2.5]])]
)
def test_as_float_accepts_one_number(out):
    assert as_float("c", out, "on case 1") == 2.5


@pytest.mark.parametrize(
    "out, words",
    [
        (None, "returned NoneType, expected a number\n  Likely mistake: a missing `return`?"),
        (True, "returned bool"),
        ("2.5", "returned str"),
        ([2.5], "returned list"),
        (np.zeros(3), "returned ndarray of shape (3,), expected a number"),
    ],
)
def test_as_float_refuses_the_rest(out, words):
    with pytest.raises(AssertionError, match="c: on case 1, your function") as info:
        as_float("c", out, "on case 1")
    assert words in str(info.value)


def test_as_tuple():
    assert as_tuple("c", [1, 2], ("a", "b")) == (1, 2)
    with pytest.raises(AssertionError) as info:
        as_tuple("c", (1, 2), ("a", "b", "c"), "on case 1, ")
    assert str(info.value).startswith("c: on case 1, expected a tuple (a, b, c), got tuple of length 2")
    with pytest.raises(AssertionError, match="expected a pair \\(a tuple of 2\\) \\(W, b\\), got NoneType"):
        as_tuple("c", None, ("W", "b"))
