"""gpt2ln.lab.fast.gemv.linear: the multi-core matrix-vector product equals F.linear wherever it is used,
and hands everything else to F.linear; gemv.multicore applies it to a model's products, only
inside its `with` block. The fast decoding step (gpt2ln.model.generate.decode_step) gives the readable
path's tokens with either product, and choose_step measures once which step to use."""

import pytest
import torch
import torch.nn.functional as F

from gpt2ln import GPT2, GPT2Config
from gpt2ln.lab.fast import step
from gpt2ln.lab.fast.gemv import MAX_ROWS, linear, multicore
from gpt2ln.model import generate, kv_cache


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("out_f", [8, 9, 2304, 50257])  # divisible by the thread count or not
@pytest.mark.parametrize("shape", [(1, 48), (1, 1, 48), (3, 1, 48), (2, 2, 48), (4, 48)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_equals_f_linear_for_few_rows(two_threads, out_f, shape, with_bias):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen)
    w = torch.randn(out_f, shape[-1], generator=gen)
    b = torch.randn(out_f, generator=gen) if with_bias else None
    y = linear(x, w, b)
    assert y.shape == (*shape[:-1], out_f)
    torch.testing.assert_close(y, F.linear(x, w, b), atol=1e-5, rtol=1e-5)


def test_float64_is_exact_to_rounding(two_threads):
    x, w = torch.randn(1, 768, dtype=torch.float64), torch.randn(3072, 768, dtype=torch.float64)
    torch.testing.assert_close(linear(x, w), F.linear(x, w), atol=1e-12, rtol=1e-12)


def test_many_rows_one_thread_and_autograd_use_f_linear(two_threads, monkeypatch):
    calls = []
    real_bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a: calls.append(1) or real_bmm(*a))
    w = torch.randn(16, 8, requires_grad=True)
    linear(torch.randn(1, 8), w.detach())
    assert calls == [1]  # the batched path
    linear(torch.randn(MAX_ROWS + 1, 8), w.detach())  # more rows: a matrix product
    y = linear(torch.randn(1, 8), w)  # autograd: F.linear
    y.sum().backward()
    assert w.grad is not None and w.grad.shape == (16, 8)
    torch.set_num_threads(1)
    linear(torch.randn(1, 8), w.detach())
    assert calls == [1]


@pytest.fixture
def bmm_calls(monkeypatch):
    calls = []
    real_bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a: calls.append(1) or real_bmm(*a))
    return calls


