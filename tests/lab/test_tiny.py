"""The shipped small GPT-2 (gpt2ln/assets/tiny/): loads offline, is GPT-2's architecture, meets its
validation-loss bar over the whole validation split, matches its training log and transformers.
About 15-25 s on 2 busy cores (one pass over the 316,808 validation bytes)."""

import copy
import dataclasses
import importlib.util
import json
import math
import socket
from importlib import resources
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gpt2ln
from gpt2ln import GPT2, ByteTokenizer, GPT2Config, LayerNorm, load_tiny, load_tokens
from gpt2ln import evaluate_loss as evaluate
from gpt2ln.lab.tiny import tiny_train_log

MAX_VAL_LOSS = 1.70  # nats per byte, mean over the three held-out plays
MAX_WEIGHT_BYTES = 25_000_000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_dir():
    with resources.as_file(resources.files("gpt2ln") / "assets" / "tiny") as path:
        yield Path(path)


@pytest.fixture(scope="module")
def tiny():
    return load_tiny()


@pytest.fixture(scope="module")
def val_loss(tiny):
    model, _ = tiny
    return evaluate(model, load_tokens("val"), model.config.n_ctx, batch_size=64)


def test_load_tiny_needs_no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("load_tiny tried to use the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = load_tiny()
    assert isinstance(model, GPT2) and isinstance(tok, ByteTokenizer)
    assert not model.training
    assert model.device == torch.device("cpu")
    assert gpt2ln.load_tiny is load_tiny


def test_files_and_size(tiny_dir):
    names = {p.name for p in tiny_dir.iterdir() if not p.name.startswith(".")}
    assert {"model.safetensors", "config.json", "train_log.json", "rerun_check.json"} <= names
    assert (tiny_dir / "model.safetensors").stat().st_size <= MAX_WEIGHT_BYTES
    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new"


def test_is_gpt2_architecture(tiny):
    model, tok = tiny
    c = model.config
    # default GPT2Config apart from the sizes (byte vocabulary, context, width, depth, heads)
    sizes = dict(vocab_size=256, n_ctx=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head)
    assert c == GPT2Config(**sizes)
    assert c.vocab_size == tok.vocab_size == 256
    assert c.norm == "layernorm" and c.norm_position == "pre" and c.use_final_norm and not c.qk_norm
    assert isinstance(model.ln_f, LayerNorm)
    for block in model.h:
        assert block.position == "pre"
        assert isinstance(block.ln_1, LayerNorm) and isinstance(block.ln_2, LayerNorm)
    assert model.wpe.weight.shape == (c.n_ctx, c.n_embd) and model.wpe.weight.requires_grad  # learned
    # tied: no separate output matrix; logits = ln_f(h) @ wte^T
    assert not any("lm_head" in k for k in model.state_dict())
    x = torch.tensor([tok.encode("ROMEO:\nBut soft")])
    logits, cache = model.run_with_cache(x)
    torch.testing.assert_close(logits, cache["ln_f.out"] @ model.wte.weight.T)
    # pre-norm: the block adds to the residual stream what its sub-layers make of ln(x)
    b0, h0 = model.h[0], cache["resid_pre.0"]
    a = b0.attn(b0.ln_1(h0))
    torch.testing.assert_close(cache["resid_mid.0"], h0 + a)


def test_val_loss_meets_the_bar(val_loss):
    assert math.isfinite(val_loss)
    assert val_loss <= MAX_VAL_LOSS, f"validation loss {val_loss:.4f} > {MAX_VAL_LOSS}"


def test_train_log_matches_a_recomputation(val_loss, tiny):
    model, _ = tiny
    log = tiny_train_log()
    assert abs(log["final_val_loss"] - val_loss) <= 1e-4, (log["final_val_loss"], val_loss)
    # fields added to GPT2Config since the run take their defaults
    assert GPT2Config(**log["model_config"]) == GPT2Config(**_sizes(model.config))
    assert log["num_parameters"] == model.num_parameters()
    assert log["train_config"]["block_size"] == model.config.n_ctx
    assert log["train_wall_s"] <= 3600  # at most an hour of training
    assert len(log["train"]["loss"]) == log["train_config"]["steps"]
    assert log["val"]["step"][-1] == log["train_config"]["steps"]


def test_script_defaults_are_the_shipped_run():
    """`python scripts/train_tiny.py` with no arguments retrains exactly the shipped configuration."""
    spec = importlib.util.spec_from_file_location("train_tiny", ROOT / "scripts" / "train_tiny.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.parse_args([])
    assert args.out.resolve() == (ROOT / "gpt2ln" / "assets" / "tiny").resolve() and args.threads == 1
    config, cfg = script.build(args)
    log = tiny_train_log()
    assert config == GPT2Config(**log["model_config"])
    train_cfg = {**dataclasses.asdict(cfg), "betas": list(cfg.betas), "device": str(cfg.device)}
    assert train_cfg == log["train_config"]
    assert log["seed"] == args.seed and log["threads"] == args.threads


def _sizes(c: GPT2Config) -> dict:
    return dict(vocab_size=c.vocab_size, n_ctx=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head)


def test_transformers_loads_the_shipped_files(tiny, tiny_dir):
    transformers = pytest.importorskip("transformers")
    model, tok = tiny
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(tiny_dir)).eval()
    x = torch.tensor([tok.encode("Full fathom five thy father lies;\nOf his bones are coral made.")])
    with torch.no_grad():
        want = hf(x).logits
        # float32: equal up to rounding (atol 1e-5, rtol 1.3e-6 on logits of size ~10)
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1.3e-6)
        # float64: the same function, to 1e-10
        want64 = hf.double()(x).logits
        got64 = copy.deepcopy(model).double()(x)
    torch.testing.assert_close(got64, want64, atol=1e-10, rtol=0)


