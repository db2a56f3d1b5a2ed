"""GPT-2 hyperparameters, with the normalization choices this course varies."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")


@dataclass
class GPT2Config:
    """Shape and normalization of a GPT-2 model.

    The defaults are GPT-2 small (124M). ``norm_position="pre"`` is GPT-2's block
    ``x = x + f(norm(x))``; ``"post"`` is the original Transformer / GPT-1 block
    ``x = norm(x + f(x))``. ``qk_norm`` normalizes each head's queries and keys over
    the head dimension before the dot product. ``final_norm`` is ``ln_f`` after the
    last block (default: on for pre-norm, off for post-norm, whose last sub-block
    already ends in a norm). ``scale_resid_init`` scales the init of the projections
    that write to the residual stream (``c_proj``) by 1/sqrt(2 n_layer), as
    transformers does; the released TensorFlow code does not.
    """

    vocab_size: int = 50257
    n_ctx: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5
    norm: str = "layernorm"
    norm_position: str = "pre"
    qk_norm: bool = False
    final_norm: bool | None = None
    scale_resid_init: bool = True
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_ctx", "n_embd", "n_layer", "n_head"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GPT2Config: expected {name} to be a positive integer, got {v!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPT2Config: n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )
        if self.norm not in NORMS:
            raise ValueError(f"GPT2Config: expected norm in {NORMS}, got {self.norm!r}")
        if self.norm_position not in NORM_POSITIONS:
            raise ValueError(
                f"GPT2Config: expected norm_position in {NORM_POSITIONS}, got {self.norm_position!r}"
            )
        if not self.layer_norm_epsilon > 0:
            raise ValueError(f"GPT2Config: expected layer_norm_epsilon > 0, got {self.layer_norm_epsilon}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPT2Config: expected 0 <= dropout < 1, got {self.dropout}")
        if self.final_norm is not None and not isinstance(self.final_norm, bool):
            raise ValueError(
                f"GPT2Config: expected final_norm to be True, False or None, got {self.final_norm!r}"
            )

    @property
    def use_final_norm(self) -> bool:
        """Whether the model has ``ln_f``: ``final_norm``, or if None, pre-norm only."""
        return self.norm_position == "pre" if self.final_norm is None else self.final_norm

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @classmethod
    def from_preset(cls, name: str, **overrides) -> GPT2Config:
        """A named GPT-2 size: ``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``."""
        key = name.split("/")[-1]
        if key not in PRESETS:
            raise ValueError(f"unknown GPT-2 preset {name!r}; expected one of {sorted(PRESETS)}")
        return dataclasses.replace(PRESETS[key], **overrides)

    def replace(self, **changes) -> GPT2Config:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, GPT2Config] = {
    "gpt2": GPT2Config(n_embd=768, n_layer=12, n_head=12),
    "gpt2-medium": GPT2Config(n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large": GPT2Config(n_embd=1280, n_layer=36, n_head=20),
    "gpt2-xl": GPT2Config(n_embd=1600, n_layer=48, n_head=25),
}
