"""The decoding step and the norm kernels in C (``csrc/``), compiled here and called with ctypes.

A decoding step of GPT-2 small multiplies one token's vector by every weight matrix: it reads
~500 MB of weights and does ~1 flop per 2 bytes, so its floor is the time the memory takes to
deliver the weights once (``python -m gpt2ln.lab.bench`` measures both). In Python each step also
pays for ~200 operator calls (a few microseconds each) and for the BLAS matrix-vector product,
which on some CPUs runs on one core. ``csrc/decode_step.c`` is the same step as
:func:`gpt2ln.model.generate.decode_step` (LayerNorm, products, causal attention over the cache,
GELU, residuals, ``ln_f``, the tied unembedding) as ~100 lines of plain C, in the spirit of
llm.c: one call per token, on PyTorch's own weight and cache memory (pointers, no copies),
each product split over the threads with OpenMP. It is a speed path, like gpt-fast's compiled
step or llama.cpp: the readable path stays :class:`gpt2ln.GPT2`'s forward, and the tests check
that both give the same tokens.

``csrc/norms.c`` holds the one-pass LayerNorm, RMSNorm and DyT kernels that the norm modules
use for large CPU inputs at inference (:func:`norm`, called by ``gpt2ln.lab.fast.kernels``).

:func:`load` compiles both files once per machine (``cc -O3 -march=native -fopenmp``, about a
second; the library is kept in ``~/.cache/gpt2ln``, or ``$GPT2LN_CACHE``, keyed by the sources,
the compiler and the CPU) and loads it with ``ctypes``. Where that fails (no C compiler, another
platform), on the portable float path (``ATEN_CPU_CAPABILITY=default``) or where the environment
sets ``GPT2LN_COMPILE=0`` or ``GPT2LN_NATIVE=0``, it returns None and says why in
:data:`STATUS`; ``generate`` then runs the Python step and the norms PyTorch's kernels. Without
OpenMP it builds a one-thread library (the step then competes in ``choose_step``; the norms are
left to PyTorch). :func:`supports` says which models the step computes exactly: pre-norm
LayerNorm GPT-2 (with or without biases), float32 on CPU, one sequence.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import record_function

__all__ = ["SOURCE", "SOURCES", "STATUS", "NativeStep", "load", "norm", "supports"]

SOURCE = Path(__file__).with_name("csrc") / "decode_step.c"
#: every C file of the library: the decoding step and the norm kernels of :func:`norm`
SOURCES = (SOURCE, SOURCE.with_name("norms.c"))
#: what both include (the thread count, tanh_rational): part of the cache key with SOURCES
HEADERS = (SOURCE.with_name("common.h"),)

#: "loaded: <path>", or "unavailable: <why>" once :func:`load` has decided (cached for the process)
STATUS: dict[str, str] = {}
_LIB: list[ctypes.CDLL] = []

#: compiler flag sets tried in turn: the first that compiles wins
_FLAG_SETS = (
    ["-O3", "-march=native", "-fopenmp"],
    ["-O3", "-mcpu=native", "-fopenmp"],  # clang on arm64
    ["-O3", "-fopenmp"],
    ["-O3", "-march=native"],  # no OpenMP (Apple's clang): one thread
    ["-O3"],
)


def _cache_dir() -> Path:
    return Path(os.environ.get("GPT2LN_CACHE", Path.home() / ".cache" / "gpt2ln"))


def _cpu_id() -> str:
    """The CPU's model and instruction-set flags (Linux), so that a library built with
    ``-march=native`` is never loaded on another kind of CPU sharing the cache directory."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "|".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags", "Features"))}))
    except OSError:
        return platform.processor()


def _compile(cc: str) -> Path:
    """Compile SOURCES into a shared library under the cache directory (reused when the sources,
    the compiler and the machine are unchanged); RuntimeError with the compiler's message."""
    src = b"".join(p.read_bytes() for p in (*SOURCES, *HEADERS))
    errors = []
    for flags in _FLAG_SETS:
        key = hashlib.sha256(
            src + " ".join([cc, *flags, platform.machine(), _cpu_id(), sys.platform]).encode()
        ).hexdigest()[:16]
        out = _cache_dir() / f"gpt2ln-native-{key}.so"
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        # built next to its final name, then renamed: atomic, so a process that loads the library
        # while another builds it (pytest -n 2) sees either nothing or the whole file
        tmp_out = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        cmd = [cc, *flags, "-shared", "-fPIC", "-std=c11", *map(str, SOURCES), "-o", str(tmp_out), "-lm"]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as err:
            errors.append(f"{' '.join(flags)}: {err}")
            continue
        if run.returncode == 0:
            os.replace(tmp_out, out)
            return out
        tmp_out.unlink(missing_ok=True)
        errors.append(f"{' '.join(flags)}: {(run.stderr.strip().splitlines() or ['failed'])[0][:200]}")
    raise RuntimeError(f"{cc} could not compile {', '.join(p.name for p in SOURCES)}: " + "; ".join(errors))