def test_multicore_sends_linear_and_matmul_by_a_transposed_weight_to_gemv(two_threads, bmm_calls):
    lin, w, x = torch.nn.Linear(8, 16), torch.randn(50, 8), torch.randn(1, 1, 8)
    w_in_out = torch.randn(8, 50)  # [in, out]: its transpose is not contiguous
    with torch.no_grad():
        plain = (lin(x), x @ w.T, x @ w_in_out)
        assert bmm_calls == []  # outside the block: F.linear and matmul
        with multicore():
            fast = (lin(x), x @ w.T, torch.matmul(x, w.T), x @ w_in_out)  # the last: not a W.T
        assert len(bmm_calls) == 3
        lin(x)
    assert len(bmm_calls) == 3  # nothing stays switched on
    for a, b in zip(fast, (*plain[:2], plain[1], plain[2]), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with multicore(), pytest.raises(RuntimeError):  # a wrong width fails as F.linear does
        lin(torch.randn(1, 7))


def test_generate_uses_gemv_only_where_told_or_chosen(two_threads, bmm_calls):
    model = GPT2(GPT2Config(vocab_size=97, n_ctx=32, n_embd=48, n_layer=2, n_head=4)).eval()
    idx = torch.randint(0, 97, (1, 5))
    a = model.generate(idx, 6, temperature=0, gemv=False)
    assert bmm_calls == []
    b = model.generate(idx, 6, temperature=0, gemv=True)
    # 5 one-token steps after the prompt's, each 2 layers x 4 products + the unembedding
    assert len(bmm_calls) == 5 * (2 * 4 + 1)
    c = model.generate(idx, 6, temperature=0, gemv=True, fast=False)  # the readable path, under multicore()
    # there the prompt step's unembedding (of its last position only) goes to gemv too
    assert len(bmm_calls) == 2 * 5 * (2 * 4 + 1) + 1
    assert torch.equal(a, b) and torch.equal(a, c)


CONFIGS = {
    "gpt2": {},
    "rmsnorm, qk-norm": {"norm": "rmsnorm", "qk_norm": True},
    "dyt": {"norm": "dyt"},
    "no final norm": {"norm": "none"},
}


@pytest.mark.parametrize("kw", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("use_gemv", [False, True])
def test_fast_step_gives_the_readable_paths_tokens(two_threads, kw, use_gemv):
    torch.manual_seed(0)
    model = GPT2(GPT2Config(vocab_size=97, n_ctx=24, n_embd=48, n_layer=2, n_head=4, **kw)).eval()
    idx = torch.randint(0, 97, (2, 5))
    readable = model.generate(idx, 30, temperature=0, fast=False)  # 35 > n_ctx: the window slides
    fast = model.generate(idx, 30, temperature=0, gemv=use_gemv)
    assert torch.equal(readable, fast)
    sampled = [
        model.generate(idx, 12, top_k=5, generator=torch.Generator().manual_seed(3), fast=f)
        for f in (False, True)
    ]
    assert torch.equal(*sampled)


def test_fast_step_logits_equal_the_models_forward():
    torch.manual_seed(1)
    model = GPT2(GPT2Config(vocab_size=97, n_ctx=24, n_embd=48, n_layer=3, n_head=4)).eval()
    idx = torch.randint(0, 97, (2, 9))
    kv = kv_cache.KVCache.for_model(model.config, 2, 9)
    with torch.no_grad():
        full = model(idx)  # [2, 9, vocab]
        with kv_cache.decoding(model, kv):
            model(idx[:, :8])
        assert kv.length == 8
        step = generate.decode_step(model, idx[:, 8:], kv)
    assert kv.length == 9 and step.shape == (2, 97)
    torch.testing.assert_close(step, full[:, -1], atol=1e-5, rtol=1e-5)


def test_other_norm_placements_decode_on_the_readable_path(monkeypatch):
    model = GPT2(GPT2Config(vocab_size=97, n_ctx=24, n_embd=48, n_layer=2, n_head=4, norm_position="post"))
    model.eval()
    assert not generate.supports_fast_step(model)
    for module in (step, generate):  # where decode_step is looked up
        monkeypatch.setattr(module, "decode_step", lambda *a, **k: pytest.fail("decode_step used"))
    idx = torch.randint(0, 97, (1, 4))
    assert torch.equal(
        model.generate(idx, 6, temperature=0), model.generate(idx, 6, temperature=0, fast=False)
    )


def test_choose_step_measures_once_and_says_why(two_threads, monkeypatch):
    model = GPT2(GPT2Config(vocab_size=91, n_ctx=16, n_embd=32, n_layer=1, n_head=2)).eval()
    monkeypatch.setattr(step, "STEP_CHOICE", {})
    choice = step.choose_step(model, native=False)
    assert choice["step"] in {"gemv.linear", "F.linear"} and "native: left out" in choice["why"]
    assert set(choice["step_ms"]) == {"gemv.linear", "F.linear"}
    assert "gemv.linear" in choice["why"] and "F.linear" in choice["why"]
    monkeypatch.setattr(step, "time_interleaved", lambda *a, **k: pytest.fail("measured twice"))
    assert step.choose_step(model, native=False) is choice  # cached for the process
    torch.set_num_threads(1)
    one = step.choose_step(model, native=False)
    assert one["step"] == "F.linear" and "not a multi-core CPU" in one["why"]  # nothing to choose


def test_generate_rejects_a_non_bool_gemv():
    model = GPT2(GPT2Config(vocab_size=97, n_ctx=16, n_embd=32, n_layer=1, n_head=2)).eval()
    with pytest.raises(TypeError, match="expected gemv to be None, True or False"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, gemv="yes")
