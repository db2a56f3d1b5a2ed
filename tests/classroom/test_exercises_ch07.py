"""Chapter 7 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gpt2ln.exercises import check_lnf_factor, check_lr_schedule, check_post_norm_block, check_pre_norm_block


# ------------------------------------------------------------------------ check_post_norm_block
def right_block(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x))
    return ln_2(h + mlp(h))


def test_right_block_passes_and_prints_one_line(capsys):
    check_post_norm_block(right_block)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_post_norm_block")


def _loop_block(x, attn, mlp, ln_1, ln_2):
    for f, ln in ((attn, ln_1), (mlp, ln_2)):
        x = ln(x + f(x))
    return x


def _numpy_block(x, attn, mlp, ln_1, ln_2):
    h = ln_1(x + attn(x)).numpy()
    return ln_2(torch.from_numpy(h) + mlp(torch.from_numpy(h))).numpy()


@pytest.mark.parametrize("fn", [_loop_block, _numpy_block], ids=["loop", "numpy-out"])
def test_other_right_blocks_pass(fn, capsys):
    check_post_norm_block(fn)
    assert "✓" in capsys.readouterr().out


def _in_place(x, attn, mlp, ln_1, ln_2):
    x += attn(x)
    h = ln_1(x)
    return ln_2(h + mlp(h))


BLOCK_MISTAKES = {
    "pre_norm": (
        lambda x, a, m, l1, l2: (lambda h: h + m(l2(h)))(x + a(l1(x))),
        "normalized before adding",
    ),
    "no_residual": (lambda x, a, m, l1, l2: l2(m(l1(a(x)))), "forgot the residual"),
    "output_norm": (
        lambda x, a, m, l1, l2: (lambda h: h + l2(m(h)))(x + l1(a(x))),
        "applied ln to the sub-layer output only",
    ),
    "swapped_norms": (lambda x, a, m, l1, l2: right_block(x, a, m, l2, l1), "swapped ln_1 and ln_2"),
    "mlp_reads_x": (
        lambda x, a, m, l1, l2: l2(l1(x + a(x)) + m(x)),
        "the MLP reads the block input x",
    ),
    "residual_from_x": (
        lambda x, a, m, l1, l2: l2(x + m(l1(x + a(x)))),
        "the second residual adds the block input x",
    ),
    "parallel": (lambda x, a, m, l1, l2: l2(x + a(x) + m(x)), "parallel block"),
    "norm_outside_mlp_sum": (
        lambda x, a, m, l1, l2: (lambda h: l2(h) + m(h))(l1(x + a(x))),
        "normalized the stream before adding the MLP",
    ),
    "norm_outside_attn_sum": (
        lambda x, a, m, l1, l2: (lambda h: l2(h + m(h)))(l1(x) + a(x)),
        "normalized the stream before adding attention",
    ),
    "attention_half_only": (lambda x, a, m, l1, l2: l1(x + a(x)), "forgot the MLP half"),
    "no_second_norm": (
        lambda x, a, m, l1, l2: (lambda h: h + m(h))(l1(x + a(x))),
        "forgot the second norm",
    ),
    "returns_none": (lambda x, a, m, l1, l2: None, "missing `return`"),
    "in_place": (_in_place, "in place"),
    "wrong_shape": (lambda x, a, m, l1, l2: right_block(x, a, m, l1, l2)[0], "has shape"),
}


@pytest.mark.parametrize("name", list(BLOCK_MISTAKES))
def test_each_block_mistake_fails_naming_it(name):
    fn, words = BLOCK_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_post_norm_block") as info:
        check_post_norm_block(fn)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("name", [*BLOCK_MISTAKES, "unexplained"])
def test_failing_block_check_does_not_hand_over_the_answer(name):
    # the learner writes the block: no failure message may print its formula
    fn = BLOCK_MISTAKES[name][0] if name in BLOCK_MISTAKES else (
        lambda x, a, m, l1, l2: 1.01 * right_block(x, a, m, l1, l2))
    with pytest.raises(AssertionError) as info:
        check_post_norm_block(fn)
    msg = str(info.value)
    assert "ln_2(h + mlp(h))" not in msg and "ln_1(x + attn(x))" not in msg, msg


def test_unexplained_block_gets_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_post_norm_block(lambda x, a, m, l1, l2: 1.01 * right_block(x, a, m, l1, l2))


def test_unimplemented_block_says_not_implemented_yet():
    def my_post_norm_block(x, attn, mlp, ln_1, ln_2):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_post_norm_block(my_post_norm_block)


# ------------------------------------------------------------------------- check_pre_norm_block
def right_pre_block(x, attn, mlp, ln_1, ln_2):
    h = x + attn(ln_1(x))
    return h + mlp(ln_2(h))


def test_right_pre_block_passes_and_prints_one_line(capsys):
    check_pre_norm_block(right_pre_block)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_pre_norm_block")


def _loop_pre_block(x, attn, mlp, ln_1, ln_2):
    for f, ln in ((attn, ln_1), (mlp, ln_2)):
        x = x + f(ln(x))
    return x


def _hf_style_pre_block(x, attn, mlp, ln_1, ln_2):  # transformers' GPT2Block: residual = x; x = ln(x); ...
    residual = x
    x = ln_1(x)
    x = attn(x) + residual
    residual = x
    return mlp(ln_2(x)) + residual


@pytest.mark.parametrize("fn", [_loop_pre_block, _hf_style_pre_block], ids=["loop", "transformers-style"])
def test_other_right_pre_blocks_pass(fn, capsys):
    check_pre_norm_block(fn)
    assert "✓" in capsys.readouterr().out


def _pre_in_place(x, attn, mlp, ln_1, ln_2):
    x += attn(ln_1(x))
    return x + mlp(ln_2(x))


def _stream_normalized(x, attn, mlp, ln_1, ln_2):
    x = ln_1(x)  # the classic slip: the stream itself replaced by its normalized copy
    x = x + attn(x)
    x = ln_2(x)
    return x + mlp(x)


PRE_MISTAKES = {
    "post_norm": (right_block, "normalized after the residual addition"),
    "no_attention_residual": (
        lambda x, a, m, l1, l2: (lambda h: h + m(l2(h)))(a(l1(x))),
        "dropped the attention's residual connection",
    ),
    "no_mlp_residual": (lambda x, a, m, l1, l2: m(l2(x + a(l1(x)))), "dropped the MLP's residual connection"),
    "no_residual": (lambda x, a, m, l1, l2: m(l2(a(l1(x)))), "dropped both residual connections"),
    "ln_1_twice": (lambda x, a, m, l1, l2: right_pre_block(x, a, m, l1, l1), "reused ln_1 for both"),
    "ln_2_twice": (lambda x, a, m, l1, l2: right_pre_block(x, a, m, l2, l2), "reused ln_2 for both"),
    "swapped_norms": (lambda x, a, m, l1, l2: right_pre_block(x, a, m, l2, l1), "swapped ln_1 and ln_2"),
    "stream_normalized": (_stream_normalized, "normalized the residual stream itself"),
    "stream_normalized_attention": (
        lambda x, a, m, l1, l2: (lambda u: (lambda h: h + m(l2(h)))(u + a(u)))(l1(x)),
        "normalized the residual stream itself before attention",
    ),
    "stream_normalized_mlp": (
        lambda x, a, m, l1, l2: (lambda h: h + m(h))(l2(x + a(l1(x)))),
        "normalized the residual stream itself before the MLP",
    ),
    "ln_f_plain": (
        lambda x, a, m, l1, l2: F.layer_norm(right_pre_block(x, a, m, l1, l2), (x.shape[-1],)),
        "added a final norm (ln_f) inside the block",
    ),
    "ln_f_as_ln_2": (
        lambda x, a, m, l1, l2: l2(right_pre_block(x, a, m, l1, l2)),
        "added a final norm (ln_f) inside the block",
    ),
    "ln_f_as_ln_1": (
        lambda x, a, m, l1, l2: l1(right_pre_block(x, a, m, l1, l2)),
        "added a final norm (ln_f) inside the block",
    ),
    "parallel": (lambda x, a, m, l1, l2: x + a(l1(x)) + m(l2(x)), "the MLP reads the block input"),
    "residual_from_x": (
        lambda x, a, m, l1, l2: x + m(l2(x + a(l1(x)))),
        "the second residual adds the block input x",
    ),
    "attention_half_only": (lambda x, a, m, l1, l2: x + a(l1(x)), "forgot the MLP half"),
    "returns_none": (lambda x, a, m, l1, l2: None, "missing `return`"),
    "in_place": (_pre_in_place, "in place"),
    "wrong_shape": (lambda x, a, m, l1, l2: right_pre_block(x, a, m, l1, l2)[0], "has shape"),
}


@pytest.mark.parametrize("name", list(PRE_MISTAKES))
def test_each_pre_block_mistake_fails_naming_it(name):
    fn, words = PRE_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_pre_norm_block") as info:
        check_pre_norm_block(fn)
    assert words in str(info.value), str(info.value)


def test_pre_block_mistakes_each_name_one_mistake():
    """The sub-layers' parameters are distinct enough that no two mistakes give one output."""
    from gpt2ln.exercises import ch07

    case = ch07._block_cases("pre")[0]
    args = (case.x, *case.sublayers())
    truth = case.truth()
    outs = {m.label: m.fn(*args).detach() for m in ch07._pre_mistakes() if "ln_f" not in m.label}
    for label, y in outs.items():
        assert (y - truth).abs().max() > 1e-2, label
        for other, z in outs.items():
            assert other == label or (y - z).abs().max() > 1e-2, (label, other)