def load() -> ctypes.CDLL | None:
    """The compiled step, or None where it is not available (the reason is in ``STATUS["step"]``)."""
    if _LIB:
        return _LIB[0]
    if "step" in STATUS:
        return None
    for var in ("GPT2LN_COMPILE", "GPT2LN_NATIVE"):
        if os.environ.get(var, "1") == "0":
            STATUS["step"] = f"unavailable: {var}=0"
            return None
    if os.environ.get("ATEN_CPU_CAPABILITY") == "default":
        STATUS["step"] = (
            "unavailable: ATEN_CPU_CAPABILITY=default (the portable float path: PyTorch's kernels only)"
        )
        return None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        STATUS["step"] = "unavailable: no C compiler (cc, gcc or clang) on PATH"
        return None
    try:
        path = _compile(cc)
        lib = ctypes.CDLL(str(path))
        fn = lib.gpt2ln_decode_step
    except (RuntimeError, OSError, AttributeError) as err:
        STATUS["step"] = f"unavailable: {type(err).__name__}: {err}"
        return None
    fn.restype = ctypes.c_int
    ints = [ctypes.c_int] * 6  # pos, n_layer, n_head, n_embd, vocab, max_len
    fn.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long, *ints, ctypes.c_float, ctypes.c_int]
    lib.gpt2ln_products_only.restype = None
    lib.gpt2ln_products_only.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    p, c_long, c_int, c_float = ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_float
    lib.gpt2ln_layer_norm.argtypes = [p, p, p, p, c_long, c_int, c_float, c_int]
    lib.gpt2ln_rms_norm.argtypes = [p, p, p, c_long, c_int, c_float, c_int]
    lib.gpt2ln_dyt.argtypes = [p, c_float, p, p, p, c_long, c_int, c_int]
    for fn_norm in (lib.gpt2ln_layer_norm, lib.gpt2ln_rms_norm, lib.gpt2ln_dyt):
        fn_norm.restype = None
    lib.gpt2ln_openmp.restype = ctypes.c_int
    threads = "OpenMP" if lib.gpt2ln_openmp() else "one thread (built without OpenMP)"
    STATUS["step"] = f"loaded: {path} ({threads})"
    _LIB.append(lib)
    return lib


