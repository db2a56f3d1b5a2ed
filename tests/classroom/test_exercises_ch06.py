"""Chapter 6 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln import GPT2Config
from gpt2ln.exercises import check_causal_attention, check_gelu
from gpt2ln.exercises.ch06 import check_padded_causal_mask, check_saturating_std, check_smallest_nan_fill


# ----------------------------------------------------------------------- check_causal_attention
def _attn(
    x,
    wa,
    ba,
    wp,
    bp,
    n_head,
    *,
    scale="D",
    mask="before",
    split="transpose",
    merge="transpose",
    dim=-1,
    linear=False,
    order="qkv",
):
    """A learner's attention, right by default; each keyword reproduces one mistake."""
    B, T, d = x.shape
    H, D = n_head, d // n_head
    if linear:  # nn.Linear layout: x @ W.T (crashes on c_attn's [d, 3d] weight)
        qkv = F.linear(x, wa, ba)
    else:
        qkv = x @ wa + ba
    parts = dict(zip("qkv", qkv.split(d, dim=-1), strict=True))
    q, k, v = (parts[c] for c in order)
    if split == "transpose":
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
    else:
        q, k, v = (t.reshape(B, H, T, D) for t in (q, k, v))
    s = q @ k.transpose(-2, -1)
    s = s / {"D": math.sqrt(D), "d": math.sqrt(d), "none": 1.0}[scale]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    if mask == "before":
        s = s.masked_fill(~causal, float("-inf"))
    p = torch.softmax(s, dim=dim)
    if mask == "after":
        p = p * causal
    y = p @ v
    y = y.transpose(1, 2).reshape(B, T, d) if merge == "transpose" else y.reshape(B, T, d)
    return F.linear(y, wp, bp) if linear else y @ wp + bp


def right_attention(x, wa, ba, wp, bp, n_head):
    return _attn(x, wa, ba, wp, bp, n_head)


def test_right_attention_passes_and_prints_one_line(capsys):
    check_causal_attention(right_attention)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_causal_attention")