def test_unexplained_pre_block_gets_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_pre_norm_block(lambda x, a, m, l1, l2: 1.01 * right_pre_block(x, a, m, l1, l2))


def test_unimplemented_pre_block_says_not_implemented_yet():
    def my_pre_norm_block(x, attn, mlp, ln_1, ln_2):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_pre_norm_block(my_pre_norm_block)


# ---------------------------------------------------------------------------- check_lr_schedule
def right_schedule(step, steps, lr, warmup, min_lr):
    if step < warmup:
        return lr * step / warmup
    if step >= steps:
        return min_lr
    progress = (step - warmup) / (steps - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def test_right_schedule_passes_and_prints_one_line(capsys):
    check_lr_schedule(right_schedule)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_lr_schedule")


def _numpy_schedule(step, steps, lr, warmup, min_lr):
    w = np.clip((step - warmup) / (steps - warmup), 0.0, 1.0)
    cosine = min_lr + 0.5 * (lr - min_lr) * (1 + np.cos(np.pi * w))
    return np.float64(lr * step / warmup) if step < warmup else cosine


def _tensor_schedule(step, steps, lr, warmup, min_lr):
    return torch.tensor(right_schedule(step, steps, lr, warmup, min_lr), dtype=torch.float32)


@pytest.mark.parametrize("fn", [_numpy_schedule, _tensor_schedule], ids=["numpy", "tensor"])
def test_other_right_schedules_pass(fn, capsys):
    check_lr_schedule(fn)
    assert "✓" in capsys.readouterr().out


def _schedule(step, steps, lr, warmup, min_lr, *, warm=None, floor=None, span=None, start=None, clamp=True):
    if step < warmup:
        return warm(step, warmup, lr, min_lr) if warm else lr * step / warmup
    low = min_lr if floor is None else floor
    if step >= steps and clamp:
        return low
    s0 = warmup if start is None else start
    p = (step - s0) / ((steps - warmup) if span is None else span(steps, warmup))
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * p))


