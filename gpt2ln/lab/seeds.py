"""Run an experiment for several seeds at once, one worker process per CPU core.

A conclusion a chapter draws from a training run or a random draw is checked over several
seeds, ``chapter_seeds()``: the base seed (environment variable ``GPT2LN_SEED``, default 0)
and the ones after it, so ``GPT2LN_SEED=1`` reruns a chapter on seeds 1, 2, 3.

``run_jobs(fn, jobs)`` maps a function over jobs on spawned worker processes of one thread
each (for the course's tiny models one thread per run is faster than two threads sharing a
run); the pool is kept for the next call. Each result comes back as bytes pickled in the
worker with the standard ``pickle`` (not multiprocessing's, which hands each tensor over as a
shared-memory file descriptor), so its tensors travel inside the pipe. ``train_job`` is such a
function: it builds a ``GPT2`` from a seed, trains it with ``gpt2ln.train`` and returns the history and the
trained weights, which ``TrainResult.model()`` turns back into a model.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing
import os
import pickle
import signal
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import torch

from ..model.config import GPT2Config
from ..model.gpt2 import GPT2
from ..model.norms import LayerNorm
from .train import TrainConfig, TrainHistory, get_device, train

SEED_ENV = "GPT2LN_SEED"

_pool: ProcessPoolExecutor | None = None
_pool_workers = 0


def base_seed(default: int = 0) -> int:
    """The chapter's base seed: ``$GPT2LN_SEED`` if set (a non-negative integer), else ``default``."""
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return default
    try:
        seed = int(text)
    except ValueError:
        raise ValueError(f"{SEED_ENV}: expected a non-negative integer, got {text!r}") from None
    if seed < 0:
        raise ValueError(f"{SEED_ENV}: expected a non-negative integer, got {seed}")
    return seed


