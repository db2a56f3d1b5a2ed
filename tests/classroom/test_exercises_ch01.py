"""Chapter 1's checks: a right answer passes, each named mistake fails naming itself."""

import numpy as np
import pytest
import torch

from gpt2ln.exercises import check_invariance, check_residual_norms

# ------------------------------------------------------------------ check_residual_norms


def norms_right(cache, n_layer):
    return torch.stack([cache[f"resid_pre.{l}"].norm(dim=-1).mean() for l in range(n_layer + 1)])


def norms_list_of_floats(cache, n_layer):
    return [cache[f"resid_pre.{l}"].norm(dim=-1).mean().item() for l in range(n_layer + 1)]


def norms_numpy(cache, n_layer):
    return norms_right(cache, n_layer).numpy()


@pytest.mark.parametrize("fn", [norms_right, norms_list_of_floats, norms_numpy])
def test_residual_norms_right_answer_passes(fn, capsys):
    check_residual_norms(fn)
    assert "✓ check_residual_norms" in capsys.readouterr().out


def _per_layer(f, n_extra=1, start=0):
    def fn(cache, n_layer):
        return torch.stack([f(cache[f"resid_pre.{l}"]) for l in range(start, n_layer + n_extra)])

    return fn


def _lnf_last(cache, n_layer):
    out = norms_right(cache, n_layer)
    out[-1] = cache["ln_f.out"].norm(dim=-1).mean()
    return out


RESID_MISTAKES = {
    "forgot the last entry": _per_layer(lambda x: x.norm(dim=-1).mean(), n_extra=0),
    "skipped the first entry": _per_layer(lambda x: x.norm(dim=-1).mean(), start=1),
    "norm over the wrong axis": _per_layer(lambda x: x.norm(dim=1).mean()),
    "mean of squares instead of norm": _per_layer(lambda x: x.pow(2).mean(dim=-1).mean()),
    "squared norm instead of norm": _per_layer(lambda x: x.pow(2).sum(dim=-1).mean()),
    "RMS instead of norm": _per_layer(lambda x: x.pow(2).mean(dim=-1).sqrt().mean()),
    "root of the mean squared norm": _per_layer(lambda x: x.pow(2).sum(dim=-1).mean().sqrt()),
    "used ln_f.out for the last entry": _lnf_last,
    "reverse order": lambda cache, n_layer: norms_right(cache, n_layer).flip(0),
}


@pytest.mark.parametrize("name", sorted(RESID_MISTAKES))
def test_residual_norms_mistake_is_named(name):
    with pytest.raises(AssertionError, match=name):
        check_residual_norms(RESID_MISTAKES[name])


@pytest.mark.parametrize("dim", [0, None])
def test_residual_norms_other_wrong_axes_are_named(dim):
    f = (lambda x: x.norm()) if dim is None else (lambda x: x.norm(dim=dim).mean())
    with pytest.raises(AssertionError, match="norm over the wrong axis"):
        check_residual_norms(_per_layer(f))


def test_residual_norms_hard_coded_depth_fails():
    def two_layers(cache, n_layer):
        return norms_right(cache, 2)

    with pytest.raises(AssertionError, match=r"expected shape \[n_layer \+ 1\] = \[5\]"):
        check_residual_norms(two_layers)


def test_residual_norms_wrong_values_report_the_entry():
    with pytest.raises(AssertionError, match="entry 0 is"):
        check_residual_norms(lambda cache, n_layer: norms_right(cache, n_layer) + 1.0)


def test_residual_norms_in_place_change_is_caught():
    def sneaky(cache, n_layer):
        cache["resid_pre.0"].mul_(2)
        return norms_right(cache, n_layer)

    with pytest.raises(AssertionError, match="modified the cache in place"):
        check_residual_norms(sneaky)


def test_residual_norms_not_implemented_and_none():
    def stub(cache, n_layer):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_residual_norms(stub)
    with pytest.raises(AssertionError, match="missing `return`"):
        check_residual_norms(lambda cache, n_layer: None)