def _no_warmup_handling(step, steps, lr, warmup, min_lr):
    if step <= warmup:  # the peak at step == warmup, computed as lr * warmup / warmup
        return lr * step / warmup
    return right_schedule(step, steps, lr, warmup, min_lr)


def _nan_warmup(step, steps, lr, warmup, min_lr):
    if step <= warmup:  # numpy: 0 / 0 is NaN, not an exception
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.float64(lr) * step / np.float64(warmup)
    return right_schedule(step, steps, lr, warmup, min_lr)


LR_MISTAKES = {
    "warmup_plus_one": (
        lambda *a: _schedule(*a, warm=lambda s, w, lr, m: lr * (s + 1) / w),
        "off-by-one in warm-up",
    ),
    "warmup_nanogpt": (
        lambda *a: _schedule(*a, warm=lambda s, w, lr, m: lr * (s + 1) / (w + 1)),
        "off-by-one in warm-up",
    ),
    "warmup_from_min": (
        lambda *a: _schedule(*a, warm=lambda s, w, lr, m: m + (lr - m) * s / w),
        "warm-up starts from min_lr",
    ),
    "decays_to_zero": (lambda *a: _schedule(*a, floor=0.0), "cosine not reaching min"),
    "span_over_steps": (lambda *a: _schedule(*a, span=lambda n, w: n), "cosine not reaching min"),
    "cosine_from_zero": (
        lambda *a: _schedule(*a, start=0, span=lambda n, w: n),
        "cosine counted from step 0",
    ),
    "no_clamp": (lambda *a: _schedule(*a, clamp=False), "no clamp after steps"),
    "decays_to_zero_no_clamp": (
        lambda *a: _schedule(*a, floor=0.0, clamp=False),
        "cosine decays to 0 instead of to min_lr, and past `steps` it climbs back up",
    ),
    "no_warmup_handling": (_no_warmup_handling, "no warm-up handling"),
    "nan_when_no_warmup": (_nan_warmup, "no warm-up handling"),
    "missing_half": (
        lambda step, steps, lr, warmup, min_lr: (
            right_schedule(step, steps, lr, warmup, min_lr) * 2 - min_lr
            if warmup <= step < steps
            else right_schedule(step, steps, lr, warmup, min_lr)
        ),
        "missing the 0.5 factor",
    ),
    "linear_decay": (
        lambda step, steps, lr, warmup, min_lr: (
            lr - (lr - min_lr) * (step - warmup) / (steps - warmup)
            if warmup <= step < steps
            else right_schedule(step, steps, lr, warmup, min_lr)
        ),
        "linear decay instead of cosine",
    ),
    "returns_none": (lambda *a: None, "missing `return`"),
    "returns_list": (lambda *a: [right_schedule(*a)], "expected a number"),
}


