"""gpt2ln: normalization in transformers, built around GPT-2.

The package the book's chapters import once they have built each piece by hand.
"""

from .attention import CausalSelfAttention, attention_scores, causal_mask
from .backward import LayerNormFunction, layer_norm_backward, layer_norm_fn
from .blocks import MLP, Block, HookPoint, gelu
from .config import PRESETS, GPT2Config
from .data import ByteTokenizer, get_batch, load_corpus, load_tokens
from .device import get_device
from .kv_cache import KVCache
from .loading import hub_available, infer_config, to_hf_state_dict
from .model import GPT2
from .norms import DyT, LayerNorm, RMSNorm, dyt, layer_norm, make_norm, rms_norm, set_fast
from .numerics import (
    variance_one_pass,
    variance_two_pass,
    variance_welford,
    variance_welford_parallel,
    welford_merge,
)
from .timing import copy_bandwidth, time_fn, time_interleaved
from .tiny import load_gpt2_or_tiny, load_tiny
from .train import TrainConfig, evaluate_loss, lr_at, lr_sensitivity, train

load_pretrained = GPT2.from_pretrained  # GPT-2 from a local directory, a .safetensors file or the hub

__version__ = "0.1.0"

__all__ = [
    "GPT2",
    "MLP",
    "PRESETS",
    "Block",
    "ByteTokenizer",
    "CausalSelfAttention",
    "DyT",
    "GPT2Config",
    "HookPoint",
    "KVCache",
    "LayerNorm",
    "LayerNormFunction",
    "RMSNorm",
    "TrainConfig",
    "attention_scores",
    "causal_mask",
    "copy_bandwidth",
    "dyt",
    "evaluate_loss",
    "gelu",
    "get_batch",
    "get_device",
    "hub_available",
    "infer_config",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_fn",
    "load_corpus",
    "load_gpt2_or_tiny",
    "load_pretrained",
    "load_tiny",
    "load_tokens",
    "lr_at",
    "lr_sensitivity",
    "make_norm",
    "rms_norm",
    "set_fast",
    "time_fn",
    "time_interleaved",
    "to_hf_state_dict",
    "train",
    "variance_one_pass",
    "variance_two_pass",
    "variance_welford",
    "variance_welford_parallel",
    "welford_merge",
]
