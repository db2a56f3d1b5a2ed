"""Checks for chapter 7 (pre-norm versus post-norm).

``check_post_norm_block(fn)`` and ``check_pre_norm_block(fn)`` run the learner's
``fn(x, attn, mlp, ln_1, ln_2) -> y``, a block written from its four sub-layers, against
``gpt2ln.Block`` with ``norm_position="post"`` (the original Transformer / GPT-1) or
``"pre"`` (GPT-2) on the same random weights, and name the classic mistake a wrong output
matches. ``check_lr_schedule(fn)`` checks ``fn(step, steps, lr, warmup, min_lr)``, linear
warm-up then cosine decay, against ``gpt2ln.lab.train.lr_at``. ``check_gradient_balance(k)``
measures, at initialization, the pre-norm/post-norm gradient gap with both embedding tables
multiplied by ``k`` and names the usual mistakes of the prediction. ``check_lr_limit`` checks a
bracket of post-norm's learning-rate limit found by training.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...lab.train import TrainConfig, lr_at
from ...model.blocks import Block
from ...model.config import GPT2Config
from ._core import (
    Mistake,
    as_float,
    call,
    call_on_copies,
    compare,
    fail,
    fail_mistake,
    passed,
)

__all__ = [
    "check_gradient_balance",
    "check_lnf_factor",
    "check_lr_limit",
    "check_lr_schedule",
    "check_post_norm_block",
    "check_pre_norm_block",
    "train_with_init",
    "xavier_blocks",
]


# ------------------------------------------------------------------------------------- blocks
@dataclass
class _BlockCase:
    what: str
    x: torch.Tensor  # [B, T, d]
    block: Block
    tol: float

    def sublayers(self, *extra: str) -> tuple[nn.Module, ...]:
        """attn, mlp, ln_1, ln_2 (then the ``extra`` norms by name) as modules ``[B, T, d] -> [B, T, d]``."""
        b = self.block
        return (b.attn, b.mlp, b.ln_1, b.ln_2, *(getattr(b, n) for n in extra))

    def truth(self) -> torch.Tensor:
        with torch.no_grad():
            return self.block(self.x)


def _block_cases(position: str = "post") -> list[_BlockCase]:
    """Two blocks with ``norm_position=position``, random weights and norm gains, and their inputs.

    Every parameter is drawn anew (seeded), so ln_1's gain and bias differ from ln_2's and
    each classic mistake gives its own output.
    """
    gen = torch.Generator().manual_seed(7)

    def case(what: str, B: int, T: int, d: int, H: int, dtype: torch.dtype, tol: float) -> _BlockCase:
        with torch.random.fork_rng(devices=[]):  # nn.Linear's default init draws from the global RNG
            block = Block(GPT2Config(n_embd=d, n_head=H, n_layer=1, n_ctx=T, norm_position=position))
        with torch.no_grad():
            for name, p in block.named_parameters():
                if name.endswith("weight") and p.ndim == 2:  # sub-layers as large as x itself
                    p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
                elif name.startswith("ln_") and name.endswith("weight"):  # the norms told apart
                    p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=gen))
                else:
                    p.copy_(0.3 * torch.randn(p.shape, generator=gen))
        x = 1.5 * torch.randn(B, T, d, generator=gen) + 0.5
        return _BlockCase(what, x.to(dtype), block.to(dtype).eval(), tol)

    return [
        case("x of shape [2, 5, 16] (B, T, d), 2 heads, float64", 2, 5, 16, 2, torch.float64, 1e-9),
        case("x of shape [1, 7, 24], 3 heads, float32", 1, 7, 24, 3, torch.float32, 1e-4),
    ]


def _check_block(
    check: str,
    fn: Callable[..., Any],
    position: str,
    mistakes: Sequence[Mistake],
    formula: str,
    extra=(),
    hint: str | None = None,
) -> None:
    """Run fn(x, *sub-layers) on each block case and compare with ``Block(norm_position=position)``."""
    for case in _block_cases(position):
        args = (case.x, *case.sublayers(*extra))
        names = ("x", "attn", "mlp", "ln_1", "ln_2", *extra)
        with torch.no_grad():
            out = call_on_copies(
                check,
                fn,
                args,
                names=names,
                what=case.what,
                likely="an in-place operation such as `x += attn(x)`: write `x = x + attn(x)` (a new tensor)",
            )
        truth = case.truth()
        if hasattr(out, "shape") and tuple(out.shape) != tuple(truth.shape):
            fail(
                check,
                f"on {case.what}, your output has shape {tuple(out.shape)}, expected {tuple(truth.shape)}",
                "a block maps [B, T, d] to [B, T, d]: no indexing or reduction at the end",
            )
        ref = f"your output differs from the {position}-norm block"
        compare(
            check,
            f"on {case.what}",
            out,
            truth,
            case.tol,
            mistakes,
            args,
            formula=hint or formula,
            differs=ref,
        )
    passed(check, f"matches gpt2ln.Block(norm_position={position!r}), {formula}, on 2 inputs")


def _post(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x))
    return ln_2(h + mlp(h))


def _pre(x, attn, mlp, ln_1, ln_2):
    h = x + attn(ln_1(x))
    return h + mlp(ln_2(h))


_POST_FORMULA = "h = ln_1(x + attn(x)); y = ln_2(h + mlp(h))"
_PRE_FORMULA = "h = x + attn(ln_1(x)); y = h + mlp(ln_2(h))"
# what a failing post-norm check shows instead of the answer (the learner writes the block)
_POST_HINT = "the post-norm formula at the top of chapter 7 (which norm reads which sum)"


def _post_mistakes() -> list[Mistake]:
    fix = "post-norm normalizes the sum, after the residual addition, in both halves"
    return [
        Mistake(
            "normalized before adding: x + attn(ln_1(x)) is pre-norm (GPT-2's block), not post-norm",
            fix,
            _pre,
        ),
        Mistake(
            "forgot the residual: ln_1(attn(x)) drops the x + ... of each sub-layer",
            "add each sub-layer's input back before its norm",
            lambda x, a, m, l1, l2: l2(m(l1(a(x)))),
        ),
        Mistake(
            "applied ln to the sub-layer output only: x + ln_1(attn(x)) normalizes what the sub-layer "
            "adds, not the sum (a placement of its own, met in chapter 11), so the stream is never "
            "normalized",
            fix,
            lambda x, a, m, l1, l2: (lambda h: h + l2(m(h)))(x + l1(a(x))),
        ),
        Mistake(
            "swapped ln_1 and ln_2: ln_1 belongs to the attention half, ln_2 to the MLP half",
            fix,
            lambda x, a, m, l1, l2: _post(x, a, m, l2, l1),
        ),
        Mistake(
            "the MLP reads the block input x instead of the first half's output h",
            "the second half works on the first half's output h",
            lambda x, a, m, l1, l2: l2(l1(x + a(x)) + m(x)),
        ),
        Mistake(
            "the second residual adds the block input x instead of h: ln_2(x + mlp(h))",
            "the residual of the MLP half is its own input h",
            lambda x, a, m, l1, l2: l2(x + m(l1(x + a(x)))),
        ),
        Mistake(
            "parallel block: attention and MLP both read x and one norm follows their sum",
            "the two halves run one after the other, each with its own norm",
            lambda x, a, m, l1, l2: l2(x + a(x) + m(x)),
        ),
        Mistake(
            "normalized the stream before adding the MLP: ln_2(h) + mlp(h) leaves mlp(h) outside the "
            "norm, so the block's output is not normalized",
            "the norm reads the whole sum, residual and sub-layer output together",
            lambda x, a, m, l1, l2: (lambda h: l2(h) + m(h))(l1(x + a(x))),
        ),
        Mistake(
            "normalized the stream before adding attention: ln_1(x) + attn(x) leaves attn(x) outside "
            "the norm",
            "the norm reads the whole sum, residual and sub-layer output together",
            lambda x, a, m, l1, l2: (lambda h: l2(h + m(h)))(l1(x) + a(x)),
        ),
        Mistake(
            "forgot the MLP half: returned the attention half's output h",
            "finish with the MLP half: its residual sum, then its norm",
            lambda x, a, m, l1, l2: l1(x + a(x)),
        ),
        Mistake(
            "forgot the second norm: h + mlp(h) without ln_2",
            "each sub-layer's sum is normalized, the MLP half's too",
            lambda x, a, m, l1, l2: (lambda h: h + m(h))(l1(x + a(x))),
        ),
    ]


def check_post_norm_block(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, attn, mlp, ln_1, ln_2)`` is the post-norm block.

    x: ``[B, T, d]``; ``attn``, ``mlp``, ``ln_1``, ``ln_2``: modules
    ``[B, T, d] -> [B, T, d]`` (the sub-layers of a ``gpt2ln.Block`` with random
    weights, norm gains and biases); returns ``[B, T, d]``, which must equal
    ``ln_2(h + mlp(h))`` with ``h = ln_1(x + attn(x))``, i.e. ``Block`` with
    ``norm_position="post"``. Two inputs (float64, float32). A wrong output names
    the mistake it matches: pre-norm, no residual, norm on the sub-layer output only
    (chapter 11's OLMo 2 placement), norms swapped, the MLP reading x, a parallel block, a
    missing half or norm.
    """
    _check_block("check_post_norm_block", fn, "post", _post_mistakes(), _POST_FORMULA, hint=_POST_HINT)


