"""The MLP and the transformer block, with its norms in one of five placements (pre-norm as in
GPT-2, post-norm as in GPT-1, Peri-LN, OLMo 2's reordering, DeepNorm)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import CausalSelfAttention, KVCache, make_norm
from .config import GPT2Config
from .gemv import Linear


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """``c_fc``: ``[d] -> [4d]``, tanh GELU, ``c_proj``: ``[4d] -> [d]``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        d = config.n_embd
        self.c_fc = Linear(d, 4 * d)  # nn.Linear, multi-core for one-token steps (gpt2ln.gemv)
        self.c_proj = Linear(4 * d, d)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, T, d]`` -> ``[B, T, d]``."""
        return self.dropout(self.c_proj(gelu(self.c_fc(x))))


class Block(nn.Module):
    """One transformer block; ``config.norm_position`` places the norms.

    pre-norm (GPT-2):  ``x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))``
    post-norm (GPT-1): ``x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))``
    peri (Peri-LN):    ``x = x + ln_attn_out(attn(ln_1(x))); x = x + ln_mlp_out(mlp(ln_2(x)))``
    olmo2:             ``x = x + ln_1(attn(x)); x = x + ln_2(mlp(x))``
    deepnorm:          ``x = ln_1(alpha x + attn(x)); x = ln_2(alpha x + mlp(x))``

    ``ln_1`` is always the attention sub-block's norm and ``ln_2`` the MLP's, wherever
    they sit; Peri-LN adds the output norms ``ln_attn_out`` and ``ln_mlp_out``.
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.position = config.norm_position
        self.ln_1 = make_norm(config, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = make_norm(config, config.n_embd)
        self.mlp = MLP(config)
        if self.position == "peri":
            self.ln_attn_out = make_norm(config, config.n_embd)
            self.ln_mlp_out = make_norm(config, config.n_embd)
        self.alpha = config.deepnorm_alpha if self.position == "deepnorm" else 1.0

    def forward(
        self,
        x: torch.Tensor,
        kv_cache: KVCache | None = None,
        cache: dict[str, torch.Tensor] | None = None,
        layer: int = 0,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x: ``[B, T, d]`` -> (``[B, T, d]``, this layer's keys and values).

        With ``cache`` it records ``attn_out.{layer}`` and ``mlp_out.{layer}`` (what each
        sub-block adds, or for post-norm/DeepNorm feeds to its norm) and ``resid_mid.{layer}``
        (the stream between the two sub-blocks).
        """
        pos = self.position
        if pos in ("pre", "peri"):
            a, present = self.attn(self.ln_1(x), kv_cache, cache, layer)
            if pos == "peri":
                a = self.ln_attn_out(a)
            x = mid = x + a
            m = self.mlp(self.ln_2(x))
            if pos == "peri":
                m = self.ln_mlp_out(m)
            x = x + m
        elif pos == "olmo2":
            a, present = self.attn(x, kv_cache, cache, layer)
            a = self.ln_1(a)
            x = mid = x + a
            m = self.ln_2(self.mlp(x))
            x = x + m
        else:  # post, deepnorm (alpha = 1 for post)
            a, present = self.attn(x, kv_cache, cache, layer)
            x = mid = self.ln_1(self._scaled(x) + a)
            m = self.mlp(x)
            x = self.ln_2(self._scaled(x) + m)
        if cache is not None:
            cache[f"attn_out.{layer}"] = a
            cache[f"resid_mid.{layer}"] = mid
            cache[f"mlp_out.{layer}"] = m
        return x, present

    def _scaled(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.alpha == 1.0 else x * self.alpha
