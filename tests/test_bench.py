"""gpt2ln.bench: the measuring helpers produce the record's structure (tiny sizes; no timing asserted)."""

import math

import pytest
import torch

from gpt2ln import GPT2Config
from gpt2ln.bench import (
    bench_forward,
    bench_generate,
    bench_layer_norm,
    compare_tokens,
    make_pair,
    peak_memory,
    profile_forward,
    run,
)

TINY = GPT2Config(vocab_size=97, n_ctx=64, n_embd=32, n_layer=2, n_head=4)


@pytest.fixture(scope="module")
def pair():
    return make_pair(TINY)


def _positive_finite(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


def test_make_pair_holds_the_same_weights(pair):
    ours, theirs = pair
    idx = torch.randint(0, TINY.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(ours(idx), theirs(idx).logits, atol=1e-4, rtol=1e-4)


def test_bench_forward_rows(pair):
    rows = bench_forward(*pair, shapes=[(1, 8), (2, 16)], repeats=2, warmup=0)
    assert [(r["B"], r["T"]) for r in rows] == [(1, 8), (2, 16)]
    for r in rows:
        assert r["outputs_match"] and r["max_abs_logit_diff"] < 1e-3
        assert all(_positive_finite(r[k]) for k in ("gpt2ln_ms", "transformers_ms", "ratio"))


def test_bench_generate_compares_tokens(pair):
    out = bench_generate(*pair, prompt_len=4, new_tokens=6, repeats=1, warmup=0)
    assert out["tokens_equal"], out["mismatch"]
    assert _positive_finite(out["ratio"]) and _positive_finite(out["gpt2ln_without_gemv_ms"])
    ours = pair[0]
    n_weights = sum(p.numel() for p in ours.parameters()) - ours.wpe.weight.numel()
    assert out["weight_bytes"] == 4 * n_weights  # float32, every matrix read once per token
    for k in ("read_GBps", "floor_ms_per_token", "gpt2ln_weight_GBps", "transformers_ms_per_token"):
        assert _positive_finite(out[k]), k


def test_compare_tokens_reports_a_mismatch():
    a = torch.tensor([[1, 2, 3, 4]])
    b = a.clone()
    assert compare_tokens(a, b)["equal"]
    b[0, 2] = 9
    check = compare_tokens(a, b)
    assert not check["equal"] and check["first_mismatch"] == [0, 2] and "3 vs 9" in check["why"]
    assert not compare_tokens(a, a[:, :3])["equal"]


def test_bench_generate_reports_a_mismatch(pair, monkeypatch):
    ours, theirs = pair
    real = ours.generate

    def wrong(idx, n, **kw):
        out = real(idx, n, **kw)
        out[0, -1] = (out[0, -1] + 1) % TINY.vocab_size
        return out

    monkeypatch.setattr(ours, "generate", wrong)
    out = bench_generate(ours, theirs, prompt_len=4, new_tokens=3, repeats=1, warmup=0)
    assert not out["tokens_equal"] and "token [0, 6]" in out["mismatch"]


def test_bench_layer_norm_rows():
    rows = bench_layer_norm([(2, 8, 32), (1, 1, 32)], repeats=2, warmup=0, compile=False)
    assert len(rows) == 2
    for r in rows:
        assert set(r["impls"]) == {
            "gpt2ln.layer_norm",
            "gpt2ln.LayerNorm (module)",
            "F.layer_norm",
            "gpt2ln.rms_norm",
            "gpt2ln.RMSNorm (module)",
        }
        assert _positive_finite(r["copy_GBps"]) and r["compile_error"] is None
        assert all(_positive_finite(v["GBps"]) and _positive_finite(v["us"]) for v in r["impls"].values())


def test_peak_memory_and_profile(pair):
    ours, _ = pair
    mem = peak_memory(lambda: torch.ones(2**20), "cpu")
    assert isinstance(mem["method"], str) and mem["peak_MiB"] >= 0
    ops = profile_forward(ours, torch.zeros(1, 8, dtype=torch.long), top=3)
    assert 1 <= len(ops) <= 3 and all(o["self_cpu_ms"] > 0 and 0 < o["share"] <= 1 for o in ops)


def test_run_record_structure():
    rec = run(
        "cpu",
        quick=True,
        config=TINY,
        forward_shapes=[(1, 8)],
        ln_shapes=[(1, 4, 32)],
        prompt_len=4,
        new_tokens=4,
        compile=False,
        log=lambda s: None,
    )
    assert set(rec) >= {"machine", "goals", "runs", "profile", "profile_generate", "summary", "command"}
    assert rec["profile_generate"]["top_ops"] and rec["profile_generate"]["new_tokens"] == 4
    assert isinstance(rec["summary"]["layer_norm_goal_met"], bool)
    assert 0 < rec["summary"]["layer_norm_of_copy"]
    assert set(rec["machine"]) >= {
        "platform",
        "cpu_count",
        "torch",
        "transformers",
        "device_name",
        "load_average",
    }
    fp32 = rec["runs"]["float32"]
    assert set(fp32) == {"forward", "gemv", "generate", "memory", "layer_norm"}
    assert rec["summary"]["outputs_match"]
    assert all(_positive_finite(v) for v in rec["summary"]["forward_ratios"].values())


def test_keep_freed_memory_says_what_it_set():
    import platform

    from gpt2ln.bench import keep_freed_memory

    got = keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert got is not None and got.startswith("glibc mallopt")
    else:
        assert got is None


def test_bench_gemv_rows():
    from gpt2ln.bench import bench_gemv

    out = bench_gemv((40, 16), repeats=2, warmup=0)
    assert out["shape"] == [40, 16] and len(out["impls"]) == 3
    assert all(_positive_finite(v["GBps"]) and _positive_finite(v["ms"]) for v in out["impls"].values())
