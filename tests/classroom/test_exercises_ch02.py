"""Chapter 2 checks: a right answer passes with one line; each classic mistake fails
with an AssertionError that names it."""

import numpy as np
import pytest
import torch

import gpt2ln
from gpt2ln import GPT2, GPT2Config
from gpt2ln.exercises import check_layer_norm, check_layernorm_param_count
from gpt2ln.exercises.ch02 import _count, _count_in_model


# ----------------------------------------------------------------------------- LayerNorm
def _ln(x, g, b, eps=1e-5, *, dim=-1, correction=0, eps_at="inside", center=True, affine="x*g+b"):
    """A learner's LayerNorm, right by default; each keyword reproduces one mistake."""
    u = x.mean(dim, keepdim=True)
    s = x.var(dim, keepdim=True, correction=correction)
    xc = x - u if center else x
    y = xc / (s.sqrt() + eps) if eps_at == "outside" else xc * torch.rsqrt(s + eps)
    return {
        "x*g+b": y * g + b,
        "none": y,
        "g": y * g,
        "b": y + b,
        "(x+b)*g": (y + b) * g,
        "x*b+g": y * b + g,
    }[affine]


def right(x, g, b, eps=1e-5):
    return _ln(x, g, b, eps)


def test_right_layer_norm_passes_and_prints_one_line(capsys):
    check_layer_norm(right)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("✓ check_layer_norm")


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, g, b, eps=1e-5: gpt2ln.layer_norm(x, g, b, eps),
        lambda x, g, b, eps=1e-5: torch.nn.functional.layer_norm(x, x.shape[-1:], g, b, eps),
    ],
    ids=["gpt2ln", "torch"],
)
def test_reference_implementations_pass(fn, capsys):
    check_layer_norm(fn)
    assert "✓" in capsys.readouterr().out


def test_numpy_returning_layer_norm_passes(capsys):
    def np_ln(x, g, b, eps=1e-5):
        x = np.asarray(x)
        u = x.mean(-1, keepdims=True)
        return (x - u) / np.sqrt(x.var(-1, keepdims=True) + eps) * np.asarray(g) + np.asarray(b)

    check_layer_norm(np_ln)
    assert "✓" in capsys.readouterr().out


def _one_pass(x, g, b, eps=1e-5):
    u = x.mean(-1, keepdim=True)
    s = (x * x).mean(-1, keepdim=True) - u * u
    return (x - u) * torch.rsqrt(s + eps) * g + b


def _rms(x, g, b, eps=1e-5):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * g + b


def _no_keepdim(x, g, b, eps=1e-5):
    u = x.mean(-1)
    s = ((x - u) ** 2).mean(-1)
    return (x - u) / torch.sqrt(s + eps) * g + b


def _no_eps(x, g, b, eps=1e-5):
    return _ln(x, g, b, 0.0)


MISTAKES = {
    # name: (wrong implementation, words the message must contain)
    "bessel": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, correction=1), "Bessel"),
    "torch_std_default": (
        lambda x, g, b, eps=1e-5: (
            (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * g + b
        ),
        "unbiased",
    ),
    "eps_outside_root": (
        lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, eps_at="outside"),
        "eps outside the square root",
    ),
    "wrong_default_eps": (lambda x, g, b, eps=1e-6: _ln(x, g, b, eps), "wrong default eps"),
    "eps_argument_ignored": (lambda x, g, b, eps=1e-5: _ln(x, g, b, 1e-5), "ignores the eps argument"),
    "no_eps": (_no_eps, "no eps"),
    "axis_0": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, dim=0), "wrong axis"),
    "token_axis": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, dim=1), "token axis"),
    "no_keepdim": (_no_keepdim, "keepdim"),
    "rms_no_centering": (_rms, "no mean subtraction"),
    "centered_variance_uncentered_output": (
        lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, center=False),
        "no mean subtraction",
    ),
    "no_affine": (
        lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, affine="none"),
        "forgot the affine gain g and bias b",
    ),
    "gain_only": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, affine="g"), "forgot the bias b"),
    "bias_only": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, affine="b"), "forgot the gain g"),
    "b_before_g": (
        lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, affine="(x+b)*g"),
        "added b before multiplying by g",
    ),
    "g_b_swapped": (lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, affine="x*b+g"), "swapped g and b"),
    "one_pass_variance": (_one_pass, "one-pass variance cancels"),
    "returns_none": (lambda x, g, b, eps=1e-5: None, "missing `return`"),
    "wrong_shape": (lambda x, g, b, eps=1e-5: x.mean(-1), "shape"),
    "nan_output": (lambda x, g, b, eps=1e-5: right(x, g, b, eps) * float("nan"), "NaN"),
    "in_place": (
        lambda x, g, b, eps=1e-5: right(x.sub_(0.0).mul_(1.0).add_(1.0) - 1.0, g, b, eps),
        "in place",
    ),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_layer_norm_mistake_fails_naming_it(name):
    fn, words = MISTAKES[name]
    with pytest.raises(AssertionError) as info:
        check_layer_norm(fn)
    assert words in str(info.value), str(info.value)


def test_layer_norm_message_names_the_failing_input():
    with pytest.raises(AssertionError, match=r"check_layer_norm: on x of shape \[4, 4\]"):
        check_layer_norm(MISTAKES["bessel"][0])


def test_two_mistakes_at_once_get_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_layer_norm(lambda x, g, b, eps=1e-5: _ln(x, g, b, eps, correction=1, affine="g"))


