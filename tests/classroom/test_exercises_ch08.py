"""Chapter 8 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln.exercises import check_lr_sensitivity, check_qk_norm_scores


# ----------------------------------------------------------------------- check_qk_norm_scores
def _ms(t, dim=-1):
    return t.pow(2).mean(dim=dim, keepdim=True)


def right_scores(q, k, g_q, g_k, eps=1e-5):
    q_hat = q * torch.rsqrt(_ms(q) + eps) * g_q
    k_hat = k * torch.rsqrt(_ms(k) + eps) * g_k
    return q_hat @ k_hat.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _numpy_scores(q, k, g_q, g_k, eps=1e-5):
    q, k, g_q, g_k = (t.numpy() for t in (q, k, g_q, g_k))
    qh = q / np.sqrt((q**2).mean(-1, keepdims=True) + eps) * g_q
    kh = k / np.sqrt((k**2).mean(-1, keepdims=True) + eps) * g_k
    return qh @ np.swapaxes(kh, -1, -2) / np.sqrt(q.shape[-1])


@pytest.mark.parametrize(
    "fn",
    [
        right_scores,
        lambda q, k, g_q, g_k, eps=1e-5: (
            (F.rms_norm(q, (q.shape[-1],), g_q, eps) @ F.rms_norm(k, (k.shape[-1],), g_k, eps).mT)
            / math.sqrt(q.shape[-1])
        ),
        lambda q, k, g_q, g_k, eps=1e-5: (
            (gpt2ln.rms_norm(q, g_q, eps) @ gpt2ln.rms_norm(k, g_k, eps).transpose(-1, -2))
            * q.shape[-1] ** -0.5
        ),
        lambda q, k, g_q, g_k, eps=1e-5: (
            torch.einsum(
                "bhid,bhjd->bhij",
                q * torch.rsqrt(_ms(q) + eps) * g_q,
                k * torch.rsqrt(_ms(k) + eps) * g_k,
            )
            / math.sqrt(q.shape[-1])
        ),
        _numpy_scores,
    ],
    ids=["formula", "F.rms_norm", "gpt2ln.rms_norm", "einsum", "numpy"],
)
def test_right_qk_norm_scores_pass(fn, capsys):
    check_qk_norm_scores(fn)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_qk_norm_scores")


def _scores(q, k, g_q, g_k, eps=1e-5, *, dim=-1, norm="rms", gain="after", scale="sqrt", which="both"):
    """A learner's QK-norm scores, right by default; each keyword reproduces one mistake."""

    def normalize(t, g):
        if gain == "before":
            t = t * g
        if norm == "rms":
            u = t / torch.sqrt(_ms(t, dim) + eps)
        elif norm == "outside":
            u = t / (_ms(t, dim).sqrt() + eps)
        elif norm == "no_eps":
            u = t / _ms(t, dim).sqrt()
        elif norm == "layernorm":
            u = F.layer_norm(t, (t.shape[-1],), eps=eps)
        elif norm == "std":
            u = t / t.std(dim=-1, keepdim=True)
        else:  # l2
            u = F.normalize(t, dim=-1)
        return u * g if gain == "after" else u

    if which == "same_gain":
        g_k = g_q
    q_hat = normalize(q, g_q) if which != "k_only" else q
    k_hat = normalize(k, g_k) if which != "q_only" else k
    s = q_hat @ k_hat.transpose(-2, -1)
    return s / {"sqrt": math.sqrt(q.shape[-1]), "none": 1.0, "D": q.shape[-1]}[scale]


def _after_dot(q, k, g_q, g_k, eps=1e-5):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s / torch.sqrt(_ms(s) + eps)


