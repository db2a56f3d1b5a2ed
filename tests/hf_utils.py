"""Helpers shared by the tests that compare against Hugging Face transformers."""

import transformers

from gpt2ln import GPT2Config


def hf_config(cfg: GPT2Config) -> transformers.GPT2Config:
    """The transformers config for the same GPT-2 shape (no dropout)."""
    return transformers.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.n_ctx,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        layer_norm_epsilon=cfg.layer_norm_epsilon,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=cfg.vocab_size - 1,
        eos_token_id=cfg.vocab_size - 1,
    )


def hf_model(cfg: GPT2Config) -> transformers.GPT2LMHeadModel:
    """A randomly initialized transformers GPT-2 in eval mode."""
    return transformers.GPT2LMHeadModel(hf_config(cfg)).eval()
