"""GPT-2 hyperparameters, with the normalization choices this course varies."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

NORMS = ("layernorm", "rmsnorm", "dyt", "none")
NORM_POSITIONS = ("pre", "post", "peri", "olmo2", "deepnorm")


@dataclass
class GPT2Config:
    """Shape and normalization of a GPT-2 model.

    The defaults are GPT-2 small (124M). ``norm`` is the normalization used everywhere
    (``ln_1``, ``ln_2``, Peri-LN's ``ln_attn_out``/``ln_mlp_out``, ``ln_f`` and QK-norm):
    ``"layernorm"``, ``"rmsnorm"``, ``"dyt"`` (Dynamic Tanh, ``weight * tanh(alpha x) + bias``,
    Zhu et al. 2025, with ``alpha`` starting at ``dyt_alpha``) or ``"none"`` (identity: no
    normalization).

    ``norm_position`` places it in each block, for each sub-layer ``f`` (attention, MLP):

    - ``"pre"`` (GPT-2): ``x = x + f(norm(x))``
    - ``"post"`` (original Transformer, GPT-1): ``x = norm(x + f(x))``
    - ``"peri"`` (Peri-LN, Gemma 2's sandwich): ``x = x + norm_out(f(norm_in(x)))``
    - ``"olmo2"`` (OLMo 2's reordered norm): ``x = x + norm(f(x))``
    - ``"deepnorm"`` (DeepNet, Wang et al. 2022): ``x = norm(alpha * x + f(x))`` with
      ``alpha = (2 n_layer)^(1/4)``, and the value, output and MLP weights initialized
      with std ``0.02 * beta``, ``beta = (8 n_layer)^(-1/4)`` (the decoder-only constants).

    ``qk_norm`` normalizes each head's queries and keys over the head dimension before
    the dot product. ``final_norm`` is ``ln_f`` after the last block (default: on where
    the residual stream itself is never normalized, ``pre``/``peri``/``olmo2``; off for
    ``post``/``deepnorm``, whose last sub-block already ends in a norm).
    ``scale_resid_init`` scales the init of the projections that write to the residual
    stream (``c_proj``) by 1/sqrt(2 n_layer), as transformers does; the released
    TensorFlow code does not (DeepNorm uses its own beta instead).
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
    dyt_alpha: float = 0.5

    def __post_init__(self) -> None:
        def check(ok: bool, expected: str, got: object) -> None:
            if not ok:
                raise ValueError(f"GPT2Config: expected {expected}, got {got!r}")

        for name in ("vocab_size", "n_ctx", "n_embd", "n_layer", "n_head"):
            v = getattr(self, name)
            is_int = isinstance(v, int) and not isinstance(v, bool)
            check(is_int and v >= 1, f"{name} to be a positive integer", v)
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPT2Config: n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})"
            )
        check(self.norm in NORMS, f"norm in {NORMS}", self.norm)
        check(self.norm_position in NORM_POSITIONS, f"norm_position in {NORM_POSITIONS}", self.norm_position)
        check(self.layer_norm_epsilon > 0, "layer_norm_epsilon > 0", self.layer_norm_epsilon)
        check(0.0 <= self.dropout < 1.0, "0 <= dropout < 1", self.dropout)
        a = self.dyt_alpha
        check(isinstance(a, (int, float)) and not isinstance(a, bool) and a > 0, "dyt_alpha > 0", a)
        if self.qk_norm and self.norm == "none":
            raise ValueError('GPT2Config: qk_norm=True needs a norm; got norm="none"')
        f = self.final_norm
        check(f is None or isinstance(f, bool), "final_norm to be True, False or None", f)

    @property
    def use_final_norm(self) -> bool:
        """Whether the model has ``ln_f``: ``final_norm``, or if None, the placements whose
        residual stream is never normalized (``pre``, ``peri``, ``olmo2``)."""
        if self.final_norm is None:
            return self.norm_position in ("pre", "peri", "olmo2")
        return self.final_norm

    @property
    def deepnorm_alpha(self) -> float:
        """DeepNorm's residual scale ``(2 n_layer)^(1/4)`` (decoder-only)."""
        return (2 * self.n_layer) ** 0.25

    @property
    def deepnorm_beta(self) -> float:
        """DeepNorm's init scale ``(8 n_layer)^(-1/4)`` (decoder-only)."""
        return (8 * self.n_layer) ** -0.25

    @property
    def is_gpt2(self) -> bool:
        """True when this is GPT-2's own architecture (pre-norm LayerNorm, ``ln_f``, no QK-norm),
        the only one transformers' ``GPT2LMHeadModel`` can hold."""
        return (self.norm, self.norm_position, self.qk_norm, self.use_final_norm) == (
            "layernorm",
            "pre",
            False,
            True,
        )

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