def _pre_mistakes() -> list[Mistake]:
    fix = f"normalize only the sub-layer's input, and add its output to the stream: {_PRE_FORMULA}"
    ln_f = "added a final norm (ln_f) inside the block: GPT-2 applies ln_f once, after the last block"
    ln_f_fix = f"return the stream itself, h + mlp(ln_2(h)); the block is {_PRE_FORMULA}"
    return [
        Mistake(
            "normalized after the residual addition: ln_1(x + attn(x)) is post-norm (the original "
            "Transformer's block), not GPT-2's pre-norm",
            fix,
            _post,
        ),
        Mistake(
            "dropped the attention's residual connection: h = attn(ln_1(x)) loses x",
            "add the sub-layer's output to its input: h = x + attn(ln_1(x))",
            lambda x, a, m, l1, l2: (lambda h: h + m(l2(h)))(a(l1(x))),
        ),
        Mistake(
            "dropped the MLP's residual connection: y = mlp(ln_2(h)) loses h",
            "add the sub-layer's output to its input: y = h + mlp(ln_2(h))",
            lambda x, a, m, l1, l2: m(l2(x + a(l1(x)))),
        ),
        Mistake(
            "dropped both residual connections: mlp(ln_2(attn(ln_1(x)))) is a plain stack of layers",
            f"each sub-layer adds to the stream: {_PRE_FORMULA}",
            lambda x, a, m, l1, l2: m(l2(a(l1(x)))),
        ),
        Mistake(
            "reused ln_1 for both sub-layers: the MLP reads ln_1(h), it has its own norm ln_2",
            "ln_1 before attention, ln_2 before the MLP: y = h + mlp(ln_2(h))",
            lambda x, a, m, l1, l2: _pre(x, a, m, l1, l1),
        ),
        Mistake(
            "reused ln_2 for both sub-layers: attention reads ln_2(x), it has its own norm ln_1",
            "ln_1 before attention, ln_2 before the MLP: h = x + attn(ln_1(x))",
            lambda x, a, m, l1, l2: _pre(x, a, m, l2, l2),
        ),
        Mistake(
            "swapped ln_1 and ln_2: ln_1 belongs to the attention half, ln_2 to the MLP half",
            fix,
            lambda x, a, m, l1, l2: _pre(x, a, m, l2, l1),
        ),
        Mistake(
            "normalized the residual stream itself: `x = ln_1(x)` then `x + attn(x)` adds the "
            "normalized x, so the stream is replaced by its normalized copy",
            "keep the stream as it is and normalize only the sub-layer's input: x + attn(ln_1(x))",
            lambda x, a, m, l1, l2: (lambda h: h + m(h))(l2((lambda u: u + a(u))(l1(x)))),
        ),
        Mistake(
            "normalized the residual stream itself before the MLP: `h = ln_2(h)` then `h + mlp(h)`",
            "keep the stream h and normalize only the MLP's input: h + mlp(ln_2(h))",
            lambda x, a, m, l1, l2: (lambda h: h + m(h))(l2(x + a(l1(x)))),
        ),
        Mistake(
            "normalized the residual stream itself before attention: `x = ln_1(x)` then `x + attn(x)`",
            "keep the stream x and normalize only attention's input: x + attn(ln_1(x))",
            lambda x, a, m, l1, l2: (lambda h: h + m(l2(h)))((lambda u: u + a(u))(l1(x))),
        ),
        Mistake(ln_f, ln_f_fix, lambda x, a, m, l1, l2: F.layer_norm(_pre(x, a, m, l1, l2), x.shape[-1:])),
        Mistake(ln_f, ln_f_fix, lambda x, a, m, l1, l2: l2(_pre(x, a, m, l1, l2))),
        Mistake(ln_f, ln_f_fix, lambda x, a, m, l1, l2: l1(_pre(x, a, m, l1, l2))),
        Mistake(
            "the MLP reads the block input: mlp(ln_2(x)) instead of mlp(ln_2(h)) (a parallel block)",
            "the MLP half works on the stream after attention: y = h + mlp(ln_2(h))",
            lambda x, a, m, l1, l2: x + a(l1(x)) + m(l2(x)),
        ),
        Mistake(
            "the second residual adds the block input x instead of h: x + mlp(ln_2(h))",
            "the MLP's residual is its own input h: y = h + mlp(ln_2(h))",
            lambda x, a, m, l1, l2: x + m(l2(x + a(l1(x)))),
        ),
        Mistake(
            "forgot the MLP half: returned h = x + attn(ln_1(x))",
            f"finish with y = h + mlp(ln_2(h)); the block is {_PRE_FORMULA}",
            lambda x, a, m, l1, l2: x + a(l1(x)),
        ),
    ]