QK_MISTAKES = {
    # name: (wrong implementation, words the message must contain)
    "axis_T": (lambda *a, **kw: _scores(*a, **kw, dim=-2), "wrong axis: the positions"),
    "axis_heads": (lambda *a, **kw: _scores(*a, **kw, dim=1), "wrong axis: the heads"),
    "no_scale": (lambda *a, **kw: _scores(*a, **kw, scale="none"), "forgot the 1/sqrt(D) scale"),
    "scale_1_over_D": (lambda *a, **kw: _scores(*a, **kw, scale="D"), "1/D instead of 1/sqrt(D)"),
    "after_dot": (_after_dot, "normalized after the dot product"),
    "l2": (lambda *a, **kw: _scores(*a, **kw, norm="l2"), "unit-length (L2)"),
    "same_gain": (lambda *a, **kw: _scores(*a, **kw, which="same_gain"), "shared the gain across q and k"),
    "q_only": (lambda *a, **kw: _scores(*a, **kw, which="q_only"), "normalized q only"),
    "k_only": (lambda *a, **kw: _scores(*a, **kw, which="k_only"), "normalized k only"),
    "gain_before": (lambda *a, **kw: _scores(*a, **kw, gain="before"), "gain applied before the norm"),
    "no_gain": (lambda *a, **kw: _scores(*a, **kw, gain="none"), "forgot the gains"),
    "layernorm": (lambda *a, **kw: _scores(*a, **kw, norm="layernorm"), "subtracted the mean"),
    "std": (lambda *a, **kw: _scores(*a, **kw, norm="std"), "standard deviation"),
    "eps_outside": (lambda *a, **kw: _scores(*a, **kw, norm="outside"), "eps outside the square root"),
    "no_eps": (lambda *a, **kw: _scores(*a, **kw, norm="no_eps"), "forgot eps"),
    "ignored_eps": (lambda q, k, g_q, g_k, eps=1e-5: right_scores(q, k, g_q, g_k), "ignored the eps"),
    "transposed": (
        lambda q, k, g_q, g_k, eps=1e-5: right_scores(k, q, g_k, g_q, eps),
        "returned the scores transposed",
    ),
    "returns_none": (lambda *a, **kw: None, "missing `return`"),
    "in_place": (
        lambda q, k, g_q, g_k, eps=1e-5: right_scores(q.mul_(1.0).add_(1.0) - 1.0, k, g_q, g_k, eps),
        "in place",
    ),
}


@pytest.mark.parametrize("name", list(QK_MISTAKES))
def test_each_qk_norm_mistake_fails_naming_it(name):
    fn, words = QK_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_qk_norm_scores") as info:
        check_qk_norm_scores(fn)
    assert words in str(info.value), str(info.value)


def test_two_mistakes_at_once_get_the_generic_message():
    with pytest.raises(AssertionError, match="no single classic mistake"):
        check_qk_norm_scores(lambda *a, **kw: _scores(*a, **kw, scale="none", which="same_gain"))


