"""The key/value cache, and how a model decodes with it.

When a model generates text, step t only needs the new token's query; the keys and values of
the tokens before it do not change. :class:`KVCache` keeps them, preallocated, and
:func:`decoding` attaches it to a model for the length of a ``with`` block, with forward hooks
and no change to the model's code: the position embedding continues at the cached length, each
layer's :class:`~gpt2ln.model.attention.Attend` writes its new keys and values into the cache and
attends over all of them, and after the forward the cache advances. With ``last_only`` the
final norm (and so the unembedding, the largest product of a decoding step) sees only the last
position. The loop that uses it is :func:`gpt2ln.model.generate.generate`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn

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