def check_pre_norm_block(fn: Callable[..., Any]) -> None:
    """Check ``fn(x, attn, mlp, ln_1, ln_2)`` is GPT-2's pre-norm block.

    x: ``[B, T, d]``; ``attn``, ``mlp``, ``ln_1``, ``ln_2``: modules ``[B, T, d] -> [B, T, d]``
    (the sub-layers of a ``gpt2ln.Block`` with random weights; ln_1's gain and bias differ
    from ln_2's); returns ``[B, T, d]``, which must equal ``h + mlp(ln_2(h))`` with
    ``h = x + attn(ln_1(x))``, i.e. ``Block`` with ``norm_position="pre"``. Two inputs
    (float64, float32). A wrong output names the mistake it matches: post-norm (normalized
    after the residual addition), a dropped residual connection, ln_1 reused for both
    sub-layers, the residual stream itself normalized (``x = ln(x)`` before adding), a final
    norm (ln_f) inside the block, the MLP reading x, a missing half.
    """
    _check_block("check_pre_norm_block", fn, "pre", _pre_mistakes(), _PRE_FORMULA)


# ------------------------------------------------------------------------------ lr schedule
_LR_FORMULA = (
    "lr * step / warmup for step < warmup; then min_lr + 0.5 * (lr - min_lr) * "
    "(1 + cos(pi * (step - warmup) / (steps - warmup))); min_lr from step == steps on"
)


def _schedule(
    step: int,
    steps: int,
    lr: float,
    warmup: int,
    min_lr: float,
    *,
    warm: str = "right",
    floor: str = "min_lr",
    progress: str = "right",
    clamp: bool = True,
    half: float = 0.5,
    decay: str = "cosine",
) -> float:
    """``lr_at``'s schedule, or one classic mistake."""
    low = min_lr if floor == "min_lr" else 0.0
    if step < warmup:
        num, den = {
            "right": (step, warmup),
            "plus_one": (step + 1, warmup),
            "nanogpt": (step + 1, warmup + 1),
        }["right" if warm == "from_min" else warm]
        if warm == "from_min":
            return min_lr + (lr - min_lr) * num / den
        return lr * num / den
    if step >= steps and clamp:
        return low
    start, span = {
        "right": (warmup, steps - warmup),
        "over_steps": (warmup, steps),
        "from_zero": (0, steps),
    }[progress]
    p = (step - start) / span
    if decay == "linear":
        return lr - (lr - low) * p
    return low + half * (lr - low) * (1.0 + math.cos(math.pi * p))


