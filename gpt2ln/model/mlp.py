"""The MLP sub-block of GPT-2: ``c_fc`` ``[d] -> [4d]``, GPT-2's tanh GELU, ``c_proj`` ``[4d] -> [d]``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import GPT2Config


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    return F.gelu(x, approximate="tanh")


class MLP(nn.Module):
    """``c_fc``: ``[d] -> [4d]``, tanh GELU, ``c_proj``: ``[4d] -> [d]``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[B, T, d]`` -> ``[B, T, d]``."""
        return self.dropout(self.c_proj(gelu(self.c_fc(x))))