@pytest.mark.parametrize("name", list(LR_MISTAKES))
def test_each_schedule_mistake_fails_naming_it(name):
    fn, words = LR_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_lr_schedule") as info:
        check_lr_schedule(fn)
    assert words in str(info.value), str(info.value)


def test_unexplained_schedule_gets_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_lr_schedule(lambda *a: 1.1 * right_schedule(*a))


def test_unimplemented_schedule_says_not_implemented_yet():
    def my_lr(step, steps, lr, warmup, min_lr):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_lr_schedule(my_lr)


def test_crashing_schedule_reports_the_exception():
    with pytest.raises(AssertionError, match="raised KeyError"):
        check_lr_schedule(lambda *a: {}["lr"])


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_post_norm_block(right_block)
    check_pre_norm_block(right_pre_block)
    check_lr_schedule(right_schedule)
    assert torch.equal(torch.rand(3), expected)


# ------------------------------------------------------------------------ check_lr_limit
from gpt2ln import GPT2Config, TrainConfig  # noqa: E402
from gpt2ln.exercises import check_lr_limit  # noqa: E402
from gpt2ln.lab.seeds import TrainJob, TrainResult  # noqa: E402
from gpt2ln.lab.train import TrainHistory  # noqa: E402

UNIGRAM = 3.30
_MODEL = dict(vocab_size=256, n_ctx=64, n_embd=64, n_head=4, n_layer=4)
_CFG = TrainConfig(steps=200, warmup_steps=0, batch_size=8, block_size=32, device="cpu", log_attn_max=False)