def _float32_cpu(t: torch.Tensor | None) -> bool:
    return t is None or (t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous())


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def norm(name: str, x: torch.Tensor, *args: torch.Tensor | float | None) -> torch.Tensor | None:
    """The C kernel of ``csrc/norms.c`` for a norm module (``layer_norm``: weight, bias, eps;
    ``rms_norm``: weight, eps; ``dyt``: alpha, weight, bias) on x ``[..., d]`` -> ``[..., d]``, or
    None where it does not apply (not contiguous float32 on CPU, or no library), so the caller
    runs another path. No autograd: the caller checks that none is needed."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not all(_float32_cpu(t) for t in (x, *tensors)) or x.ndim == 0 or x.shape[-1] == 0:
        return None
    lib = load()
    if lib is None or (not lib.gpt2ln_openmp() and torch.get_num_threads() > 1):
        return None  # one C thread would lose to PyTorch's multi-threaded kernels
    d = x.shape[-1]
    rows, y, threads = x.numel() // d, torch.empty_like(x), torch.get_num_threads()
    if name == "layer_norm":
        w, b, eps = args
        lib.gpt2ln_layer_norm(x.data_ptr(), _ptr(w), _ptr(b), y.data_ptr(), rows, d, eps, threads)
    elif name == "rms_norm":
        w, eps = args
        lib.gpt2ln_rms_norm(x.data_ptr(), _ptr(w), y.data_ptr(), rows, d, eps, threads)
    elif name == "dyt":
        alpha, w, b = args
        lib.gpt2ln_dyt(x.data_ptr(), float(alpha), _ptr(w), _ptr(b), y.data_ptr(), rows, d, threads)
    else:
        raise ValueError(f"native.norm: expected layer_norm, rms_norm or dyt, got {name!r}")
    return y


def supports(model: nn.Module, batch: int = 1) -> str | None:
    """None if the C step computes exactly what ``model`` computes for one sequence; otherwise why not."""
    cfg = model.config
    if batch != 1:
        return f"batch {batch}: the C step decodes one sequence"
    if cfg.norm_position != "pre" or cfg.norm != "layernorm" or cfg.qk_norm:
        qk = " with QK-norm" if cfg.qk_norm else ""
        return f"{cfg.norm_position}-norm {cfg.norm}{qk}: the C step is pre-norm LayerNorm"
    if model.training and cfg.dropout > 0:
        return "dropout is active (call model.eval())"
    norms = [m for b in model.h for m in (b.ln_1, b.ln_2)] + [model.ln_f]
    # gpt2ln.LayerNorm by name: norms imports fused, which imports this module
    if any(type(m).__qualname__ != "LayerNorm" or type(m).__module__ != "gpt2ln.model.norms" for m in norms):
        return "a norm that is not gpt2ln.LayerNorm"
    if any(m.eps != cfg.layer_norm_epsilon for m in norms):
        return f"a LayerNorm whose eps is not the config's {cfg.layer_norm_epsilon}"
    for name, p in model.named_parameters():
        if not _float32_cpu(p):
            return f"{name}: the C step needs contiguous float32 on CPU, got {p.dtype} on {p.device}"
    d = cfg.n_embd
    for b in model.h:
        shapes = [b.attn.c_attn.weight.shape, b.attn.c_proj.weight.shape, b.mlp.c_fc.weight.shape]
        if shapes != [(3 * d, d), (d, d), (4 * d, d)]:
            return f"unexpected weight shapes {shapes}"
    return None


def _params(model: nn.Module) -> list[torch.Tensor | None]:
    """The weights in the order ``csrc/decode_step.c`` reads them."""
    out: list[torch.Tensor | None] = []
    for b in model.h:
        a, m = b.attn, b.mlp
        for t in (b.ln_1, a.c_attn, a.c_proj, b.ln_2, m.c_fc, m.c_proj):
            out += [t.weight, t.bias]
    return [*out, model.wte.weight, model.wpe.weight, model.ln_f.weight, model.ln_f.bias]


class NativeStep:  # kv: a gpt2ln.model.kv_cache.KVCache (not imported: kv_cache imports this module)
    """``step(tok)``: the C decoding step of ``model`` for token ids tok ``[1, 1]`` at position
    ``kv.length``, writing into the :class:`gpt2ln.model.kv_cache.KVCache` ``kv`` -> logits ``[1, vocab]``;
    advances ``kv`` by one. Build it with :meth:`create`, which returns None where the step is
    unavailable or does not support the model."""

    def __init__(self, lib: ctypes.CDLL, model: nn.Module, kv: Any) -> None:
        cfg = model.config
        self.fn, self.model, self.kv, self.cfg = lib.gpt2ln_decode_step, model, kv, cfg
        self.fn_products = lib.gpt2ln_products_only
        self.tensors = _params(model)  # held, so the pointers stay valid
        ptrs = [0 if t is None else t.data_ptr() for t in self.tensors]
        self.table = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self.scratch = torch.empty(10 * cfg.n_embd + cfg.n_head * kv.max_len)
        self.logits = torch.empty(1, cfg.vocab_size)

    @classmethod
    def create(cls, model: nn.Module, kv: Any) -> NativeStep | None:
        lib = load()
        if lib is None or supports(model, kv.k.shape[1]) is not None:
            return None
        if not (_float32_cpu(kv.k) and _float32_cpu(kv.v)):
            return None
        return cls(lib, model, kv)

    def products_only(self) -> None:
        """Only the step's matrix-vector products (same weights, same order): for the benchmark."""
        cfg = self.cfg
        x = torch.ones(4 * cfg.n_embd)
        out = torch.empty(max(cfg.vocab_size, 4 * cfg.n_embd))
        self._products_args = (x, out)  # kept alive for the call
        self.fn_products(
            ctypes.addressof(self.table), x.data_ptr(), out.data_ptr(),
            cfg.n_layer, cfg.n_embd, cfg.vocab_size, torch.get_num_threads(),
        )  # fmt: skip

    def __call__(self, tok: torch.Tensor) -> torch.Tensor:
        kv, cfg = self.kv, self.cfg
        kv.check_room(1)
        token = int(tok.reshape(-1)[0])
        if not 0 <= token < cfg.vocab_size:
            raise ValueError(f"decode step: expected a token id in [0, {cfg.vocab_size}), got {token}")
        with record_function("gpt2ln::native_step"):  # named in torch.profiler's tables
            rc = self.fn(
                ctypes.addressof(self.table), kv.k.data_ptr(), kv.v.data_ptr(), self.scratch.data_ptr(),
                self.logits.data_ptr(), token, kv.length, cfg.n_layer, cfg.n_head, cfg.n_embd,
                cfg.vocab_size, kv.max_len, cfg.layer_norm_epsilon, torch.get_num_threads(),
            )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"decode step: the C step rejected its arguments (code {rc})")
        kv.advance(1)
        return self.logits.clone()