def _lr_mistakes() -> list[Mistake]:
    def m(label: str, fix: str, **kw: Any) -> Mistake:
        return Mistake(label, fix, lambda *a: _schedule(*a, **kw))

    warm_fix = "warm up as lr * step / warmup: step 0 has lr 0, the peak lr comes at step == warmup"
    cos_fix = "progress = (step - warmup) / (steps - warmup) runs from 0 at the end of warm-up to 1 at steps"
    return [
        m(
            "off-by-one in warm-up: lr * (step + 1) / warmup reaches the peak one step early",
            warm_fix,
            warm="plus_one",
        ),
        m(
            "off-by-one in warm-up: lr * (step + 1) / (warmup + 1) is nanoGPT's convention, not lr_at's",
            warm_fix,
            warm="nanogpt",
        ),
        m("warm-up starts from min_lr instead of 0", warm_fix, warm="from_min"),
        m(
            "cosine not reaching min: it decays to 0 instead of to min_lr",
            "decay to the floor: min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress))",
            floor="zero",
        ),
        m(
            "cosine not reaching min at step == steps: progress = (step - warmup) / steps",
            cos_fix,
            progress="over_steps",
        ),
        m(
            "cosine counted from step 0, not from the end of warm-up: progress = step / steps",
            cos_fix,
            progress="from_zero",
        ),
        m(
            "no clamp after steps: past `steps` the cosine climbs back up",
            "return min_lr for step >= steps",
            clamp=False,
        ),
        m(
            "cosine decays to 0 instead of to min_lr, and past `steps` it climbs back up (no clamp)",
            "decay to the floor, min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress)), "
            "and return min_lr for step >= steps",
            floor="zero",
            clamp=False,
        ),
        m(
            "missing the 0.5 factor: (lr - min_lr) * (1 + cos(...)) starts at 2 lr - min_lr",
            "min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress))",
            half=1.0,
        ),
        m(
            "linear decay instead of cosine",
            "use 0.5 * (1 + cos(pi * progress)), not 1 - progress",
            decay="linear",
        ),
    ]


@dataclass
class _LrCase:
    steps: int
    lr: float
    warmup: int
    min_lr: float

    @property
    def what(self) -> str:
        return f"steps={self.steps}, lr={self.lr:g}, warmup={self.warmup}, min_lr={self.min_lr:g}"

    def step_range(self) -> range:
        return range(self.steps + 6)  # five steps past the end too

    def truth(self) -> list[float]:
        ratio = self.min_lr / self.lr
        cfg = TrainConfig(steps=self.steps, lr=self.lr, warmup_steps=self.warmup, min_lr_ratio=ratio)
        return [lr_at(s, cfg) for s in self.step_range()]

    def agrees(self, got: float, want: float) -> bool:
        return abs(got - want) <= 1e-6 * self.lr  # float32 is fine; NaN never agrees


_LR_CASES = [
    _LrCase(steps=100, lr=1e-3, warmup=10, min_lr=5e-5),
    _LrCase(steps=40, lr=6e-4, warmup=0, min_lr=6e-5),
    _LrCase(steps=30, lr=0.5, warmup=7, min_lr=0.0),
]


def check_lr_schedule(fn: Callable[..., Any]) -> None:
    """Check ``fn(step, steps, lr, warmup, min_lr) -> float`` is ``gpt2ln.lab.train.lr_at``.

    Linear warm-up from 0 (``lr * step / warmup`` for ``step < warmup``; step 0 has
    lr 0), cosine decay from ``lr`` at ``step == warmup`` to ``min_lr`` at
    ``step == steps``, and ``min_lr`` after that; ``warmup = 0`` means no warm-up.
    Three schedules, every step from 0 to ``steps + 5``. A wrong value names the
    mistake it matches: off-by-one in warm-up, cosine not reaching min_lr (decaying to
    0, or over the wrong span), no clamp after ``steps``, no warm-up handling (division
    by zero for ``warmup = 0``), linear decay, a missing 0.5.
    """
    check = "check_lr_schedule"
    no_warmup = (
        "no warm-up handling: warmup = 0 means no warm-up at all; compute lr * step / warmup "
        "only while step < warmup (never, when warmup = 0)"
    )
    mistakes = _lr_mistakes()
    for case in _LR_CASES:
        got = []
        for step in case.step_range():
            args = (step, case.steps, case.lr, case.warmup, case.min_lr)
            try:
                v = fn(*args)
            except ZeroDivisionError as e:
                if case.warmup == 0:
                    fail(check, f"with {case.what}, at step {step}: ZeroDivisionError ({e})", no_warmup)
                v = call(check, fn, *args)  # reports the exception in a sentence
            except Exception:
                v = call(check, fn, *args)  # "not implemented yet", or the exception in a sentence
            got.append(as_float(check, v, f"with {case.what}, at step {step}"))
        truth = case.truth()
        bad = [i for i, (g, t) in enumerate(zip(got, truth, strict=True)) if not case.agrees(g, t)]
        if not bad:
            continue
        i = bad[0]
        where = f"with {case.what}, at step {i}: got {got[i]:.6g}, expected {truth[i]:.6g}"
        if case.warmup == 0 and not math.isfinite(got[i]):
            fail(check, where, f"{no_warmup} (0 / 0 is NaN in numpy and torch)")
        for m in mistakes:
            vals = [m.fn(s, case.steps, case.lr, case.warmup, case.min_lr) for s in case.step_range()]
            if all(case.agrees(g, v) for g, v in zip(got, vals, strict=True)):
                fail_mistake(check, where, m.label, m.fix)
        fail(check, where, f"no single classic mistake explains it; compare with {_LR_FORMULA}")
    passed(check, f"matches gpt2ln.lr_at on 3 schedules, with and without warm-up: {_LR_FORMULA}")


