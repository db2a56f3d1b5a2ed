"""Causal self-attention as in GPT-2, with optional QK-norm."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import GPT2Config
from .norms import make_norm


def causal_mask(t_q: int, t_k: int, device: torch.device | None = None) -> torch.Tensor:
    """``[t_q, t_k]`` bool, True where query i may attend to key j.

    The queries are the last t_q of t_k positions, so query i sits at absolute
    position ``t_k - t_q + i`` and sees keys ``j <= t_k - t_q + i``.
    """
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def attention_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q ``[B, H, T, D]``, k ``[B, H, T_k, D]`` -> ``q k^T / sqrt(D)`` ``[B, H, T, T_k]``, the
    future entries -inf (the queries are the last T of T_k positions)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    return scores.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))


class Attend(nn.Module):
    """``softmax(q k^T / sqrt(D) + causal mask) v``: q ``[B, H, T, D]``, k, v ``[B, H, T_k, D]``
    -> ``[B, H, T, D]``, by PyTorch's fused ``F.scaled_dot_product_attention``.

    A module of its own, with no parameters, so that its inputs and output can be hooked:
    ``GPT2.run_with_cache`` records the scores and pattern here (with :func:`attention_scores`),
    generation passes cached keys and values in (``gpt2ln.model.kv_cache``).
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        T, T_k = q.shape[2], k.shape[2]  # T < T_k when earlier keys come from a KV cache
        causal = 1 < T == T_k  # SDPA's own causal mask is aligned top-left: right only when T == T_k
        mask = None if causal or T == 1 else causal_mask(T, T_k, q.device)  # one query sees every key
        p = self.dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention.

    ``c_attn``: ``[d] -> [3d]`` (queries, keys, values for all heads); ``c_proj``:
    ``[d] -> [d]``. Weights are ``nn.Linear`` (``[out, in]``); GPT-2's checkpoints store
    the transpose (``Conv1D``, ``[in, out]``), which the loader handles.
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        d, self.n_head, self.head_dim = config.n_embd, config.n_head, config.head_dim
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.qk_norm = config.qk_norm
        if config.qk_norm:  # each head's queries and keys, over the head dimension
            self.q_norm = make_norm(config, config.head_dim)
            self.k_norm = make_norm(config, config.head_dim)
        self.attend = Attend(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, T, d]`` -> ``[B, T, d]``."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        y = self.attend(q, k, v).transpose(1, 2).reshape(B, T, C)  # heads side by side again
        return self.resid_dropout(self.c_proj(y))
