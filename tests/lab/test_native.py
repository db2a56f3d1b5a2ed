"""gpt2ln.lab.fast.native: the decoding step in C computes what the Python step and the readable forward
compute (logits to float rounding, the same cache contents, the same tokens), runs only where
it supports the model, and falls back, saying why, where it cannot compile."""

import pytest
import torch
import torch.nn.functional as F

from gpt2ln import GPT2, GPT2Config
from gpt2ln.lab.fast import native, step
from gpt2ln.lab.fast.kernels import tanh_rational
from gpt2ln.model import generate, kv_cache

SMALL = dict(vocab_size=97, n_ctx=24, n_embd=48, n_layer=2, n_head=4)

needs_c = pytest.mark.skipif(native.load() is None, reason=f"no C step here: {native.STATUS.get('step')}")


def small(seed: int = 0, **kw) -> GPT2:
    torch.manual_seed(seed)
    model = GPT2(GPT2Config(**{**SMALL, **kw})).eval()
    with torch.no_grad():  # non-trivial norm gains and biases, so a missing one would show
        for m in model.modules():
            if hasattr(m, "eps"):
                m.weight.add_(0.3 * torch.randn_like(m.weight))
                if getattr(m, "bias", None) is not None:
                    m.bias.add_(0.1 * torch.randn_like(m.bias))
    return model


@needs_c
def test_c_step_equals_the_python_step_position_by_position():
    model = small(1)
    ids = torch.randint(0, 97, (20,), generator=torch.Generator().manual_seed(0))
    kv_c = kv_cache.KVCache.for_model(model.config, 1, 20)
    kv_py = kv_cache.KVCache.for_model(model.config, 1, 20)
    step = native.NativeStep.create(model, kv_c)
    assert step is not None
    with torch.no_grad():
        for i in range(20):
            a = step(ids[i].view(1, 1))
            b = generate.decode_step(model, ids[i].view(1, 1), kv_py, F.linear)
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-5)
    assert kv_c.length == kv_py.length == 20
    torch.testing.assert_close(kv_c.k, kv_py.k, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kv_c.v, kv_py.v, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # and the last logits are those of the model's full forward
        torch.testing.assert_close(a, model(ids.view(1, -1))[:, -1], atol=2e-5, rtol=1e-5)


@needs_c
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_native_generate_gives_the_readable_paths_tokens(seed):
    model = small(seed)
    idx = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(seed))
    readable = model.generate(idx, 30, temperature=0, fast=False)  # 35 > n_ctx: the window slides
    assert torch.equal(model.generate(idx, 30, temperature=0, native=True), readable)
    sampled = [
        model.generate(idx, 12, top_k=5, generator=torch.Generator().manual_seed(3), fast=False),
        model.generate(idx, 12, top_k=5, generator=torch.Generator().manual_seed(3), native=True),
    ]
    assert torch.equal(*sampled)


@needs_c
def test_bias_free_linears_are_supported():
    model = small(0)
    for b in model.h:
        b.mlp.c_fc.bias = None
    idx = torch.randint(0, 97, (1, 4))
    assert native.supports(model) is None
    assert torch.equal(
        model.generate(idx, 8, temperature=0, native=True), model.generate(idx, 8, temperature=0, fast=False)
    )


@pytest.mark.parametrize(
    ("kw", "batch", "why"),
    [
        ({"norm": "rmsnorm"}, 1, "pre-norm LayerNorm"),
        ({"qk_norm": True}, 1, "QK-norm"),
        ({"norm_position": "post"}, 1, "pre-norm LayerNorm"),
        ({}, 2, "one sequence"),
    ],
)
def test_supports_names_what_it_cannot_compute(kw, batch, why):
    assert why in native.supports(small(0, **kw), batch)


def test_supports_rejects_float64_and_active_dropout():
    assert "float32" in native.supports(small(0).double())
    assert "dropout" in native.supports(small(0, dropout=0.1).train())


def test_native_true_says_why_it_cannot_run():
    model = small(0, norm="rmsnorm")
    with pytest.raises(ValueError, match="C step cannot run: .*pre-norm LayerNorm"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, native=True)
    with pytest.raises(ValueError, match="native=True runs the C step"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, native=True, gemv=True)
    with pytest.raises(TypeError, match="expected native to be None, True or False"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, native="yes")


@pytest.fixture
def fresh_native(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "STATUS", {})
    monkeypatch.setattr(native, "_LIB", [])
    monkeypatch.setattr(step, "STEP_CHOICE", {})
    monkeypatch.setenv("GPT2LN_CACHE", str(tmp_path))


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"GPT2LN_COMPILE": "0"}, "GPT2LN_COMPILE=0"),
        ({"GPT2LN_NATIVE": "0"}, "GPT2LN_NATIVE=0"),
        ({"ATEN_CPU_CAPABILITY": "default"}, "portable float path"),
        ({"CC": "/nonexistent/cc"}, "could not compile"),
    ],
)
def test_without_a_compiler_generate_falls_back_and_says_why(fresh_native, monkeypatch, env, why):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert native.load() is None and why in native.STATUS["step"]
    model = small(0)
    idx = torch.randint(0, 97, (1, 4))
    choice = step.choose_step(model)
    assert choice["step"] != "native" and why in choice["why"]
    readable = model.generate(idx, 6, temperature=0, fast=False)
    assert torch.equal(model.generate(idx, 6, temperature=0), readable)


@needs_c
def test_compiles_once_into_the_cache(fresh_native, tmp_path):
    assert native.load() is not None and native.STATUS["step"].startswith("loaded")
    built = list(tmp_path.glob("gpt2ln-native-*.so"))
    assert len(built) == 1
    mtime = built[0].stat().st_mtime_ns
    native.STATUS.clear()
    native._LIB.clear()
    assert native.load() is not None
    assert built[0].stat().st_mtime_ns == mtime  # reused, not rebuilt


@needs_c
def test_the_default_step_is_measured_and_can_be_the_c_step(fresh_native):
    model = small(0)
    choice = step.choose_step(model)
    assert "native" in choice["step_ms"] and choice["step"] in choice["step_ms"]


def test_tanh_rational_is_within_1e_6_of_tanh():
    z = torch.linspace(-40, 40, 400_001)
    assert (tanh_rational(z).double() - torch.tanh(z.double())).abs().max() < 1e-6
    small_z = torch.linspace(-1e-3, 1e-3, 20_001)
    exact = torch.tanh(small_z.double())
    assert torch.allclose(tanh_rational(small_z).double(), exact, rtol=1e-6, atol=1e-12)
    assert tanh_rational(torch.tensor([float("inf"), -float("inf")])).tolist() == [1.0, -1.0]
