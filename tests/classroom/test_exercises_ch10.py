"""Chapter 10 checks: right answers pass, each classic mistake fails naming itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpt2ln.exercises import check_fold_ln, check_logit_lens


# ---------------------------------------------------------------------------- check_fold_ln
def test_fold_ln_passes(capsys):
    check_fold_ln(lambda g, b, W, c: (W * g[None, :], c + W @ b))
    check_fold_ln(lambda g, b, W, c: (W @ torch.diag(g), c + b @ W.T))
    assert "✓ check_fold_ln" in capsys.readouterr().out


FOLD_MISTAKES = {
    "scaled the wrong axis": lambda g, b, W, c: (W * g[:, None], c + W @ b),
    "forgot to move the LayerNorm's bias through W": lambda g, b, W, c: (W * g[None, :], c),
    "added b without W": lambda g, b, W, c: (W * g[None, :], c + b),
    "through the folded W_f": lambda g, b, W, c: (W * g[None, :], c + (W * g[None, :]) @ b),
    "through W transposed": lambda g, b, W, c: (W * g[None, :], c + W.T @ b),
    "forgot the gain": lambda g, b, W, c: (W, c + W @ b),
}


@pytest.mark.parametrize("name", list(FOLD_MISTAKES))
def test_fold_ln_names_mistake(name):
    with pytest.raises(AssertionError, match="check_fold_ln") as e:
        check_fold_ln(FOLD_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_fold_ln_other_failures():
    def my_fold(g, b, W, c):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_fold_ln(my_fold)

    def in_place(g, b, W, c):
        W *= g[None, :]
        return W, c + W @ b

    with pytest.raises(AssertionError, match="in place"):
        check_fold_ln(in_place)
    with pytest.raises(AssertionError, match="expected a pair"):
        check_fold_ln(lambda g, b, W, c: W * g[None, :])
    with pytest.raises(AssertionError, match="c_f is not"):
        check_fold_ln(lambda g, b, W, c: (W * g[None, :], c + W @ b + 0.1))


# ---------------------------------------------------------------------------- check_logit_lens
def test_logit_lens_passes(capsys):
    check_logit_lens(lambda resid, ln_f, wte: ln_f(resid) @ wte.T)
    check_logit_lens(
        lambda resid, ln_f, wte: F.linear(
            F.layer_norm(resid, (resid.shape[-1],), ln_f.weight, ln_f.bias, ln_f.eps), wte
        )
    )
    assert "✓ check_logit_lens" in capsys.readouterr().out


def _plain(r):
    return F.layer_norm(r, (r.shape[-1],))


LENS_MISTAKES = {
    "forgot ln_f": lambda resid, ln_f, wte: resid @ wte.T,
    "used ln_f without its affine": lambda resid, ln_f, wte: _plain(resid) @ wte.T,
    "gain but not its bias": lambda resid, ln_f, wte: (_plain(resid) * ln_f.weight) @ wte.T,
    "without subtracting the mean": lambda resid, ln_f, wte: (
        (resid * torch.rsqrt(resid.pow(2).mean(-1, keepdim=True) + 1e-5) * ln_f.weight + ln_f.bias) @ wte.T
    ),
    "untied/transposed wte": lambda resid, ln_f, wte: ln_f(resid) @ wte,
}


@pytest.mark.parametrize("name", list(LENS_MISTAKES))
def test_logit_lens_names_mistake(name):
    with pytest.raises(AssertionError, match="check_logit_lens") as e:
        check_logit_lens(LENS_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_logit_lens_other_failures():
    def my_logit_lens(resid, ln_f, wte):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet") as e:
        check_logit_lens(my_logit_lens)
    assert "my_logit_lens" in str(e.value)
    with pytest.raises(AssertionError, match="differ from ln_f"):
        check_logit_lens(lambda resid, ln_f, wte: ln_f(resid) @ wte.T + 0.5)
    with pytest.raises(AssertionError, match="shape"):
        check_logit_lens(lambda resid, ln_f, wte: (ln_f(resid) @ wte.T)[..., :-1])


# ---------------------------------------------------------------------------- check_center_unembed
def test_center_unembed_passes(capsys):
    from gpt2ln.exercises.ch10 import check_center_unembed

    check_center_unembed(lambda W, b: (W - W.mean(0, keepdim=True), b - b.mean()))
    check_center_unembed(lambda W, b: (W - W.sum(0) / W.shape[0], b - b.sum() / len(b)))
    assert "✓ check_center_unembed" in capsys.readouterr().out


CENTER_MISTAKES = {
    "centred over d": lambda W, b: (W - W.mean(1, keepdim=True), b - b.mean()),
    "forgot the bias": lambda W, b: (W - W.mean(0, keepdim=True), b),
    "centred the bias but not W_U": lambda W, b: (W, b - b.mean()),
    "one number, the mean of all of W_U": lambda W, b: (W - W.mean(), b - b.mean()),
}


@pytest.mark.parametrize("name", list(CENTER_MISTAKES))
def test_center_unembed_names_mistake(name):
    from gpt2ln.exercises.ch10 import check_center_unembed

    with pytest.raises(AssertionError, match="check_center_unembed") as e:
        check_center_unembed(CENTER_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_center_unembed_other_failures():
    from gpt2ln.exercises.ch10 import check_center_unembed

    def my_center_unembed(W_U, b_U):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_center_unembed(my_center_unembed)

    def in_place(W, b):
        W -= W.mean(0, keepdim=True)
        return W, b - b.mean()

    with pytest.raises(AssertionError, match="in place"):
        check_center_unembed(in_place)
    with pytest.raises(AssertionError, match="expected a pair"):
        check_center_unembed(lambda W, b: W - W.mean(0))
    with pytest.raises(AssertionError, match="probabilities moved"):
        check_center_unembed(lambda W, b: (W - W.mean(0, keepdim=True) + 0.1 * W, b - b.mean()))


# ---------------------------------------------------------------------------- check_logit_attribution
def _dla(w, W, b, t):
    x = w.sum(0)
    return (w - w.mean(-1, keepdim=True)) / torch.sqrt(x.var(unbiased=False) + 1e-5) @ W[t]


def test_logit_attribution_passes(capsys):
    from gpt2ln.exercises.ch10 import check_logit_attribution

    check_logit_attribution(_dla)

    def loop(writes, W_U, b_U, token):  # one write at a time, numpy out
        x = writes.sum(0)
        s = float(((x - x.mean()) ** 2).mean() + 1e-5) ** 0.5
        return torch.stack([(w - w.mean()) @ W_U[token] / s for w in writes]).numpy()

    check_logit_attribution(loop)
    assert "✓ check_logit_attribution" in capsys.readouterr().out


ATTR_MISTAKES = {
    "forgot to divide by ln_f's sigma": lambda w, W, b, t: (w - w.mean(-1, keepdim=True)) @ W[t],
    "normalized each write by its own sigma": lambda w, W, b, t: F.layer_norm(w, (w.shape[-1],)) @ W[t],
    "forgot to subtract each write's mean": lambda w, W, b, t: (
        w / torch.sqrt(w.sum(0).var(unbiased=False) + 1e-5) @ W[t]
    ),
    "added b_U[token] to every contribution": lambda w, W, b, t: _dla(w, W, b, t) + b[t],
    "the logit lens": lambda w, W, b, t: F.layer_norm(w.cumsum(0), (w.shape[-1],)) @ W[t],
}


@pytest.mark.parametrize("name", list(ATTR_MISTAKES))
def test_logit_attribution_names_mistake(name):
    from gpt2ln.exercises.ch10 import check_logit_attribution

    with pytest.raises(AssertionError, match="check_logit_attribution") as e:
        check_logit_attribution(ATTR_MISTAKES[name])
    assert name in str(e.value), str(e.value)


def test_logit_attribution_other_failures():
    from gpt2ln.exercises.ch10 import check_logit_attribution

    def my_logit_attribution(writes, W_U, b_U, token):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check_logit_attribution(my_logit_attribution)
    with pytest.raises(AssertionError, match="shape"):
        check_logit_attribution(lambda w, W, b, t: _dla(w, W, b, t).sum())
    with pytest.raises(AssertionError, match="differ from the direct logit attribution"):
        check_logit_attribution(lambda w, W, b, t: _dla(w, W, b, t) * 1.5)


# ---------------------------------------------------------------------------- no known mistake
NO_MATCH = {  # wrong answers that match none of the listed mistakes, and text of the answer they must not see
    "check_fold_ln": (
        lambda g, b, W, c: (W * g[None, :] * 1.5, c - W @ b),
        ("W * g[None, :]", "c + W @ b", "Likely mistake"),
    ),
    "check_center_unembed": (
        lambda W, b: (W - W.mean(0, keepdim=True) + 0.1 * W, b - b.mean()),
        ("W_U.mean(dim=0", "b_U - b_U.mean()", "Likely mistake"),
    ),
    "check_logit_attribution": (
        lambda w, W, b, t: _dla(w, W, b, t) * 1.5,
        ("writes.mean(-1", "sigma(writes.sum(0))", "Likely mistake"),
    ),
}


@pytest.mark.parametrize("name", list(NO_MATCH))
def test_no_known_mistake_gives_a_hint_not_the_answer(name):
    import gpt2ln.exercises.ch10 as ch10

    fn, answer = NO_MATCH[name]
    with pytest.raises(AssertionError, match=name) as e:
        getattr(ch10, name)(fn)
    msg = str(e.value)
    assert "No known mistake matches this answer. Hint:" in msg, msg
    for text in answer:
        assert text not in msg, (text, msg)