def test_greedy_generation_is_deterministic(tiny):
    model, tok = tiny
    x = torch.tensor([tok.encode("ROMEO:\n")])
    a = model.generate(x, 60, temperature=0)
    b = model.generate(x, 60, temperature=0)
    c = model.generate(x, 60, temperature=0, use_cache=False)
    assert torch.equal(a, b) and torch.equal(a, c)
    text = tok.decode(a[0])
    assert text.startswith("ROMEO:\n") and len(text) == len("ROMEO:\n") + 60


# ---------------------------------------------------------------- evaluate's definition
def _reference_loss(model, tokens, block_size):
    """The definition, one window at a time: mean NLL of w[1:] given w[:-1] over the
    consecutive non-overlapping windows w of block_size tokens (the last may be shorter)."""
    nll, n = 0.0, 0
    for s in range(0, len(tokens), block_size):
        w = tokens[s : s + block_size].long()
        if len(w) < 2:
            continue
        with torch.no_grad():
            logits = model(w[None, :-1])[0]
        nll += F.cross_entropy(logits, w[1:], reduction="sum").item()
        n += len(w) - 1
    assert n == len(tokens) - math.ceil(len(tokens) / block_size)
    return nll / n


@pytest.mark.parametrize("n", [320, 321, 333])
def test_evaluate_is_the_documented_mean(n):
    torch.manual_seed(0)
    model = GPT2(GPT2Config(vocab_size=256, n_ctx=32, n_embd=32, n_layer=2, n_head=2)).train()
    tokens = load_tokens("val")[:n]
    got = evaluate(model, tokens, 32, batch_size=3)
    assert model.training  # mode restored
    assert got == pytest.approx(_reference_loss(model.eval(), tokens, 32), abs=1e-6)
    assert evaluate(model, tokens, 32, batch_size=64) == pytest.approx(got, abs=1e-6)
    assert evaluate(model, tokens, 33) == pytest.approx(_reference_loss(model, tokens, 33), abs=1e-6)


def test_evaluate_rejects_bad_input():
    model = GPT2(GPT2Config(vocab_size=256, n_ctx=16, n_embd=16, n_layer=1, n_head=2))
    tokens = load_tokens("val")[:100]
    with pytest.raises(TypeError, match="GPT2"):
        evaluate("model", tokens, 16)
    with pytest.raises(ValueError, match="1-D integer"):
        evaluate(model, tokens.float(), 16)
    with pytest.raises(ValueError, match="block_size"):
        evaluate(model, tokens, 18)
    with pytest.raises(ValueError, match="block_size"):
        evaluate(model, tokens, 1)
    with pytest.raises(ValueError, match="batch_size"):
        evaluate(model, tokens, 16, batch_size=0)
    with pytest.raises(ValueError, match="at least 2"):
        evaluate(model, tokens[:1], 16)
