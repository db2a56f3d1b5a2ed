"""Checks for chapter 8 (QK-norm and attention-logit growth).

``check_qk_norm_scores(fn)`` runs the learner's ``fn(q, k, g_q, g_k, eps=1e-5)``, the
pre-softmax scores of QK-norm with RMSNorm, on inputs where each classic mistake gives
a different answer, and names the one it matches. ``check_lr_sensitivity(fn)`` checks
``fn(lrs, losses, loss_init) -> float``, the learning-rate sensitivity of Wortsman et
al. (2023), on sweeps with and without diverged runs. ``check_collapse_warmup(w)`` trains the
chapter's small model without QK-norm at 3e-2 with ``w`` warm-up steps and with ``w - 10``, and
checks that ``w`` is just past the edge: no collapse at ``w``, collapse at ``w - 10``.
``check_collapse_lr(lr)`` does the same over the learning rate (``lr`` and ``lr / 2``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._core import (
    Mistake,
    as_float,
    call,
    call_on_copies,
    compare,
    divide_by_root,
    fail,
    passed,
    rel_dist,
)

__all__ = ["check_collapse_lr", "check_collapse_warmup", "check_lr_sensitivity", "check_qk_norm_scores"]


def _dist(a: torch.Tensor, ref: torch.Tensor) -> float:
    """rel_dist, and inf also when ref has NaN/inf (a mistake's output may)."""
    if not torch.isfinite(ref).all():
        return math.inf
    return rel_dist(a, ref)


# ---------------------------------------------------------------------------- QK-norm scores
_QK_FORMULA = (
    "q_hat = q / sqrt(mean(q^2 over D) + eps) * g_q; k_hat likewise with g_k; "
    "scores = q_hat @ k_hat^T / sqrt(D)"
)


def _rms(t: torch.Tensor, eps: float | None, dim: int | tuple[int, ...] = -1, where: str = "inside"):
    """t divided by its RMS over dim (eps inside or outside the root, or no eps)."""
    ms = t.pow(2).mean(dim=dim, keepdim=True)
    if eps is None:
        return t / ms.sqrt()
    return divide_by_root(t, ms, eps, where)


def _qk(
    q: torch.Tensor,
    k: torch.Tensor,
    g_q: torch.Tensor,
    g_k: torch.Tensor,
    eps: float,
    *,
    dim: int | tuple[int, ...] = -1,
    norm: str = "rms",
    eps_where: str = "inside",
    gain: str = "after",
    scale: str = "sqrt",
    which: str = "both",
    after_dot: bool = False,
    transpose: bool = False,
) -> torch.Tensor:
    """QK-norm scores with RMSNorm, or one classic mistake. q ``[B, H, Tq, D]``, k ``[B, H, Tk, D]``."""
    D = q.shape[-1]

    def normalize(t: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        if gain == "before":
            t = t * g
        if norm == "rms":
            u = _rms(t, None if eps_where == "none" else eps, dim, eps_where)
        elif norm == "layernorm":
            u = _rms(t - t.mean(dim=dim, keepdim=True), eps, dim)
        elif norm == "std":  # divided by torch.std (Bessel), not centred
            u = t / torch.sqrt(t.var(dim=dim, keepdim=True) + eps)
        else:  # "l2": unit length
            u = t / torch.sqrt(t.pow(2).sum(dim=dim, keepdim=True) + eps)
        return u * g if gain == "after" else u

    if after_dot:  # raw scores, then each row normalized over the keys
        s = q @ k.transpose(-2, -1) / math.sqrt(D)
        return _rms(s, eps)
    q_hat = normalize(q, g_q) if which in ("both", "q") else q
    k_hat = normalize(k, g_k) if which in ("both", "k") else k
    if which == "same_gain_q":
        q_hat, k_hat = normalize(q, g_q), normalize(k, g_q)
    elif which == "same_gain_k":
        q_hat, k_hat = normalize(q, g_k), normalize(k, g_k)
    s = k_hat @ q_hat.transpose(-2, -1) if transpose else q_hat @ k_hat.transpose(-2, -1)
    factor = {"sqrt": 1 / math.sqrt(D), "none": 1.0, "D": 1 / D}[scale]
    return s * factor


def _qk_mistakes(default_eps: float) -> list[Mistake]:
    def m(label: str, fix: str, **kw: Any) -> Mistake:
        return Mistake(label, fix, lambda q, k, gq, gk, eps: _qk(q, k, gq, gk, eps, **kw))

    axis_fix = "normalize over the last axis, D: t.pow(2).mean(dim=-1, keepdim=True)"
    return [
        m(
            "normalized over the wrong axis: the positions (dim -2, T) instead of the head dimension D",
            axis_fix,
            dim=-2,
        ),
        m(
            "normalized over the wrong axis: the heads (dim 1, H) instead of the head dimension D",
            axis_fix,
            dim=1,
        ),
        m(
            "normalized over the wrong axis: a whole head's [T, D] block at once instead of each "
            "vector over D",
            axis_fix,
            dim=(-2, -1),
        ),
        m(
            "forgot the 1/sqrt(D) scale: QK-norm keeps it, scores = q_hat @ k_hat^T / sqrt(D)",
            "divide q_hat @ k_hat^T by sqrt(D), D = q.shape[-1]",
            scale="none",
        ),
        m(
            "scaled by 1/D instead of 1/sqrt(D)",
            "divide by math.sqrt(D)",
            scale="D",
        ),
        m(
            "normalized after the dot product: the scores were normalized instead of q and k",
            "normalize each query and each key vector first, then take the dot products",
            after_dot=True,
        ),
        m(
            "unit-length (L2) normalization instead of RMS: F.normalize makes |q_hat| = 1, not sqrt(D), "
            "so the scores are D times too small",
            "divide by the root MEAN square, sqrt(mean(q^2) + eps), not by the norm sqrt(sum(q^2))",
            norm="l2",
        ),
        m(
            "shared the gain across q and k: used g_q for both",
            "q_hat uses g_q, k_hat uses g_k",
            which="same_gain_q",
        ),
        m(
            "shared the gain across q and k: used g_k for both",
            "q_hat uses g_q, k_hat uses g_k",
            which="same_gain_k",
        ),
        m(
            "normalized q only, not k",
            "normalize the keys too: k_hat = k / sqrt(mean(k^2) + eps) * g_k",
            which="q",
        ),
        m(
            "normalized k only, not q",
            "normalize the queries too: q_hat = q / sqrt(mean(q^2) + eps) * g_q",
            which="k",
        ),
        m(
            "gain applied before the norm: rms_norm(g * q) instead of g * rms_norm(q)",
            "normalize first, then multiply by the gain",
            gain="before",
        ),
        m(
            "forgot the gains g_q and g_k",
            "multiply the normalized q by g_q and the normalized k by g_k",
            gain="none",
        ),
        m(
            "subtracted the mean (LayerNorm) instead of RMSNorm",
            "RMSNorm does not centre: q / sqrt(mean(q^2) + eps) * g_q",
            norm="layernorm",
        ),
        m(
            "divided by the standard deviation (torch.std) instead of the RMS",
            "the RMS is sqrt(mean(q^2) + eps): no centring, no Bessel correction",
            norm="std",
        ),
        m(
            "forgot eps: q / sqrt(mean(q^2)) with no eps",
            "q / sqrt(mean(q^2) + eps), eps inside the square root",
            eps_where="none",
        ),
        m(
            "eps outside the square root: q / (sqrt(mean(q^2)) + eps)",
            "put eps inside: q / sqrt(mean(q^2) + eps)",
            eps_where="outside",
        ),
        m(
            "returned the scores transposed: keys x queries (k_hat @ q_hat^T)",
            "rows are queries, columns keys: q_hat @ k_hat.transpose(-2, -1)",
            transpose=True,
        ),
        *(
            Mistake(
                f"ignored the eps argument (used eps={e:g} whatever eps is)",
                "use the eps passed in",
                lambda q, k, gq, gk, eps, e=e: _qk(q, k, gq, gk, e),
            )
            for e in dict.fromkeys((default_eps, 1e-5, 1e-6))
        ),
    ]


@dataclass
class _QKCase:
    what: str
    q: torch.Tensor
    k: torch.Tensor
    g_q: torch.Tensor
    g_k: torch.Tensor
    eps: float | None  # None: not passed, the default applies
    tol: float


_QK_DEFAULT_EPS = 1e-5  # gpt2ln.rms_norm's, GPT-2's LayerNorm eps (lesson 004)


def _qk_cases() -> list[_QKCase]:
    gen = torch.Generator().manual_seed(8)

    def r(*shape: int, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
        return mean + std * torch.randn(*shape, generator=gen, dtype=torch.float64)

    def gain(D: int) -> torch.Tensor:
        return 1.0 + 0.5 * r(D)

    f32 = torch.float32
    q3, k3 = r(2, 2, 4, 8, std=1e-3), r(2, 2, 4, 8, std=1e-3)
    q3[0, 1, 2] = 0.0  # a query vector of zeros: its scores must be 0, not NaN
    return [
        _QKCase(
            "q, k of shape [2, 3, 5, 8] (B, H, T, D), entries N(0.5, 1), float64, eps=1e-5",
            r(2, 3, 5, 8, mean=0.5),
            r(2, 3, 5, 8, mean=0.5),
            gain(8),
            gain(8),
            1e-5,
            1e-9,
        ),
        _QKCase(
            "q [1, 2, 4, 16] and k [1, 2, 6, 16] (4 queries, 6 keys), float32, eps=1e-6",
            r(1, 2, 4, 16, std=3.0).to(f32),
            r(1, 2, 6, 16, std=0.2).to(f32),
            gain(16).to(f32),
            gain(16).to(f32),
            1e-6,
            1e-5,
        ),
        _QKCase(
            "tiny q, k (entries ~1e-3, so eps matters; one query vector all zeros), eps=1e-4, float64",
            q3,
            k3,
            gain(8),
            gain(8),
            1e-4,
            1e-9,
        ),
    ]


def check_qk_norm_scores(fn: Callable[..., Any]) -> None:
    """Check ``fn(q, k, g_q, g_k, eps=1e-5)`` gives QK-norm's scores with RMSNorm.

    q ``[B, H, Tq, D]``, k ``[B, H, Tk, D]``, g_q and g_k ``[D]``; returns the
    unmasked pre-softmax scores ``[B, H, Tq, Tk]`` =
    ``rms_norm(q) * g_q @ (rms_norm(k) * g_k)^T / sqrt(D)`` (eps inside the root).
    Three inputs: float64 with a non-zero mean, float32 with 4 queries and 6 keys,
    tiny vectors (one all zeros); every call passes eps by keyword (1e-5, 1e-6, 1e-4), so
    the learner's default eps is never judged. A wrong output
    names the classic mistake it matches: wrong axis (T, heads, or the whole head),
    no or wrong scale, normalized after the dot product, L2 instead of RMS, one gain
    for both, q or k left unnormalized, gain before the norm, no gains, LayerNorm or
    std instead of RMS, eps outside the root, forgot eps, ignored eps, transposed.
    """
    check = "check_qk_norm_scores"
    mistakes = _qk_mistakes(_QK_DEFAULT_EPS)
    for case in _qk_cases():
        tensors = (case.q, case.k, case.g_q, case.g_k)
        out = call_on_copies(
            check,
            fn,
            tensors,
            names=("q", "k", "g_q", "g_k"),
            what=case.what,
            kwargs={} if case.eps is None else {"eps": case.eps},
        )
        eps = _QK_DEFAULT_EPS if case.eps is None else case.eps
        d64 = (*(t.double() for t in tensors), eps)
        compare(
            check,
            f"on {case.what}",
            out,
            _qk(*d64),
            case.tol,
            mistakes,
            d64,
            formula=_QK_FORMULA,
            nonfinite="forgot eps: a vector of zeros has RMS 0, and 0 / 0 = NaN. Fix: "
            "q / sqrt(mean(q^2) + eps), eps inside the square root",
            skip=(RuntimeError, ValueError),
        )
    passed(check, "matches QK-norm (RMSNorm) scores on every test input, tiny and all-zero vectors included")


# ---------------------------------------------------------------------------- LR sensitivity
_LRS_FORMULA = "capped = min(loss, loss_init) (loss_init if NaN/inf); mean(capped - min(capped))"


def _capped(losses: Sequence[float], loss_init: float) -> list[float]:
    return [loss_init if not math.isfinite(x) else min(x, loss_init) for x in losses]


def _sens(lrs: Sequence[float], losses: Sequence[float], loss_init: float) -> float:
    c = _capped(losses, loss_init)
    best = min(c)
    return sum(x - best for x in c) / len(c)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _lrs_mistakes() -> list[Mistake]:
    def no_min(lrs, losses, init):  # NaN/inf -> init, but no cap: a run that ended above init counts in full
        c = [x if math.isfinite(x) else init for x in losses]
        return _mean([x - min(c) for x in c])

    def dropped(lrs, losses, init):
        c = [min(x, init) for x in losses if math.isfinite(x)]
        return _mean([x - min(c) for x in c]) if c else math.nan

    def minus_mean(lrs, losses, init):
        c = _capped(losses, init)
        return _mean([x - _mean(c) for x in c])

    def minus_init(lrs, losses, init):
        return _mean([x - init for x in _capped(losses, init)])

    def maximum(lrs, losses, init):
        c = _capped(losses, init)
        return max(x - min(c) for x in c)

    def lr_weighted(lrs, losses, init):
        c = _capped(losses, init)
        return sum(w * (x - min(c)) for w, x in zip(lrs, c, strict=True)) / sum(lrs)

    def sample_mean(lrs, losses, init):  # divided by n - 1
        c = _capped(losses, init)
        return sum(x - min(c) for x in c) / (len(c) - 1) if len(c) > 1 else math.nan

    def median(lrs, losses, init):
        c = sorted(x - min(_capped(losses, init)) for x in _capped(losses, init))
        mid = len(c) // 2
        return c[mid] if len(c) % 2 else (c[mid - 1] + c[mid]) / 2

    def best_of_raw(lrs, losses, init):  # the best over the uncapped, finite losses
        finite = [x for x in losses if math.isfinite(x)]
        best = min(finite) if finite else init
        return _mean([x - best for x in _capped(losses, init)])

    return [
        Mistake(
            "forgot the min with loss_init: a run that ended above its initial loss counts in full",
            "cap every loss at loss_init: min(loss, loss_init), and count NaN/inf as loss_init",
            no_min,
        ),
        Mistake(
            "dropped the diverged runs: averaged over the finite losses only, so a sweep that diverges "
            "at high learning rates looks less sensitive",
            "keep every run in the mean; a diverged run (NaN or inf) counts as loss_init",
            dropped,
        ),
        Mistake(
            "subtracted the mean instead of the best: the result is always 0",
            "subtract the best (smallest) capped loss of the sweep",
            minus_mean,
        ),
        Mistake(
            "subtracted loss_init instead of the best",
            "subtract the best (smallest) capped loss of the sweep",
            minus_init,
        ),
        Mistake(
            "used the max instead of the mean over the sweep",
            "average min(loss, loss_init) - best over all the runs",
            maximum,
        ),
        Mistake(
            "weighted the runs by their learning rate: the expectation is a plain mean over the runs "
            "of the (log-spaced) sweep",
            "sum(capped - best) / len(capped)",
            lr_weighted,
        ),
        Mistake(
            "divided by n - 1 (as for a sample variance): the expectation is the plain mean over the n runs",
            "sum(capped - best) / len(capped)",
            sample_mean,
        ),
        Mistake(
            "took the median over the runs instead of the mean",
            "average over all the runs: sum(capped - best) / len(capped)",
            median,
        ),
        Mistake(
            "took the best over the raw losses, not the capped ones",
            "best = min(capped losses), so it is at most loss_init",
            best_of_raw,
        ),
    ]


@dataclass
class _LRSCase:
    what: str
    lrs: Any
    losses: Any
    loss_init: float


def _lrs_cases() -> list[_LRSCase]:
    import numpy as np

    nan, inf = math.nan, math.inf
    return [
        _LRSCase(
            "a sweep of 5 runs, none diverged (Python lists)",
            [1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
            [2.86, 2.63, 2.66, 3.02, 3.23],
            5.54,
        ),
        _LRSCase(
            "a sweep of 7 runs with a NaN loss, an inf loss and a run that ended above loss_init "
            "(NumPy arrays)",
            np.array([3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1]),
            np.array([3.40, 2.91, 2.70, 2.75, 6.20, nan, inf]),
            5.54,
        ),
        _LRSCase(
            "a sweep of 4 runs whose two highest learning rates diverged (float64 tensors)",
            torch.tensor([1e-3, 1e-2, 1e-1, 1.0], dtype=torch.float64),
            torch.tensor([3.1, 2.8, nan, nan], dtype=torch.float64),
            5.5,
        ),
        _LRSCase(
            "a sweep of 3 runs that all diverged (a list of NaN and inf)",
            [1e-2, 1e-1, 1.0],
            [nan, inf, nan],
            5.5,
        ),
    ]


def _copy(x: Any) -> Any:
    """A fresh copy of a list, NumPy array or tensor, so the learner cannot change the case."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    return list(x) if isinstance(x, list) else x.copy()


def check_lr_sensitivity(fn: Callable[..., Any]) -> None:
    """Check ``fn(lrs, losses, loss_init) -> float``, the LR sensitivity of Wortsman et al. (2023).

    ``E_lr[min(loss(lr), loss_init) - min_lr' min(loss(lr'), loss_init)]``, the mean over
    the runs of the sweep; a diverged run's loss (NaN or inf) counts as ``loss_init``.
    Four sweeps: Python lists without divergence, NumPy arrays with NaN, inf and a run
    that ended above ``loss_init``, float64 tensors, and a sweep where every run
    diverged (the answer is 0). A wrong answer names the mistake it matches: no min
    with ``loss_init``, NaN not handled, diverged runs dropped, the mean or
    ``loss_init`` subtracted instead of the best, the max instead of the mean, runs
    weighted by learning rate, the best taken over the raw losses.
    """
    check = "check_lr_sensitivity"
    mistakes = _lrs_mistakes()
    for case in _lrs_cases():
        lrs = [float(x) for x in case.lrs]
        losses = [float(x) for x in case.losses]
        out = call(check, fn, _copy(case.lrs), _copy(case.losses), case.loss_init)
        y = as_float(check, out, f"on {case.what}", "one number (a mean over the sweep)")
        truth = _sens(lrs, losses, case.loss_init)
        if math.isnan(y):
            fail(
                check,
                f"on {case.what}, your function returned NaN (expected {truth:.6g})",
                "NaN handling: a diverged run's loss is NaN, and NaN spreads through min, mean and "
                "subtraction (min(nan, 5.5) is nan, and np.min of an array holding a NaN is NaN). Count a "
                "non-finite loss as loss_init: `loss_init if not math.isfinite(x) else min(x, loss_init)`",
            )
        if math.isinf(y):
            fail(
                check,
                f"on {case.what}, your function returned {y} (expected {truth:.6g})",
                "forgot the min with loss_init: a diverged run's infinite loss went into the mean. "
                "Fix: cap every loss at loss_init, min(loss, loss_init), and count NaN/inf as loss_init",
            )
        compare(
            check,
            f"on {case.what}",
            torch.tensor(y, dtype=torch.float64),
            torch.tensor(truth, dtype=torch.float64),
            1e-9,
            mistakes,
            (lrs, losses, case.loss_init),
            formula=_LRS_FORMULA,
            differs=f"your function returned {y:.6g}, the LR sensitivity is {truth:.6g}: it differs",
            skip=(RuntimeError, ValueError),
        )
    passed(check, "matches the LR sensitivity on every test sweep, diverged runs included")


# ---------------------------------------------------------------------------- the collapse edge
COLLAPSE_NATS = 1.0  # the chapter's line: mean attention entropy below 1 nat is a collapsed model
COLLAPSE_STEPS = 150
COLLAPSE_WARMUP = 30  # the chapter's base_cfg
WARMUP_LR = 3e-2  # exercise 8.3: the chapter's first collapsed rate
WARMUP_STEP = 10  # the edge, to within this many warm-up steps


def _entropy_after(lr: float, warmup_steps: int = COLLAPSE_WARMUP) -> tuple[float, float, bool]:
    """(mean attention entropy at step 0, after training, diverged?) of the chapter's small model
    without QK-norm (seed 0) trained at ``lr`` with ``warmup_steps`` of warm-up on one thread, as
    the chapter's runs are, on the chapter's validation batch, in nats: the chapter's numbers for
    seed 0."""
    from gpt2ln import GPT2, GPT2Config, TrainConfig, get_batch, load_tokens, train

    cfg = GPT2Config(vocab_size=256, n_ctx=64, n_embd=64, n_layer=2, n_head=4)
    tcfg = TrainConfig(
        steps=COLLAPSE_STEPS, batch_size=8, block_size=64, warmup_steps=warmup_steps, eval_batches=8,
        z_loss=1e-4, eval_interval=COLLAPSE_STEPS, device="cpu", lr=lr, seed=0,
    )
    train_data, val_data = load_tokens("train"), load_tokens("val")
    x_val, _ = get_batch(val_data, 8, cfg.n_ctx, torch.Generator().manual_seed(0))

    def entropy(model: GPT2) -> float:
        model.eval()
        with torch.no_grad():
            _, cache = model.run_with_cache(x_val)
        ents = [torch.special.entr(cache[f"attn_pattern.{l}"]).sum(-1).mean() for l in range(cfg.n_layer)]
        return float(torch.stack(ents).mean())

    # One thread, as in the chapter's runs (one process of one thread each): at high rates the
    # training is chaotic, and another thread count sums in another order and ends elsewhere.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # leave the learner's RNG where it was
            torch.manual_seed(0)
            model = GPT2(cfg)
            start = entropy(model)
            history = train(model, train_data, val_data, tcfg, progress=False)
            return start, entropy(model), bool(history.diverged)
    finally:
        torch.set_num_threads(threads)


def check_collapse_lr(lr: Any) -> None:
    """Check that ``lr`` is a learning rate at which the chapter's model without QK-norm (seed 0,
    150 steps) collapses, a mean attention entropy below 1 nat, while at ``lr / 2`` it does not.

    Trains two small models (a few seconds each on a CPU). A wrong answer says which side of
    the edge it is on, with the entropies it measured.
    """
    check = "check_collapse_lr"
    if isinstance(lr, (bool, str)) or (not isinstance(lr, (int, float)) and getattr(lr, "shape", None) != ()):
        fail(check, f"my_collapse_lr is {lr!r} ({type(lr).__name__}): expected one learning rate, a number")
    rate = float(lr)
    if not math.isfinite(rate) or rate <= 0:
        fail(check, f"my_collapse_lr is {rate}: a learning rate is a positive number")
    if not 1e-4 <= rate <= 1.0:
        fail(
            check,
            f"my_collapse_lr = {rate:g} is outside the range this check trains (1e-4 to 1)",
            "AdamW moves each weight by about the learning rate per step: the edge lies between "
            "the chapter's sweep values 1e-3 and 1e-1",
        )
    start, end, diverged = _entropy_after(rate)
    if diverged or not math.isfinite(end):
        fail(
            check,
            f"at lr = {rate:g} the run diverged (its loss became NaN or inf)",
            "a rate far past the edge: the question is where the attention first collapses, "
            "well before training breaks. Try smaller rates",
        )
    if end >= COLLAPSE_NATS:
        fail(
            check,
            f"your rate still trains normally: after {COLLAPSE_STEPS} steps at lr = {rate:g} the mean "
            f"attention entropy only fell from {start:.2f} to {end:.2f} nats, not below {COLLAPSE_NATS:g}",
            "a rate below the edge. Raise it (try a few values between your rate and 1e-1)",
        )
    _, half, _ = _entropy_after(rate / 2)
    if half < COLLAPSE_NATS:
        fail(
            check,
            f"at lr = {rate:g} the attention collapsed ({end:.2f} nats), but at half of it, {rate / 2:g}, "
            f"it already had ({half:.2f} nats): your rate is more than twice the edge",
            "a rate far above the edge. Lower it until half of it no longer collapses",
        )
    passed(
        check,
        f"at lr = {rate:g} the mean attention entropy falls from {start:.2f} to {end:.2f} nats "
        f"(collapsed); at {rate / 2:g} it ends at {half:.2f}: the edge lies between the two",
    )


def check_collapse_warmup(warmup_steps: Any) -> None:
    """Check that ``warmup_steps`` is a warm-up just long enough that the chapter's model without
    QK-norm (seed 0, 150 steps at the peak rate 3e-2) does not collapse (mean attention entropy
    at least 1 nat), while with ``warmup_steps - 10`` it does.

    Trains two small models (a few seconds each on a CPU). A wrong answer says which side of
    the edge it is on, with the entropies it measured.
    """
    check = "check_collapse_warmup"
    w = warmup_steps
    if isinstance(w, (bool, str)) or (not isinstance(w, (int, float)) and getattr(w, "shape", None) != ()):
        fail(check, f"my_warmup_steps is {w!r} ({type(w).__name__}): expected a number of steps, an int")
    w = float(w)
    if 0 < w < 1:
        fail(
            check,
            f"my_warmup_steps = {w:g}: a fraction of the run, not a number of steps",
            f"warmup_steps counts steps: {w:g} of the {COLLAPSE_STEPS} steps is {w * COLLAPSE_STEPS:g}",
        )
    if not math.isfinite(w) or w != int(w) or not WARMUP_STEP <= w <= COLLAPSE_STEPS:
        fail(
            check,
            f"my_warmup_steps = {w:g}: expected a whole number of steps from {WARMUP_STEP} to "
            f"{COLLAPSE_STEPS} (the run's length)",
        )
    w = int(w)
    start, end, diverged = _entropy_after(WARMUP_LR, w)
    if diverged or not math.isfinite(end):
        fail(check, f"with warmup_steps = {w} the run diverged (its loss became NaN or inf)")
    if end < COLLAPSE_NATS:
        fail(
            check,
            f"with warmup_steps = {w} the attention still collapses: after {COLLAPSE_STEPS} steps at "
            f"lr = {WARMUP_LR:g} the mean attention entropy fell from {start:.2f} to {end:.2f} nats, "
            f"below {COLLAPSE_NATS:g}",
            "a warm-up below the edge. Lengthen it (try a few values between yours and the whole run)",
        )
    _, shorter, _ = _entropy_after(WARMUP_LR, w - WARMUP_STEP)
    if shorter >= COLLAPSE_NATS:
        fail(
            check,
            f"with warmup_steps = {w} the attention does not collapse ({end:.2f} nats), but with "
            f"{w - WARMUP_STEP} it does not either ({shorter:.2f} nats): your warm-up is more than "
            f"{WARMUP_STEP} steps past the edge",
            f"shorten it until {WARMUP_STEP} steps fewer collapse",
        )
    passed(
        check,
        f"with {w} warm-up steps the mean attention entropy ends at {end:.2f} nats (not collapsed); with "
        f"{w - WARMUP_STEP} at {shorter:.2f} (collapsed): the edge lies between the two",
    )
