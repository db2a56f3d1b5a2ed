"""Generation: the key/value cache and the decoding loop behind ``GPT2.generate``.

When a model generates text, step t only needs the new token's query; the keys and values of
the tokens before it do not change. :class:`KVCache` keeps them, preallocated, and
:func:`decoding` attaches it to a model for the length of a ``with`` block, with forward hooks
and no change to the model's code: the position embedding continues at the cached length, each
layer's :class:`~gpt2ln.attention.Attend` writes its new keys and values into the cache and
attends over all of them, and after the forward the cache advances. With ``last_only`` the
final norm (and so the unembedding, the largest product of a decoding step) sees only the last
position. :func:`generate` is the loop.

That readable path pays Python for every hook and module call, a few milliseconds per token on
GPT-2 small, next to the ~15 ms it takes a CPU to read the weights once. So by default each
one-token step after the prompt runs :func:`decode_step` instead (the recipe of gpt-fast: a
static cache and a one-token step with nothing else in it): the same modules' weights and the
same operations, in a plain loop over the blocks, writing into the same preallocated
:class:`KVCache`, with ``F.linear`` or the multi-core ``gemv.linear`` as its products; or the
same step in C (:mod:`gpt2ln.native`), where a C compiler exists. :func:`choose_step` times one
step of each once per process and model shape and keeps the fastest, so no choice is tuned to
one CPU. The tokens are those of the readable path (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import gemv
from .blocks import gelu
from .config import GPT2Config
from .timing import time_interleaved


class KVCache:
    """Keys and values of every layer, preallocated for ``max_len`` positions.

    ``k``, ``v``: ``[n_layer, B, H, max_len, D]``; positions ``[0, length)`` are filled.
    During one forward inside :func:`decoding` each layer's attention calls :meth:`update` with
    its new keys and values ``[B, H, T, D]``, written at ``[length, length + T)``; after the
    forward :meth:`advance` adds ``T`` to ``length``. Writing into a buffer costs one copy of the
    new entries, where growing with ``torch.cat`` copies the whole past every step.
    """

    def __init__(
        self,
        n_layer: int,
        batch: int,
        n_head: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.max_len, self.length = max_len, 0

    @classmethod
    def for_model(
        cls,
        config: GPT2Config,
        batch: int,
        max_len: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> KVCache:
        """An empty cache for a model with this config, ``max_len <= n_ctx`` positions."""
        if not 1 <= max_len <= config.n_ctx:
            raise ValueError(f"KVCache: expected 1 <= max_len <= n_ctx={config.n_ctx}, got {max_len}")
        return cls(config.n_layer, batch, config.n_head, max_len, config.head_dim, device, dtype)

    def check_room(self, t: int) -> None:
        """ValueError unless ``t`` more positions fit."""
        if self.length + t > self.max_len:
            raise ValueError(f"KVCache: {self.length + t} positions do not fit in max_len={self.max_len}")

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store layer ``layer``'s new k, v ``[B, H, T, D]``; return all its keys and values so far
        ``[B, H, length + T, D]`` (views into the buffer, no copy)."""
        _, batch, heads, _, dim = self.k.shape
        for name, t in (("k", k), ("v", v)):
            if t.ndim != 4 or (t.shape[0], t.shape[1], t.shape[3]) != (batch, heads, dim):
                raise ValueError(
                    f"KVCache: expected {name} of shape [{batch}, {heads}, T, {dim}] (B, H, T, D), "
                    f"got {tuple(t.shape)}"
                )
        if k.shape != v.shape:
            raise ValueError(
                f"KVCache: expected k and v of the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if not 0 <= layer < self.k.shape[0]:
            raise ValueError(f"KVCache: expected a layer in [0, {self.k.shape[0]}), got {layer}")
        self.check_room(k.shape[2])
        end = self.length + k.shape[2]
        self.k[layer, :, :, self.length : end] = k
        self.v[layer, :, :, self.length : end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, t: int) -> None:
        """Mark ``t`` more positions as filled (called once per forward, after every layer)."""
        self.length += t

    def reset(self) -> None:
        self.length = 0


@contextmanager
def decoding(
    model: nn.Module, kv: KVCache | None = None, last_only: bool = False
) -> Iterator[KVCache | None]:
    """Within the block, ``model(idx)`` continues the positions held in ``kv`` (if given): idx
    ``[B, T]`` sits at positions ``[kv.length, kv.length + T)``, attends to the cached keys and
    values too, and adds its own to the cache. With ``last_only`` the logits are those of the
    last position only, ``[B, 1, vocab]``. The hooks are removed on leaving the block."""
    handles = []

    def shift_positions(wpe: nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        kv.check_room(len(args[0]))
        return (args[0] + kv.length,)

    def extend(layer: int, attend: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        q, k, v = args
        return (q, *kv.update(layer, k, v))

    if kv is not None:
        handles.append(model.wpe.register_forward_pre_hook(shift_positions))
        for layer, block in enumerate(model.h):
            handles.append(block.attn.attend.register_forward_pre_hook(partial(extend, layer)))
        handles.append(model.register_forward_hook(lambda m, args, out: kv.advance(args[0].shape[1])))
    if last_only:
        handles.append(model.ln_f.register_forward_pre_hook(lambda m, args: (args[0][:, -1:],)))
    try:
        yield kv
    finally:
        for h in handles:
            h.remove()


Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def supports_fast_step(model: nn.Module) -> bool:
    """Whether :func:`decode_step` computes what ``model`` computes: pre-norm blocks (GPT-2's),
    and no dropout active. Other placements decode on the readable path."""
    cfg = model.config
    return cfg.norm_position == "pre" and not (model.training and cfg.dropout > 0)


def decode_step(model: nn.Module, tok: torch.Tensor, kv: KVCache, linear: Linear = F.linear) -> torch.Tensor:
    """One decoding step: token ids tok ``[B, 1]`` at position ``kv.length`` -> logits ``[B, vocab]``.

    The forward of a pre-norm ``GPT2`` for one new token, written out: embeddings, then per block
    ``x + c_proj(attention(ln_1(x)))`` with this token's key and value written into ``kv`` and
    the query attending to every cached position, then ``x + mlp(ln_2(x))``; ``ln_f`` and the tied
    unembedding. Same modules, same weights, same kernels as ``model(tok)`` inside
    :func:`decoding`, without the hooks and the per-module bookkeeping. ``linear(x, W, b)`` runs
    the products (``F.linear`` or ``gemv.linear``). Advances ``kv`` by one.
    """
    B, pos, C = tok.shape[0], kv.length, model.config.n_embd
    H, D = model.config.n_head, model.config.head_dim
    kv.check_room(1)
    end = pos + 1
    x = model.wte(tok) + model.wpe.weight[pos]  # [B, 1, d]
    for layer, block in enumerate(model.h):
        attn, mlp = block.attn, block.mlp
        qkv = linear(block.ln_1(x), attn.c_attn.weight, attn.c_attn.bias)  # [B, 1, 3d]
        q, k, v = (t.view(B, 1, H, D).transpose(1, 2) for t in qkv.split(C, dim=-1))  # [B, H, 1, D]
        if attn.qk_norm:
            q, k = attn.q_norm(q), attn.k_norm(k)
        kv.k[layer, :, :, pos:end] = k
        kv.v[layer, :, :, pos:end] = v
        y = F.scaled_dot_product_attention(q, kv.k[layer, :, :, :end], kv.v[layer, :, :, :end])
        x = x + linear(y.transpose(1, 2).reshape(B, 1, C), attn.c_proj.weight, attn.c_proj.bias)
        h = gelu(linear(block.ln_2(x), mlp.c_fc.weight, mlp.c_fc.bias))
        x = x + linear(h, mlp.c_proj.weight, mlp.c_proj.bias)
    kv.advance(1)
    h = model.ln_f(x)[:, -1]  # [B, d]
    if linear is F.linear:
        return h @ model.wte.weight.T  # the readable path's own unembedding, the same kernel
    return linear(h, model.wte.weight, None)  # [B, vocab]


#: the measured choice per (device, threads, dtype, model shape, batch): see :func:`choose_step`
STEP_CHOICE: dict[tuple, dict[str, Any]] = {}


def choose_step(model: nn.Module, batch: int = 1, repeats: int = 5, native: bool = True) -> dict[str, Any]:
    """Measure once which one-token step is fastest here: :func:`decode_step` with ``F.linear``,
    with the multi-core ``gemv.linear``, or the C step of :mod:`gpt2ln.native` (where it compiles
    and supports the model).

    Times one step of ``model`` with each (``native=False``: all but the C step), interleaved,
    ``repeats`` rounds after one warm-up, on a scratch cache, and picks another step than
    ``F.linear``'s only if its median is below 0.95x
    ``F.linear``'s, so the default is never slower than the plain product by more than the noise.
    The answer is cached in :data:`STEP_CHOICE` for the process. Returns ``{"step": name,
    "why": str, "step_ms": {name: ms}}``, name one of ``"F.linear"``, ``"gemv.linear"``, ``"native"``.
    """
    from . import native as c_native

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
        steps["gemv.linear"] = partial(decode_step, model, kv=kv, linear=gemv.linear)
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


def _native_step(model: nn.Module, kv: KVCache | None, device: torch.device, fast: bool) -> Callable:
    """The C step for ``generate(native=True)``, or a ValueError naming why it cannot run."""
    from . import native

    if kv is None or not fast:
        raise ValueError("generate: native=True needs use_cache=True, fast=True and max_new_tokens > 0")
    why = "not on CPU" if device.type != "cpu" else native.supports(model, kv.k.shape[1])
    step = native.NativeStep.create(model, kv) if why is None else None
    if step is None:
        why = why or native.STATUS.get("step")
        raise ValueError(f"generate: native=True, but the C step cannot run: {why}")
    return step


def sample(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """logits ``[B, vocab]`` -> next ids ``[B, 1]``: argmax for ``temperature=0``, else a draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    multicore: bool | None = None,
    fast: bool = True,
    native: bool | None = None,
) -> torch.Tensor:
    """``model.generate``: idx ``[B, T]`` -> ``[B, T + max_new_tokens]`` (see ``GPT2.generate``).

    ``fast`` (with the cache, for pre-norm models) runs each one-token step with
    :func:`decode_step`; otherwise every step is ``model(...)`` inside :func:`decoding`.
    With ``multicore`` and ``native`` both None, :func:`choose_step` picks the fast step:
    :func:`decode_step` with ``F.linear`` or ``gemv.linear``, or the C step of
    :mod:`gpt2ln.native`. ``multicore`` True/False forces :func:`decode_step` with
    ``gemv.linear``/``F.linear`` (on the readable path True runs it under ``gemv.multicore()``);
    ``native=True`` forces the C step (a ValueError says why where it cannot run), ``native=False``
    leaves it out.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"generate: expected max_new_tokens to be an int >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"generate: expected temperature >= 0, got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"generate: expected top_k to be None or an int >= 1, got {top_k!r}")
    if multicore is not None and not isinstance(multicore, bool):
        raise TypeError(f"generate: expected gemv to be None, True or False, got {multicore!r}")
    if native is not None and not isinstance(native, bool):
        raise TypeError(f"generate: expected native to be None, True or False, got {native!r}")
    if native and multicore is not None:
        raise ValueError(
            "generate: native=True runs the C step; gemv=True/False choose the Python step's product"
        )
    n_ctx = model.config.n_ctx
    model.check_idx(idx[:, -n_ctx:] if isinstance(idx, torch.Tensor) and idx.ndim == 2 else idx)
    B, T0 = idx.shape
    out = torch.empty(B, T0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
    out[:, :T0] = idx
    kv = None
    if use_cache and max_new_tokens > 0:
        max_len = min(n_ctx, T0 + max_new_tokens)
        kv = KVCache.for_model(model.config, B, max_len, idx.device, model.wte.weight.dtype)
    step = None
    if native:
        step = _native_step(model, kv, idx.device, fast)
    elif fast and kv is not None and supports_fast_step(model):
        if multicore is not None:
            name = "gemv.linear" if multicore else "F.linear"
        else:
            name = choose_step(model, B, native=native is None)["step"]
            if name == "native":
                step = _native_step(model, kv, idx.device, fast)
        if step is None:
            linear = gemv.linear if name == "gemv.linear" else F.linear
            step = partial(decode_step, model, kv=kv, linear=linear)
    readable_gemv = multicore is True and step is None and idx.device.type == "cpu"
    with decoding(model, kv, last_only=True), gemv.multicore() if readable_gemv else nullcontext():
        for t in range(T0, T0 + max_new_tokens):
            if kv is not None and 0 < kv.length < kv.max_len:
                if step is not None:
                    logits = step(out[:, t - 1 : t])  # [B, vocab]
                else:
                    logits = model(out[:, t - 1 : t])[:, -1, :]  # the newest token only
            else:  # first step, no cache, or the window is full: run the last n_ctx tokens
                if kv is not None:
                    kv.reset()
                logits = model(out[:, max(0, t - n_ctx) : t])[:, -1, :]
            out[:, t : t + 1] = sample(logits, temperature, top_k, generator)
    return out
