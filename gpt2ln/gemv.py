"""Matrix-vector products that use every CPU core: the decoding step's bottleneck.

When the model generates text it feeds one token per step, so every layer multiplies a
single row ``x`` ``[1, in]`` by its weight ``W`` ``[out, in]``: a matrix-vector product
(GEMV). It does 2 flops per 4-byte weight it reads, so its speed is set by how fast the
weights stream from memory. On CPU, PyTorch's ``F.linear`` sends a one-row product to the
BLAS GEMV routine, which (for this ``[out, in]`` layout) runs on one core, and one core
cannot pull the full memory bandwidth of the machine.

:func:`linear` splits ``W``'s rows into one block per thread and runs the blocks as one
batched product (``torch.bmm``), which PyTorch spreads over the threads: each core streams
its share of the weights. Each output is still the dot product of one row of ``W`` with
``x`` (equal to ``F.linear`` up to float rounding, tested), in a fraction of the time; the
benchmark (``python -m gpt2ln.bench``) measures it. Everything else (more rows, a GPU,
one thread, autograd) goes to ``F.linear``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

#: at most this many rows ([B * T]) count as matrix-vector products
MAX_ROWS = 4
#: False sends every product to ``F.linear`` (see :func:`disabled`)
ENABLED = True


@contextmanager
def disabled() -> Iterator[None]:
    """Within the block, :func:`linear` is plain ``F.linear`` (the benchmark's ablation)."""
    global ENABLED
    old, ENABLED = ENABLED, False
    try:
        yield
    finally:
        ENABLED = old


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias``, like ``F.linear``: x ``[..., in]``, weight ``[out, in]`` -> ``[..., out]``."""
    k = torch.get_num_threads()
    rows = x.numel() // x.shape[-1] if x.ndim and x.shape[-1] else 0
    if (
        not ENABLED
        or k < 2
        or x.device.type != "cpu"
        or not 0 < rows <= MAX_ROWS
        or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        or weight.shape[0] < 2 * k
        or x.dtype != weight.dtype
        or not weight.is_contiguous()
    ):
        return F.linear(x, weight, bias)
    out_f, in_f = weight.shape
    if x.shape[-1] != in_f:  # let F.linear raise its own shape error
        return F.linear(x, weight, bias)
    per = out_f // k  # rows of W per thread; the last out_f % k rows go through F.linear
    xt = x.reshape(rows, in_f).T  # [in, rows]
    main = torch.bmm(weight[: k * per].view(k, per, in_f), xt.expand(k, in_f, rows))  # [k, per, rows]
    y = main.reshape(k * per, rows).T  # [rows, k * per]
    if k * per < out_f:
        y = torch.cat([y, F.linear(x.reshape(rows, in_f), weight[k * per :])], dim=1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], out_f)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same ``[out, in]`` weight, same state dict) whose
    forward uses :func:`linear`, so one-token decoding steps use every core."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: ``[..., in]`` -> ``[..., out]``."""
        return linear(x, self.weight, self.bias)
