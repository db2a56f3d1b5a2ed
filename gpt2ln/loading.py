"""Reading GPT-2 weights: transformers / hub state dicts, safetensors files, the hub.

This module reads and converts state dicts and configs; it builds no model (``GPT2.from_pretrained``
and ``GPT2.from_hf_state_dict`` do, with what it returns), so it does not import ``gpt2ln.model``.

Only safetensors are read: a ``pytorch_model.bin`` is a pickle, which can run code
when loaded, so it is refused with a message saying how to convert it.

Key names. transformers' ``GPT2LMHeadModel.state_dict()`` prefixes every key with
``transformer.`` and adds ``lm_head.weight`` (the same tensor as ``wte.weight``);
the hub's ``model.safetensors`` has no prefix and carries ``h.{i}.attn.bias``
causal-mask buffers. Both are accepted. ``Conv1D`` weights (``c_attn``, ``c_proj``,
``c_fc``) are stored ``[in, out]`` and transposed into ``nn.Linear``'s ``[out, in]``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

import torch

from .config import GPT2Config

CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
HUB_ALIASES = {name: f"openai-community/{name}" for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")}


def _is_conv1d(key: str) -> bool:
    return key.endswith(CONV1D_SUFFIXES)


def _strip(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """Drop the ``transformer.`` prefix and the mask buffers; split off ``lm_head.weight``."""
    out: dict[str, torch.Tensor] = {}
    lm_head = None
    for key, value in state_dict.items():
        if key == "lm_head.weight":
            lm_head = value
            continue
        key = key.removeprefix("transformer.")
        if IGNORED.match(key):
            continue
        out[key] = value
    return out, lm_head


def infer_config(state_dict: dict[str, torch.Tensor], **overrides) -> GPT2Config:
    """GPT-2 config from weight shapes: vocab and width from ``wte``, context from
    ``wpe``, depth from the ``h.{i}`` keys. Shapes do not fix the number of heads:
    GPT-2 uses 64 dimensions per head at every size, so ``n_head = n_embd // 64``
    unless given in ``overrides``."""
    sd, _ = _strip(state_dict)
    for key in ("wte.weight", "wpe.weight"):
        if key not in sd:
            raise ValueError(f"not a GPT-2 state dict: missing {key!r} (got keys like {sorted(sd)[:5]})")
    vocab_size, n_embd = sd["wte.weight"].shape
    n_ctx = sd["wpe.weight"].shape[0]
    layers = {int(m.group(1)) for k in sd if (m := re.match(r"h\.(\d+)\.", k))}
    n_layer = max(layers) + 1 if layers else 0
    fields = dict(vocab_size=vocab_size, n_ctx=n_ctx, n_embd=n_embd, n_layer=n_layer)
    if "n_head" not in overrides:
        if n_embd % 64:
            raise ValueError(
                f"cannot infer n_head for n_embd={n_embd} (not a multiple of GPT-2's head size 64); "
                "pass a GPT2Config"
            )
        fields["n_head"] = n_embd // 64
    fields.update(overrides)
    return GPT2Config(**fields)


def from_hf_state_dict(
    state_dict: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """transformers' or the hub's GPT-2 weights under ``gpt2ln`` names and layouts, checked against
    ``expected`` (a model's own ``state_dict()``), or a ValueError listing every missing,
    unexpected and mis-shaped key. Never a partial result."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"expected a state dict (dict of tensors), got {type(state_dict).__name__}")
    sd, lm_head = _strip(state_dict)
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    misshaped = []
    converted: dict[str, torch.Tensor] = {}
    for key in sorted(set(expected) & set(sd)):
        value = sd[key]
        if not isinstance(value, torch.Tensor):
            misshaped.append(f"{key}: expected a tensor, got {type(value).__name__}")
            continue
        want = tuple(expected[key].shape)
        if _is_conv1d(key):
            value = value.T
        if tuple(value.shape) != want:
            shown = tuple(want[::-1]) if _is_conv1d(key) else want
            misshaped.append(f"{key}: expected {shown}, got {tuple(sd[key].shape)}")
        converted[key] = value
    if lm_head is not None and "wte.weight" in sd and not torch.equal(lm_head, sd["wte.weight"]):
        unexpected.append("lm_head.weight (differs from wte.weight; GPT-2 ties them)")
    if missing or unexpected or misshaped:
        lines = ["GPT-2 state dict does not match the model:"]
        if missing:
            lines.append(f"  missing ({len(missing)}): {', '.join(missing)}")
        if unexpected:
            lines.append(f"  unexpected ({len(unexpected)}): {', '.join(unexpected)}")
        if misshaped:
            lines.append(f"  wrong shape ({len(misshaped)}): {'; '.join(misshaped)}")
        raise ValueError("\n".join(lines))
    return converted


def to_hf_state_dict(
    state_dict: dict[str, torch.Tensor] | torch.nn.Module, prefix: str = "transformer."
) -> dict[str, torch.Tensor]:
    """A ``gpt2ln`` state dict (``model.state_dict()``, or the model itself) under transformers'
    names and ``Conv1D`` layout.

    With the default prefix the result loads into ``GPT2LMHeadModel``
    (``lm_head.weight`` included); with ``prefix=""`` into ``GPT2Model``.
    """
    if isinstance(state_dict, torch.nn.Module):  # a model: its state dict
        state_dict = state_dict.state_dict()
    if not isinstance(state_dict, dict):
        got = type(state_dict).__name__
        raise TypeError(f"to_hf_state_dict: expected a state dict or a model, got {got}")
    out = {prefix + k: (v.T.contiguous() if _is_conv1d(k) else v) for k, v in state_dict.items()}
    if prefix:
        out["lm_head.weight"] = state_dict["wte.weight"]
    return out


def config_from_json(path: str | Path) -> GPT2Config:
    """Read a transformers GPT-2 ``config.json``."""
    cfg = json.loads(Path(path).read_text())
    return GPT2Config(
        vocab_size=cfg["vocab_size"],
        n_ctx=cfg.get("n_positions", cfg.get("n_ctx", 1024)),
        n_embd=cfg["n_embd"],
        n_layer=cfg["n_layer"],
        n_head=cfg["n_head"],
        layer_norm_epsilon=cfg.get("layer_norm_epsilon", 1e-5),
    )


def config_to_json(config: GPT2Config, dropout: float | None = None) -> dict:
    """transformers' ``config.json`` for a GPT-2 of this shape (the inverse of
    ``config_from_json``). ``dropout`` defaults to the config's own. Only for GPT-2's own
    architecture (``config.is_gpt2``): transformers' GPT-2 has no place for the variants."""
    if not config.is_gpt2:
        raise ValueError(
            "config_to_json: transformers' GPT-2 is pre-norm LayerNorm with ln_f and no QK-norm; got "
            f"norm={config.norm!r}, norm_position={config.norm_position!r}, qk_norm={config.qk_norm}, "
            f"final norm {config.use_final_norm}"
        )
    p = config.dropout if dropout is None else dropout
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.n_ctx,
        "n_embd": config.n_embd,
        "n_layer": config.n_layer,
        "n_head": config.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "resid_pdrop": p,
        "embd_pdrop": p,
        "attn_pdrop": p,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "dtype": "float32",
    }


