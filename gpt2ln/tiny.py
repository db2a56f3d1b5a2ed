"""The small GPT-2 this project trains and ships, and the loss it is judged by.

Real GPT-2 weights need a download. Offline (and in CI) the book uses a small
GPT-2 trained here by ``scripts/train_tiny.py`` with ``gpt2ln.train`` on the
training plays of the shipped Shakespeare corpus: byte-level (vocab 256), GPT-2's
architecture (pre-norm LayerNorm, ``ln_f``, learned positions, tied embeddings,
tanh GELU), only smaller. Its files live in ``gpt2ln/assets/tiny/``:
``model.safetensors`` and ``config.json`` in transformers' layout (so both
``gpt2ln.GPT2.from_pretrained`` and ``transformers.GPT2LMHeadModel.from_pretrained``
read them) and ``train_log.json``, the record of the run. The model card is the
book page ``book/small_model.md``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import torch
import torch.nn.functional as F

from .data import ByteTokenizer
from .model import GPT2

TINY_DIR = ("assets", "tiny")


def evaluate(model: GPT2, tokens: torch.Tensor, block_size: int, batch_size: int = 32) -> float:
    """Mean cross-entropy (nats per token) of ``model`` over all of ``tokens`` ``[N]``.

    Deterministic, no sampling: ``tokens`` is cut into consecutive, non-overlapping
    windows of ``block_size`` tokens, ``tokens[0:block_size]``,
    ``tokens[block_size:2 * block_size]``, ... (the last window holds the remaining
    ``N % block_size`` tokens, if any). Inside each window the model reads the
    window's tokens and predicts every token but the first from the ones before it
    in that window (input ``w[:-1]``, targets ``w[1:]``), so every token of
    ``tokens`` is predicted exactly once except the first of each window:
    ``N - ceil(N / block_size)`` predictions (a last window of a single token
    predicts nothing). The result is the mean of their negative log-likelihoods,
    summed in float64. ``block_size`` must be in ``2 .. model.config.n_ctx + 1``;
    use ``n_ctx`` to give each prediction up to the model's full context.

    Runs without gradients, in eval mode (the model's mode is restored after), in
    batches of ``batch_size`` windows on the model's device.
    """
    if not isinstance(model, GPT2):
        raise TypeError(f"evaluate: expected a gpt2ln.GPT2 model, got {type(model).__name__}")
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1 or tokens.is_floating_point():
        is_tensor = isinstance(tokens, torch.Tensor)
        got = f"{tuple(tokens.shape)} {tokens.dtype}" if is_tensor else type(tokens).__name__
        raise ValueError(f"evaluate: expected tokens to be a 1-D integer tensor [N], got {got}")
    for name, v, lo, hi in (
        ("block_size", block_size, 2, model.config.n_ctx + 1),
        ("batch_size", batch_size, 1, None),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
            want = f"an int in {lo}..{hi}" if hi is not None else f"an int >= {lo}"
            raise ValueError(f"evaluate: expected {name} to be {want}, got {v!r}")
    if len(tokens) < 2:
        raise ValueError(f"evaluate: need at least 2 tokens to predict one, got {len(tokens)}")

    n_full = len(tokens) // block_size
    full = tokens[: n_full * block_size].view(n_full, block_size)  # [n_full, block_size]
    rest = tokens[n_full * block_size :]
    chunks = [full[i : i + batch_size] for i in range(0, n_full, batch_size)]
    if len(rest) >= 2:
        chunks.append(rest[None, :])  # [1, N % block_size]

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for w in chunks:
                w = w.long().to(model.device)
                logits = model(w[:, :-1])  # [b, t - 1, vocab]
                nll = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1), reduction="sum"
                )
                total += float(nll.double())
                count += w[:, 1:].numel()
    finally:
        model.train(was_training)
    return total / count


def _tiny_file(name: str) -> Any:
    return resources.files("gpt2ln").joinpath(*TINY_DIR, name)


def load_tiny() -> tuple[GPT2, ByteTokenizer]:
    """The shipped small GPT-2 and its tokenizer, from the package (no network).

    Returns ``(model, ByteTokenizer())`` with the model on the CPU, in eval mode.
    """
    from safetensors.torch import load

    from .loading import config_from_json, model_from_hf_state_dict

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
    model = model_from_hf_state_dict(state_dict, config)
    return model.eval(), ByteTokenizer()


def tiny_train_log() -> dict[str, Any]:
    """The shipped ``train_log.json``: how the small GPT-2 was trained (see ``scripts/train_tiny.py``)."""
    return json.loads(_tiny_file("train_log.json").read_text())