def fake_run(lr, final, seed=0, pos="post", init="xavier", diverged=False, **cfg_changes):
    job = TrainJob(
        GPT2Config(norm_position=pos, **_MODEL),
        _CFG.replace(lr=lr, seed=seed, **cfg_changes),
        init_seed=seed,
        key={"init": init},
    )
    history = TrainHistory(ce=[5.5] * 180 + [final] * 20, diverged=diverged)
    return TrainResult(job=job, history=history, state={}, seconds=0.0)


def ok(lr=2e-3, **kw):
    return [fake_run(lr, UNIGRAM - 0.3, seed=s, **kw) for s in (0, 1, 2)]


def stuck(lr=4e-3, **kw):
    return [fake_run(lr, UNIGRAM + 0.01, seed=s, **kw) for s in (0, 1, 2)]


def test_lr_limit_right_bracket_passes(capsys):
    check_lr_limit(ok(), stuck(), UNIGRAM)
    out = capsys.readouterr().out
    assert out.startswith("✓ check_lr_limit") and "0.002" in out and "0.004" in out


@pytest.mark.parametrize(
    ("ok_runs", "stuck_runs", "words"),
    [
        (ok(), stuck(lr=1e-2), "wider than 2"),
        (ok(lr=4e-3), stuck(lr=2e-3), "not below"),
        ([fake_run(2e-3, UNIGRAM - 0.05)], stuck(), "has not left the plateau"),
        (ok(), [fake_run(4e-3, UNIGRAM - 0.2)], "not on the plateau"),
        (ok(pos="pre"), stuck(pos="pre"), "post-norm's limit"),
        (ok(), stuck(init="gpt2"), "model or its init"),
        (ok(init="gpt2"), stuck(init="gpt2"), "post-norm with Xavier-normal init"),
        (ok(), stuck(warmup_steps=40), "warmup_steps"),
        ([*ok(), fake_run(0.003, UNIGRAM - 0.3)], stuck(), "mixes peak learning rates"),
        (ok(), [fake_run(4e-3, UNIGRAM, diverged=True)], "diverged"),
        ([], stuck(), "empty"),
        ([UNIGRAM - 0.3], stuck(), "not a training result"),
    ],
)
def test_lr_limit_names_the_mistake(ok_runs, stuck_runs, words):
    with pytest.raises(AssertionError, match=words):
        check_lr_limit(ok_runs, stuck_runs, UNIGRAM)


def test_train_with_init_records_the_init_and_rejects_unknown_ones():
    from gpt2ln.exercises.ch07 import train_with_init

    cfg = _CFG.replace(steps=2, eval_interval=2, eval_batches=1, lr=1e-3)
    job = TrainJob(GPT2Config(norm_position="post", **_MODEL), cfg, init_seed=0)
    result = train_with_init((job, "xavier"))
    assert result.job.key == {"init": "xavier"} and len(result.history.ce) == 2
    std = result.state["h.0.mlp.c_fc.weight"].std().item()
    assert 0.06 < std < 0.1  # Xavier-normal, 64 -> 256: sqrt(2 / 320) = 0.079, after 2 small steps
    with pytest.raises(ValueError, match="init"):
        train_with_init((job, "kaiming"))


# ------------------------------------------------------------------ check_gradient_balance
from gpt2ln.exercises.ch07 import check_gradient_balance  # noqa: E402

EMB_RMS = math.hypot(0.02, 0.01)  # GPT-2's token (0.02) and position (0.01) embeddings


@pytest.mark.parametrize("k", [1 / EMB_RMS, 1 / 0.02, np.float64(45.0), torch.tensor(45.0)])
def test_gradient_balance_right_k_passes(k, capsys):
    check_gradient_balance(k)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_gradient_balance")