def chapter_seeds(n: int = 3) -> list[int]:
    """``n`` consecutive seeds from ``base_seed()``: ``[s, s + 1, ..., s + n - 1]``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"chapter_seeds: expected n to be a positive integer, got {n!r}")
    s = base_seed()
    return list(range(s, s + n))


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stopped kernel stops its workers through the pool
    torch.set_num_threads(1)


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_workers
    if _pool is None or _pool_workers != workers:
        close_pool()
        ctx = multiprocessing.get_context("spawn")  # fork after torch has started threads can hang
        _pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker)
        _pool_workers = workers
    return _pool


def _call_saved(fn: Callable[[Any], Any], job: Any) -> bytes:
    """``fn(job)`` in a worker, returned as bytes of the standard ``pickle``.

    Pickled the ordinary way, a CPU tensor leaves a worker as a shared-memory file that the
    parent fetches, one tensor at a time, over a socket from the worker's resource-sharer
    thread, and keeps open for as long as the tensor lives: chapter 11's 99 trained models
    are some 5,000 such files. Under load one of those fetches can fail (a refused or reset
    connection, a full descriptor table); ProcessPoolExecutor then reports "a result has
    failed to un-pickle", marks the whole pool broken and fails every job of the call. As
    bytes, a result is copied through the pipe like any other object.
    """
    return pickle.dumps(fn(job), protocol=pickle.HIGHEST_PROTOCOL)


def _load_saved(data: bytes) -> Any:
    # what ProcessPoolExecutor itself does with every result: our own worker's bytes, not a file
    return pickle.loads(data)


def _broken_pool_error(err: BaseException) -> RuntimeError:
    """A RuntimeError that says what broke the pool: the worker processes' exit codes
    (negative: killed by that signal; -9 is SIGKILL, as the kernel's OOM killer sends) and
    the cause the executor recorded (a worker's traceback, or an un-pickling error)."""
    procs = dict(getattr(_pool, "_processes", None) or {})
    deadline = time.monotonic() + 5  # the pool is broken: let the dying workers' exit codes arrive
    while any(p.exitcode is None for p in procs.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    codes = []
    for pid, proc in procs.items():
        code = proc.exitcode
        if code is not None and code < 0:
            try:
                code = f"{code} ({signal.Signals(-code).name})"
            except ValueError:
                pass
        codes.append(f"pid {pid}: {'running' if code is None else f'exit code {code}'}")
    cause = err.__cause__
    detail = f"; cause: {type(cause).__name__}: {str(cause).strip()[-2000:]}" if cause is not None else ""
    return RuntimeError(
        f"run_jobs: the worker pool broke ({err}); workers: {', '.join(codes) or 'none left'}{detail}. "
        "The pool is closed; the next run_jobs call starts a new one."
    )


def close_pool() -> None:
    """Shut the worker processes down (they are also shut down when Python exits)."""
    global _pool, _pool_workers
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
    _pool, _pool_workers = None, 0


atexit.register(close_pool)


def default_workers() -> int:
    """One worker per CPU core available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _on_accelerator(job: Any) -> bool:
    """Whether ``job`` (a ``TrainJob``, or a tuple or list holding one) trains off the CPU."""
    if isinstance(job, (tuple, list)):
        return any(_on_accelerator(part) for part in job)
    cfg = getattr(job, "cfg", None)
    if not isinstance(cfg, TrainConfig):
        return False
    device = torch.device(cfg.device) if cfg.device is not None else get_device()  # None: train()'s pick
    return device.type != "cpu"


def run_jobs(fn: Callable[[Any], Any], jobs: Iterable[Any], workers: int | None = None) -> list[Any]:
    """``[fn(job) for job in jobs]``, computed on ``workers`` spawned processes of one thread each.

    fn must be importable by name (a module's top-level function, not one defined in a
    notebook), and jobs and results picklable. ``workers=None``: one per CPU core, or 1 when a
    job trains on a GPU (a ``TrainJob`` whose ``cfg.device`` is not the CPU, alone or in a tuple);
    ``workers=1`` runs everything here, in this process, with its thread settings. The results
    come back in the order of the jobs.
    """
    jobs = list(jobs)
    if workers is None:
        workers = 1 if any(_on_accelerator(job) for job in jobs) else default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"run_jobs: expected workers to be a positive integer or None, got {workers!r}")
    if getattr(fn, "__module__", "__main__") == "__main__" and workers > 1:
        raise TypeError(
            f"run_jobs: expected a function importable from a module, got {fn!r} defined in __main__ "
            "(worker processes cannot import it); use workers=1 or move it into a module"
        )
    workers = min(workers, max(1, len(jobs)))
    if workers == 1:
        return [fn(job) for job in jobs]
    pool = _get_pool(workers)
    try:
        saved = list(pool.map(_call_saved, [fn] * len(jobs), jobs, chunksize=1))
    except BrokenProcessPool as err:  # a worker died, or a result could not be read back
        error = _broken_pool_error(err)
        close_pool()  # a broken pool fails every later call: start afresh next time
        raise error from err
    return [_load_saved(data) for data in saved]


def _ln_f_layernorm(model: GPT2) -> None:
    model.ln_f = LayerNorm(model.config.n_embd, eps=model.config.layer_norm_epsilon)


HOOKS: dict[str, Callable[[GPT2], None]] = {
    "ln_f_layernorm": _ln_f_layernorm,  # chapter 11: DyT in the blocks, a LayerNorm ln_f
}


@dataclass
class TrainJob:
    """One training run: ``GPT2(config)`` built right after ``torch.manual_seed(init_seed)``,
    changed by ``HOOKS[hook]`` if given, then ``train(model, ..., cfg)`` (``cfg.seed`` sets the
    batches). ``init_seed=None`` uses ``cfg.seed``."""

    config: GPT2Config
    cfg: TrainConfig
    init_seed: int | None = None
    hook: str | None = None
    key: Any = None  # anything that names the run for the caller

    def __post_init__(self) -> None:
        if not isinstance(self.config, GPT2Config):
            raise TypeError(f"TrainJob: expected config to be a GPT2Config, got {type(self.config).__name__}")
        if not isinstance(self.cfg, TrainConfig):
            raise TypeError(f"TrainJob: expected cfg to be a TrainConfig, got {type(self.cfg).__name__}")
        if self.hook is not None and self.hook not in HOOKS:
            raise ValueError(f"TrainJob: expected hook in {sorted(HOOKS)} or None, got {self.hook!r}")


@dataclass
class TrainResult:
    """What ``train_job`` returns: the job, its ``TrainHistory``, the trained weights (on the
    CPU), the wall-clock seconds the training took and the CPU seconds its process spent on it."""

    job: TrainJob
    history: TrainHistory
    state: dict[str, torch.Tensor] = field(repr=False)
    seconds: float
    cpu_seconds: float = math.nan

    def model(self) -> GPT2:
        """The trained model, rebuilt from the weights, in eval mode on the CPU."""
        torch.manual_seed(0)  # the init is overwritten; seeded only so that nothing else is drawn at random
        model = GPT2(self.job.config)
        if self.job.hook is not None:
            HOOKS[self.job.hook](model)
        model.load_state_dict(self.state)
        return model.eval()

    @property
    def final_val_loss(self) -> float:
        """The last validation loss, NaN if the run diverged."""
        return math.nan if self.history.diverged else self.history.val_loss[-1]


def train_job(job: TrainJob) -> TrainResult:
    """Build, train and return one run (see ``TrainJob``); the function ``run_jobs`` maps."""
    import time

    torch.manual_seed(job.cfg.seed if job.init_seed is None else job.init_seed)
    model = GPT2(job.config)
    if job.hook is not None:
        HOOKS[job.hook](model)
    data = _tokens()
    start, cpu_start = time.perf_counter(), time.process_time()
    history = train(model, data["train"], data["val"], job.cfg, progress=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return TrainResult(job=job, history=history, state=state, seconds=seconds, cpu_seconds=cpu_seconds)


_TOKENS: dict[str, torch.Tensor] = {}


def _tokens() -> dict[str, torch.Tensor]:
    if not _TOKENS:
        from .data import load_tokens

        _TOKENS.update(train=load_tokens("train"), val=load_tokens("val"))
    return _TOKENS


@dataclass(frozen=True)
class Spread:
    """Median, smallest and largest of a set of values (one per seed)."""

    median: float
    lo: float
    hi: float

    @property
    def width(self) -> float:
        return self.hi - self.lo

    def __format__(self, spec: str) -> str:
        """``median (lo to hi)``; ``median (all seeds)`` when the ends print the same."""
        spec = spec or ".3g"
        lo, hi = format(self.lo, spec), format(self.hi, spec)
        return f"{self.median:{spec}} ({'all seeds' if lo == hi else f'{lo} to {hi}'})"


def spread(values: Sequence[float]) -> Spread:
    """The ``Spread`` of ``values`` (NaNs ignored; all NaN gives NaNs)."""
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("spread: expected at least one value, got none")
    finite = [v for v in vals if not math.isnan(v)]
    if not finite:
        return Spread(math.nan, math.nan, math.nan)
    return Spread(statistics.median(finite), min(finite), max(finite))
