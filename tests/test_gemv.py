"""gpt2ln.gemv.linear: the multi-core matrix-vector product equals F.linear wherever it is used,
and hands everything else to F.linear."""

import pytest
import torch
import torch.nn.functional as F

from gpt2ln.gemv import MAX_ROWS, Linear, linear


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


def test_linear_module_is_an_nn_linear_with_the_same_state():
    m = Linear(8, 16)
    assert isinstance(m, torch.nn.Linear) and set(m.state_dict()) == {"weight", "bias"}
    x = torch.randn(3, 8)
    torch.testing.assert_close(m(x), F.linear(x, m.weight, m.bias))
    with pytest.raises(RuntimeError):  # a wrong width fails as F.linear does
        m(torch.randn(1, 7))


def test_disabled_sends_everything_to_f_linear(two_threads, monkeypatch):
    from gpt2ln import gemv

    calls = []
    real_bmm = torch.bmm
    monkeypatch.setattr(torch, "bmm", lambda *a: calls.append(1) or real_bmm(*a))
    with gemv.disabled():
        linear(torch.randn(1, 8), torch.randn(16, 8))
    assert calls == [] and gemv.ENABLED
    linear(torch.randn(1, 8), torch.randn(16, 8))
    assert calls == [1]
