"""A small, deterministic training loop for ``gpt2ln.GPT2`` (in the spirit of nanoGPT).

AdamW with weight decay on the matrices, linear warm-up then cosine decay, gradient
clipping, optional z-loss, and a per-step log of the loss, the gradient norm and
each layer's largest attention score. A run that blows up (non-finite loss) stops
and says so in its history instead of raising: some chapters diverge on purpose.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..model.attention import causal_mask
from ..model.gpt2 import GPT2
from .data import get_batch


@dataclass
class TrainConfig:
    """What ``train`` does.

    steps: optimizer steps. batch_size, block_size: each step sees ``batch_size``
    windows of ``block_size`` tokens. lr: peak learning rate, reached after
    ``warmup_steps`` of linear warm-up from 0, then cosine decay to
    ``min_lr_ratio * lr`` at ``steps`` (see ``lr_at``). weight_decay: AdamW's, on
    parameters with ``ndim >= 2`` only (the matrices and embeddings; not biases or
    norm gains), as nanoGPT. betas: AdamW's. grad_clip: clip the global gradient
    norm to this (None: no clipping). z_loss: coefficient of ``mean(log(Z)^2)``,
    log Z the logsumexp of each position's logits (PaLM; Wortsman et al. 2023 use
    1e-4); 0 turns it off. eval_interval, eval_batches: every ``eval_interval``
    steps (and after the last) the validation loss over ``eval_batches`` batches.
    seed: data order, and dropout. device: None picks ``gpt2ln.get_device()``.
    log_attn_max: record each layer's largest |attention score| every step.
    """

    steps: int = 1000
    batch_size: int = 32
    block_size: int = 128
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = 1.0
    z_loss: float = 0.0
    eval_interval: int = 100
    eval_batches: int = 20
    seed: int = 0
    device: str | torch.device | None = None
    log_attn_max: bool = True

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "block_size", "eval_interval", "eval_batches"):
            v = getattr(self, name)
            _check(name, v, _is_int(v) and v >= 1, "a positive integer")
        w = self.warmup_steps
        _check("warmup_steps", w, _is_int(w) and 0 <= w <= self.steps, f"an int in 0..steps={self.steps}")
        _check("seed", self.seed, _is_int(self.seed), "an int")
        _check("lr", self.lr, _is_number(self.lr) and 0 < self.lr < math.inf, "a finite number > 0")
        r = self.min_lr_ratio
        _check("min_lr_ratio", r, _is_number(r) and 0 <= r <= 1, "a number in [0, 1]")
        for name in ("weight_decay", "z_loss"):
            v = getattr(self, name)
            _check(name, v, _is_number(v) and 0 <= v < math.inf, "a finite number >= 0")
        b = self.betas
        ok = isinstance(b, (tuple, list)) and len(b) == 2 and all(_is_number(x) and 0 <= x < 1 for x in b)
        _check("betas", b, ok, "two numbers in [0, 1)")
        self.betas = tuple(b)
        c = self.grad_clip
        _check("grad_clip", c, c is None or (_is_number(c) and c > 0), "None or a number > 0")
        _check("log_attn_max", self.log_attn_max, isinstance(self.log_attn_max, bool), "True or False")
        d = self.device
        _check("device", d, d is None or isinstance(d, (str, torch.device)), "None, a str or a torch.device")

    @property
    def min_lr(self) -> float:
        return self.min_lr_ratio * self.lr

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block_size

    def replace(self, **changes) -> TrainConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def _check(name: str, value: object, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"TrainConfig: expected {name} to be {expected}, got {value!r}")


@dataclass
class TrainHistory:
    """What ``train`` recorded. Per step (one entry per optimizer step, in order):

    ``step``; ``lr``; ``loss``, the objective (cross-entropy + z-loss term);
    ``ce``, the cross-entropy alone (nats per token); ``grad_norm``, the global
    gradient norm before clipping; ``attn_max``, one list per step of each layer's
    largest |pre-softmax attention score| (``[]`` with ``log_attn_max=False``).
    Validation: ``val_step`` (the number of steps taken when measured: 0, every
    ``eval_interval``, and the end) and ``val_loss``. ``diverged``: the loss or the
    gradient norm became non-finite at step ``diverged_step``; that step is the
    last entry and its update was not applied.
    """

    step: list[int] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    ce: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    attn_max: list[list[float]] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    diverged: bool = False
    diverged_step: int | None = None


def lr_at(step: int, cfg: TrainConfig) -> float:
    """The learning rate of optimizer step ``step`` (0-based).

    Linear warm-up ``lr * step / warmup_steps`` for ``step < warmup_steps`` (so step 0
    has lr 0), the peak ``lr`` at ``step == warmup_steps``, then cosine decay to
    ``min_lr`` at ``step == steps`` (and after). ``warmup_steps=0``: no warm-up.
    """
    if not _is_int(step) or step < 0:
        raise ValueError(f"lr_at: expected step to be an int >= 0, got {step!r}")
    if step < cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if step >= cfg.steps:
        return cfg.min_lr
    progress = (step - cfg.warmup_steps) / (cfg.steps - cfg.warmup_steps)  # 0 -> 1
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


def lr_sensitivity(losses: Sequence[float], loss_init: float) -> float:
    """Learning-rate sensitivity of a sweep (Wortsman et al. 2023), as in chapter 8.

    losses: the final loss of each run of a learning-rate sweep (NaN/inf for a run that
    diverged); loss_init: the loss at initialization. Each loss is capped at loss_init
    (a diverged run counts as loss_init), and the result is the mean over the sweep of
    ``capped - min(capped)``: 0 when every learning rate does as well as the best.
    """
    values = [float(x) for x in losses]
    if not values:
        raise ValueError("lr_sensitivity: expected at least one loss, got an empty sweep")
    if not math.isfinite(loss_init):
        raise ValueError(f"lr_sensitivity: expected a finite loss_init, got {loss_init}")
    capped = [loss_init if not math.isfinite(x) else min(x, loss_init) for x in values]
    best = min(capped)
    return sum(x - best for x in capped) / len(capped)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with ``weight_decay`` on parameters with ndim >= 2 and none on the rest."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def lm_loss(
    logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits ``[B, T, V]``, targets ``[B, T]`` -> (objective, cross-entropy), both 0-d.

    objective = cross-entropy + ``z_loss * mean(logsumexp(logits)^2)``.
    """
    flat = logits.reshape(-1, logits.shape[-1]).float()
    ce = F.cross_entropy(flat, targets.reshape(-1))
    if z_loss == 0:
        return ce, ce
    return ce + z_loss * torch.logsumexp(flat, dim=-1).square().mean(), ce


