"""GPT-2 from the Hugging Face Hub, or the shipped small model: what chapters 9 and 10 run.

:func:`load_gpt2_or_tiny` tries the released GPT-2 small (``gpt2`` at a pinned revision, through
:mod:`gpt2ln.model.loading`, which never hangs on the network) and falls back, with one printed
line, to the small GPT-2 the package ships (:func:`gpt2ln.lab.tiny.load_tiny`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.gpt2 import GPT2
from ..model.loading import GPT2_REPO, GPT2_REVISION, TOKENIZER_FILES, hub_download, is_released_gpt2
from .tiny import load_tiny

#: What ``load_gpt2_or_tiny`` calls the shipped model.
TINY_SOURCE = "the small GPT-2 shipped with gpt2ln (bytes, Shakespeare)"
#: The one line ``load_gpt2_or_tiny`` prints when it falls back (``reason``: what went wrong, in plain
#: words, no exception names; the exception itself, on one line, is ``LoadedGPT2.error``).
FALLBACK_LINE = "Could not load {repo}@{rev} from the Hugging Face Hub ({reason}): using {tiny}."


@dataclass(frozen=True)
class LoadedGPT2:
    """What ``load_gpt2_or_tiny`` loaded.

    ``model``: a ``GPT2`` in eval mode. ``tokenizer``: ``encode(str) -> list[int]`` and
    ``decode(list[int]) -> str`` (transformers' GPT-2 BPE from the Hub, or ``ByteTokenizer``).
    ``source``: what ran, in words. ``from_hub``: the weights are the Hub repository's (just
    downloaded or from the local Hugging Face cache). ``released``: they are, byte for byte, the
    released GPT-2 small's (``gpt2ln.model.loading.is_released_gpt2``: the SHA-256 of its
    ``model.safetensors``), the one case where the released model's reference values apply; a
    checkpoint served under the same repo id and revision by another server is not. ``message``:
    the one line it printed (plain words). ``error``: on a fallback, the exception that caused it,
    ``Type: message`` on one line (empty when the Hub's model loaded).
    """

    model: GPT2
    tokenizer: Any
    source: str
    from_hub: bool
    released: bool
    message: str
    error: str = ""


def _plain_reason(error: BaseException) -> str:
    """What went wrong, in words a learner reads without a traceback (no exception class names)."""
    text, name = str(error), type(error).__name__
    if isinstance(error, TimeoutError):  # gpt2ln's HubStalledError, or a socket timeout
        return "the Hub did not answer in time"
    if isinstance(error, ConnectionError):
        if "HF_HUB_OFFLINE" in text:
            return "offline mode is set by HF_HUB_OFFLINE and the files are not in the local cache"
        return "no network: the Hub is not reachable"
    if "RevisionNotFound" in name:
        return "the Hub does not know this revision"
    if "RepositoryNotFound" in name:
        return "the Hub does not know this repository"
    if "EntryNotFound" in name:
        return "a file is missing from the repository"
    if isinstance(error, ImportError):
        return "transformers is not installed"
    return "the download or loading failed; run.error says why"


def _one_line(error: BaseException, limit: int = 240) -> str:
    """``Type: message`` on one line; gpt2ln's own connection and stall errors keep their first line
    (the rest is advice for ``from_pretrained`` callers)."""
    text = str(error).strip()
    if isinstance(error, ConnectionError | TimeoutError):
        text = text.split("\n")[0]
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def load_gpt2_or_tiny(
    repo_id: str = GPT2_REPO,
    revision: str | None = GPT2_REVISION,
    timeout: float = 3.0,
    cache_dir: str | Path | None = None,
    verbose: bool = True,
    stall: float = 120.0,
) -> LoadedGPT2:
    """GPT-2 and its tokenizer from the Hugging Face Hub (``repo_id`` at ``revision``; from the local
    Hugging Face cache when it holds them), else the shipped small GPT-2 (``load_tiny``).

    What chapters 9 and 10 run. The Hub files are ``config.json``, ``model.safetensors`` (the only
    weights read) and the tokenizer files, fetched by ``gpt2ln.model.loading.hub_download``: it never
    hangs (``timeout`` s to connect and for each answer, ``stall`` s without progress at most
    once a download runs), so offline or with a server that does not answer this returns within
    seconds. Any failure (no
    network, ``HF_HUB_OFFLINE``, a missing file, an unknown revision, a stalled server, no
    ``transformers``, a tokenizer that does not fit the model) falls back to the small model and
    prints one line, ``FALLBACK_LINE``, saying why in plain words (the exception, ``Type: message``,
    is the result's ``error``). On success it prints one line naming what
    loaded and whether it is the released GPT-2 small. ``verbose=False`` prints nothing.
    """
    rev = (revision or "main")[:7]
    try:
        required = ("config.json", "model.safetensors")
        files = hub_download(repo_id, required, revision, timeout, TOKENIZER_FILES, cache_dir, stall)
        from transformers import AutoTokenizer

        folder = files["model.safetensors"].parent  # the snapshot of this revision
        model = GPT2.from_pretrained(folder).eval()
        # byte-level BPE decodes exactly: no "clean-up" of spaces (transformers 4.x defaults it on)
        tokenizer = AutoTokenizer.from_pretrained(
            str(folder), local_files_only=True, clean_up_tokenization_spaces=False
        )
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(
                f"the tokenizer has {len(tokenizer)} tokens, the model's vocabulary {model.config.vocab_size}"
            )
        released = is_released_gpt2(files["model.safetensors"])
    except Exception as error:  # any failure: the shipped model, and one line saying why
        model, tokenizer = load_tiny()
        message = FALLBACK_LINE.format(repo=repo_id, rev=rev, reason=_plain_reason(error), tiny=TINY_SOURCE)
        if verbose:
            print(message)
        return LoadedGPT2(
            model,
            tokenizer,
            TINY_SOURCE,
            from_hub=False,
            released=False,
            message=message,
            error=_one_line(error),
        )
    if released:
        source = f"the released GPT-2 small ({repo_id}@{rev})"
        how = "its model.safetensors has the released SHA-256"
    else:
        source = f"{repo_id}@{rev}, not the released GPT-2 small weights"
        how = "its model.safetensors is not the released file (SHA-256 differs): no reference values apply"
    message = (
        f"loaded {repo_id}@{rev} from the Hugging Face Hub (or its local cache): {how}; "
        f"{model.config.n_layer} blocks, width {model.config.n_embd}, vocabulary {model.config.vocab_size:,}"
    )
    if verbose:
        print(message)
    return LoadedGPT2(model, tokenizer, source, from_hub=True, released=released, message=message)
