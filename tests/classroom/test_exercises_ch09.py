"""Chapter 9 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import pytest
import torch

import gpt2ln
from gpt2ln.exercises import check_embed, check_gpt2_param_count
from gpt2ln.exercises.ch09 import check_cached_attention


# ----------------------------------------------------------------------- check_gpt2_param_count
def _count(c, *, tied=True, wpe=True, biases=True, ln=True, ln_f=True, mlp=4):
    V, N, d, L = c.vocab_size, c.n_ctx, c.n_embd, c.n_layer
    b = 1 if biases else 0
    block = (2 * 2 * d if ln else 0) + (3 * d * d + b * 3 * d) + (d * d + b * d)
    block += mlp * d * d + b * mlp * d + mlp * d * d + b * d
    return V * d + (N * d if wpe else 0) + L * block + (2 * d if ln_f else 0) + (0 if tied else V * d)


def test_param_count_right_passes(capsys):
    check_gpt2_param_count(_count)
    out = capsys.readouterr().out
    assert "✓ check_gpt2_param_count" in out and "124,439,808" in out and "1,557,611,200" in out


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(tied=False), "lm_head"),
        (dict(wpe=False), "forgot the position embeddings wpe"),
        (dict(biases=False), "forgot the biases"),
        (dict(ln_f=False), "forgot the final LayerNorm ln_f"),
        (dict(mlp=1), "MLP width d instead of 4d"),
        # the chapter's 12 d^2 L and the embeddings, nothing else
        (dict(biases=False, ln=False, ln_f=False), "counted only the weight matrices"),
    ],
)
def test_param_count_mistakes_are_named(kw, words):
    with pytest.raises(AssertionError, match=words):
        check_gpt2_param_count(lambda c: _count(c, **kw))


def test_param_count_not_implemented_and_wrong_type():
    def todo(c):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_gpt2_param_count(todo)
    with pytest.raises(AssertionError, match="expected an int"):
        check_gpt2_param_count(lambda c: float(_count(c)))
    with pytest.raises(AssertionError, match="missing `return`"):
        check_gpt2_param_count(lambda c: None)


def test_param_count_unknown_mistake_still_fails():
    with pytest.raises(AssertionError, match="you counted"):
        check_gpt2_param_count(lambda c: _count(c) + 1)


# ----------------------------------------------------------------------------- check_embed
def right_embed(idx, wte, wpe):
    return wte[idx] + wpe[torch.arange(idx.shape[1])]


def test_embed_right_passes(capsys):
    check_embed(right_embed)
    check_embed(lambda idx, wte, wpe: torch.nn.functional.embedding(idx, wte) + wpe[: idx.shape[1]])
    assert "✓ check_embed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fn, words",
    [
        (lambda idx, wte, wpe: wte[idx] + wpe[1 : idx.shape[1] + 1], "positions start at 1"),
        (lambda idx, wte, wpe: wte[idx], "forgot the position embeddings"),
        (lambda idx, wte, wpe: idx[..., None] + wpe[: idx.shape[1]], "added the token id itself"),
        (lambda idx, wte, wpe: wte[idx] + wpe[idx], r"looked up the positions by token id"),
        (lambda idx, wte, wpe: wpe[idx] + wte[: idx.shape[1]], "swapped wte and wpe"),
        (lambda idx, wte, wpe: wte[idx] * wte.shape[1] ** 0.5 + wpe[: idx.shape[1]], "sqrt\\(d\\)"),
        # what the exercise's question ("so that the width stays d") warns against, in either order
        (
            lambda idx, wte, wpe: torch.cat([wte[idx], wpe[: idx.shape[1]].expand(idx.shape[0], -1, -1)], -1),
            "concatenated the two embeddings",
        ),
        (
            lambda idx, wte, wpe: torch.cat([wpe[: idx.shape[1]].expand(idx.shape[0], -1, -1), wte[idx]], -1),
            "concatenated the two embeddings",
        ),
        # lesson 000's watch-out: the embeddings are not normalized on the way in
        (
            lambda idx, wte, wpe: torch.nn.functional.layer_norm(
                right_embed(idx, wte, wpe), (wte.shape[1],), eps=1e-5
            ),
            "normalized the embeddings \\(a LayerNorm",
        ),
        (
            lambda idx, wte, wpe: gpt2ln.layer_norm(right_embed(idx, wte, wpe), eps=1e-6),
            "normalized the embeddings \\(a LayerNorm",
        ),
        (
            lambda idx, wte, wpe: gpt2ln.rms_norm(right_embed(idx, wte, wpe)),
            "normalized the embeddings \\(an RMSNorm",
        ),
    ],
)
def test_embed_mistakes_are_named(fn, words):
    with pytest.raises(AssertionError, match=words):
        check_embed(fn)


def test_embed_not_implemented_shape_and_in_place():
    def todo(idx, wte, wpe):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_embed(todo)
    with pytest.raises(AssertionError, match="lost the batch axis"):
        check_embed(lambda idx, wte, wpe: right_embed(idx, wte, wpe)[0])

    def in_place(idx, wte, wpe):
        wte += 0.0 * wte + 1.0
        return right_embed(idx, wte, wpe)

    with pytest.raises(AssertionError, match="in place"):
        check_embed(in_place)


# ------------------------------------------------------------------- check_cached_attention
def _cached(x_new, k_past, v_past, wa, ba, wp, bp, n_head, *, mask="right", append=True, scale=0.5):
    # scale: the scores are divided by D ** scale (0.5: sqrt(D), right; 1: D; 0: no scale)
    B, Tn, d = x_new.shape
    D, P = d // n_head, k_past.shape[2]
    q, k, v = (t.view(B, Tn, n_head, D).transpose(1, 2) for t in (x_new @ wa + ba).split(d, dim=-1))
    if append:
        k, v = torch.cat([k_past, k], 2), torch.cat([v_past, v], 2)
    else:
        k, v = k_past, v_past
    scores = q @ k.transpose(-2, -1) / D**scale
    ones = torch.ones(Tn, k.shape[2], dtype=torch.bool)
    future = {"right": ones.triu(P + 1), "square": ones.triu(1), "self": ones.triu(P), "none": ~ones}[mask]
    pattern = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    return (pattern @ v).transpose(1, 2).reshape(B, Tn, d) @ wp + bp, k, v


def test_cached_attention_right_passes(capsys):
    check_cached_attention(_cached)
    assert "✓ check_cached_attention" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(mask="square"), r"as if queries and keys had the same positions"),
        (dict(mask="none"), r"no causal mask among the new positions"),
        (dict(append=False, mask="none"), r"attended only to the cached keys"),
        (dict(scale=1.0), r"1/D instead of 1/sqrt\(D\)"),
        (dict(scale=0.0), r"forgot the 1/sqrt\(D\) scale"),
        # the offset off by one: each new token masked from its own key
        (dict(mask="self"), r"hides each new token from itself"),
    ],
)
def test_cached_attention_mistakes_are_named(kw, words):
    with pytest.raises(AssertionError, match=words):
        check_cached_attention(lambda *a: _cached(*a, **kw))


def test_cached_attention_cache_not_returned_and_not_implemented():
    def todo(*a):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_cached_attention(todo)
    with pytest.raises(AssertionError, match="new positions appended"):
        check_cached_attention(lambda *a: (_cached(*a)[0], a[1], a[2]))  # the old cache back
    with pytest.raises(AssertionError, match=r"\(out, k, v\)"):
        check_cached_attention(lambda *a: _cached(*a)[0])  # the output only