def _check_data(name: str, data: torch.Tensor, model: GPT2, block_size: int) -> None:
    if not isinstance(data, torch.Tensor) or data.ndim != 1 or data.is_floating_point():
        got = f"{tuple(data.shape)} {data.dtype}" if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"train: expected {name} to be a 1-D integer tensor of token ids [N], got {got}")
    if len(data) < block_size + 1:
        raise ValueError(
            f"train: {name} has {len(data)} tokens, need at least block_size + 1 = {block_size + 1}"
        )
    lo, hi, vocab = int(data.min()), int(data.max()), model.config.vocab_size
    if lo < 0 or hi >= vocab:
        raise ValueError(
            f"train: {name} holds token ids in [{lo}, {hi}], outside the vocabulary [0, {vocab})"
        )


@torch.no_grad()
def evaluate_loss(
    model: GPT2,
    tokens: torch.Tensor,
    block_size: int,
    batch_size: int = 32,
    batches: int | None = None,
    generator: torch.Generator | None = None,
) -> float:
    """Mean cross-entropy (nats per token) of the model's next-token predictions on tokens ``[N]``.

    The one loss evaluation of the package (``train``'s validation loss, the shipped small
    model's loss, the chapters'). It reads windows of ``block_size`` consecutive tokens: in
    each window ``w`` the model reads ``w[:-1]`` and predicts ``w[1:]``, every token from the
    ones before it in that window; the result is the mean negative log-likelihood of all these
    predictions, summed in float64. ``block_size`` is in ``2 .. n_ctx + 1``.

    - ``batches=None`` (default): every token, deterministically. The windows are consecutive
      and do not overlap, ``tokens[0:block_size]``, ``tokens[block_size:2 * block_size]``, ...
      (the last holds the ``N % block_size`` remaining tokens, if there are two or more), so
      every token is predicted once except the first of each window:
      ``N - ceil(N / block_size)`` predictions. Use ``n_ctx + 1`` for the model's full context.
    - ``batches=n``: ``n`` batches of ``batch_size`` windows at random starts, drawn with
      ``gpt2ln.get_batch(tokens, batch_size, block_size - 1, generator)`` (seed 0 if no
      ``generator``, so repeated calls see the same text): how ``train`` measures validation.

    Runs in eval mode without gradients, in batches of ``batch_size`` windows on the model's
    device, and restores the model's mode.
    """
    if not isinstance(model, GPT2):
        raise TypeError(f"evaluate_loss: expected a gpt2ln.GPT2 model, got {type(model).__name__}")
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1 or tokens.is_floating_point():
        is_tensor = isinstance(tokens, torch.Tensor)
        got = f"{tuple(tokens.shape)} {tokens.dtype}" if is_tensor else type(tokens).__name__
        raise ValueError(f"evaluate_loss: expected tokens to be a 1-D integer tensor [N], got {got}")
    for name, v, lo, hi in (
        ("block_size", block_size, 2, model.config.n_ctx + 1),
        ("batch_size", batch_size, 1, None),
        ("batches", 1 if batches is None else batches, 1, None),
    ):
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            want = f"an int in {lo}..{hi}" if hi is not None else f"an int >= {lo}"
            raise ValueError(f"evaluate_loss: expected {name} to be {want}, got {v!r}")
    if len(tokens) < 2:
        raise ValueError(f"evaluate_loss: need at least 2 tokens to predict one, got {len(tokens)}")
    if batches is None:
        n_full = len(tokens) // block_size
        full = tokens[: n_full * block_size].view(n_full, block_size)  # [n_full, block_size]
        windows = [full[i : i + batch_size] for i in range(0, n_full, batch_size)]
        if len(tokens) - n_full * block_size >= 2:
            windows.append(tokens[n_full * block_size :][None, :])  # [1, N % block_size]
        pairs = [(w[:, :-1], w[:, 1:]) for w in windows]
    else:
        generator = torch.Generator().manual_seed(0) if generator is None else generator
        pairs = (get_batch(tokens, batch_size, block_size - 1, generator) for _ in range(batches))
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for x, y in pairs:
            x, y = x.long().to(model.device), y.long().to(model.device)
            logits = model(x)  # [b, t, vocab]
            nll = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="sum"
            )
            total += float(nll.double())
            count += y.numel()
    finally:
        model.train(was_training)
    return total / count