def test_unimplemented_qk_norm_scores_says_not_implemented_yet():
    def my_qk_norm_scores(q, k, g_q, g_k, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_qk_norm_scores(my_qk_norm_scores)


def test_qk_norm_scores_match_gpt2ln_with_rmsnorm():
    """The check's reference is what gpt2ln's attention computes with qk_norm and RMSNorm."""
    cfg = gpt2ln.GPT2Config(
        vocab_size=32, n_ctx=8, n_embd=16, n_layer=1, n_head=2, qk_norm=True, norm="rmsnorm"
    )
    torch.manual_seed(0)
    model = gpt2ln.GPT2(cfg).eval()
    attn = model.h[0].attn
    with torch.no_grad():
        attn.q_norm.weight.uniform_(0.5, 2.0)
        attn.k_norm.weight.uniform_(0.5, 2.0)
        idx = torch.randint(0, 32, (2, 8))
        _, cache = model.run_with_cache(idx)
        h = model.h[0].ln_1(cache["resid_pre.0"])
        q, k, _ = attn.c_attn(h).split(16, dim=-1)
        q, k = (t.view(2, 8, 2, 8).transpose(1, 2) for t in (q, k))
        ours = right_scores(q, k, attn.q_norm.weight, attn.k_norm.weight, attn.q_norm.eps)
    visible = gpt2ln.causal_mask(8, 8)
    theirs = cache["attn_scores.0"].masked_select(visible)
    assert torch.allclose(ours.masked_select(visible), theirs, atol=1e-5)


# ----------------------------------------------------------------------- check_lr_sensitivity
def right_sensitivity(lrs, losses, loss_init):
    capped = [loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses]
    best = min(capped)
    return sum(c - best for c in capped) / len(capped)


def _numpy_sensitivity(lrs, losses, loss_init):
    a = np.asarray(losses, dtype=float)
    a = np.where(np.isfinite(a), np.minimum(a, loss_init), loss_init)
    return np.mean(a - a.min())  # a NumPy scalar


def _torch_sensitivity(lrs, losses, loss_init):
    t = torch.as_tensor(np.asarray(losses, dtype=float))
    t = torch.nan_to_num(t, nan=loss_init, posinf=loss_init).clamp(max=loss_init)
    return (t - t.min()).mean()  # a 0-d tensor


@pytest.mark.parametrize(
    "fn", [right_sensitivity, _numpy_sensitivity, _torch_sensitivity], ids=["python", "numpy", "torch"]
)
def test_right_lr_sensitivity_passes(fn, capsys):
    check_lr_sensitivity(fn)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("✓ check_lr_sensitivity")


def _no_min(lrs, losses, loss_init):
    a = np.asarray(losses, dtype=float)
    a = np.where(np.isnan(a), loss_init, a)
    return float(np.mean(a - a.min()))


def _no_min_finite(lrs, losses, loss_init):  # NaN and inf -> loss_init, but no cap for finite losses
    a = np.asarray(losses, dtype=float)
    a = np.where(np.isfinite(a), a, loss_init)
    return float(np.mean(a - a.min()))


def _no_nan_handling(lrs, losses, loss_init):
    a = np.minimum(np.asarray(losses, dtype=float), loss_init)  # np.minimum propagates NaN
    return float(np.mean(a - a.min()))


def _dropped(lrs, losses, loss_init):
    a = np.asarray(losses, dtype=float)
    a = np.minimum(a[np.isfinite(a)], loss_init)
    return float(np.mean(a - a.min())) if a.size else float("nan")


def _minus_mean(lrs, losses, loss_init):
    c = [loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses]
    return float(np.mean(np.array(c) - np.mean(c)))


def _minus_init(lrs, losses, loss_init):
    c = [loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses]
    return float(np.mean(np.array(c) - loss_init))


def _max(lrs, losses, loss_init):
    c = np.array([loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses])
    return float(np.max(c - c.min()))


def _n_minus_1(lrs, losses, loss_init):
    c = np.array([loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses])
    return float(np.sum(c - c.min()) / (len(c) - 1))


def _median(lrs, losses, loss_init):
    c = np.array([loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses])
    return float(np.median(c - c.min()))


def _weighted(lrs, losses, loss_init):
    c = np.array([loss_init if not math.isfinite(float(x)) else min(float(x), loss_init) for x in losses])
    return float(np.average(c - c.min(), weights=np.asarray(lrs, dtype=float)))


LRS_MISTAKES = {
    "no_min_inf_kept": (_no_min, "forgot the min with loss_init"),
    "no_min_finite": (_no_min_finite, "forgot the min with loss_init"),
    "no_nan_handling": (_no_nan_handling, "NaN handling"),
    "dropped_diverged": (_dropped, "dropped the diverged runs"),
    "minus_mean": (_minus_mean, "subtracted the mean instead of the best"),
    "minus_init": (_minus_init, "subtracted loss_init instead of the best"),
    "max": (_max, "used the max instead of the mean"),
    "lr_weighted": (_weighted, "weighted the runs by their learning rate"),
    "n_minus_1": (_n_minus_1, "divided by n - 1"),
    "median": (_median, "the median over the runs instead of the mean"),
    "returns_none": (lambda *a: None, "missing `return`"),
    "returns_array": (lambda lrs, losses, loss_init: np.zeros(3), "expected one number"),
}


@pytest.mark.parametrize("name", list(LRS_MISTAKES))
def test_each_lr_sensitivity_mistake_fails_naming_it(name):
    fn, words = LRS_MISTAKES[name]
    with pytest.raises(AssertionError, match="check_lr_sensitivity") as info:
        check_lr_sensitivity(fn)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("name", ["n_minus_1", "median"])
def test_n_minus_1_and_median_are_not_blamed_on_lr_weighting(name):
    fn, _ = LRS_MISTAKES[name]
    with pytest.raises(AssertionError) as info:
        check_lr_sensitivity(fn)
    assert "learning rate" not in str(info.value), str(info.value)


def test_pass_messages_do_not_list_the_test_inputs(capsys):
    check_qk_norm_scores(right_scores)
    check_lr_sensitivity(right_sensitivity)
    out = capsys.readouterr().out
    assert "float32" not in out and "eps=1e-5" not in out and "lists, arrays" not in out


def test_unimplemented_lr_sensitivity_says_not_implemented_yet():
    def my_lr_sensitivity(lrs, losses, loss_init):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_lr_sensitivity(my_lr_sensitivity)


def test_crash_is_reported_in_a_sentence():
    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        check_lr_sensitivity(lambda *a: 1 / 0)


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_qk_norm_scores(right_scores)
    check_lr_sensitivity(right_sensitivity)
    assert torch.equal(torch.rand(3), expected)


# ----------------------------------------------------------------------- check_collapse_lr
from gpt2ln.classroom.exercises import ch08 as _ch08  # noqa: E402
from gpt2ln.exercises.ch08 import check_collapse_lr, check_collapse_warmup  # noqa: E402


def _fake_edge(edge, start=3.1):
    # entropy after training: 2.4 nats below the edge, 0.5 above it; diverges above 0.5
    def entropy_after(lr):
        return start, (2.4 if lr < edge else 0.5), lr > 0.5

    return entropy_after


@pytest.mark.parametrize(
    ("lr", "message"),
    [
        (0.01, "your rate still trains normally"),
        (0.2, "more than twice the edge"),
        (0.8, "diverged"),
        (-0.01, "a learning rate is a positive number"),
        (float("nan"), "a learning rate is a positive number"),
        (3.0, "outside the range"),
        ("0.03", "expected one learning rate"),
    ],
)
def test_collapse_lr_names_the_mistake(monkeypatch, lr, message):
    monkeypatch.setattr(_ch08, "_entropy_after", _fake_edge(0.021))
    with pytest.raises(AssertionError, match=message):
        check_collapse_lr(lr)


def test_collapse_lr_passes_inside_the_window(monkeypatch, capsys):
    monkeypatch.setattr(_ch08, "_entropy_after", _fake_edge(0.021))
    check_collapse_lr(0.03)
    assert "the edge lies between" in capsys.readouterr().out


def test_collapse_lr_real_runs(capsys):
    # the chapter's answer, trained for real: collapsed at 0.03, not at 0.015
    check_collapse_lr(0.03)
    assert "collapsed" in capsys.readouterr().out


def test_collapse_lr_trains_on_one_thread(monkeypatch):
    # the chapter trains on one thread per process; the check must too (another thread count
    # ends elsewhere at high rates), and give the caller's thread count back
    seen = []

    def fake_train(model, train_data, val_data, cfg, progress=False):
        seen.append(torch.get_num_threads())
        raise RuntimeError("stop here")

    monkeypatch.setattr(gpt2ln, "train", fake_train)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="stop here"):
            _ch08._entropy_after(0.03)
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------- check_collapse_warmup
def _fake_warmup_edge(edge, start=3.2, diverge_at=None):
    # entropy after training at 3e-2: 0.6 nats (collapsed) below the edge, 2.5 from it on
    def entropy_after(lr, warmup_steps=30):
        assert lr == _ch08.WARMUP_LR
        return start, (2.5 if warmup_steps >= edge else 0.6), warmup_steps == diverge_at

    return entropy_after