# ------------------------------------------------------------------ the chapter's experiment
# Helpers the chapter's training runs use (they live here, in a module, so that the worker
# processes of ``gpt2ln.lab.seeds.run_jobs`` can import them).
def xavier_blocks(model: nn.Module) -> nn.Module:
    """Xavier-normal init, in place, for the four matrices inside every block (``c_attn``,
    ``attn.c_proj``, ``c_fc``, ``mlp.c_proj``): std ``sqrt(2 / (fan_in + fan_out))``, the
    initialization Xiong et al. (2020) analyse post-norm under. Embeddings, biases and norms
    keep GPT-2's init. Returns the model."""
    with torch.no_grad():
        for block in model.h:
            for lin in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                nn.init.xavier_normal_(lin.weight)
    return model


INITS: dict[str, Callable[[nn.Module], Any]] = {"gpt2": lambda model: model, "xavier": xavier_blocks}


def train_with_init(item: tuple[Any, str]) -> Any:
    """``(TrainJob, init)`` -> ``TrainResult``: ``gpt2ln.lab.seeds.train_job`` with the block
    matrices re-drawn by ``INITS[init]`` ("gpt2": GPT-2's init, unchanged; "xavier":
    ``xavier_blocks``) right after the model is built. For ``run_jobs``."""
    import time

    from ...lab.seeds import TrainResult, _tokens
    from ...lab.train import train
    from ...model.gpt2 import GPT2

    job, init = item
    if job.key is None:  # the result says which init it had (check_lr_limit reads it)
        job = dataclasses.replace(job, key={"init": init})
    if init not in INITS:
        raise ValueError(f"train_with_init: expected init in {sorted(INITS)}, got {init!r}")
    torch.manual_seed(job.cfg.seed if job.init_seed is None else job.init_seed)
    model = INITS[init](GPT2(job.config))
    data = _tokens()
    start, cpu_start = time.perf_counter(), time.process_time()
    history = train(model, data["train"], data["val"], job.cfg, progress=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return TrainResult(job=job, history=history, state=state, seconds=seconds, cpu_seconds=cpu_seconds)


# ------------------------------------------------------------------ post-norm's learning-rate limit
_PLATEAU = 0.05  # within this many nats of the unigram entropy: byte frequencies only
_LEFT = 0.1  # at least this far below it: the run learned something from the context


def _describe(run: Any) -> str:
    return (
        f"{run.job.config.norm_position}-norm, init {_init_of(run)!r}, peak lr {run.job.cfg.lr:g}, "
        f"seed {run.job.cfg.seed}"
    )


def _init_of(run: Any) -> str:
    key = getattr(run.job, "key", None)
    return key.get("init", "gpt2") if isinstance(key, dict) else "gpt2"


def _final(run: Any, k: int = 20) -> float:
    ce = run.history.ce
    return sum(ce[-k:]) / min(k, len(ce))


def check_lr_limit(ok_runs: Sequence[Any], stuck_runs: Sequence[Any], unigram: float) -> None:
    """Check a bracket of post-norm's learning-rate limit: ``ok_runs`` (results of
    ``train_with_init``, one or more seeds) all at one peak rate, every run at least 0.1 nats
    below the ``unigram`` entropy; ``stuck_runs`` all at one higher rate, every run within 0.05
    of it; the two rates at most a factor 2 apart; post-norm with Xavier-normal init
    (``train_with_init``'s "xavier"); nothing else different between the runs."""
    name = "check_lr_limit"
    groups = {"ok_runs": list(ok_runs), "stuck_runs": list(stuck_runs)}
    for label, runs in groups.items():
        if not runs:
            fail(name, f"{label} is empty", "pass the list that run_jobs(train_with_init, ...) returned")
        for run in runs:
            if not (hasattr(run, "job") and hasattr(run, "history")):
                fail(
                    name,
                    f"{label} holds a {type(run).__name__}, not a training result",
                    "pass the results of run_jobs(train_with_init, [job(...), ...]) unchanged",
                )
    runs = groups["ok_runs"] + groups["stuck_runs"]
    for run in runs:
        if run.job.config.norm_position != "post":
            fail(
                name,
                f"a run is {_describe(run)}",
                "the question is post-norm's limit: train every run with norm_position 'post'",
            )
        if run.history.diverged:
            fail(
                name,
                f"a run diverged ({_describe(run)})",
                "a diverged run is not on the plateau; "
                "bracket the rate at which the loss stays at the unigram entropy",
            )
    first = runs[0]
    for run in runs[1:]:
        if run.job.config != first.job.config or _init_of(run) != _init_of(first):
            fail(
                name,
                f"the runs differ in the model or its init ({_describe(first)} vs {_describe(run)})",
                "change only the peak learning rate (and the seed): same setup, same init",
            )
        cfg_a = first.job.cfg.replace(lr=1.0, seed=0)
        cfg_b = run.job.cfg.replace(lr=1.0, seed=0)
        if cfg_a != cfg_b:
            diff = [
                f
                for f in (
                    "steps",
                    "warmup_steps",
                    "batch_size",
                    "block_size",
                    "weight_decay",
                    "grad_clip",
                    "betas",
                    "min_lr_ratio",
                )
                if getattr(cfg_a, f) != getattr(cfg_b, f)
            ]
            fail(
                name,
                f"the runs differ in more than the learning rate: {', '.join(diff) or 'the TrainConfig'}",
                "keep every other setting of the chapter's runs (base.replace(lr=..., seed=...))",
            )
    if _init_of(first) != "xavier":
        fail(
            name,
            f"the runs use init {_init_of(first)!r}; the exercise brackets the limit of post-norm "
            "with Xavier-normal init",
            'build every run with job("post", "xavier", lr, 0, seed)',
        )
    for label, runs_ in groups.items():
        lrs = {run.job.cfg.lr for run in runs_}
        if len(lrs) > 1:
            fail(name, f"{label} mixes peak learning rates {sorted(lrs)}", "one rate per list, several seeds")
    lr_ok, lr_stuck = groups["ok_runs"][0].job.cfg.lr, groups["stuck_runs"][0].job.cfg.lr
    if lr_ok >= lr_stuck:
        fail(
            name,
            f"the rate that trains ({lr_ok:g}) is not below the rate that is stuck ({lr_stuck:g})",
            "ok_runs at the lower rate, stuck_runs at the higher one",
        )
    for run in groups["ok_runs"]:
        gap = unigram - _final(run)
        if gap < _LEFT:
            fail(
                name,
                f"at {lr_ok:g} a run ends only {gap:.3f} nats below the unigram entropy "
                f"({_describe(run)}): it has not left the plateau.\n  Next: the limit is below this "
                "rate; try a lower one",
            )
    for run in groups["stuck_runs"]:
        gap = unigram - _final(run)
        if abs(gap) > _PLATEAU:
            fail(
                name,
                f"at {lr_stuck:g} a run ends {gap:.3f} nats below the unigram entropy ({_describe(run)}): "
                "it is not on the plateau.\n  Next: the limit is above this rate; try a higher one",
            )
    if lr_stuck / lr_ok > 2 + 1e-9:
        fail(
            name,
            f"the bracket {lr_ok:g} to {lr_stuck:g} is {lr_stuck / lr_ok:.1f} times wide, wider than 2."
            f"\n  Next: try the geometric mean, {math.sqrt(lr_ok * lr_stuck):.2g}, and keep the half "
            "that brackets the limit",
        )
    seeds = sorted({run.job.cfg.seed for run in runs})
    passed(
        name,
        f"post-norm (init {_init_of(first)!r}) leaves the plateau at {lr_ok:g} and stays on it at "
        f"{lr_stuck:g}, seeds {seeds}",
    )


# ------------------------------------------------------------ the gradients at init, balanced
_BALANCE_MODEL = dict(vocab_size=256, n_ctx=64, n_embd=64, n_head=4, n_layer=6)
_BALANCE_SEEDS = (0, 1, 2)
_BALANCE_BAND = (0.8, 1.25)  # the gap counts as 1 inside this band, every seed
_WTE_STD, _WPE_STD = 0.02, 0.01  # GPT-2's init of the token and position embeddings


def _balance_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The chapter's batch: 16 windows of 64 bytes of the training text, drawn with seed 0."""
    from ...lab.data import get_batch, load_tokens

    return get_batch(load_tokens("train"), 16, 64, torch.Generator().manual_seed(0))


def _balance_model(position: str, seed: int, k: float) -> nn.Module:
    """A fresh 6-layer byte-level GPT-2 (width 64) with both embedding tables multiplied by k."""
    from ...model.gpt2 import GPT2

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2(GPT2Config(norm_position=position, **_BALANCE_MODEL))
    with torch.no_grad():
        model.wte.weight.mul_(k)
        model.wpe.weight.mul_(k)
    return model


def _block_grad_norms(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
    """``[n_layer, 2]``: the gradient norm of each block's attention and MLP weights."""
    logits = model(xb)
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1)).backward()

    def norm(*linears: nn.Module) -> torch.Tensor:
        return torch.sqrt(sum(lin.weight.grad.square().sum() for lin in linears))

    return torch.stack(
        [torch.stack([norm(b.attn.c_attn, b.attn.c_proj), norm(b.mlp.c_fc, b.mlp.c_proj)]) for b in model.h]
    )


