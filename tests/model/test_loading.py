"""Loading: transformers' save_pretrained directories, hub-style safetensors,
strict key checking, the offline path, and refusing pickles."""

import json
import time

import pytest
import torch
from hf_utils import hf_model
from safetensors.torch import save_file

import gpt2ln
from gpt2ln import GPT2, GPT2Config

CFG = GPT2Config(vocab_size=71, n_ctx=24, n_embd=32, n_layer=2, n_head=2)


@pytest.fixture
def hf():
    return hf_model(CFG)


def _same_logits(model, hf):
    idx = torch.randint(0, CFG.vocab_size, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-5, rtol=0)


def test_from_pretrained_reads_a_save_pretrained_directory(hf, tmp_path):
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    model = GPT2.from_pretrained(tmp_path)
    assert not model.training
    assert model.config.n_head == 2  # from config.json, not guessed from shapes
    _same_logits(model, hf)
    assert gpt2ln.load_pretrained(str(tmp_path)).config.n_layer == 2


def test_from_pretrained_reads_hub_style_keys_with_mask_buffers(hf, tmp_path):
    """The hub's model.safetensors: no `transformer.` prefix, no lm_head, attn.bias buffers."""
    sd = {k: v.clone().contiguous() for k, v in hf.transformer.state_dict().items()}
    for i in range(CFG.n_layer):
        sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(CFG.n_ctx, CFG.n_ctx)).view(1, 1, CFG.n_ctx, CFG.n_ctx)
        sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    assert not any(k.startswith("transformer.") for k in sd)
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    _same_logits(GPT2.from_pretrained(tmp_path), hf)
    _same_logits(GPT2.from_pretrained(tmp_path / "model.safetensors"), hf)


def test_lm_head_is_accepted_only_when_tied(hf):
    sd = dict(hf.state_dict())
    assert "lm_head.weight" in sd
    GPT2.from_hf_state_dict(sd, CFG)
    sd["lm_head.weight"] = sd["lm_head.weight"] + 1.0
    with pytest.raises(ValueError, match="lm_head.weight"):
        GPT2.from_hf_state_dict(sd, CFG)


def test_missing_unexpected_and_misshaped_keys_are_all_listed(hf):
    sd = dict(hf.state_dict())
    del sd["transformer.h.1.ln_2.bias"]
    sd["transformer.h.0.attn.q_proj.weight"] = torch.zeros(3)
    sd["transformer.h.0.mlp.c_fc.weight"] = sd["transformer.h.0.mlp.c_fc.weight"].T  # [out, in]: wrong layout
    with pytest.raises(ValueError) as err:
        GPT2.from_hf_state_dict(sd, CFG)
    msg = str(err.value)
    assert "missing (1): h.1.ln_2.bias" in msg
    assert "unexpected (1): h.0.attn.q_proj.weight" in msg
    assert "h.0.mlp.c_fc.weight: expected (32, 128), got (128, 32)" in msg


def test_config_is_inferred_from_shapes(hf):
    cfg = gpt2ln.infer_config(hf.state_dict(), n_head=2)
    assert (cfg.vocab_size, cfg.n_ctx, cfg.n_embd, cfg.n_layer, cfg.n_head) == (71, 24, 32, 2, 2)
    big = GPT2(GPT2Config(vocab_size=10, n_ctx=8, n_embd=128, n_layer=3, n_head=8)).to_hf_state_dict()
    assert gpt2ln.infer_config(big).n_head == 2  # GPT-2's 64 dimensions per head
    with pytest.raises(ValueError, match="not a GPT-2 state dict: missing 'wte.weight'"):
        gpt2ln.infer_config({"foo": torch.zeros(1)})


def test_n_head_cannot_be_guessed_off_the_gpt2_head_size():
    sd = GPT2(GPT2Config(vocab_size=10, n_ctx=8, n_embd=40, n_layer=1, n_head=4)).to_hf_state_dict()
    with pytest.raises(ValueError, match="cannot infer n_head for n_embd=40"):
        GPT2.from_hf_state_dict(sd)


def test_pickled_checkpoints_are_refused(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FileNotFoundError, match="pytorch_model.bin is a pickle"):
        GPT2.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"only \.safetensors"):
        GPT2.from_pretrained(tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="no such file"):
        GPT2.from_pretrained(tmp_path / "nothing.safetensors")


def test_hub_id_offline_fails_fast_with_the_local_alternative(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # closed port on loopback: nothing answers
    start = time.perf_counter()
    with pytest.raises(ConnectionError) as err:
        GPT2.from_pretrained("gpt2")
    assert time.perf_counter() - start < 15
    msg = str(err.value)
    assert "openai-community/gpt2" in msg and "not reachable" in msg and "model.safetensors" in msg


def test_hub_available_honours_offline_mode(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    assert gpt2ln.hub_available() is False
    assert time.perf_counter() - start < 0.5


def test_config_json_round_trips_and_loads_in_transformers(tmp_path):
    import transformers

    from gpt2ln.model.loading import config_from_json, config_to_json

    (tmp_path / "config.json").write_text(json.dumps(config_to_json(CFG)))
    assert config_from_json(tmp_path / "config.json") == CFG
    hf_cfg = transformers.GPT2Config.from_dict(config_to_json(CFG, dropout=0.0))
    assert (hf_cfg.n_positions, hf_cfg.n_head, hf_cfg.resid_pdrop) == (CFG.n_ctx, CFG.n_head, 0.0)
