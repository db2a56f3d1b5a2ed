"""The model a learner reads: GPT-2 with pluggable normalization, in PyTorch.

Read it in this order (about 900 lines in all; ``gpt2.py`` is the place to start):

* ``config.py``: ``GPT2Config``, the sizes and the choices (which norm, where it goes).
* ``norms.py``: LayerNorm exactly as GPT-2's official code, RMSNorm and DyT; functions and modules.
* ``attention.py``: causal self-attention (``c_attn``, ``c_proj``), with optional QK-norm.
* ``mlp.py``: the MLP (``c_fc``, tanh GELU, ``c_proj``).
* ``hooks.py``: ``HookPoint``, names for intermediate values.
* ``blocks.py``: the block, with its norms in one of five placements.
* ``gpt2.py``: ``GPT2``: embeddings, blocks, ``ln_f``, tied unembedding; ``run_with_cache``.
* ``kv_cache.py`` and ``generate.py``: the key/value cache and the decoding loop.
* ``loading.py``: weights from transformers' names and the Hugging Face Hub (safetensors only).
* ``backward.py``: LayerNorm's backward pass by hand, as an autograd function.

Nothing here imports the lab or the classroom; faster kernels plug in from outside
(``gpt2ln.lab.fast``) through ``norms.register_one_pass`` and ``generate.register_fast_decoding``.
"""

from .attention import CausalSelfAttention, attention_scores, causal_mask
from .backward import LayerNormFunction, layer_norm_backward, layer_norm_fn
from .blocks import Block
from .config import PRESETS, GPT2Config
from .gpt2 import GPT2
from .hooks import HookPoint
from .kv_cache import KVCache
from .loading import hub_available, infer_config, to_hf_state_dict
from .mlp import MLP, gelu
from .norms import DyT, LayerNorm, RMSNorm, dyt, layer_norm, make_norm, rms_norm, set_fast

__all__ = [
    "GPT2",
    "MLP",
    "PRESETS",
    "Block",
    "CausalSelfAttention",
    "DyT",
    "GPT2Config",
    "HookPoint",
    "KVCache",
    "LayerNorm",
    "LayerNormFunction",
    "RMSNorm",
    "attention_scores",
    "causal_mask",
    "dyt",
    "gelu",
    "hub_available",
    "infer_config",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_fn",
    "make_norm",
    "rms_norm",
    "set_fast",
    "to_hf_state_dict",
]