@torch.no_grad()
def max_abs_score(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q ``[B, H, T, D]``, k ``[B, H, T_k, D]`` -> max |q.k / sqrt(D)| over the causal entries (0-d)."""
    scores = (q @ k.transpose(-2, -1)).mul_(1.0 / math.sqrt(q.shape[-1]))  # [B, H, T, T_k]
    future = ~causal_mask(q.shape[2], k.shape[2], q.device)
    return scores.masked_fill_(future, 0.0).abs_().amax()  # in place: one [B, H, T, T_k] buffer


def train(
    model: GPT2,
    train_data: torch.Tensor,
    val_data: torch.Tensor | None = None,
    cfg: TrainConfig | None = None,
    progress: bool = True,
) -> TrainHistory:
    """Train ``model`` in place on byte/token ids ``train_data`` ``[N]``; return its history.

    Moves the model to ``cfg.device``. Seeds torch's global RNG with ``cfg.seed``
    (for dropout) and draws batches from a generator with the same seed, so the same
    model, data, config and machine give the same history. The validation loss, if
    ``val_data`` is given, always uses the same ``eval_batches`` batches. After the
    run each parameter's ``.grad`` holds the last step's clipped gradient. Prints
    nothing but a tqdm progress bar (none with ``progress=False``).
    """
    cfg = TrainConfig() if cfg is None else cfg
    if not isinstance(model, GPT2):
        raise TypeError(f"train: expected a gpt2ln.GPT2 model, got {type(model).__name__}")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"train: expected cfg to be a TrainConfig, got {type(cfg).__name__}")
    if cfg.block_size > model.config.n_ctx:
        raise ValueError(f"train: block_size {cfg.block_size} exceeds the model's n_ctx {model.config.n_ctx}")
    _check_data("train_data", train_data, model, cfg.block_size)
    if val_data is not None:
        _check_data("val_data", val_data, model, cfg.block_size)

    device = torch.device(cfg.device) if cfg.device is not None else get_device()
    model.to(device)
    torch.manual_seed(cfg.seed)
    batches = torch.Generator().manual_seed(cfg.seed)
    optimizer = make_optimizer(model, cfg)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    history = TrainHistory()
    attn_max: list[torch.Tensor] = []  # each layer's largest |score| in the last forward, in order
    hooks = [  # on each attention's inputs q, k: one extra q @ k^T, no [B, H, T, T] kept
        block.attn.attend.register_forward_pre_hook(lambda m, args: attn_max.append(max_abs_score(*args[:2])))
        for block in model.h
        if cfg.log_attn_max
    ]
    was_training = model.training
    model.train()
    bar = tqdm(range(cfg.steps), disable=not progress, desc="train", unit="step")
    try:
        for step in bar:
            if step % cfg.eval_interval == 0 and val_data is not None:
                history.val_step.append(step)
                history.val_loss.append(_val_loss(model, val_data, cfg))
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = get_batch(train_data, cfg.batch_size, cfg.block_size, batches, device=device)
            optimizer.zero_grad(set_to_none=True)
            attn_max.clear()
            loss, ce = lm_loss(model(x), y, cfg.z_loss)
            finite = bool(torch.isfinite(loss))
            grad_norm = math.nan
            if finite:
                loss.backward()
                max_norm = math.inf if cfg.grad_clip is None else cfg.grad_clip  # inf: measure, don't clip
                grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm).item()
                finite = math.isfinite(grad_norm)
            history.step.append(step)
            history.lr.append(lr)
            history.loss.append(loss.item())
            history.ce.append(ce.item())
            history.grad_norm.append(grad_norm)
            if cfg.log_attn_max:
                history.attn_max.append(torch.stack(attn_max).tolist())
            if not finite:
                history.diverged, history.diverged_step = True, step
                break
            optimizer.step()
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}", refresh=False)
        else:
            if val_data is not None:
                history.val_step.append(cfg.steps)
                history.val_loss.append(_val_loss(model, val_data, cfg))
    finally:
        bar.close()
        for h in hooks:
            h.remove()
        model.train(was_training)
    return history


def _val_loss(model: GPT2, val_data: torch.Tensor, cfg: TrainConfig) -> float:
    """The validation loss ``train`` logs: the same ``eval_batches`` batches every time."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    return evaluate_loss(model, val_data, cfg.block_size + 1, cfg.batch_size, cfg.eval_batches, gen)


def get_device() -> torch.device:
    """The best available device: ``cuda``, then ``mps``, then ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
