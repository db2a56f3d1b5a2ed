"""Checks for chapter 9 (GPT-2 end to end).

``check_gpt2_param_count(fn)`` checks ``fn(config) -> int``, the parameter count of
``GPT2(config)`` with the tied unembedding counted once, and names the classic
counting mistake a wrong answer matches. ``check_embed(fn)`` checks the input of the
first block, ``fn(idx, wte, wpe) -> wte[idx] + wpe[0..T-1]`` ``[B, T, d]``.
``check_cached_attention(fn)`` checks one decoding step of causal self-attention with a
key/value cache against full attention over all positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...model.config import GPT2Config
from ...model.gpt2 import GPT2
from ._core import (
    Mistake,
    as_int,
    as_tensor,
    as_tuple,
    call,
    call_on_copies,
    compare,
    fail,
    passed,
)

__all__ = ["check_cached_attention", "check_embed", "check_gpt2_param_count"]

_PRESETS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")


# ---------------------------------------------------------------------- parameter count
def _count(
    c: GPT2Config,
    *,
    tied: bool = True,
    wpe: bool = True,
    biases: bool = True,
    ln: bool = True,
    ln_bias: bool = True,
    ln_f: bool = True,
    mlp_mult: int = 4,
    qkv: int = 3,
) -> int:
    """GPT-2's parameter count by formula, or one classic mistake (keywords)."""
    V, N, d, L = c.vocab_size, c.n_ctx, c.n_embd, c.n_layer
    b = 1 if biases else 0
    one_ln = (2 if ln_bias else 1) * d if ln else 0
    attn = d * qkv * d + b * qkv * d + d * d + b * d  # c_attn, c_proj
    mlp = d * mlp_mult * d + b * mlp_mult * d + mlp_mult * d * d + b * d  # c_fc, c_proj
    block = 2 * one_ln + attn + mlp
    emb = V * d + (N * d if wpe else 0)
    head = 0 if tied else V * d
    return emb + L * block + (one_ln if ln_f else 0) + head


_MISTAKES = [  # each fn(config) -> int
    Mistake(label, "", lambda c, kw=kw: _count(c, **kw))
    for label, kw in [
        (
            "counted a separate lm_head [vocab, d]: GPT-2 ties the unembedding to wte "
            "(logits = h @ wte^T), so it is counted once",
            dict(tied=False),
        ),
        ("forgot the position embeddings wpe [n_ctx, d]", dict(wpe=False)),
        (
            "forgot the biases of the linear layers "
            "(c_attn [3d], attn c_proj [d], c_fc [4d], mlp c_proj [d])",
            dict(biases=False),
        ),
        ("forgot the final LayerNorm ln_f (2d parameters after the last block)", dict(ln_f=False)),
        (
            "forgot the LayerNorms altogether (ln_1, ln_2 in every block, and ln_f)",
            dict(ln=False, ln_f=False),
        ),
        (
            "counted only the LayerNorm gains: each LayerNorm also has a bias of d entries",
            dict(ln_bias=False),
        ),
        ("MLP width d instead of 4d: c_fc maps d -> 4d, c_proj 4d -> d", dict(mlp_mult=1)),
        ("counted c_attn as [d, d]: it makes queries, keys and values, [d, 3d] (+ 3d biases)", dict(qkv=1)),
        (
            "counted only the weight matrices (12 d^2 per block) and the embeddings: the biases of the "
            "linear layers (9d per block) and the LayerNorms' gains and biases (4d per block, 2d for ln_f) "
            "are parameters too",
            dict(biases=False, ln=False, ln_f=False),
        ),
    ]
]


def _describe(c: GPT2Config) -> str:
    return f"(vocab_size={c.vocab_size}, n_ctx={c.n_ctx}, n_embd={c.n_embd}, n_layer={c.n_layer})"


def _configs() -> list[tuple[GPT2Config, int]]:
    """Two small configs (truth from a real GPT2) and the four presets (formula)."""
    small = [
        GPT2Config(vocab_size=37, n_ctx=11, n_embd=12, n_layer=2, n_head=3),
        GPT2Config(vocab_size=50, n_ctx=23, n_embd=8, n_layer=3, n_head=2),
    ]
    out = [(c, GPT2(c).num_parameters()) for c in small]
    return out + [(GPT2Config.from_preset(p), _count(GPT2Config.from_preset(p))) for p in _PRESETS]


