"""GPT-2: token and position embeddings, a stack of blocks, ``ln_f``, tied unembedding."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from .attention import KVCache, make_norm
from .blocks import Block
from .config import GPT2Config
from .gemv import linear
from .norms import DyT, LayerNorm, RMSNorm


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
            if getattr(module, "bias", None) is not None and isinstance(module.bias, torch.Tensor):
                module.bias.zero_()
        self.wpe.weight.normal_(0.0, 0.01)
        if self.config.norm_position == "deepnorm":
            beta, d = self.config.deepnorm_beta, self.config.n_embd
            for block in self.h:
                block.attn.c_attn.weight[2 * d :].mul_(beta)  # rows [2d, 3d): the values
                for lin in (block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                    lin.weight.mul_(beta)
        elif self.config.scale_resid_init:
            for block in self.h:
                for proj in (block.attn.c_proj, block.mlp.c_proj):
                    proj.weight.normal_(0.0, 0.02 / math.sqrt(2 * self.config.n_layer))

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def num_parameters(self) -> int:
        """Number of parameters, the tied embedding counted once."""
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------ forward
    def check_idx(self, idx: torch.Tensor, past_len: int = 0) -> None:
        """Raise TypeError/ValueError unless idx is an int tensor ``[B, T]`` of valid ids."""
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"GPT2: expected idx to be a torch.Tensor of token ids, got {type(idx).__name__}")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"GPT2: expected an integer tensor of token ids (int64), got dtype {idx.dtype}")
        if idx.ndim != 2:
            raise ValueError(f"GPT2: expected idx of shape [B, T], got shape {tuple(idx.shape)}")
        B, T = idx.shape
        if B == 0 or T == 0:
            raise ValueError(f"GPT2: expected a non-empty batch [B, T], got shape {tuple(idx.shape)}")
        n_ctx = self.config.n_ctx
        if past_len + T > n_ctx:
            raise ValueError(f"GPT2: sequence length {past_len + T} exceeds the context window n_ctx={n_ctx}")
        lo, hi = (int(v) for v in torch.aminmax(idx))  # one device sync for both
        if lo < 0 or hi >= self.config.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"GPT2: token id {bad} is outside [0, vocab_size) = [0, {self.config.vocab_size})"
            )

    def _run(
        self,
        idx: torch.Tensor,
        kv_cache: KVCache | None = None,
        cache: dict[str, torch.Tensor] | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """idx ``[B, T]`` (already checked) -> logits ``[B, T, vocab]``.

        With ``kv_cache`` idx continues the cached positions and its keys and values
        are added to the cache. ``last_only`` computes the logits of the last position
        only (``[B, 1, vocab]``), all generation needs: the unembedding is the largest
        single matrix product of a short forward.
        """
        past_len = 0 if kv_cache is None else kv_cache.length
        T = idx.shape[1]
        pos = torch.arange(past_len, past_len + T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # [B, T, d]
        for layer, block in enumerate(self.h):
            if cache is not None:
                cache[f"resid_pre.{layer}"] = x
            x, _ = block(x, kv_cache, cache, layer)
        if kv_cache is not None:
            kv_cache.advance(T)
        if cache is not None:
            cache[f"resid_pre.{len(self.h)}"] = x
        if last_only:
            x = x[:, -1:]
        x = self.ln_f(x)
        if cache is not None:
            cache["ln_f.out"] = x
        return linear(x, self.wte.weight)  # x @ wte^T: [B, T, vocab], tied unembedding

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: int64 ``[B, T]`` with ``T <= n_ctx`` -> logits ``[B, T, vocab_size]``."""
        self.check_idx(idx)
        return self._run(idx)

    def run_with_cache(self, idx: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Forward pass that also returns the activations, by name.

        ``resid_pre.{l}`` ``[B, T, d]`` for l = 0..n_layer (l = n_layer is the input
        to ``ln_f``), ``resid_mid.{l}``, ``attn_out.{l}``, ``mlp_out.{l}`` ``[B, T, d]``,
        ``attn_scores.{l}`` ``[B, H, T, T]`` (scaled, pre-softmax, future entries
        -inf), ``attn_pattern.{l}``, and ``ln_f.out`` ``[B, T, d]``.
        """
        self.check_idx(idx)
        cache: dict[str, torch.Tensor] = {}
        logits = self._run(idx, cache=cache)
        return logits, cache

    # --------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Extend idx ``[B, T]`` by ``max_new_tokens`` -> ``[B, T + max_new_tokens]``.

        ``temperature=0`` is greedy (argmax); otherwise sample from
        softmax(logits / temperature), restricted to the ``top_k`` largest if given,
        with ``generator`` for reproducibility. With ``use_cache`` each step feeds
        only the new token and reuses past keys and values; once the sequence fills
        the context window the model recomputes over the last ``n_ctx`` tokens.
        Call ``model.eval()`` first if the model has dropout.
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"generate: expected max_new_tokens to be an int >= 0, got {max_new_tokens!r}")
        if not temperature >= 0:
            raise ValueError(f"generate: expected temperature >= 0, got {temperature}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"generate: expected top_k to be None or an int >= 1, got {top_k!r}")
        n_ctx = self.config.n_ctx
        self.check_idx(idx[:, -n_ctx:] if isinstance(idx, torch.Tensor) and idx.ndim == 2 else idx)
        B, T0 = idx.shape
        out = torch.empty(B, T0 + max_new_tokens, dtype=idx.dtype, device=idx.device)
        out[:, :T0] = idx
        kv = None
        if use_cache and max_new_tokens > 0:
            max_len = min(n_ctx, T0 + max_new_tokens)
            kv = KVCache.for_model(self.config, B, max_len, idx.device, self.wte.weight.dtype)
        for t in range(T0, T0 + max_new_tokens):
            if kv is not None and 0 < kv.length < kv.max_len:
                logits = self._run(out[:, t - 1 : t], kv, last_only=True)  # the newest token only
            else:  # first step, no cache, or the window is full: run the last n_ctx tokens
                if kv is not None:
                    kv.reset()
                logits = self._run(out[:, max(0, t - n_ctx) : t], kv, last_only=True)
            out[:, t : t + 1] = self._sample(logits[:, -1, :], temperature, top_k, generator)
        return out

    @staticmethod
    def _sample(
        logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
    ) -> torch.Tensor:
        """logits ``[B, vocab]`` -> next ids ``[B, 1]``."""
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = logits.float() / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_hf_state_dict(
        cls, state_dict: dict[str, torch.Tensor], config: GPT2Config | None = None
    ) -> GPT2:
        """Build a model from transformers' or the hub's GPT-2 weights (see ``gpt2ln.loading``)."""
        from .loading import model_from_hf_state_dict

        return model_from_hf_state_dict(state_dict, config)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, revision: str | None = None) -> GPT2:
        """Load GPT-2 from a local directory / ``.safetensors`` file or a hub id (see ``gpt2ln.loading``)."""
        from .loading import load_pretrained

        return load_pretrained(name_or_path, revision=revision)

    def to_hf_state_dict(self, prefix: str = "transformer.") -> dict[str, torch.Tensor]:
        """Weights under transformers' names and layouts (``Conv1D``: ``[in, out]``)."""
        from .loading import to_hf_state_dict

        return to_hf_state_dict(self, prefix)
