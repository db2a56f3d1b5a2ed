"""gpt2ln.lab.bench: the measuring helpers produce the record's structure (tiny sizes; no timing asserted)."""

import math

import pytest
import torch

from gpt2ln import GPT2Config
from gpt2ln.lab.bench import (
    bench_forward,
    bench_generate,
    bench_generate_memory,
    bench_layer_norm,
    bench_native_parts,
    compare_tokens,
    make_pair,
    peak_memory,
    profile_forward,
    profile_generate,
    run,
)
from gpt2ln.lab.fast import native

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


def test_bench_generate_compares_tokens_on_every_path(pair):
    out = bench_generate(*pair, prompt_len=4, new_tokens=6, repeats=1, warmup=0)
    assert out["tokens_equal"], out["mismatch"]
    paths = {"eager", "fast", "fast, F.linear", "fast, gemv.linear", "transformers"}
    if native.load() is not None:  # the C step, where this machine compiles it
        paths.add("fast, native")
        assert out["native"].startswith("loaded")
    assert set(out["paths"]) == paths
    assert out["default_path"] in out["paths"] and isinstance(out["step_choice"]["why"], str)
    assert _positive_finite(out["ratio"]) and out["ratio"] == out["paths"]["fast"]["vs_transformers"]
    ours = pair[0]
    n_weights = sum(p.numel() for p in ours.parameters()) - ours.wpe.weight.numel()
    assert out["weight_bytes"] == 4 * n_weights  # float32, every matrix read once per token
    for k in ("read_GBps", "floor_ms_per_token"):
        assert _positive_finite(out[k]), k
    for p in out["paths"].values():
        assert _positive_finite(p["ms"]) and p["ms_per_token"] >= 0
    assert out["fast_of_floor"] == out["paths"]["fast"]["of_floor"]


def test_bench_generate_memory_kv_cache_matches_its_formula(pair):
    out = bench_generate_memory(*pair, prompt_len=4, new_tokens=6)
    kv = out["kv_cache"]
    assert kv["T"] == 10 and kv["bytes"] == kv["formula_bytes"] == 2 * TINY.n_layer * 10 * TINY.n_embd * 4
    for side in ("gpt2ln", "gpt2ln_eager", "transformers"):
        assert out[side]["method"].startswith("torch.profiler")
    assert out["gpt2ln"]["peak_MiB"] * 2**20 >= kv["bytes"]  # the cache is allocated inside the call


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
    # every gpt2ln path against transformers: eager, fast, fast with each product, and the C step
    assert out["mismatch"].count("token [0, 6]") == 4 + (native.load() is not None)


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
            "F.rms_norm",
            "gpt2ln.dyt",
            "gpt2ln.DyT (module)",
        }
        assert _positive_finite(r["copy_GBps"]) and r["compile_error"] is None
        assert all(_positive_finite(v["GBps"]) and _positive_finite(v["us"]) for v in r["impls"].values())


def test_peak_memory_counts_the_tensors_held_at_once():
    def two_then_one():
        a = torch.ones(2**20)  # 4 MiB
        b = torch.ones(2**19)  # + 2 MiB: 6 MiB held
        del a, b
        return torch.ones(2**20)  # 4 MiB again, after both were freed

    assert peak_memory(lambda: torch.ones(2**20), "cpu")["peak_MiB"] == 4.0
    mem = peak_memory(two_then_one, "cpu")
    assert mem["method"].startswith("torch.profiler") and mem["peak_MiB"] == 6.0


def test_profiles(pair):
    ours, _ = pair
    ops = profile_forward(ours, torch.zeros(1, 8, dtype=torch.long), top=3)
    assert 1 <= len(ops) <= 3 and all(o["self_cpu_ms"] > 0 and 0 < o["share"] <= 1 for o in ops)
    gen = profile_generate(ours, torch.zeros(1, 4, dtype=torch.long), 3, top=3)
    assert 0 < gen["ops_ms"] and 0 < gen["wall_ms"] and len(gen["top_ops"]) == 3


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
    assert set(fp32) == {"forward", "gemv", "generate", "generate_memory", "memory", "layer_norm"}
    assert isinstance(rec["summary"]["norm_modules_goal_met"], bool) and rec["summary"]["default_path_why"]
    assert rec["profile_generate"]["eager"]["top_ops"]
    assert rec["summary"]["outputs_match"]
    assert all(_positive_finite(v) for v in rec["summary"]["forward_ratios"].values())


def test_keep_freed_memory_says_what_it_set():
    import platform

    from gpt2ln.lab.bench import keep_freed_memory

    got = keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert got is not None and got.startswith("glibc mallopt")
    else:
        assert got is None


def test_bench_gemv_rows():
    from gpt2ln.lab.bench import bench_gemv

    out = bench_gemv((40, 16), repeats=2, warmup=0)
    assert out["shape"] == [40, 16] and len(out["impls"]) == 3
    assert all(_positive_finite(v["GBps"]) and _positive_finite(v["ms"]) for v in out["impls"].values())


@pytest.mark.skipif(native.load() is None, reason="no C step here")
def test_bench_native_parts_splits_the_c_step(pair):
    out = bench_native_parts(pair[0], pos=5, repeats=2)
    assert set(out["ms"]) == {"step", "products", "floor"} and out["pos"] == 5
    assert all(_positive_finite(v) for v in out["ms"].values())
    assert out["rest_ms"] == out["ms"]["step"] - out["ms"]["products"]
    assert out["step_of_floor"] == out["ms"]["step"] / out["ms"]["floor"]