def check_gpt2_param_count(fn: Callable[[GPT2Config], Any]) -> None:
    """Check ``fn(config) -> int`` is the number of parameters of ``GPT2(config)``.

    Tied unembedding (counted once), learned positions, two LayerNorms per block
    plus ``ln_f``, all biases, MLP width ``4 * n_embd``. Checked on two small
    configs (against a real ``gpt2ln.GPT2``) and the four GPT-2 sizes. Compute from
    the config's fields: don't build the model. A wrong count names the mistake it
    matches.
    """
    check = "check_gpt2_param_count"
    configs = _configs()
    for config, truth in configs:
        out = as_int(check, call(check, fn, config.replace()), f"for config {_describe(config)}")
        if out == truth:
            continue
        names = [m.label for m in _MISTAKES if m.fn(config) == out]
        fail(
            check,
            f"for config {_describe(config)}: you counted {out:,}, a GPT2 with this config has {truth:,}",
            "\n    or: ".join(names) if names else None,
        )
    passed(
        check,
        f"right on {len(configs)} configs, e.g. gpt2: {_count(GPT2Config.from_preset('gpt2')):,} "
        f"and gpt2-xl: {_count(GPT2Config.from_preset('gpt2-xl')):,}",
    )


# -------------------------------------------------------------------------- embeddings
def _embed(idx: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor, how: str = "right") -> torch.Tensor:
    """``wte[idx] + wpe[0..T-1]`` ``[B, T, d]``, or one classic mistake."""
    T = idx.shape[1]
    pos = torch.arange(T)
    if how == "right":
        return wte[idx] + wpe[pos]
    if how == "pos_from_1":
        return wte[idx] + wpe[pos + 1]
    if how == "no_wpe":
        return wte[idx]
    if how == "add_id":
        return idx[..., None].to(wte.dtype) + wpe[pos]
    if how == "wpe_by_token":
        return wte[idx] + wpe[idx]
    if how == "swapped":
        return wpe[idx] + wte[pos]
    if how == "scaled":
        return wte[idx] * wte.shape[1] ** 0.5 + wpe[pos]
    if how == "reversed":
        return wte[idx] + wpe[pos.flip(0)]
    if how in ("layer_norm", "rms_norm"):  # normalized on the way in: GPT-2 does not
        h = wte[idx] + wpe[pos]
        if how == "layer_norm":
            h = h - h.mean(-1, keepdim=True)
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
    raise ValueError(how)


_EMBED_MISTAKES = [  # each fn(idx, wte, wpe) -> [B, T, d]
    Mistake(label, "", lambda i, t, p, how=how: _embed(i, t, p, how))
    for how, label in [
        ("pos_from_1", "positions start at 1: the first token's position is 0, pos = torch.arange(T)"),
        ("no_wpe", "forgot the position embeddings: add wpe[pos], pos = 0..T-1"),
        (
            "add_id",
            "added the token id itself instead of looking up its row: use wte[idx] ([B, T] -> [B, T, d])",
        ),
        ("wpe_by_token", "looked up the positions by token id (wpe[idx]): a token's position is its index"),
        ("swapped", "swapped wte and wpe: tokens index wte ([vocab, d]), positions index wpe ([n_ctx, d])"),
        (
            "scaled",
            "multiplied the token embeddings by sqrt(d) (the original Transformer does; GPT-2 does not)",
        ),
        ("reversed", "positions counted from the end: token t (0-based) gets wpe[t]"),
        (
            "layer_norm",
            "normalized the embeddings (a LayerNorm on wte[idx] + wpe[pos]): GPT-2 does not normalize "
            "the embeddings on the way in; the stream enters block 0 as the plain sum, and block 0's "
            "ln_1 normalizes only its attention branch's copy",
        ),
        (
            "rms_norm",
            "normalized the embeddings (an RMSNorm on wte[idx] + wpe[pos]): GPT-2 does not normalize "
            "the embeddings on the way in; the stream enters block 0 as the plain sum",
        ),
    ]
]


