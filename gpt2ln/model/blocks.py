"""The transformer block, with its norms in one of five placements (pre-norm as in GPT-2,
post-norm as in GPT-1, Peri-LN, OLMo 2's reordering, DeepNorm)."""

from __future__ import annotations

import torch
from torch import nn

from .attention import CausalSelfAttention
from .config import GPT2Config
from .hooks import HookPoint
from .mlp import MLP
from .norms import make_norm


class Block(nn.Module):
    """One transformer block, x ``[B, T, d]`` -> ``[B, T, d]``; ``config.norm_position`` places the norms.

    ``ln_1`` is always the attention sub-block's norm and ``ln_2`` the MLP's, wherever
    they sit; Peri-LN adds the output norms ``ln_attn_out`` and ``ln_mlp_out``. The hook
    points name what each sub-block adds to the stream (``attn_out``, ``mlp_out``; for
    post-norm and DeepNorm, what it feeds to its norm) and the stream between the two
    (``resid_mid``); they change nothing.
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
        self.attn_out, self.resid_mid, self.mlp_out = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn, mlp, ln_1, ln_2 = self.attn, self.mlp, self.ln_1, self.ln_2
        a_out, mid, m_out = self.attn_out, self.resid_mid, self.mlp_out  # identities, to be hooked
        if self.position == "pre":  # GPT-2: x + f(norm(x))
            x = mid(x + a_out(attn(ln_1(x))))
            return x + m_out(mlp(ln_2(x)))
        if self.position == "post":  # GPT-1: norm(x + f(x))
            x = mid(ln_1(x + a_out(attn(x))))
            return ln_2(x + m_out(mlp(x)))
        if self.position == "peri":  # Peri-LN: x + norm_out(f(norm_in(x)))
            x = mid(x + a_out(self.ln_attn_out(attn(ln_1(x)))))
            return x + m_out(self.ln_mlp_out(mlp(ln_2(x))))
        if self.position == "olmo2":  # OLMo 2: x + norm(f(x))
            x = mid(x + a_out(ln_1(attn(x))))
            return x + m_out(ln_2(mlp(x)))
        a = self.alpha  # DeepNorm: norm(alpha x + f(x))
        x = mid(ln_1(a * x + a_out(attn(x))))
        return ln_2(a * x + m_out(mlp(x)))
