"""GPT-2: token and position embeddings, a stack of blocks, ``ln_f``, tied unembedding."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from .attention import attention_scores
from .blocks import Block
from .config import GPT2Config
from .generate import generate as _generate
from .hooks import HookPoint
from .norms import DyT, LayerNorm, RMSNorm, make_norm


class GPT2(nn.Module):
    """GPT-2 with pluggable normalization, named as in the official checkpoints.

    ``wte`` ``[vocab, d]``, ``wpe`` ``[n_ctx, d]``, ``h[i]`` blocks (``ln_1``,
    ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``, ``mlp.c_proj``),
    ``ln_f``; logits are ``ln_f(h) @ wte^T`` (no separate ``lm_head``).
    """

    def __init__(self, config: GPT2Config | None = None) -> None:
        super().__init__()
        config = GPT2Config() if config is None else config
        if not isinstance(config, GPT2Config):
            raise TypeError(f"GPT2: expected a GPT2Config, got {type(config).__name__}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_ctx, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = make_norm(config, config.n_embd) if config.use_final_norm else nn.Identity()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2's init: weights N(0, 0.02), wpe N(0, 0.01), biases 0, norm gains 1.

        With ``config.scale_resid_init`` the ``c_proj`` weights (which write to the
        residual stream) get std 0.02 / sqrt(2 n_layer), as in transformers. DyT's
        ``alpha`` starts at ``config.dyt_alpha``. DeepNorm instead scales the value,
        ``c_proj`` and ``c_fc`` weights by its beta (std 0.02 beta), the queries and keys not.
        """
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, 0.02)
            if isinstance(module, (LayerNorm, RMSNorm, DyT)):
                module.weight.fill_(1.0)
            if isinstance(module, DyT):
                module.alpha.fill_(module.alpha_init)
            if isinstance(getattr(module, "bias", None), torch.Tensor):
                module.bias.zero_()
        self.wpe.weight.normal_(0.0, 0.01)
        d, beta, n_layer = self.config.n_embd, self.config.deepnorm_beta, self.config.n_layer
        for block in self.h:
            if self.config.norm_position == "deepnorm":
                block.attn.c_attn.weight[2 * d :].mul_(beta)  # rows [2d, 3d): the values
                for lin in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                    lin.weight.mul_(beta)
            elif self.config.scale_resid_init:
                for proj in (block.attn.c_proj, block.mlp.c_proj):
                    proj.weight.normal_(0.0, 0.02 / math.sqrt(2 * n_layer))

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def num_parameters(self) -> int:
        """Number of parameters, the tied embedding counted once."""
        return sum(p.numel() for p in self.parameters())

    def check_idx(self, idx: torch.Tensor) -> None:
        """Raise TypeError/ValueError unless idx is an int tensor ``[B, T]`` of valid ids."""
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"GPT2: expected idx to be a torch.Tensor of token ids, got {type(idx).__name__}")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"GPT2: expected an integer tensor of token ids (int64), got dtype {idx.dtype}")
        if idx.ndim != 2 or idx.numel() == 0:
            raise ValueError(f"GPT2: expected a non-empty idx of shape [B, T], got shape {tuple(idx.shape)}")
        if idx.shape[1] > self.config.n_ctx:
            n_ctx = self.config.n_ctx
            raise ValueError(f"GPT2: sequence length {idx.shape[1]} exceeds the context window n_ctx={n_ctx}")
        lo, hi = (int(v) for v in torch.aminmax(idx))  # one device sync for both
        if lo < 0 or hi >= self.config.vocab_size:
            vocab = self.config.vocab_size
            raise ValueError(
                f"GPT2: token id {lo if lo < 0 else hi} is outside [0, vocab_size) = [0, {vocab})"
            )

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: int64 ``[B, T]`` with ``T <= n_ctx`` -> logits ``[B, T, vocab_size]``."""
        self.check_idx(idx)
        pos = torch.arange(idx.shape[1], device=idx.device)  # [T]
        x = self.drop(self.wte(idx) + self.wpe(pos))  # [B, T, d]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T  # [B, T, vocab]: the tied unembedding

    def run_with_cache(self, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Forward pass that also returns the activations, by name.

        ``resid_pre.{l}`` ``[B, T, d]`` for l = 0..n_layer (l = n_layer is the input
        to ``ln_f``), ``resid_mid.{l}``, ``attn_out.{l}``, ``mlp_out.{l}`` ``[B, T, d]``,
        ``attn_scores.{l}`` ``[B, H, T, T]`` (scaled, pre-softmax, future entries
        -inf), ``attn_pattern.{l}``, and ``ln_f.out`` ``[B, T, d]``. Recorded by forward
        hooks, removed before it returns; the attention runs the explicit formula,
        ``softmax(scores) v``, so the pattern stored is the one used.
        """
        cache: dict[str, torch.Tensor] = {}

        def save(name: str, inputs: bool = False):  # a hook storing a module's input or output
            return lambda module, args, out=None: cache.__setitem__(name, args[0] if inputs else out)

        def explicit_attention(layer: int):  # replaces the fused kernel's output
            def hook(attend: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> torch.Tensor:
                q, k, v = args
                cache[f"attn_scores.{layer}"] = scores = attention_scores(q, k)  # [B, H, T, T]
                cache[f"attn_pattern.{layer}"] = pattern = torch.softmax(scores, dim=-1)
                return nn.functional.dropout(pattern, attend.dropout, attend.training) @ v

            return hook

        hooks = [self.ln_f.register_forward_pre_hook(save(f"resid_pre.{len(self.h)}", inputs=True))]
        hooks.append(self.ln_f.register_forward_hook(save("ln_f.out")))
        for layer, block in enumerate(self.h):
            hooks.append(block.register_forward_pre_hook(save(f"resid_pre.{layer}", inputs=True)))
            hooks.append(block.attn.attend.register_forward_hook(explicit_attention(layer)))
            for name, m in block.named_children():
                if isinstance(m, HookPoint):
                    hooks.append(m.register_forward_hook(save(f"{name}.{layer}")))
        try:
            logits = self(idx)
        finally:
            for h in hooks:
                h.remove()
        return logits, cache

    #: ``model.generate(idx, max_new_tokens, *, temperature=1.0, top_k=None, generator=None,
    #: use_cache=True, fast=True, gemv=None, native=None)``: see ``gpt2ln.model.generate``.
    generate = _generate

    @classmethod
    def from_hf_state_dict(
        cls, state_dict: dict[str, torch.Tensor], config: GPT2Config | None = None
    ) -> GPT2:
        """A model holding exactly transformers' or the hub's GPT-2 weights (``gpt2ln.model.loading``), in
        eval mode, or a ValueError listing every missing, unexpected and mis-shaped key."""
        from .loading import from_hf_state_dict, infer_config

        model = cls(infer_config(state_dict) if config is None else config)
        model.load_state_dict(from_hf_state_dict(state_dict, model.state_dict()), strict=True)
        return model.eval()

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, revision: str | None = None) -> GPT2:
        """Load GPT-2 from a local directory, a ``.safetensors`` file or a hub id (``loading.py``)."""
        from .loading import read_pretrained

        return cls.from_hf_state_dict(*read_pretrained(name_or_path, revision=revision))

    def to_hf_state_dict(self, prefix: str = "transformer.") -> dict[str, torch.Tensor]:
        """Weights under transformers' names and layouts (``Conv1D``: ``[in, out]``)."""
        from .loading import to_hf_state_dict

        return to_hf_state_dict(self.state_dict(), prefix)
