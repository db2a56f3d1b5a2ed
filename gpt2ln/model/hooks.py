"""Hook points: names for intermediate values (as in TransformerLens's ``hook_points.py``).

A :class:`HookPoint` is the identity. The model puts one wherever a value is worth looking at (the
stream before each block, what each sub-block adds, the stream between the two); PyTorch's forward
hooks on them read or change that value, and ``GPT2.run_with_cache`` records each one by name.
"""

from __future__ import annotations

import torch
from torch import nn


class HookPoint(nn.Module):
    """The identity, there to be hooked: a name for an intermediate value (as in TransformerLens).
    ``GPT2.run_with_cache`` records what passes through each one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