def test_unimplemented_layer_norm_says_not_implemented_yet():
    def my_layer_norm(x, g, b, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_layer_norm(my_layer_norm)


def test_crashing_layer_norm_reports_the_exception():
    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        check_layer_norm(lambda x, g, b, eps=1e-5: 1 / 0)


# ----------------------------------------------------------------------- parameter count
def right_count(config):
    per = 1 if config.norm == "rmsnorm" else 2
    n = config.n_layer * 2 * per * config.n_embd
    if config.use_final_norm:
        n += per * config.n_embd
    if config.qk_norm:
        n += config.n_layer * 2 * per * config.head_dim
    return n


def test_right_param_count_passes_and_prints_one_line(capsys):
    check_layernorm_param_count(right_count)
    check_layernorm_param_count(right_count, variants=True)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("✓ check_layernorm_param_count") for line in out)
    assert "38,400" in out[0]  # gpt2: 12 * 2 * 1,536 + 1,536


def test_gpt2_only_formula_passes_without_variants(capsys):
    check_layernorm_param_count(lambda c: 2 * c.n_embd * (2 * c.n_layer + 1))
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize(
    "config",
    [
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=8, n_layer=2, n_head=2),
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=12, n_layer=3, n_head=3, norm="rmsnorm"),
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=12, n_layer=3, n_head=3, qk_norm=True),
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=12, n_layer=2, n_head=4, norm="rmsnorm", qk_norm=True),
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=8, n_layer=2, n_head=2, norm_position="post"),
        GPT2Config(vocab_size=50, n_ctx=8, n_embd=8, n_layer=2, n_head=2, final_norm=False),
    ],
)
def test_reference_formula_matches_a_real_model(config):
    assert _count(config) == _count_in_model(config) == right_count(config)


def test_reference_formula_gives_the_gpt2_small_count():
    config = GPT2Config.from_preset("gpt2")
    assert _count(config) == 38_400
    ln_1 = sum(p.numel() for n, p in GPT2(GPT2Config(n_layer=1)).named_parameters() if "ln_1" in n)
    assert ln_1 == 1_536


COUNT_MISTAKES = {
    "forgot_ln_f": (lambda c: 2 * c.n_embd * 2 * c.n_layer, "forgot ln_f"),
    "gain_only": (lambda c: c.n_embd * (2 * c.n_layer + 1), "counted only the gain, not the bias"),
    "one_per_block": (lambda c: 2 * c.n_embd * (c.n_layer + 1), "one LayerNorm per block instead of two"),
    "gain_only_and_forgot_ln_f": (
        lambda c: c.n_embd * 2 * c.n_layer,
        "; and counted only the gain",
    ),
    "returns_float": (lambda c: 2.0 * c.n_embd * (2 * c.n_layer + 1), "expected an int"),
    "returns_none": (lambda c: None, "missing `return`"),
}


@pytest.mark.parametrize("name", list(COUNT_MISTAKES))
def test_each_param_count_mistake_fails_naming_it(name):
    fn, words = COUNT_MISTAKES[name]
    with pytest.raises(AssertionError) as info:
        check_layernorm_param_count(fn)
    assert words in str(info.value), str(info.value)


VARIANT_MISTAKES = {
    "ln_f_counted_when_final_norm_false": (
        lambda c: 2 * c.n_embd * (2 * c.n_layer + 1) + (c.n_layer * 2 * 2 * c.head_dim if c.qk_norm else 0),
        "this config has none",
    ),
    "rmsnorm_with_bias": (
        lambda c: right_count(c.replace(norm="layernorm")),
        "counted a bias for RMSNorm",
    ),
    "forgot_qk_norm": (lambda c: right_count(c.replace(qk_norm=False)), "forgot the QK norms"),
    "qk_norm_over_n_embd": (
        lambda c: (
            right_count(c)
            + (c.n_layer * 2 * (2 if c.norm == "layernorm" else 1) * (c.n_embd - c.head_dim)) * c.qk_norm
        ),
        "width head_dim",
    ),
}


@pytest.mark.parametrize("name", list(VARIANT_MISTAKES))
def test_each_variant_count_mistake_fails_naming_it(name):
    fn, words = VARIANT_MISTAKES[name]
    check_layernorm_param_count(fn)  # right on plain GPT-2 configs
    with pytest.raises(AssertionError) as info:
        check_layernorm_param_count(fn, variants=True)
    assert words in str(info.value), str(info.value)


def test_unimplemented_param_count_says_not_implemented_yet():
    def layernorm_params(config):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_layernorm_param_count(layernorm_params)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_layer_norm(right)
    check_layernorm_param_count(right_count, variants=True)
    assert torch.equal(torch.rand(3), expected)


# The lessons the course was built from (shared/seeds/), typed as they give LayerNorm.
def lesson_000_norm(x, g, b, eps=1e-5):
    """Lesson 000: u = mean(x), s = mean((x - u)^2), x_hat = (x - u)(s + eps)^(-1/2), LN = g x_hat + b."""
    u = x.mean(-1, keepdim=True)
    s = ((x - u) ** 2).mean(-1, keepdim=True)
    x_hat = (x - u) * torch.rsqrt(s + eps)
    return g * x_hat + b


def lesson_004_layer_norm(x, gamma, beta, eps=1e-5):  # x: (..., d)
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased variance
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("fn", [lesson_000_norm, lesson_004_layer_norm], ids=["lesson-000", "lesson-004"])
def test_the_lessons_layer_norms_pass_check_layer_norm(fn, capsys):
    check_layer_norm(fn)
    assert "✓ check_layer_norm" in capsys.readouterr().out
