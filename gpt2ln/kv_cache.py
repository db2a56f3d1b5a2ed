"""Generation: the key/value cache and the decoding loop behind ``GPT2.generate``.

When a model generates text, step t only needs the new token's query; the keys and values of
the tokens before it do not change. :class:`KVCache` keeps them, preallocated, and
:func:`decoding` attaches it to a model for the length of a ``with`` block, with forward hooks
and no change to the model's code: the position embedding continues at the cached length, each
layer's :class:`~gpt2ln.attention.Attend` writes its new keys and values into the cache and
attends over all of them, and after the forward the cache advances. With ``last_only`` the
final norm (and so the unembedding, the largest product of a decoding step) sees only the last
position. :func:`generate` is the loop, run under ``gemv.multicore()`` unless asked not to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from functools import partial

import torch
from torch import nn

from . import gemv
from .config import GPT2Config


class KVCache:
    """Keys and values of every layer, preallocated for ``max_len`` positions.

    ``k``, ``v``: ``[n_layer, B, H, max_len, D]``; positions ``[0, length)`` are filled.
    During one forward inside :func:`decoding` each layer's attention calls :meth:`update` with
    its new keys and values ``[B, H, T, D]``, written at ``[length, length + T)``; after the
    forward :meth:`advance` adds ``T`` to ``length``. Writing into a buffer costs one copy of the
    new entries, where growing with ``torch.cat`` copies the whole past every step.
    """

    def __init__(
        self,
        n_layer: int,
        batch: int,
        n_head: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.max_len, self.length = max_len, 0

    @classmethod
    def for_model(
        cls,
        config: GPT2Config,
        batch: int,
        max_len: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        """An empty cache for a model with this config, ``max_len <= n_ctx`` positions."""
        if not 1 <= max_len <= config.n_ctx:
            raise ValueError(f"KVCache: expected 1 <= max_len <= n_ctx={config.n_ctx}, got {max_len}")
        return cls(config.n_layer, batch, config.n_head, max_len, config.head_dim, device, dtype)

    def check_room(self, t: int) -> None:
        """ValueError unless ``t`` more positions fit."""
        if self.length + t > self.max_len:
            raise ValueError(f"KVCache: {self.length + t} positions do not fit in max_len={self.max_len}")

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store layer ``layer``'s new k, v ``[B, H, T, D]``; return all its keys and values so far
        ``[B, H, length + T, D]`` (views into the buffer, no copy)."""
        _, batch, heads, _, dim = self.k.shape
        for name, t in (("k", k), ("v", v)):
            if t.ndim != 4 or (t.shape[0], t.shape[1], t.shape[3]) != (batch, heads, dim):
                raise ValueError(
                    f"KVCache: expected {name} of shape [{batch}, {heads}, T, {dim}] (B, H, T, D), "
                    f"got {tuple(t.shape)}"
                )
        if k.shape != v.shape:
            raise ValueError(
                f"KVCache: expected k and v of the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if not 0 <= layer < self.k.shape[0]:
            raise ValueError(f"KVCache: expected a layer in [0, {self.k.shape[0]}), got {layer}")
        self.check_room(k.shape[2])
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, t: int) -> None:
        """Mark ``t`` more positions as filled (called once per forward, after every layer)."""
        self.length += t

    def reset(self) -> None:
        self.length = 0


@contextmanager
def decoding(
    model: nn.Module, kv: KVCache | None = None, last_only: bool = False
) -> Iterator[KVCache | None]:
    """Within the block, ``model(idx)`` continues the positions held in ``kv`` (if given): idx
    ``[B, T]`` sits at positions ``[kv.length, kv.length + T)``, attends to the cached keys and
    values too, and adds its own to the cache. With ``last_only`` the logits are those of the
    last position only, ``[B, 1, vocab]``. The hooks are removed on leaving the block."""
    handles = []

    def shift_positions(wpe: nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        kv.check_room(len(args[0]))
        return (args[0] + kv.length,)

    def extend(layer: int, attend: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        q, k, v = args
        return (q, *kv.update(layer, k, v))

    if kv is not None:
        handles.append(model.wpe.register_forward_pre_hook(shift_positions))
        for layer, block in enumerate(model.h):
            handles.append(block.attn.attend.register_forward_pre_hook(partial(extend, layer)))
        handles.append(model.register_forward_hook(lambda m, args, out: kv.advance(args[0].shape[1])))
    if last_only:
        handles.append(model.ln_f.register_forward_pre_hook(lambda m, args: (args[0][:, -1:],)))
    try:
        yield kv
    finally:
        for h in handles:
            h.remove()


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
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    multicore: bool = True,
) -> torch.Tensor:
    """``model.generate``: idx ``[B, T]`` -> ``[B, T + max_new_tokens]`` (see ``GPT2.generate``)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"generate: expected max_new_tokens to be an int >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"generate: expected temperature >= 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"generate: expected top_k to be None or an int >= 1, got {top_k!r}")
    n_ctx = model.config.n_ctx
    model.check_idx(idx[:, -n_ctx:] if isinstance(idx, torch.Tensor) and idx.ndim == 2 else idx)
    B, T0 = idx.shape
    out = torch.empty(B, T0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :T0] = idx
    kv = None
    if use_cache and max_new_tokens > 0:
        max_len = min(n_ctx, T0 + max_new_tokens)
        kv = KVCache.for_model(model.config, B, max_len, idx.device, model.wte.weight.dtype)
    fast_gemv = multicore and idx.device.type == "cpu"  # gemv.linear only helps on a multi-core CPU
    with decoding(model, kv, last_only=True), gemv.multicore() if fast_gemv else nullcontext():
        for t in range(T0, T0 + max_new_tokens):
            if kv is not None and 0 < kv.length < kv.max_len:
                logits = model(out[:, t - 1 : t])  # the newest token only
            else:  # first step, no cache, or the window is full: run the last n_ctx tokens
                if kv is not None:
                    kv.reset()
                logits = model(out[:, max(0, t - n_ctx) : t])
            out[:, t : t + 1] = sample(logits[:, -1, :], temperature, top_k, generator)
    return out