class _OneThread:
    """Run the tiny models on one thread (they run fastest so), then restore the thread count."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.threads)


def _balance_gaps(k: float) -> list[float]:
    """Per seed: pre-norm's / post-norm's block gradient norm, mean over the blocks and sub-layers."""
    xb, yb = _balance_batch()
    gaps = []
    with _OneThread():
        for seed in _BALANCE_SEEDS:
            pre, post = (_block_grad_norms(_balance_model(p, seed, k), xb, yb) for p in ("pre", "post"))
            gaps.append((pre / post).mean().item())
    return gaps


def _stream_rms_at_ln_f() -> float:
    """The rms of a fresh pre-norm model's stream entering ln_f (GPT-2's init), mean over the seeds."""
    xb, _ = _balance_batch()
    values = []
    with _OneThread(), torch.no_grad():
        for seed in _BALANCE_SEEDS:
            _, cache = _balance_model("pre", seed, 1.0).run_with_cache(xb)
            values.append(cache[f"resid_pre.{_BALANCE_MODEL['n_layer']}"].pow(2).mean().sqrt().item())
    return sum(values) / len(values)


def check_gradient_balance(k: Any) -> None:
    """Check ``k``, the factor on both embedding tables (``wte``, ``wpe``) of fresh pre-norm and
    post-norm GPT-2s at which their blocks' gradients are equal.

    Measures 6-layer byte-level models (width 64, GPT-2's init otherwise) on seeds 0, 1, 2 and
    the chapter's batch: the mean over the blocks of pre-norm's / post-norm's gradient norm must
    lie between 0.8 and 1.25 in every seed. The right ``k`` makes the embeddings' rms,
    ``sqrt(0.02**2 + 0.01**2)`` = 0.022, about 1, as large as the stream every post-norm norm reads
    (k near 45). A wrong ``k`` names the mistake it matches: 1 / the rms of the stream entering
    ``ln_f`` (which holds what the blocks add, not scaled by k), the two stds added, the position
    embedding's std alone, the norm ``||x||`` made 1 instead of the rms, a k below 1 or equal to 1.
    """
    check = "check_gradient_balance"
    k = _positive_number(
        check, "k", k, "the factor on both tables", "k multiplies the embeddings: a factor above 0"
    )
    gaps = _balance_gaps(k)
    lo, hi = min(gaps), max(gaps)
    measured = f"{lo:.2f} to {hi:.2f}" if f"{lo:.2f}" != f"{hi:.2f}" else f"{lo:.2f}"
    emb_rms = math.hypot(_WTE_STD, _WPE_STD)
    if all(_BALANCE_BAND[0] <= g <= _BALANCE_BAND[1] for g in gaps):
        # k = 1 / 0.02 balances too, but it counts the token embeddings only: say so
        token_only = abs(k * _WTE_STD - 1) < 0.02
        note = (
            f" (1 / 0.02 counts the token embeddings only; with the position embeddings the rms is "
            f"{emb_rms:.4f}, k = {1 / emb_rms:.1f})"
            if token_only
            else ""
        )
        passed(
            check,
            f"with both embedding tables times k = {k:.3g}, pre-norm's block gradients are {measured} "
            "times post-norm's (6 layers, seeds 0, 1, 2): every norm now reads a stream of rms about 1"
            + note,
        )
        return
    d = _BALANCE_MODEL["n_embd"]
    what = f"with k = {k:.3g}, pre-norm's block gradients are {measured} times post-norm's (want about 1)"
    if abs(k - 1) < 1e-9:
        fail(
            check,
            what,
            "k = 1 leaves GPT-2's init as it is (the chapter's gap): find the factor that brings the "
            "stream the norms read to rms 1",
        )
    if k < 1:
        fail(
            check,
            what,
            f"k below 1 shrinks the stream, and ln_f multiplies the gradient by 1 / (its rms): k should "
            f"bring the embeddings' rms ({emb_rms:.3f}) up to about 1, so k = 1 / rms, not the rms",
        )
    named = [
        (
            1 / _stream_rms_at_ln_f(),
            "k = 1 / (the rms of the stream entering ln_f): that stream is the embeddings plus what the "
            f"blocks add, and k scales only the embeddings, whose rms is sqrt(0.02² + 0.01²) = {emb_rms:.4f}",
        ),
        (
            1 / (_WTE_STD + _WPE_STD),
            "added the two standard deviations, 0.02 + 0.01: independent parts add in squares, so the "
            f"embeddings' rms is sqrt(0.02² + 0.01²) = {emb_rms:.4f}",
        ),
        (
            1 / _WPE_STD,
            "used the position embeddings' std (0.01) alone: the stream starts as token plus position "
            f"embedding, rms sqrt(0.02² + 0.01²) = {emb_rms:.4f}",
        ),
        (
            1 / (emb_rms * math.sqrt(d)),
            f"made the stream's norm ||x|| equal to 1 instead of its rms: a LayerNorm divides by the rms, "
            f"||x|| / sqrt(d), with d = {d} here",
        ),
    ]
    value, label = min(named, key=lambda m: abs(math.log(k / m[0])))
    if abs(math.log(k / value)) < 0.05:
        fail(check, what, label)
    if hi > _BALANCE_BAND[1]:
        fail(
            check,
            what,
            f"k too small: the norms of pre-norm still read a stream of rms below 1 (the embeddings' rms is "
            f"{emb_rms:.4f} × k), and each multiplies the gradient by 1 / rms",
        )
    fail(
        check,
        what,
        f"k too large: now post-norm's gradients are the larger, because pre-norm's stream has rms above 1 "
        f"(the embeddings' rms is {emb_rms:.4f} × k)",
    )


# ------------------------------------------------------------------- ln_f's factor at depth
_DEEP_LAYERS = 48
_FACTOR_TOL = 0.15  # a prediction within 15 % of the measured factor (mean over the seeds) passes


@functools.lru_cache(maxsize=2)  # the same fresh models every call: measure them once
def _lnf_factors(scaled: bool) -> tuple[float, ...]:
    """Per seed: ln_f's gradient factor (gradient norm into ln_f / out of it) in a fresh 48-layer
    pre-norm model of width 64, with or without GPT-2's 0.02/sqrt(2L) init of the ``c_proj``."""
    from ...model.gpt2 import GPT2

    xb, yb = (t[:4] for t in _balance_batch())  # the chapter's first 4 windows: 256 bytes
    cfg = GPT2Config(
        norm_position="pre", scale_resid_init=scaled, **{**_BALANCE_MODEL, "n_layer": _DEEP_LAYERS}
    )
    factors = []
    with _OneThread():
        for seed in _BALANCE_SEEDS:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = GPT2(cfg)
            logits, cache = model.run_with_cache(xb)
            into, out = cache[f"resid_pre.{_DEEP_LAYERS}"], cache["ln_f.out"]
            into.retain_grad()
            out.retain_grad()
            F.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1)).backward()
            factors.append((into.grad.norm() / out.grad.norm()).item())
    return tuple(factors)