@pytest.mark.parametrize(
    ("w", "message"),
    [
        (60, "the attention still collapses"),
        (120, "more than 10 steps past the edge"),
        (0.6, "a fraction of the run"),
        (85.5, "a whole number of steps"),
        (200, "a whole number of steps"),
        (5, "a whole number of steps"),
        ("90", "expected a number of steps"),
        (True, "expected a number of steps"),
        (float("nan"), "a whole number of steps"),
    ],
)
def test_collapse_warmup_names_the_mistake(monkeypatch, w, message):
    monkeypatch.setattr(_ch08, "_entropy_after", _fake_warmup_edge(87))
    with pytest.raises(AssertionError, match=message):
        check_collapse_warmup(w)


def test_collapse_warmup_diverged(monkeypatch):
    monkeypatch.setattr(_ch08, "_entropy_after", _fake_warmup_edge(87, diverge_at=90))
    with pytest.raises(AssertionError, match="diverged"):
        check_collapse_warmup(90)


@pytest.mark.parametrize("w", [90, 96, np.int64(90), torch.tensor(90)])
def test_collapse_warmup_passes_inside_the_window(monkeypatch, capsys, w):
    monkeypatch.setattr(_ch08, "_entropy_after", _fake_warmup_edge(87))
    check_collapse_warmup(w)
    assert "the edge lies between" in capsys.readouterr().out


def test_collapse_warmup_real_runs(capsys):
    # the chapter's answer, trained for real: no collapse with 90 warm-up steps, collapse with 80
    check_collapse_warmup(90)
    assert "not collapsed" in capsys.readouterr().out


def test_collapse_warmup_real_runs_name_a_short_warmup():
    # the chapter's own 30 steps still collapse at 3e-2 (its sweep shows it for every seed)
    with pytest.raises(AssertionError, match="still collapses"):
        check_collapse_warmup(30)