def _load_safetensors(
    weights: Path, config_json: Path | None
) -> tuple[dict[str, torch.Tensor], GPT2Config | None]:
    from safetensors.torch import load_file

    state_dict = load_file(str(weights), device="cpu")
    config = config_from_json(config_json) if config_json is not None and config_json.exists() else None
    return state_dict, config


def hub_available(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers a TCP connect within ``timeout`` seconds.

    One attempt, DNS included (run in a thread so a stuck resolver cannot hang the
    caller). False at once when ``HF_HUB_OFFLINE`` is set.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    result = [False]

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result[0] = True
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return result[0]


def _from_hub(
    repo_id: str, revision: str | None, timeout: float
) -> tuple[dict[str, torch.Tensor], GPT2Config | None]:
    from huggingface_hub import hf_hub_download

    repo_id = HUB_ALIASES.get(repo_id, repo_id)

    def fetch(local_only: bool) -> tuple[Path, Path]:
        files = [
            Path(hf_hub_download(repo_id, name, revision=revision, local_files_only=local_only))
            for name in ("model.safetensors", "config.json")
        ]
        return files[0], files[1]

    try:  # already in the local hub cache: no network needed
        return _load_safetensors(*fetch(local_only=True))
    except Exception:
        pass
    if not hub_available(timeout):
        raise ConnectionError(
            f"cannot load {repo_id!r}: the Hugging Face Hub is not reachable (no answer within "
            f"{timeout:g} s) and the weights are not in the local cache. Offline, pass a local "
            "directory holding model.safetensors and config.json instead (for example one "
            "written by transformers' GPT2LMHeadModel.save_pretrained)."
        )
    return _load_safetensors(*fetch(local_only=False))


def read_pretrained(
    name_or_path: str | Path, revision: str | None = None, timeout: float = 3.0
) -> tuple[dict[str, torch.Tensor], GPT2Config | None]:
    """GPT-2's weights and config from a local directory (``model.safetensors`` + ``config.json``),
    a ``.safetensors`` file (``config.json`` beside it is used if present; else the config is
    None), or a hub id (``gpt2``, ``openai-community/gpt2``, ``gpt2-medium``, ...), fetching
    only the safetensors and the config. ``GPT2.from_pretrained`` builds the model from them."""
    path = Path(name_or_path)
    if path.is_dir():
        weights = path / "model.safetensors"
        if not weights.exists():
            found = sorted(p.name for p in path.iterdir())
            hint = (
                " pytorch_model.bin is a pickle and is not loaded; re-save it with "
                "save_pretrained(..., safe_serialization=True)."
                if "pytorch_model.bin" in found
                else ""
            )
            raise FileNotFoundError(f"{path}: expected model.safetensors, found {found}.{hint}")
        return _load_safetensors(weights, path / "config.json")
    if path.is_file():
        if path.suffix != ".safetensors":
            raise ValueError(
                f"{path}: only .safetensors weights are loaded (pickled checkpoints can run code), "
                f"got a {path.suffix or 'suffix-less'} file"
            )
        return _load_safetensors(path, path.parent / "config.json")
    name = str(name_or_path)
    if name.startswith((".", "/", "~")) or name.endswith(".safetensors") or name.count("/") > 1:
        raise FileNotFoundError(f"{name}: no such file or directory")
    return _from_hub(name, revision, timeout)
