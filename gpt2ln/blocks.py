"""The MLP and the transformer block, pre-norm (GPT-2) or post-norm (GPT-1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import CausalSelfAttention, KVCache, make_norm
from .config import GPT2Config


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """``c_fc``: ``[d] -> [4d]``, tanh GELU, ``c_proj``: ``[4d] -> [d]``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        d = config.n_embd
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, T, d]`` -> ``[B, T, d]``."""
        return self.dropout(self.c_proj(gelu(self.c_fc(x))))


class Block(nn.Module):
    """One transformer block.

    pre-norm (GPT-2):  ``x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))``
    post-norm (GPT-1): ``x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))``
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.pre = config.norm_position == "pre"
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        cache: dict[str, torch.Tensor] | None = None,
        layer: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: ``[B, T, d]`` -> (``[B, T, d]``, this layer's keys and values)."""
        if self.pre:
            a, present = self.attn(self.ln_1(x), kv_cache, cache, layer)
            x = x + a
            mid = x
            m = self.mlp(self.ln_2(x))
            x = x + m
        else:
            a, present = self.attn(x, kv_cache, cache, layer)
            x = self.ln_1(x + a)
            mid = x
            m = self.mlp(x)
            x = self.ln_2(x + m)
        if cache is not None:
            cache[f"attn_out.{layer}"] = a
            cache[f"resid_mid.{layer}"] = mid
            cache[f"mlp_out.{layer}"] = m
        return x, present