def _positive_number(check: str, name: str, value: Any, what: str, why: str) -> float:
    """``value`` as a positive finite float, or a failure saying what was expected (``what``: what
    the learner sets ``name`` to; ``why``: why it must be above 0)."""
    wrong = (f"{name} is {type(value).__name__}, expected a number", f"set {name} = <{what}>")
    if (
        value is None
        or isinstance(value, (bool, str))
        or (hasattr(value, "shape") and math.prod(value.shape) != 1)
    ):
        fail(check, *wrong)
    try:
        value = float(value.reshape(()) if hasattr(value, "shape") else value)
    except (TypeError, ValueError):
        fail(check, *wrong)
    if not math.isfinite(value) or value <= 0:
        fail(check, f"{name} = {value!r} is not a positive number", why)
    return value


def check_lnf_factor(scaled: Any, unscaled: Any) -> None:
    """Check predictions of ``ln_f``'s gradient factor in fresh 48-layer pre-norm GPT-2s.

    ``scaled``: with GPT-2's ``0.02/sqrt(2L)`` init of each ``c_proj``; ``unscaled``: with 0.02.
    Measures byte-level models of width 64 (4 heads) on seeds 0, 1, 2 and the chapter's first 4 windows:
    the gradient norm entering ``ln_f`` over the one leaving it, mean over the seeds. Each
    prediction must be within 15 %. The factor is 1 / (rms of the stream ``ln_f`` reads),
    ``sqrt(d / ||x_48||^2)``, with ``||x_48||^2`` the embeddings' ``d (0.02^2 + 0.01^2)`` plus
    the growth the blocks add (the chapter's depth table). A wrong prediction names the mistake
    it matches: the embeddings alone (no growth), the 6-layer value for the unscaled model, the
    two swapped, the rms instead of 1 / rms, no square root.
    """
    check = "check_lnf_factor"
    why = "a gradient factor is a ratio of norms, above 0"
    predicted = {
        name: _positive_number(check, name, value, "your predicted factor", why)
        for name, value in (("scaled", scaled), ("unscaled", unscaled))
    }
    measured = {name: _lnf_factors(name == "scaled") for name in predicted}
    mean = {name: sum(v) / len(v) for name, v in measured.items()}
    off = {name: abs(predicted[name] / mean[name] - 1) for name in predicted}
    if max(off.values()) <= _FACTOR_TOL:
        passed(
            check,
            f"ln_f multiplies the gradient by {mean['scaled']:.1f} with the scaled init and by "
            f"{mean['unscaled']:.1f} without (48 layers, seeds 0, 1, 2); you predicted "
            f"{predicted['scaled']:.3g} and {predicted['unscaled']:.3g}",
        )
        return
    d = _BALANCE_MODEL["n_embd"]
    emb = 1 / math.hypot(_WTE_STD, _WPE_STD)  # 1 / rms of the embeddings alone, about 45
    what = "; ".join(
        f"{name}: you predicted {predicted[name]:.3g}, measured {span_text(measured[name])}"
        for name in predicted
    )
    # the usual wrong predictions, checked against what the learner wrote
    close = {name: (lambda v, name=name: abs(math.log(predicted[name] / v)) < 0.1) for name in predicted}
    if close["scaled"](mean["unscaled"]) and close["unscaled"](mean["scaled"]):
        fail(
            check,
            what,
            "the two are swapped: without the scaled init the stream grows more, so ln_f "
            "reads a larger stream and its factor, 1 / rms, is the smaller one",
        )
    if any(close[name](emb) for name in predicted):
        fail(
            check,
            what,
            f"1 / (the embeddings' rms) = {emb:.0f} leaves out what the blocks add: ln_f reads the "
            "embeddings plus the growth in the chapter's depth table, ||x_48||² = d·(0.02² + 0.01²) + growth",
        )
    if any(predicted[name] < 1 for name in predicted):
        fail(
            check,
            what,
            "a factor below 1 is the stream's rms, not 1 / rms: a norm multiplies the gradient "
            "by 1 / (the rms of what it reads)",
        )
    if any(close[name](mean[name] ** 2) for name in predicted):
        fail(
            check,
            what,
            f"no square root: the rms is sqrt(||x||² / d), so the factor is sqrt({d} / ||x_48||²)",
        )
    if off["unscaled"] > _FACTOR_TOL and close["unscaled"](mean["scaled"]):
        fail(
            check,
            what,
            "without the scaled init the growth is not the same at every depth: it grows like "
            "2L (Figure 7.3), so at 48 layers the stream is larger and ln_f's factor smaller",
        )
    fail(
        check,
        what,
        "ln_f's factor is 1 / rms = sqrt(d / ||x_48||²); ||x_48||² is d·(0.02² + 0.01²) plus the "
        "growth printed in the depth table for L = 48, scaled or not",
    )


def span_text(values: Sequence[float]) -> str:
    """``lo to hi`` over the seeds, one decimal (one number when both print the same)."""
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return lo if lo == hi else f"{lo} to {hi}"
