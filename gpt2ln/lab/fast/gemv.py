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
benchmark (``python -m gpt2ln.lab.bench``) measures it. Everything else (more rows, a GPU,
one thread, autograd) goes to ``F.linear``.

The model's code stays plain (``nn.Linear``, ``x @ wte.weight.T``): :class:`multicore` is a
context manager, used by ``GPT2.generate``, inside which those products go to :func:`linear`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

#: at most this many rows ([B * T]) count as matrix-vector products
MAX_ROWS = 4


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias``, like ``F.linear``: x ``[..., in]``, weight ``[out, in]`` -> ``[..., out]``."""
    k = torch.get_num_threads()
    rows = x.numel() // x.shape[-1] if x.ndim and x.shape[-1] else 0
    if (
        k < 2
        or x.device.type != "cpu"
        or not 0 < rows <= MAX_ROWS
        or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        or weight.ndim != 2
        or weight.shape[0] < 2 * k
        or x.shape[-1] != weight.shape[1]  # let F.linear raise its own shape error
        or x.dtype != weight.dtype
        or not weight.is_contiguous()
    ):
        return F.linear(x, weight, bias)
    out_f, in_f = weight.shape
    per = out_f // k  # rows of W per thread; the last out_f % k rows go through F.linear
    xt = x.reshape(rows, in_f).T  # [in, rows]
    main = torch.bmm(weight[: k * per].view(k, per, in_f), xt.expand(k, in_f, rows))  # [k, per, rows]
    y = main.reshape(k * per, rows).T  # [rows, k * per]
    if k * per < out_f:
        y = torch.cat([y, F.linear(x.reshape(rows, in_f), weight[k * per :])], dim=1)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], out_f)


_MATMULS = (torch.Tensor.__matmul__, torch._C.TensorBase.matmul, torch.Tensor.matmul, torch.matmul)


class multicore(TorchFunctionMode):
    """Within ``with gemv.multicore():``, ``F.linear(x, W, b)`` (so every ``nn.Linear``) and
    ``x @ W.T`` with W ``[out, in]`` contiguous go through :func:`linear`; every other
    operation runs as usual. Nothing changes outside the block, and nothing global is set:
    a torch function mode applies to the code its ``with`` block runs. The price is one Python
    call per torch operation inside the block (microseconds; a decoding step of GPT-2 small
    spends milliseconds reading its weights)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.linear:
            return linear(*args, **kwargs)
        if func in _MATMULS and not kwargs:
            x, w = args
            if isinstance(w, torch.Tensor) and w.ndim == 2 and w.T.is_contiguous() and x.ndim >= 1:
                return linear(x, w.T)
        return func(*args, **kwargs)
