"""The fast paths: where the lab makes the readable model run at the speed of the memory.

llm.c keeps its kernels in ``dev/``, which "is ok to be (locally) complex"; this corner is that for
gpt2ln. Nothing in :mod:`gpt2ln.model` imports it: it plugs in through two registration points,
which :func:`enable` fills when the package loads.

* ``kernels``: one-pass LayerNorm, RMSNorm and DyT for large CPU inputs without autograd (the C
  kernels, or ``torch.compile``), plugged into the norm modules' fast path
  (``gpt2ln.model.norms.register_one_pass``).
* ``native``: the C library (``csrc/``: the norm kernels and the one-token decoding step), compiled
  once per machine and loaded with ctypes.
* ``gemv``: a matrix-vector product split over the CPU's cores.
* ``step``: which one-token step ``generate`` runs, measured once per machine
  (``gpt2ln.model.generate.register_fast_decoding``).

:func:`disable` takes both out again (the model then runs PyTorch's kernels and its own
``decode_step``; the outputs are the same).
"""

from __future__ import annotations

from ...model.generate import register_fast_decoding
from ...model.norms import register_one_pass
from . import gemv, kernels, native, step


def enable() -> None:
    """Plug the one-pass norm kernels and the measured choice of decoding step into the model."""
    register_one_pass(kernels.one_pass)
    register_fast_decoding(step.fast_decoding)


def disable() -> None:
    """Unplug them: PyTorch's norm kernels and the model's own ``decode_step``."""
    register_one_pass(None)
    register_fast_decoding(None)


enable()

__all__ = ["disable", "enable", "gemv", "kernels", "native", "step"]
