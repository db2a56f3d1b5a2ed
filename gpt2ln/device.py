"""Pick where to run: CUDA, then Apple's MPS, then the CPU."""

from __future__ import annotations

import torch


def get_device() -> torch.device:
    """The best available device: ``cuda``, then ``mps``, then ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