def _embed_cases() -> list[tuple[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(9)
    out = []
    for B, T, V, N, d, dtype in ((2, 5, 13, 16, 6, torch.float64), (3, 9, 7, 9, 4, torch.float32)):
        idx = torch.randint(0, V, (B, T), generator=gen)
        wte = torch.randn(V, d, generator=gen, dtype=torch.float64).to(dtype)
        wpe = torch.randn(N, d, generator=gen, dtype=torch.float64).to(dtype)
        out.append((f"idx [{B}, {T}], wte [{V}, {d}], wpe [{N}, {d}], {dtype}", (idx, wte, wpe)))
    return out


def check_embed(fn: Callable[..., Any]) -> None:
    """Check ``fn(idx, wte, wpe)`` is GPT-2's input to the first block.

    idx: int64 ``[B, T]``; wte ``[vocab, d]``; wpe ``[n_ctx, d]`` with ``T <= n_ctx``;
    returns ``wte[idx] + wpe[pos]`` with ``pos = 0..T-1``, ``[B, T, d]``. A wrong
    output names the mistake it matches: positions from 1 or from the end, no
    ``wpe``, the token id added instead of looked up, ``wpe`` indexed by token,
    ``wte``/``wpe`` swapped, a sqrt(d) scale, a LayerNorm or RMSNorm on the embeddings
    (lesson 000's watch-out: GPT-2 does not normalize the embeddings on the way in).
    """
    check = "check_embed"
    cases = _embed_cases()
    for what, (idx, wte, wpe) in cases:
        out = call_on_copies(check, fn, (idx, wte, wpe), names=("idx", "wte", "wpe"), what=what)
        truth = _embed(idx, wte.double(), wpe.double())
        d = wte.shape[1]
        if isinstance(out, torch.Tensor) and tuple(out.shape) == (*truth.shape[:-1], 2 * d):
            fail(
                check,
                f"on {what}: got shape {tuple(out.shape)}, expected {tuple(truth.shape)}",
                "concatenated the two embeddings (width 2d): GPT-2 adds them, wte[idx] + wpe[pos], "
                "so the width stays d",
            )
        if isinstance(out, torch.Tensor) and out.shape == truth.shape[1:]:
            fail(
                check,
                f"on {what}: got shape {tuple(out.shape)}, expected {tuple(truth.shape)}",
                "lost the batch axis? wte[idx] keeps it: [B, T] -> [B, T, d]",
            )
        compare(
            check,
            f"on {what}",
            out,
            truth,
            1e-5,
            _EMBED_MISTAKES,
            (idx, wte.double(), wpe.double()),
            formula="wte[idx] + wpe[pos], pos = torch.arange(T)",
            differs="your output differs from wte[idx] + wpe[pos]",
            skip=(IndexError, RuntimeError),
        )
    passed(check, f"wte[idx] + wpe[0..T-1] right on {len(cases)} inputs")


# -------------------------------------------------------------- attention with a key/value cache
def _heads(t: torch.Tensor, n_head: int) -> torch.Tensor:
    B, T, d = t.shape
    return t.view(B, T, n_head, d // n_head).transpose(1, 2)  # [B, H, T, D]


def _cached_attention(
    x_new: torch.Tensor,
    k_past: torch.Tensor,
    v_past: torch.Tensor,
    wa: torch.Tensor,
    ba: torch.Tensor,
    wp: torch.Tensor,
    bp: torch.Tensor,
    n_head: int,
    how: str = "right",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Causal attention of the new positions over the cached and new keys, or one classic mistake."""
    B, Tn, d = x_new.shape
    D, P = d // n_head, k_past.shape[2]
    q, k, v = (_heads(t, n_head) for t in (x_new @ wa + ba).split(d, dim=-1))
    if how == "not_appended":
        k, v = k_past, v_past
    else:
        k, v = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
    Tk = k.shape[2]
    scale = {"scale_D": D, "no_scale": 1.0}.get(how, math.sqrt(D))
    scores = q @ k.transpose(-2, -1) / scale
    ones = torch.ones(Tn, Tk, dtype=torch.bool)
    if how == "square_mask":
        future = ones.triu(diagonal=1)
    elif how == "self_masked":
        future = ones.triu(diagonal=P)
    elif how in ("no_mask", "not_appended"):
        future = torch.zeros_like(ones)
    else:  # new position i sits at P + i: it sees keys 0 .. P + i
        future = ones.triu(diagonal=P + 1)
    pattern = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    out = (pattern @ v).transpose(1, 2).reshape(B, Tn, d) @ wp + bp
    return out, k, v


_CACHE_MISTAKES = [  # each fn(*args) -> out [B, T_new, d]
    Mistake(label, "", lambda *a, how=how: _cached_attention(*a, how=how)[0])
    for how, label in [
        (
            "square_mask",
            "the causal mask was built as if queries and keys had the same positions "
            "(triu(diagonal=1) on [T_new, P + T_new]): new position i is position P + i, it sees keys "
            "0 .. P + i, so the mask is triu(diagonal=P + 1)",
        ),
        (
            "no_mask",
            "no causal mask among the new positions: with one new token nothing is in its future, but "
            "with several, new token i must not see new tokens after it",
        ),
        (
            "not_appended",
            "attended only to the cached keys and values: append the new ones first "
            "(torch.cat along the time axis), a token also attends to itself",
        ),
        (
            "self_masked",
            "the mask hides each new token from itself (triu(diagonal=P)): new position i is position "
            "P + i and sees keys 0 .. P + i, itself included, so the mask is triu(diagonal=P + 1)",
        ),
        ("scale_D", "scaled the scores by 1/D instead of 1/sqrt(D) (D = d / n_head, the head width)"),
        (
            "no_scale",
            "forgot the 1/sqrt(D) scale: divide the scores q k^T by sqrt(D) (D = d / n_head, the head width)",
        ),
    ]
]


def _cache_cases() -> list[tuple[str, int, tuple[Any, ...], torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(what, P, args, out truth, k truth, v truth): full causal attention on P + T_new positions."""
    gen = torch.Generator().manual_seed(9)
    out = []
    # three new tokens first: with one, a mask that hides a token from itself and keys that were
    # never appended give the same output
    for B, P, Tn, d, H in ((1, 4, 3, 8, 2), (2, 5, 1, 12, 3)):
        x = torch.randn(B, P + Tn, d, generator=gen, dtype=torch.float64)
        wa = torch.randn(d, 3 * d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        ba = 0.1 * torch.randn(3 * d, generator=gen, dtype=torch.float64)
        wp = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        bp = 0.1 * torch.randn(d, generator=gen, dtype=torch.float64)
        empty = torch.zeros(B, H, 0, d // H, dtype=torch.float64)
        full, k, v = _cached_attention(x, empty, empty, wa, ba, wp, bp, H)  # the plain causal forward
        _, k_past, v_past = _cached_attention(x[:, :P], empty, empty, wa, ba, wp, bp, H)
        args = (x[:, P:].clone(), k_past, v_past, wa, ba, wp, bp, H)
        what = f"{P} cached positions and {Tn} new (B={B}, d={d}, {H} heads)"
        out.append((what, P, args, full[:, P:], k, v))
    return out


def check_cached_attention(fn: Callable[..., Any]) -> None:
    """Check ``fn(x_new, k_past, v_past, wa, ba, wp, bp, n_head) -> (out, k, v)``.

    One decoding step of GPT-2's causal self-attention with a key/value cache: ``x_new``
    ``[B, T_new, d]`` are the new positions (already through ``ln_1``), ``k_past``/``v_past``
    ``[B, H, P, D]`` the keys and values of the ``P`` earlier positions; ``wa [d, 3d]``, ``wp [d, d]``
    applied as ``x @ W + b``. Returns the attention output for the new positions ``[B, T_new, d]``
    and the updated cache ``[B, H, P + T_new, D]``. Compared with full causal attention over all
    ``P + T_new`` positions, for one new token and for three; a wrong output names the mistake.
    """
    check = "check_cached_attention"
    cases = _cache_cases()
    names = ("x_new", "k_past", "v_past", "wa", "ba", "wp", "bp", "n_head")
    for what, _, args, out_t, k_t, v_t in cases:
        res = call_on_copies(check, fn, args, names=names, what=what)
        out, k, v = as_tuple(check, res, ("out", "k", "v"), f"on {what}: ")
        compare(
            check,
            f"on {what}",
            out,
            out_t,
            1e-8,
            _CACHE_MISTAKES,
            args,
            formula="softmax(q k^T / sqrt(D), masked where key > P + i) v, then @ wp + bp",
            differs="your attention output differs from full causal attention over all positions",
        )
        for name, got, truth in (("k", k, k_t), ("v", v, v_t)):
            if isinstance(got, torch.Tensor) and got.shape != truth.shape:
                fail(
                    check,
                    f"on {what}: the returned {name} has shape {tuple(got.shape)}, "
                    f"expected {tuple(truth.shape)}",
                    "return the cache with the new positions appended along the time axis (dim 2)",
                )
            got = as_tensor(check, got, truth, f"the returned {name}")
            compare(check, f"on {what}, the returned {name}", got, truth, 1e-8, [], args, formula="cat")
    passed(check, f"the same as full causal attention on {len(cases)} cases (3 new tokens and 1)")
