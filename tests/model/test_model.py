"""GPT2 against transformers' GPT2LMHeadModel on the same weights, the cache,
generation, the variants, and bad input."""

import pytest
import torch
from hf_utils import hf_model

from gpt2ln import GPT2, GPT2Config, KVCache
from gpt2ln.model.kv_cache import decoding

SMALL = GPT2Config(vocab_size=97, n_ctx=32, n_embd=48, n_layer=3, n_head=4)


def _randomize_norms(model):
    """Give every norm non-trivial gains and biases so a swapped g/b would show."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name:
                p.add_(torch.randn_like(p) * 0.2)


@pytest.mark.parametrize("prefixed", [True, False])
def test_logits_match_transformers_small(prefixed):
    hf = hf_model(SMALL)
    _randomize_norms(hf)
    sd = hf.state_dict() if prefixed else hf.transformer.state_dict()
    model = GPT2.from_hf_state_dict(sd, SMALL)
    idx = torch.randint(0, SMALL.vocab_size, (3, 20))
    with torch.no_grad():
        ref = hf(idx).logits
        out = model(idx)
    assert out.shape == (3, 20, SMALL.vocab_size)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_logits_match_transformers_at_gpt2_small_shape():
    cfg = GPT2Config.from_preset("gpt2")
    hf = hf_model(cfg)
    model = GPT2.from_hf_state_dict(hf.state_dict())  # config inferred from shapes
    assert model.config.n_head == 12 and model.config.n_layer == 12
    assert model.num_parameters() == 124_439_808
    assert GPT2(cfg).num_parameters() == 124_439_808
    idx = torch.randint(0, cfg.vocab_size, (2, 24))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-4, rtol=0)


def test_round_trip_to_transformers_state_dict():
    model = GPT2(SMALL).eval()
    _randomize_norms(model)
    hf = hf_model(SMALL)
    hf.load_state_dict(model.to_hf_state_dict(), strict=True)
    idx = torch.randint(0, SMALL.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-5, rtol=0)


def test_run_with_cache_names_shapes_and_agreement():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (2, 11))
    with torch.no_grad():
        logits, cache = model.run_with_cache(idx)
        fast = model(idx)
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=0)  # explicit path == SDPA path
    B, T, d, H = 2, 11, SMALL.n_embd, SMALL.n_head
    for layer in range(SMALL.n_layer + 1):
        assert cache[f"resid_pre.{layer}"].shape == (B, T, d)
    for layer in range(SMALL.n_layer):
        scores = cache[f"attn_scores.{layer}"]
        assert scores.shape == (B, H, T, T)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        assert torch.isneginf(scores[..., future]).all()
        assert torch.isfinite(scores[..., ~future]).all()
        pattern = cache[f"attn_pattern.{layer}"]
        torch.testing.assert_close(pattern.sum(-1), torch.ones(B, H, T))
    assert cache["ln_f.out"].shape == (B, T, d)
    torch.testing.assert_close(model.ln_f(cache[f"resid_pre.{SMALL.n_layer}"]), cache["ln_f.out"])
    torch.testing.assert_close(cache["ln_f.out"] @ model.wte.weight.T, logits)


def test_attention_scores_are_scaled_dot_products():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (1, 6))
    _, cache = model.run_with_cache(idx)
    block = model.h[0]
    q, k, _ = block.attn.c_attn(block.ln_1(cache["resid_pre.0"])).split(SMALL.n_embd, dim=-1)
    D = SMALL.n_embd // SMALL.n_head
    q = q.view(1, 6, SMALL.n_head, D).transpose(1, 2)
    k = k.view(1, 6, SMALL.n_head, D).transpose(1, 2)
    expected = (q @ k.transpose(-1, -2)) / D**0.5
    keep = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    torch.testing.assert_close(cache["attn_scores.0"][..., keep], expected[..., keep])


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"norm_position": "post"},
        {"qk_norm": True},
        {"norm": "rmsnorm"},
        {"norm": "rmsnorm", "qk_norm": True, "norm_position": "post"},
    ],
)
def test_greedy_generation_with_kv_cache_equals_recomputing(changes):
    model = GPT2(SMALL.replace(**changes)).eval()
    idx = torch.randint(0, SMALL.vocab_size, (2, 5))
    cached = model.generate(idx, 20, temperature=0)
    uncached = model.generate(idx, 20, temperature=0, use_cache=False)
    assert cached.shape == (2, 25)
    assert torch.equal(cached, uncached)
    # and each step is the argmax of a full forward pass
    with torch.no_grad():
        full = model(cached[:, :-1])
    assert torch.equal(full[:, 4:].argmax(-1), cached[:, 5:])


def test_generation_past_the_context_window_crops():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (1, 30))
    out = model.generate(idx, 10, temperature=0)  # 40 > n_ctx = 32
    assert torch.equal(out, model.generate(idx, 10, temperature=0, use_cache=False))


def test_sampling_is_reproducible_with_a_generator_and_respects_top_k():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (4, 3))
    a = model.generate(idx, 15, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(1))
    b = model.generate(idx, 15, temperature=0.8, top_k=5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    # top_k=1 is greedy
    g = model.generate(idx, 8, top_k=1, generator=torch.Generator().manual_seed(2))
    assert torch.equal(g, model.generate(idx, 8, temperature=0))


@pytest.mark.parametrize(
    "changes",
    [
        {"norm_position": "pre"},
        {"norm_position": "post"},
        {"qk_norm": True},
        {"norm": "rmsnorm"},
        {"norm": "rmsnorm", "qk_norm": True},
    ],
)
def test_variants_run_forward_and_backward(changes):
    cfg = SMALL.replace(**changes)
    model = GPT2(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    if cfg.qk_norm:
        assert model.h[0].attn.q_norm.weight.grad.abs().sum() > 0
        assert torch.equal(GPT2(cfg).h[0].attn.k_norm.weight, torch.ones(cfg.n_embd // cfg.n_head))


def test_post_norm_block_normalizes_its_output():
    model = GPT2(SMALL.replace(norm_position="post")).eval()
    assert isinstance(model.ln_f, torch.nn.Identity)
    _, cache = model.run_with_cache(torch.randint(0, SMALL.vocab_size, (1, 8)))
    out = cache["resid_pre.1"]  # output of block 0 = ln_2(...), gain 1, bias 0
    torch.testing.assert_close(out.mean(-1), torch.zeros(1, 8), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(1, 8), atol=1e-3, rtol=0)


def test_qk_norm_normalizes_each_heads_queries():
    model = GPT2(SMALL.replace(qk_norm=True, norm="rmsnorm")).eval()
    with torch.no_grad():
        model.h[0].attn.c_attn.weight.mul_(50.0)  # huge q, k
        _, cache = model.run_with_cache(torch.randint(0, SMALL.vocab_size, (1, 8)))
    D = SMALL.n_embd // SMALL.n_head
    # |q.k| / sqrt(D) <= |q||k| / sqrt(D) = D / sqrt(D) with unit-RMS q and k
    finite = torch.isfinite(cache["attn_scores.0"])
    assert cache["attn_scores.0"][finite].abs().max() <= D**0.5 + 1e-3


def test_init_follows_gpt2():
    model = GPT2(GPT2Config(vocab_size=500, n_ctx=256, n_embd=256, n_layer=8, n_head=4))
    assert abs(model.wte.weight.std().item() - 0.02) < 2e-3
    assert abs(model.wpe.weight.std().item() - 0.01) < 1e-3
    assert abs(model.h[0].mlp.c_proj.weight.std().item() - 0.02 / 16**0.5) < 5e-4
    assert torch.equal(model.h[3].ln_2.weight, torch.ones(256))
    assert torch.equal(model.h[3].attn.c_attn.bias, torch.zeros(768))
    cfg = GPT2Config(vocab_size=500, n_ctx=256, n_embd=256, n_layer=8, n_head=4, scale_resid_init=False)
    unscaled = GPT2(cfg)
    assert abs(unscaled.h[0].mlp.c_proj.weight.std().item() - 0.02) < 2e-3


def test_presets():
    assert GPT2Config.from_preset("gpt2-medium").n_embd == 1024
    assert GPT2Config.from_preset("openai-community/gpt2-large").n_layer == 36
    xl = GPT2Config.from_preset("gpt2-xl")
    assert (xl.n_embd, xl.n_layer, xl.n_head) == (1600, 48, 25)
    assert GPT2Config.from_preset("gpt2", norm="rmsnorm").norm == "rmsnorm"
    with pytest.raises(ValueError, match="unknown GPT-2 preset 'gpt3'"):
        GPT2Config.from_preset("gpt3")


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="divisible by n_head"):
        GPT2Config(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="norm in .*'batchnorm'"):
        GPT2Config(norm="batchnorm")
    with pytest.raises(ValueError, match="norm_position in .*'middle'"):
        GPT2Config(norm_position="middle")
    with pytest.raises(ValueError, match="n_layer to be a positive integer"):
        GPT2Config(n_layer=0)
    with pytest.raises(TypeError, match="GPT2Config"):
        GPT2({"n_layer": 2})


def test_bad_idx_is_named():
    model = GPT2(SMALL)
    with pytest.raises(ValueError, match="exceeds the context window n_ctx=32"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token id 97 is outside \[0, vocab_size\) = \[0, 97\)"):
        model(torch.tensor([[1, 97]]))
    with pytest.raises(ValueError, match="token id -1"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(TypeError, match="integer tensor.*torch.float32"):
        model(torch.zeros(1, 4))
    with pytest.raises(TypeError, match="torch.Tensor of token ids, got list"):
        model([[1, 2]])
    with pytest.raises(ValueError, match=r"shape \[B, T\], got shape \(4,\)"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), -1)
    with pytest.raises(ValueError, match="temperature >= 0"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 2, top_k=0)


def test_kv_cache_in_chunks_equals_one_full_forward():
    model = GPT2(SMALL.replace(qk_norm=True)).eval()
    idx = torch.randint(0, SMALL.vocab_size, (2, 20))
    kv = KVCache.for_model(SMALL, batch=2, max_len=20)
    with torch.no_grad():
        full = model(idx)
        with decoding(model, kv):
            parts = [model(idx[:, a:b]) for a, b in [(0, 7), (7, 8), (8, 20)]]
    assert kv.length == 20
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


def test_kv_cache_refuses_to_overflow_and_bad_sizes():
    kv = KVCache.for_model(SMALL, batch=1, max_len=4)
    assert kv.k.shape == (SMALL.n_layer, 1, SMALL.n_head, 4, SMALL.head_dim)
    with pytest.raises(ValueError, match="5 positions do not fit in max_len=4"):
        kv.update(
            0,
            torch.zeros(1, SMALL.n_head, 5, SMALL.head_dim),
            torch.zeros(1, SMALL.n_head, 5, SMALL.head_dim),
        )
    good = torch.zeros(1, SMALL.n_head, 1, SMALL.head_dim)
    with pytest.raises(
        ValueError, match=r"expected k of shape \[1, 4, T, 12\] \(B, H, T, D\), got \(1, 3, 1, 12\)"
    ):
        kv.update(0, torch.zeros(1, 3, 1, SMALL.head_dim), good)
    with pytest.raises(ValueError, match="expected a layer in \\[0, 3\\), got 3"):
        kv.update(3, good, good)
    with pytest.raises(ValueError, match="k and v of the same shape"):
        kv.update(0, good, torch.zeros(1, SMALL.n_head, 2, SMALL.head_dim))
    with pytest.raises(ValueError, match=r"1 <= max_len <= n_ctx=32, got 33"):
        KVCache.for_model(SMALL, batch=1, max_len=33)


def test_last_only_logits_are_the_last_row_of_the_full_logits():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (3, 11))
    with torch.no_grad():
        with decoding(model, last_only=True):
            last = model(idx)
        full = model(idx)
    assert last.shape == (3, 1, SMALL.vocab_size)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-6, rtol=0)


def test_generation_keeps_the_prompt_dtype_and_handles_zero_new_tokens():
    model = GPT2(SMALL).eval()
    idx = torch.randint(0, SMALL.vocab_size, (2, 4), dtype=torch.int32)
    assert torch.equal(model.generate(idx, 0), idx)
    out = model.generate(idx, 3, temperature=0)
    assert out.dtype == torch.int32 and torch.equal(out[:, :4], idx)
