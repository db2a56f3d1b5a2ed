"""The choice of decoding step: which one-token step ``generate`` runs after the prompt.

Three steps compute the same logits: :func:`~gpt2ln.model.generate.decode_step` with
``F.linear``, the same with the multi-core :func:`~gpt2ln.lab.fast.gemv.linear`, and the same step
in C (:mod:`gpt2ln.lab.fast.native`), where a C compiler exists. :func:`choose_step` times one step
of each once per process and model shape and keeps the fastest, so no choice is tuned to one CPU.
:func:`fast_decoding` is what ``generate`` asks (registered by :mod:`gpt2ln.lab.fast`).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...model.generate import decode_step, supports_fast_step
from ...model.kv_cache import KVCache
from ..timing import time_interleaved
from . import gemv as gemv_module
from . import native as c_native

#: the measured choice per (device, threads, dtype, model shape, batch): see :func:`choose_step`
STEP_CHOICE: dict[tuple, dict[str, Any]] = {}


def choose_step(model: nn.Module, batch: int = 1, repeats: int = 5, native: bool = True) -> dict[str, Any]:
    """Measure once which one-token step is fastest here: :func:`decode_step` with ``F.linear``,
    with the multi-core ``gemv.linear``, or the C step of :mod:`gpt2ln.lab.fast.native` (where it compiles
    and supports the model).

    Times one step of ``model`` with each (``native=False``: all but the C step), interleaved,
    ``repeats`` rounds after one warm-up, on a scratch cache, and picks another step than
    ``F.linear``'s only if its median is below 0.95x
    ``F.linear``'s, so the default is never slower than the plain product by more than the noise.
    The answer is cached in :data:`STEP_CHOICE` for the process. Returns ``{"step": name,
    "why": str, "step_ms": {name: ms}}``, name one of ``"F.linear"``, ``"gemv.linear"``, ``"native"``.
    """
    cfg, w = model.config, model.wte.weight
    threads = torch.get_num_threads()
    shape = (cfg.vocab_size, cfg.n_embd, cfg.n_layer, cfg.n_head)
    key = (str(w.device), threads, w.dtype, *shape, batch, native)
    if key in STEP_CHOICE:
        return STEP_CHOICE[key]
    kv = KVCache.for_model(cfg, batch, 1, w.device, w.dtype)
    tok = torch.zeros(batch, 1, dtype=torch.long, device=w.device)
    steps: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "F.linear": partial(decode_step, model, kv=kv)
    }
    skipped = []
    if w.device.type == "cpu" and threads >= 2:
        steps["gemv.linear"] = partial(decode_step, model, kv=kv, linear=gemv_module.linear)
    else:
        skipped.append("gemv.linear: not a multi-core CPU")
    why_not = "not on CPU" if w.device.type != "cpu" else c_native.supports(model, batch)
    why_not = "left out (native=False)" if not native else why_not
    c_step = c_native.NativeStep.create(model, kv) if why_not is None else None
    if c_step is not None:
        steps["native"] = c_step
    else:
        skipped.append(f"native: {why_not or c_native.STATUS.get('step', 'unavailable')}")
    if len(steps) == 1:
        choice: dict[str, Any] = {"step": "F.linear", "why": "; ".join(skipped), "step_ms": None}
    else:

        def timed(step: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
            def call() -> None:
                kv.reset()
                step(tok)

            return call

        with torch.inference_mode():
            med = time_interleaved({k: timed(f) for k, f in steps.items()}, repeats=repeats, warmup=1)
        best = min(med, key=med.get)
        if med[best] >= 0.95 * med["F.linear"]:
            best = "F.linear"
        ms = {k: v * 1e3 for k, v in med.items()}
        why = (
            f"one decoding step on {threads} threads: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
            + f" -> {best} (another step than F.linear's only when below 0.95x)"
            + "".join(f"; {s}" for s in skipped)
        )
        choice = {"step": best, "why": why, "step_ms": ms}
    STEP_CHOICE[key] = choice
    return choice


def native_step(model: nn.Module, kv: KVCache | None, device: torch.device, fast: bool) -> Callable:
    """The C step for ``generate(native=True)``, or a ValueError naming why it cannot run."""
    if kv is None or not fast:
        raise ValueError("generate: native=True needs use_cache=True, fast=True and max_new_tokens > 0")
    why = "not on CPU" if device.type != "cpu" else c_native.supports(model, kv.k.shape[1])
    step = c_native.NativeStep.create(model, kv) if why is None else None
    if step is None:
        why = why or c_native.STATUS.get("step")
        raise ValueError(f"generate: native=True, but the C step cannot run: {why}")
    return step


def fast_decoding(
    model: nn.Module, kv: KVCache | None, *, fast: bool, gemv: bool | None, native: bool | None
) -> tuple[Callable | None, AbstractContextManager]:
    """``generate``'s step and context: the C step for ``native=True``; with ``gemv`` True/False
    :func:`decode_step` with that product; with both None the step :func:`choose_step` measured
    fastest here. On the readable path (no fast step) ``gemv=True`` runs the model's products on
    several cores (:class:`~gpt2ln.lab.fast.gemv.multicore`)."""
    device = model.wte.weight.device
    step = None
    if native:
        step = native_step(model, kv, device, fast)
    elif fast and kv is not None and supports_fast_step(model):
        if gemv is not None:
            name = "gemv.linear" if gemv else "F.linear"
        else:
            name = choose_step(model, kv.k.shape[1], native=native is None)["step"]
            if name == "native":
                step = native_step(model, kv, device, fast)
        if step is None:
            linear = gemv_module.linear if name == "gemv.linear" else F.linear
            step = partial(decode_step, model, kv=kv, linear=linear)
    readable_gemv = gemv is True and step is None and device.type == "cpu"
    return step, gemv_module.multicore() if readable_gemv else nullcontext()