def _official_mask(x, wa, ba, wp, bp, n_head):
    """The official -1e10 mask, and a float32 computation of float64 inputs."""
    B, T, d = x.shape
    q, k, v = (x @ wa + ba).split(d, dim=-1)
    q, k, v = (t.view(B, T, n_head, -1).transpose(1, 2).float() for t in (q, k, v))
    w = q @ k.transpose(-2, -1) / math.sqrt(d // n_head)
    b = torch.ones(T, T).tril()
    w = w * b - 1e10 * (1 - b)
    y = (torch.softmax(w, -1) @ v).transpose(1, 2).reshape(B, T, d).to(x.dtype)
    return y @ wp + bp


def _sdpa(x, wa, ba, wp, bp, n_head):
    B, T, d = x.shape
    q, k, v = (t.view(B, T, n_head, -1).transpose(1, 2) for t in (x @ wa + ba).split(d, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, d) @ wp + bp


def _gpt2ln_module(x, wa, ba, wp, bp, n_head):
    d = x.shape[-1]
    attn = gpt2ln.CausalSelfAttention(GPT2Config(n_embd=d, n_head=n_head, n_layer=1)).to(x.dtype)
    with torch.no_grad():
        attn.c_attn.weight.copy_(wa.T)
        attn.c_attn.bias.copy_(ba)
        attn.c_proj.weight.copy_(wp.T)
        attn.c_proj.bias.copy_(bp)
        return attn(x)


def _numpy(x, wa, ba, wp, bp, n_head):
    x, wa, ba, wp, bp = (t.numpy() for t in (x, wa, ba, wp, bp))
    B, T, d = x.shape
    D = d // n_head
    q, k, v = np.split(x @ wa + ba, 3, axis=-1)
    q, k, v = (t.reshape(B, T, n_head, D).transpose(0, 2, 1, 3) for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = p / p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(B, T, d) @ wp + bp


@pytest.mark.parametrize(
    "fn",
    [_official_mask, _sdpa, _gpt2ln_module, _numpy],
    ids=["official-1e10-mask-float32", "sdpa", "gpt2ln-module", "numpy"],
)
def test_other_right_attentions_pass(fn, capsys):
    check_causal_attention(fn)
    assert "✓" in capsys.readouterr().out


ATTN_MISTAKES = {
    # name: (wrong implementation, words the message must contain)
    "no_scale": (lambda *a: _attn(*a, scale="none"), "forgot the 1/sqrt(D) scale"),
    "scale_by_d": (lambda *a: _attn(*a, scale="d"), "scaled by 1/sqrt(d)"),
    "no_mask": (lambda *a: _attn(*a, mask="none"), "no causal mask"),
    "mask_after_softmax": (lambda *a: _attn(*a, mask="after"), "mask applied after softmax"),
    "split_without_transpose": (
        lambda *a: _attn(*a, split="reshape", merge="reshape"),
        "wrong head split",
    ),
    "split_only_without_transpose": (lambda *a: _attn(*a, split="reshape"), "wrong head split"),
    "merge_without_transpose": (lambda *a: _attn(*a, merge="reshape"), "wrong head merge"),
    "linear_layout": (lambda *a: _attn(*a, linear=True), "nn.Linear layout (transposed weights)"),
    "linear_layout_c_proj_only": (
        lambda x, wa, ba, wp, bp, h: _attn(x, wa, ba, wp.T, bp, h),
        "nn.Linear layout (transposed weights)",
    ),
    "softmax_wrong_axis": (lambda *a: _attn(*a, dim=-2), "softmax over the wrong axis"),
    "qkv_order": (lambda *a: _attn(*a, order="kqv"), "wrong order"),
    "no_c_proj_bias": (
        lambda x, wa, ba, wp, bp, h: _attn(x, wa, ba, wp, 0 * bp, h),
        "forgot the bias c_proj_b",
    ),
    "returns_none": (lambda *a: None, "missing `return`"),
    "in_place": (
        lambda x, wa, ba, wp, bp, h: right_attention(x.mul_(1.0).add_(1.0) - 1.0, wa, ba, wp, bp, h),
        "in place",
    ),
}


@pytest.mark.parametrize("name", list(ATTN_MISTAKES))
def test_each_attention_mistake_fails_naming_it(name):
    fn, words = ATTN_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_causal_attention") as info:
        check_causal_attention(fn)
    assert words in str(info.value), str(info.value)


def test_ignoring_n_head_gets_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_causal_attention(lambda x, wa, ba, wp, bp, n_head: right_attention(x, wa, ba, wp, bp, 2))


def test_unimplemented_attention_says_not_implemented_yet():
    def my_causal_attention(x, c_attn_w, c_attn_b, c_proj_w, c_proj_b, n_head):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_causal_attention(my_causal_attention)


def test_crashing_attention_reports_the_exception():
    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        check_causal_attention(lambda *a: 1 / 0)


# ------------------------------------------------------------------------------------ check_gelu
K = math.sqrt(2 / math.pi)


def _np_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def right_gelu(x):
    return 0.5 * x * (1 + torch.tanh(K * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    "fn",
    [
        right_gelu,
        lambda x: F.gelu(x, approximate="tanh"),
        gpt2ln.gelu,
        lambda x: (
            0.5 * x.numpy() * (1 + np.tanh(np.sqrt(2 / np.pi) * (x.numpy() + 0.044715 * x.numpy() ** 3)))
        ),
    ],
    ids=["formula", "F.gelu-tanh", "gpt2ln.gelu", "numpy"],
)
def test_right_gelu_passes(fn, capsys):
    check_gelu(fn)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_gelu")


def _exp_tanh(z):
    e = torch.exp(2 * z)
    return (e - 1) / (e + 1)


GELU_MISTAKES = {
    "exact_erf": (lambda x: F.gelu(x), "exact erf GELU"),
    "no_cubic": (lambda x: 0.5 * x * (1 + torch.tanh(K * x)), "missing x³ term"),
    "wrong_constant": (
        lambda x: 0.5 * x * (1 + torch.tanh(K * (x + 0.04715 * x**3))),
        "wrong constant 0.044715",
    ),
    "squared": (lambda x: 0.5 * x * (1 + torch.tanh(K * (x + 0.044715 * x**2))), "x² instead of x³"),
    "no_half": (lambda x: x * (1 + torch.tanh(K * (x + 0.044715 * x**3))), "missing 0.5 factor"),
    "no_x": (lambda x: 0.5 * (1 + torch.tanh(K * (x + 0.044715 * x**3))), "forgot to multiply by x"),
    "wrong_sqrt": (
        lambda x: 0.5 * x * (1 + torch.tanh((2 / math.pi) * (x + 0.044715 * x**3))),
        "wrong constant sqrt(2/pi)",
    ),
    "quick_gelu": (lambda x: x * torch.sigmoid(1.702 * x), "sigmoid approximation"),
    "relu": (torch.relu, "ReLU"),
    "exp_tanh_overflows": (
        lambda x: 0.5 * x * (1 + _exp_tanh(K * (x + 0.044715 * x**3))),
        "NaN or inf",
    ),
    "rounded_literal": (
        lambda x: 0.5 * x * (1 + torch.tanh(0.7979 * (x + 0.044715 * x**3))),
        "close but not exact",
    ),
    "returns_none": (lambda x: None, "missing `return`"),
    "in_place": (lambda x: right_gelu(x.mul_(1.0).add_(1.0) - 1.0), "in place"),
}


@pytest.mark.parametrize("name", list(GELU_MISTAKES))
def test_each_gelu_mistake_fails_naming_it(name):
    fn, words = GELU_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_gelu") as info:
        check_gelu(fn)
    assert words in str(info.value), str(info.value)


def test_unimplemented_gelu_says_not_implemented_yet():
    def my_gelu(x):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_gelu(my_gelu)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_causal_attention(right_attention)
    check_gelu(right_gelu)
    check_padded_causal_mask(right_mask)
    check_smallest_nan_fill(65520)
    check_saturating_std(math.sqrt(8), math.sqrt(8 / 768))
    assert torch.equal(torch.rand(3), expected)


# ----------------------------------------------------------------------- check_padded_causal_mask
def _mask(
    keep,
    dtype,
    *,
    keys=True,
    invert=False,
    causal="tril",
    padding=True,
    value="min",
    shape4=True,
    out_dtype=None,
):
    """A learner's padded causal mask, right by default; each keyword reproduces one mistake."""
    T = keep.shape[-1]
    tri = {
        "tril": torch.ones(T, T, dtype=torch.bool).tril(),
        "triu": torch.ones(T, T, dtype=torch.bool).triu(),
        "strict": torch.ones(T, T, dtype=torch.bool).tril(-1),
        "none": torch.ones(T, T, dtype=torch.bool),
    }[causal]
    k = ~keep if invert else keep
    pad = k[:, None, None, :] if keys else k[:, None, :, None]
    allowed = tri[None, None] & pad if padding else tri[None, None].expand(keep.shape[0], 1, T, T)
    dt = out_dtype or dtype
    if value == "-1e10 fill":  # a literal float16 cannot hold: masked_fill refuses it
        return torch.zeros(allowed.shape, dtype=dt).masked_fill(~allowed, -1e10)
    if value == "-1e10 cast":  # the same literal, cast: -inf in float16
        return torch.where(allowed, 0.0, -1e10).to(dt)
    if value == "f32 min cast":  # float32's finfo.min, cast: -inf in bfloat16 (and float16)
        return torch.where(allowed, 0.0, torch.finfo(torch.float32).min).to(dt)
    if value == "mul":  # the official formula's product, in the mask's dtype
        b = allowed.to(dt)
        big = torch.tensor(1e10, dtype=dt)
        mask = -big * (1 - b)
    else:
        fill = {"min": torch.finfo(dt).min, "-inf": float("-inf"), "small": -5.0}[value]
        mask = torch.zeros(allowed.shape, dtype=dt).masked_fill(~allowed, fill)
    return mask if shape4 else mask[:, 0]


def right_mask(keep, dtype):
    return _mask(keep, dtype)


def right_mask_where(keep, dtype):  # another right answer: torch.where, -1e4 (finite in every dtype)
    T = keep.shape[-1]
    allowed = torch.ones(T, T, dtype=torch.bool).tril() & keep[:, None, None, :]
    return torch.where(allowed, torch.tensor(0.0, dtype=dtype), torch.tensor(-1e4, dtype=dtype))


@pytest.mark.parametrize("fn", [right_mask, right_mask_where])
def test_right_masks_pass(fn, capsys):
    check_padded_causal_mask(fn)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_padded_causal_mask")


MASK_MISTAKES = {
    "queries": (dict(keys=False), "the padding never reaches the keys"),
    "inverted": (dict(invert=True), "keep flags inverted"),
    "no causal": (dict(causal="none"), "no causal part"),
    "no padding": (dict(padding=False), "the padding never reaches the keys"),
    "triu": (dict(causal="triu"), "upper triangle"),
    "diagonal": (dict(causal="strict"), "diagonal masked"),
    "-inf": (dict(value="-inf"), "-inf for the masked keys"),
    "inf * 0": (dict(value="mul"), "inf * 0"),
    "-1e10 fill": (dict(value="-1e10 fill"), "a literal such as -1e10 for the masked value"),
    "-1e10 cast": (dict(value="-1e10 cast"), "so -1e10 becomes -inf"),
    "float32's min, cast": (dict(value="f32 min cast"), "float32's finfo.min"),
    "too small": (dict(value="small"), "not negative enough"),
    "no head axis": (dict(shape4=False), "add the head axis"),
    "float32 always": (dict(out_dtype=torch.float32), "create it with dtype=dtype"),
}


@pytest.mark.parametrize("name", list(MASK_MISTAKES))
def test_each_mask_mistake_fails_naming_it(name):
    kwargs, words = MASK_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_padded_causal_mask") as info:
        check_padded_causal_mask(lambda keep, dtype: _mask(keep, dtype, **kwargs))
    assert words in str(info.value), str(info.value)


def test_a_boolean_mask_is_told_to_be_additive():
    def boolean(keep, dtype):
        T = keep.shape[-1]
        return torch.ones(T, T, dtype=torch.bool).tril()[None, None] & keep[:, None, None, :]

    with pytest.raises(AssertionError, match="additive mask"):
        check_padded_causal_mask(boolean)


def test_unimplemented_mask_says_not_implemented_yet():
    def padded_causal_mask(keep, dtype):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_padded_causal_mask(padded_causal_mask)


def test_a_mask_returning_none_asks_for_a_return():
    with pytest.raises(AssertionError, match="missing `return`"):
        check_padded_causal_mask(lambda keep, dtype: None)


def test_a_mask_changing_keep_in_place_is_told():
    def in_place(keep, dtype):
        out = right_mask(keep, dtype)
        keep[:] = True
        return out

    with pytest.raises(AssertionError, match="check_padded_causal_mask"):
        check_padded_causal_mask(in_place)


def test_a_minus_1e10_fill_is_tied_to_float16s_range():
    with pytest.raises(AssertionError) as info:
        check_padded_causal_mask(lambda keep, dtype: _mask(keep, dtype, value="-1e10 fill"))
    msg = str(info.value)
    assert "dtype=torch.float16" in msg and "65,504" in msg and "torch.finfo(dtype).min" in msg, msg


# ----------------------------------------------------------------------- check_smallest_nan_fill
@pytest.mark.parametrize("fill", [65520, 65520.0, np.float64(65520), torch.tensor(65520.0)])
def test_the_smallest_nan_fill_passes(fill, capsys):
    check_smallest_nan_fill(fill)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_smallest_nan_fill") and "65,519" in out


NAN_FILL_MISTAKES = {
    "float16's largest": (65504, "float16's largest finite number, and values a little above it"),
    "just below": (65519, "float16's largest finite number, and values a little above it"),
    "1e4": (1e4, "a fill below float16's largest finite number"),
    "2**16": (65536, "2**16 = 65,536 is the first power of two"),
    "1e10": (1e10, "is not the smallest"),
    "not whole": (65519.5, "a whole number"),
    "infinite": (float("inf"), "a whole number"),
}


@pytest.mark.parametrize("name", list(NAN_FILL_MISTAKES))
def test_each_nan_fill_mistake_fails_naming_it(name):
    fill, words = NAN_FILL_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_smallest_nan_fill") as info:
        check_smallest_nan_fill(fill)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("fill", [None, "65520", True])
def test_a_nan_fill_that_is_not_a_number_is_told(fill):
    with pytest.raises(AssertionError, match="expected one number"):
        check_smallest_nan_fill(fill)


# ----------------------------------------------------------------------- check_saturating_std
def test_the_saturating_stds_pass(capsys):
    check_saturating_std(math.sqrt(8), math.sqrt(8 / 768))
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_saturating_std")


SATURATION_MISTAKES = {
    "qk is the score's std": ((8.0, math.sqrt(8 / 768)), "8 is the score's standard deviation"),
    "qk otherwise": ((2.0, math.sqrt(8 / 768)), "solve qk_std**2 = 8"),
    "w over d": ((math.sqrt(8), math.sqrt(8) / 768), "divided by d instead of sqrt(d)"),
    "w without the root": ((math.sqrt(8), 8 / 768), "the square root is missing"),
    "GPT-2's 0.02": ((math.sqrt(8), 0.02), "solve d * w_std**2 = 8"),
    "negative": ((-math.sqrt(8), 0.1), "a positive number"),
}


@pytest.mark.parametrize("name", list(SATURATION_MISTAKES))
def test_each_saturation_mistake_fails_naming_it(name):
    args, words = SATURATION_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_saturating_std") as info:
        check_saturating_std(*args)
    assert words in str(info.value), str(info.value)
