"""Autograded checks for the book's exercises.

Each ``check_<name>(fn)`` runs the learner's function on fixed, seeded inputs, compares
with a reference, and either prints one success line or raises ``AssertionError`` saying
which property failed and the likely mistake. Checks are grouped by chapter (``ch02`` for
chapter 2, ...) and re-exported here. All of them follow one pattern, documented at the top
of ``_core.py``: a classic mistake is a :class:`~._core.Mistake` (a label naming it, its fix,
and a function computing its output); ``call_on_copies`` runs the learner's function and
``compare`` (or ``nearest_mistake``) names the mistake whose output is nearest a wrong answer.
Copy that pattern for a new chapter.
"""

from ._core import call, fail, passed
from .ch01 import check_invariance, check_residual_norms
from .ch02 import check_layer_norm, check_layernorm_param_count
from .ch03 import check_layer_norm_backward, check_ln_jacobian, check_rms_norm_backward
from .ch04 import check_welford, check_welford_merge
from .ch05 import check_center_writing_weights, check_rms_norm, check_rms_to_layer_norm
from .ch06 import (
    check_causal_attention,
    check_gelu,
    check_padded_causal_mask,
    check_saturating_std,
    check_smallest_nan_fill,
)
from .ch07 import (
    check_gradient_balance,
    check_lnf_factor,
    check_lr_limit,
    check_lr_schedule,
    check_post_norm_block,
    check_pre_norm_block,
)
from .ch08 import check_collapse_lr, check_collapse_warmup, check_lr_sensitivity, check_qk_norm_scores
from .ch09 import check_cached_attention, check_embed, check_gpt2_param_count
from .ch10 import check_center_unembed, check_fold_ln, check_logit_attribution, check_logit_lens
from .ch11 import check_dyt, check_dyt_backward, check_peri_block, check_scale_embeddings

__all__ = [
    "call",
    "check_cached_attention",
    "check_causal_attention",
    "check_center_unembed",
    "check_center_writing_weights",
    "check_collapse_lr",
    "check_collapse_warmup",
    "check_dyt",
    "check_dyt_backward",
    "check_embed",
    "check_fold_ln",
    "check_gelu",
    "check_gpt2_param_count",
    "check_gradient_balance",
    "check_invariance",
    "check_layer_norm",
    "check_layer_norm_backward",
    "check_layernorm_param_count",
    "check_ln_jacobian",
    "check_lnf_factor",
    "check_logit_attribution",
    "check_logit_lens",
    "check_lr_limit",
    "check_lr_schedule",
    "check_lr_sensitivity",
    "check_padded_causal_mask",
    "check_peri_block",
    "check_post_norm_block",
    "check_pre_norm_block",
    "check_qk_norm_scores",
    "check_residual_norms",
    "check_rms_norm",
    "check_rms_norm_backward",
    "check_rms_to_layer_norm",
    "check_saturating_std",
    "check_scale_embeddings",
    "check_smallest_nan_fill",
    "check_welford",
    "check_welford_merge",
    "fail",
    "passed",
]
