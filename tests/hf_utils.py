"""Helpers shared by the tests that compare against Hugging Face transformers."""

import transformers

from gpt2ln import GPT2Config
from gpt2ln.model.loading import config_to_json


def hf_config(cfg: GPT2Config) -> transformers.GPT2Config:
    """The transformers config for the same GPT-2 shape (no dropout)."""
    d = config_to_json(cfg, dropout=0.0)
    d["bos_token_id"] = d["eos_token_id"] = cfg.vocab_size - 1
    return transformers.GPT2Config.from_dict(d)


def hf_model(cfg: GPT2Config) -> transformers.GPT2LMHeadModel:
    """A randomly initialized transformers GPT-2 in eval mode."""
    return transformers.GPT2LMHeadModel(hf_config(cfg)).eval()
