"""The small GPT-2 this project trains and ships.

Real GPT-2 weights need a download. Offline (and in CI) the book uses a small
GPT-2 trained here by ``scripts/train_tiny.py`` with ``gpt2ln.train`` on the
training plays of the shipped Shakespeare corpus: byte-level (vocab 256), GPT-2's
architecture (pre-norm LayerNorm, ``ln_f``, learned positions, tied embeddings,
tanh GELU), only smaller. Its files live in ``gpt2ln/assets/tiny/``:
``model.safetensors`` and ``config.json`` in transformers' layout (so both
``gpt2ln.GPT2.from_pretrained`` and ``transformers.GPT2LMHeadModel.from_pretrained``
read them) and ``train_log.json``, the record of the run. The model card is the
book page ``book/small_model.md``. Its validation loss is ``gpt2ln.evaluate_loss(model,
load_tokens("val"), block_size=n_ctx)``, every byte of the validation plays.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from ..model.gpt2 import GPT2
from .data import ByteTokenizer

TINY_DIR = ("assets", "tiny")


def _tiny_file(name: str) -> Any:
    return resources.files("gpt2ln").joinpath(*TINY_DIR, name)


def load_tiny() -> tuple[GPT2, ByteTokenizer]:
    """The shipped small GPT-2 and its tokenizer, from the package (no network).

    Returns ``(model, ByteTokenizer())`` with the model on the CPU, in eval mode.
    """
    from safetensors.torch import load

    from ..model.loading import config_from_json

    weights = _tiny_file("model.safetensors")
    config_path = _tiny_file("config.json")
    if not weights.is_file() or not config_path.is_file():
        raise FileNotFoundError(
            "the small GPT-2 is missing from the package (gpt2ln/assets/tiny/); "
            "rebuild it with `python scripts/train_tiny.py`"
        )
    with resources.as_file(config_path) as path:
        config = config_from_json(path)
    state_dict = load(weights.read_bytes())
    return GPT2.from_hf_state_dict(state_dict, config).eval(), ByteTokenizer()


def tiny_train_log() -> dict[str, Any]:
    """The shipped ``train_log.json``: how the small GPT-2 was trained (see ``scripts/train_tiny.py``)."""
    return json.loads(_tiny_file("train_log.json").read_text())
