"""Generation: the decoding loop behind ``GPT2.generate``, and its one-token step.

:func:`generate` extends a batch of token ids one token at a time. With the cache
(:class:`~gpt2ln.model.kv_cache.KVCache`) each step after the prompt feeds only the newest token.
The readable way to run that step is the model's own forward inside
:func:`~gpt2ln.model.kv_cache.decoding` (``fast=False``); it pays Python for every hook and module
call, a few milliseconds per token on GPT-2 small, next to the ~15 ms it takes a CPU to read the
weights once. So by default each one-token step runs :func:`decode_step` instead (the recipe of
gpt-fast: a static cache and a one-token step with nothing else in it): the same modules' weights
and the same operations in a plain loop over the blocks. The tokens are those of the readable path.

Faster steps plug in here without this module knowing them: ``gpt2ln.lab.fast`` (imported with
``gpt2ln``) registers, through :func:`register_fast_decoding`, the choice between ``F.linear``, a
multi-core matrix-vector product and the same step in C, measured once per machine.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache, decoding
from .mlp import gelu

Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def supports_fast_step(model: nn.Module) -> bool:
    """Whether :func:`decode_step` computes what ``model`` computes: pre-norm blocks (GPT-2's),
    and no dropout active. Other placements decode on the readable path."""
    cfg = model.config
    return cfg.norm_position == "pre" and not (model.training and cfg.dropout > 0)


def decode_step(model: nn.Module, tok: torch.Tensor, kv: KVCache, linear: Linear = F.linear) -> torch.Tensor:
    """One decoding step: token ids tok ``[B, 1]`` at position ``kv.length`` -> logits ``[B, vocab]``.

    The forward of a pre-norm ``GPT2`` for one new token, written out: embeddings, then per block
    ``x + c_proj(attention(ln_1(x)))`` with this token's key and value written into ``kv`` and
    the query attending to every cached position, then ``x + mlp(ln_2(x))``; ``ln_f`` and the tied
    unembedding. Same modules, same weights, same kernels as ``model(tok)`` inside
    :func:`decoding`, without the hooks and the per-module bookkeeping. ``linear(x, W, b)`` runs
    the products (``F.linear``, or the lab's multi-core ``gemv.linear``). Advances ``kv`` by one.
    """
    B, pos, C = tok.shape[0], kv.length, model.config.n_embd
    H, D = model.config.n_head, model.config.head_dim
    kv.check_room(1)
    end = pos + 1
    x = model.wte(tok) + model.wpe.weight[pos]  # [B, 1, d]
    for layer, block in enumerate(model.h):
        attn, mlp = block.attn, block.mlp
        qkv = linear(block.ln_1(x), attn.c_attn.weight, attn.c_attn.bias)  # [B, 1, 3d]
        q, k, v = (t.view(B, 1, H, D).transpose(1, 2) for t in qkv.split(C, dim=-1))  # [B, H, 1, D]
        if attn.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        kv.k[layer, :, :, pos:end] = k
        kv.v[layer, :, :, pos:end] = v
        y = F.scaled_dot_product_attention(q, kv.k[layer, :, :, :end], kv.v[layer, :, :, :end])
        x = x + linear(y.transpose(1, 2).reshape(B, 1, C), attn.c_proj.weight, attn.c_proj.bias)
        h = gelu(linear(block.ln_2(x), mlp.c_fc.weight, mlp.c_fc.bias))
        x = x + linear(h, mlp.c_proj.weight, mlp.c_proj.bias)
    kv.advance(1)
    h = model.ln_f(x)[:, -1]  # [B, d]
    if linear is F.linear:
        return h @ model.wte.weight.T  # the readable path's own unembedding, the same kernel
    return linear(h, model.wte.weight, None)  # [B, vocab]

Step = Callable[[torch.Tensor], torch.Tensor]  # token ids [B, 1] -> logits [B, vocab]
#: ``(model, kv, *, fast, gemv, native) -> (step or None, context)``: how generate runs its steps
FastDecoding = Callable[..., tuple[Step | None, AbstractContextManager]]
_FAST_DECODING: list[FastDecoding] = []


def register_fast_decoding(pick: FastDecoding | None) -> None:
    """Let ``pick`` choose :func:`generate`'s one-token step (None: back to :func:`decode_step`).

    ``pick(model, kv, fast=..., gemv=..., native=...)`` gets generate's options and returns the
    step to run after the prompt (None: the model's forward, the readable path) and a context
    manager to run the whole loop in. ``gpt2ln.lab.fast`` registers one when the package loads.
    """
    _FAST_DECODING[:] = [] if pick is None else [pick]


def _plain_decoding(
    model: nn.Module, kv: KVCache | None, *, fast: bool, gemv: bool | None, native: bool | None
) -> tuple[Step | None, AbstractContextManager]:
    """The model's own choice, with nothing registered: :func:`decode_step` with ``F.linear``."""
    if gemv or native:
        raise ValueError("generate: gemv=True and native=True need the lab's fast paths (gpt2ln.lab.fast)")
    wants = fast and kv is not None and supports_fast_step(model)
    return (partial(decode_step, model, kv=kv) if wants else None), nullcontext()


def sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """logits ``[B, vocab]`` -> next ids ``[B, 1]``: argmax for ``temperature=0``, else a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)



@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    fast: bool = True,
    gemv: bool | None = None,
    native: bool | None = None,
) -> torch.Tensor:
    """Extend idx ``[B, T]`` by ``max_new_tokens`` -> ``[B, T + max_new_tokens]`` (``GPT2.generate``).

    ``temperature=0`` is greedy (argmax); otherwise sample from softmax(logits / temperature),
    restricted to the ``top_k`` largest if given, with ``generator`` for reproducibility. With
    ``use_cache`` each step feeds only the new token and reuses past keys and values; once the
    sequence fills the context window the model recomputes over the last ``n_ctx`` tokens.
    ``fast`` (the default) runs each one-token step as one plain function, :func:`decode_step`,
    instead of the model's forward with hooks (the readable path, ``fast=False``); both give the
    same tokens. With ``gemv`` and ``native`` None (the default) the lab's fast paths measure once
    which step is fastest here: :func:`decode_step` with ``F.linear``, with the multi-core
    ``gemv.linear``, or the same step in C (where a C compiler is found). ``gemv=True``/``False``
    forces :func:`decode_step` with that product (on the readable path ``gemv=True`` runs the
    model's products on several cores); ``native=True`` forces the C step (a ValueError says why
    where it cannot run), ``native=False`` leaves it out. Call ``model.eval()`` first if the model
    has dropout.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"generate: expected max_new_tokens to be an int >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"generate: expected temperature >= 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"generate: expected top_k to be None or an int >= 1, got {top_k!r}")
    for name, flag in (("gemv", gemv), ("native", native)):
        if flag is not None and not isinstance(flag, bool):
            raise TypeError(f"generate: expected {name} to be None, True or False, got {flag!r}")
    if native and gemv is not None:
        raise ValueError(
            "generate: native=True runs the C step; gemv=True/False choose the Python step's product"
        )
    n_ctx = model.config.n_ctx
    model.check_idx(idx[:, -n_ctx:] if isinstance(idx, torch.Tensor) and idx.ndim == 2 else idx)
    B, T0 = idx.shape
    out = torch.empty(B, T0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :T0] = idx
    kv = None
    if use_cache and max_new_tokens > 0:
        max_len = min(n_ctx, T0 + max_new_tokens)
        kv = KVCache.for_model(model.config, B, max_len, idx.device, model.wte.weight.dtype)
    pick = _FAST_DECODING[0] if _FAST_DECODING else _plain_decoding
    step, context = pick(model, kv, fast=fast, gemv=gemv, native=native)
    with decoding(model, kv, last_only=True), context:
        for t in range(T0, T0 + max_new_tokens):
            if kv is not None and 0 < kv.length < kv.max_len:
                if step is not None:
                    logits = step(out[:, t - 1 : t])  # [B, vocab]
                else:
                    logits = model(out[:, t - 1 : t])[:, -1, :]  # the newest token only
            else:  # first step, no cache, or the window is full: run the last n_ctx tokens
                if kv is not None:
                    kv.reset()
                logits = model(out[:, max(0, t - n_ctx) : t])[:, -1, :]
            out[:, t : t + 1] = sample(logits, temperature, top_k, generator)
    return out