def test_residual_norms_leaves_global_rng_alone():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    check_residual_norms(norms_right)
    assert torch.equal(torch.rand(3), want)


# ---------------------------------------------------------------------- check_invariance


def invariance(norm_fn, x, factors=(0.1, 10.0), shifts=(-3.0, 3.0), atol=1e-8, compare=None):
    y = norm_fn(x)
    same = compare or (lambda a, b: torch.allclose(a, b, rtol=0, atol=atol))
    return {
        "scale": all(same(norm_fn(a * x), y) for a in factors),
        "shift": all(same(norm_fn(x + b), y) for b in shifts),
    }


def test_invariance_right_answer_passes(capsys):
    check_invariance(invariance)
    assert "✓ check_invariance" in capsys.readouterr().out


def test_invariance_accepts_tensor_and_numpy_bools(capsys):
    def as_tensors(norm_fn, x):
        return {k: torch.tensor(v) for k, v in invariance(norm_fn, x).items()}

    def as_numpy(norm_fn, x):
        return {k: np.bool_(v) for k, v in invariance(norm_fn, x).items()}

    check_invariance(as_tensors)
    check_invariance(as_numpy)
    assert capsys.readouterr().out.count("✓") == 2


INV_MISTAKES = {
    "tolerance too strict": lambda f, x: invariance(f, x, compare=torch.equal),
    "tolerance too loose": lambda f, x: invariance(f, x, atol=0.1),
    "tested only one direction": lambda f, x: invariance(f, x, factors=(10.0,)),
    "tested only one sign of shift": lambda f, x: invariance(f, x, shifts=(0.5, 3.0)),
}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"atol": 1e-2},  # the tolerance the exercise calls too loose
        {"atol": 1e-2, "shifts": (0.5, 3.0)},
        {"atol": 1e-2, "factors": (0.5, 2.0), "shifts": (-0.5, 0.5)},
        {"atol": 1e-2, "factors": (0.01, 100.0), "shifts": (-0.5, 0.5)},
    ],
)
def test_invariance_tolerance_1e_2_is_too_loose(kwargs):
    with pytest.raises(AssertionError, match="tolerance too loose"):
        check_invariance(lambda f, x: invariance(f, x, **kwargs))


@pytest.mark.parametrize("shifts", [(0.5, 3.0), (-3.0, -0.5), (3.0,), (-3.0,)])
def test_invariance_one_sign_of_shift_is_named(shifts):
    with pytest.raises(AssertionError, match="tested only one sign of shift"):
        check_invariance(lambda f, x: invariance(f, x, shifts=shifts))


@pytest.mark.parametrize("atol", [1e-8, 1e-6, 1e-5])
@pytest.mark.parametrize("factors", [(0.1, 10.0), (0.5, 2.0), (0.05, 0.3, 7.0)])
def test_invariance_tight_tolerances_and_other_values_pass(atol, factors, capsys):
    check_invariance(lambda f, x: invariance(f, x, atol=atol, factors=factors, shifts=(-0.5, 2.0)))
    assert "✓ check_invariance" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(INV_MISTAKES))
def test_invariance_mistake_is_named(name):
    with pytest.raises(AssertionError, match=name):
        check_invariance(INV_MISTAKES[name])


def test_invariance_only_shrinking_is_one_direction():
    with pytest.raises(AssertionError, match="tested only one direction"):
        check_invariance(lambda f, x: invariance(f, x, factors=(0.1,)))


def test_invariance_negative_factor_is_explained():
    with pytest.raises(AssertionError, match="negative"):
        check_invariance(lambda f, x: invariance(f, x, factors=(-1.0, 10.0)))


def test_invariance_bad_return_values():
    with pytest.raises(AssertionError, match='keys "scale" and "shift"'):
        check_invariance(lambda f, x: (True, True))
    with pytest.raises(AssertionError, match="should be True or False"):
        check_invariance(lambda f, x: {"scale": "yes", "shift": "no"})


def test_invariance_not_implemented():
    def stub(norm_fn, x):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_invariance(stub)
