"""gpt2ln: normalization in transformers, built around GPT-2.

The package the book's chapters import once they have built each piece by hand.
"""

from .attention import CausalSelfAttention, causal_mask
from .blocks import MLP, Block, gelu
from .config import PRESETS, GPT2Config
from .device import get_device
from .loading import hub_available, infer_config, load_pretrained, to_hf_state_dict
from .model import GPT2
from .norms import LayerNorm, RMSNorm, layer_norm, rms_norm

__version__ = "0.1.0"

__all__ = [
    "GPT2",
    "MLP",
    "PRESETS",
    "Block",
    "CausalSelfAttention",
    "GPT2Config",
    "LayerNorm",
    "RMSNorm",
    "causal_mask",
    "gelu",
    "get_device",
    "hub_available",
    "infer_config",
    "layer_norm",
    "load_pretrained",
    "rms_norm",
    "to_hf_state_dict",
]
