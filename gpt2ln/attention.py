"""Causal self-attention as in GPT-2, with optional QK-norm and a key/value cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import GPT2Config
from .gemv import Linear
from .norms import DyT, LayerNorm, RMSNorm


class KVCache:
    """Keys and values of every layer, preallocated for ``max_len`` positions.

    ``k``, ``v``: ``[n_layer, B, H, max_len, D]``; positions ``[0, length)`` are filled.
    During one forward each layer calls :meth:`update` with its new keys and values
    ``[B, H, T, D]``, written at ``[length, length + T)``; after the last layer the model
    calls :meth:`advance` (``length += T``). Writing into a buffer costs one copy of the
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
        end = self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KVCache: {end} positions do not fit in max_len={self.max_len}")
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, t: int) -> None:
        """Mark ``t`` more positions as filled (called once per forward, after every layer)."""
        self.length += t

    def reset(self) -> None:
        self.length = 0


def make_norm(config: GPT2Config, d: int) -> nn.Module:
    """The norm the config asks for, of width d (``nn.Identity`` for ``norm="none"``)."""
    if config.norm == "rmsnorm":
        return RMSNorm(d, eps=config.layer_norm_epsilon)
    if config.norm == "dyt":
        return DyT(d, alpha_init=config.dyt_alpha)
    if config.norm == "none":
        return nn.Identity()
    return LayerNorm(d, eps=config.layer_norm_epsilon)


def causal_mask(t_q: int, t_k: int, device: torch.device | None = None) -> torch.Tensor:
    """``[t_q, t_k]`` bool, True where query i may attend to key j.

    The queries are the last t_q of t_k positions, so query i sits at absolute
    position ``t_k - t_q + i`` and sees keys ``j <= t_k - t_q + i``.
    """
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention.

    ``c_attn``: ``[d] -> [3d]`` (queries, keys, values for all heads); ``c_proj``:
    ``[d] -> [d]``. Weights are ``nn.Linear`` (``[out, in]``); GPT-2's checkpoints store
    the transpose (``Conv1D``, ``[in, out]``), which the loader handles.

    With ``track_max_score = True`` each forward also stores ``max_score``, the
    largest |score| over the unmasked pre-softmax scores (a 0-d tensor, no grad),
    at the cost of one extra ``q @ k^T``; ``gpt2ln.train`` uses it to log
    attention-logit growth without keeping the full ``[B, H, T, T]`` scores.
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        d = config.n_embd
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.c_attn = Linear(d, 3 * d)  # nn.Linear, multi-core for one-token steps (gpt2ln.gemv)
        self.c_proj = Linear(d, d)
        self.qk_norm = config.qk_norm
        if config.qk_norm:
            self.q_norm = make_norm(config, self.head_dim)
            self.k_norm = make_norm(config, self.head_dim)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.track_max_score = False
        self.max_score: torch.Tensor | None = None

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        cache: dict[str, torch.Tensor] | None = None,
        layer: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: ``[B, T, d]`` -> (``[B, T, d]``, (keys, values) ``[B, H, T_k, D]``).

        With ``kv_cache`` the new keys and values are appended to layer ``layer``'s
        entries and attention runs over all of them (``T_k = past + T``).

        With ``cache`` (a dict) the explicit path runs and stores the scaled,
        pre-softmax ``attn_scores.{layer}`` ``[B, H, T, T_k]`` (masked entries -inf)
        and ``attn_pattern.{layer}``; otherwise ``F.scaled_dot_product_attention``.
        """
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        past = 0 if kv_cache is None else kv_cache.length
        if kv_cache is not None:
            k, v = kv_cache.update(layer, k, v)
        t_k = k.shape[2]
        if self.track_max_score:
            self.max_score = self.max_abs_score(q, k)
        p_drop = self.dropout if self.training else 0.0
        if cache is None:
            if past == 0:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop, is_causal=True)
            else:
                mask = None if T == 1 else causal_mask(T, t_k, x.device)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # [B, H, T, T_k]
            scores = scores.masked_fill(~causal_mask(T, t_k, x.device), float("-inf"))
            pattern = torch.softmax(scores, dim=-1)
            cache[f"attn_scores.{layer}"] = scores
            cache[f"attn_pattern.{layer}"] = pattern
            y = F.dropout(pattern, p_drop) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.resid_dropout(self.c_proj(y)), (k, v)

    @torch.no_grad()
    def max_abs_score(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q ``[B, H, T, D]``, k ``[B, H, T_k, D]`` -> max |q.k / sqrt(D)| over the causal entries (0-d)."""
        scores = (q @ k.transpose(-2, -1)).mul_(1.0 / math.sqrt(self.head_dim))  # [B, H, T, T_k]
        future = ~causal_mask(q.shape[2], k.shape[2], q.device)
        return scores.masked_fill_(future, 0.0).abs_().amax()  # in place: one [B, H, T, T_k] buffer