def test_gradient_balance_passes_token_only_k_and_says_what_it_leaves_out(capsys):
    check_gradient_balance(1 / 0.02)  # balanced within the band, but wpe forgotten
    out = capsys.readouterr().out
    assert out.startswith("✓ check_gradient_balance") and "position embeddings" in out
    check_gradient_balance(1 / EMB_RMS)
    assert "position embeddings" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("k", "words"),
    [
        (34.2, "the rms of the stream entering ln_f"),  # 1 / 0.029, the stream ln_f reads at init
        (1 / 0.03, "added the two standard deviations"),
        (1 / 0.01, "position embeddings' std (0.01) alone"),
        (1 / (EMB_RMS * 8), "norm ||x|| equal to 1 instead of its rms"),
        (EMB_RMS, "k below 1 shrinks the stream"),
        (1, "k = 1 leaves GPT-2's init as it is"),
        (20, "k too small"),
        (70, "k too large"),
        (float("nan"), "not a positive number"),
        (-45, "not a positive number"),
        ("45", "expected a number"),
        (None, "expected a number"),
    ],
)
def test_gradient_balance_names_the_mistake(k, words):
    with pytest.raises(AssertionError, match="check_gradient_balance") as info:
        check_gradient_balance(k)
    assert words in str(info.value), str(info.value)


def test_gradient_balance_leaves_the_random_state_and_threads_alone():
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_gradient_balance(1 / EMB_RMS)
    assert torch.equal(torch.rand(3), expected) and torch.get_num_threads() == threads


# ----------------------------------------------------------------------------- check_lnf_factor
@pytest.fixture(scope="module")
def lnf_predictions():
    """The right answers from the formula, not from the check: sqrt(d / ||x_48||^2), with ||x_48||^2 the
    mean over the chapter's tokens of the stream entering ln_f in fresh 48-layer pre-norm models."""
    from gpt2ln import GPT2, GPT2Config, get_batch, load_tokens

    xb, _ = get_batch(load_tokens("train"), 16, 64, torch.Generator().manual_seed(0))
    xb = xb[:4]  # the check measures the first 4 windows of the chapter's batch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: fastest on one thread
    out = {}
    for scaled in (True, False):
        sq = []
        for seed in (0, 1, 2):
            torch.manual_seed(seed)
            cfg = GPT2Config(
                vocab_size=256, n_ctx=64, n_embd=64, n_head=4, n_layer=48, scale_resid_init=scaled
            )
            with torch.no_grad():
                _, cache = GPT2(cfg).run_with_cache(xb)
            sq.append(cache["resid_pre.48"].pow(2).sum(-1).mean().item())
        out[scaled] = math.sqrt(64 / (sum(sq) / len(sq)))
    torch.set_num_threads(threads)
    return out


def test_lnf_factor_right_predictions_pass(lnf_predictions, capsys):
    check_lnf_factor(lnf_predictions[True], lnf_predictions[False])
    out = capsys.readouterr().out
    assert out.startswith("✓ check_lnf_factor") and "48 layers" in out


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("embeddings_alone", "leaves out what the blocks add"),
        ("swapped", "the two are swapped"),
        ("rms_not_inverse", "a factor below 1 is the stream's rms"),
        ("six_layer_unscaled", "grows like 2L"),
    ],
)
def test_lnf_factor_mistakes_are_named(lnf_predictions, case, words):
    s, u = lnf_predictions[True], lnf_predictions[False]
    args = {
        "embeddings_alone": (1 / math.hypot(0.02, 0.01), 1 / math.hypot(0.02, 0.01)),
        "swapped": (u, s),
        "rms_not_inverse": (1 / s, 1 / u),
        "six_layer_unscaled": (s, s),
    }[case]
    with pytest.raises(AssertionError, match="check_lnf_factor") as info:
        check_lnf_factor(*args)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("bad", [None, "34", True, -3.0, float("nan"), torch.ones(2)])
def test_lnf_factor_rejects_what_is_not_a_positive_number(bad):
    with pytest.raises(AssertionError, match="check_lnf_factor: scaled"):
        check_lnf_factor(bad, 5.0)
