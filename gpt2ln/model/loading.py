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

import hashlib
import json
import os
import re
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote, urlparse

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


#: The released GPT-2 small on the Hugging Face Hub, pinned to one commit: chapters 9 and 10 load this.
GPT2_REPO = "openai-community/gpt2"
GPT2_REVISION = "607a30d783dfa663caf39e06633721c8d4cfcd7e"
#: What identifies the released weights: the size and SHA-256 of ``model.safetensors`` at
#: ``GPT2_REVISION`` (the Hub lists the same digest as the file's LFS id). A repo id and a revision
#: are names any server can answer to; the digest is of the bytes themselves.
GPT2_SAFETENSORS_BYTES = 548_105_171
GPT2_SAFETENSORS_SHA256 = "248dfc3911869ec493c76e65bf2fcf7f615828b0254c12b473182f0f81d3a707"
#: GPT-2's tokenizer files on the Hub (all optional: ``vocab.json`` + ``merges.txt`` or
#: ``tokenizer.json`` is enough for transformers' ``AutoTokenizer``).
TOKENIZER_FILES = ("tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.json")


def is_released_gpt2(weights: str | Path) -> bool:
    """Whether ``weights`` (a ``model.safetensors``) is byte for byte the released GPT-2 small's:
    its size, then its SHA-256, against ``GPT2_SAFETENSORS_BYTES`` / ``GPT2_SAFETENSORS_SHA256``."""
    path = Path(weights)
    if not path.is_file() or path.stat().st_size != GPT2_SAFETENSORS_BYTES:
        return False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest() == GPT2_SAFETENSORS_SHA256


def hub_endpoint() -> str:
    """The Hub's address: ``HF_ENDPOINT`` if set (read at each call), else https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_available(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers a TCP connect within ``timeout`` seconds.

    One attempt, DNS included (run in a thread so a stuck resolver cannot hang the
    caller). False at once when ``HF_HUB_OFFLINE`` is set.
    """
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    url = urlparse(hub_endpoint())
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


class HubStalledError(TimeoutError):
    """A download from the Hub made no progress for too long (the server stopped answering)."""


def _fingerprint(folders: list[Path]) -> int:
    """Changes whenever a file under ``folders`` is created, grows or is written to (size and
    modification time of every file, partial downloads included)."""
    total = 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                total = hash((total, name, st.st_size, st.st_mtime_ns))
    return total


def _answers_http(url: str, timeout: float) -> None:
    """One ``HEAD url``: ``HubStalledError`` if no HTTP answer comes within ``timeout`` s (DNS
    included). Any other outcome returns: an answer, whatever its status, or an error such as a
    refused connection or a TLS certificate urllib cannot check (``huggingface_hub``, with its own
    HTTP client and certificates, then says what it means)."""
    import urllib.error
    import urllib.request

    outcome: list[BaseException | None] = []

    def probe() -> None:
        request = urllib.request.Request(url, method="HEAD", headers={"Accept-Encoding": "identity"})
        try:
            urllib.request.urlopen(request, timeout=timeout).close()
            outcome.append(None)
        except urllib.error.HTTPError:  # an answer
            outcome.append(None)
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    error = outcome[0] if outcome else TimeoutError()
    reason = getattr(error, "reason", error)
    if isinstance(reason, TimeoutError | socket.timeout):
        raise HubStalledError(f"{url} accepted the connection but sent no answer within {timeout:g} s")


def hub_download(
    repo_id: str,
    filenames: tuple[str, ...] | list[str],
    revision: str | None = None,
    timeout: float = 3.0,
    optional: tuple[str, ...] | list[str] = (),
    cache_dir: str | Path | None = None,
    stall: float = 120.0,
) -> dict[str, Path]:
    """Files of one revision of a Hub model repository, from the local Hugging Face cache if they
    are all there (no network), else downloaded with ``huggingface_hub`` from ``hub_endpoint()``.

    Returns ``{filename: local path}``; a file in ``optional`` that the repository does not have
    (HTTP 404) is left out. Never hangs on the network:

    - ``ConnectionError`` if the endpoint does not accept a connection within ``timeout`` s;
    - ``HubStalledError`` if it accepts but sends no HTTP answer to a first ``HEAD`` within
      ``timeout`` s; each of ``huggingface_hub``'s metadata requests then waits ``timeout`` s;
    - ``HubStalledError`` once the download has made no progress (nothing written to the cache)
      for ``stall`` s. That backstop is long on purpose: ``huggingface_hub`` writes a large file
      in chunks of up to 10 MB, a minute apart on a slow line, and its own read timeout (10 s,
      then a few retries) ends a download that stops midway well within it. The abandoned
      request ends or times out in a daemon thread.

    Other errors are ``huggingface_hub``'s own (``RevisionNotFoundError``,
    ``EntryNotFoundError``, ...).
    ``cache_dir`` defaults to ``HF_HUB_CACHE`` read at call time, then ``huggingface_hub``'s default.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError

    repo_id = HUB_ALIASES.get(repo_id, repo_id)
    if timeout <= 0 or stall <= 0:
        raise ValueError(f"hub_download: timeout and stall must be positive, got {timeout} and {stall}")
    cache = cache_dir if cache_dir is not None else os.environ.get("HF_HUB_CACHE") or None
    names = list(dict.fromkeys([*filenames, *optional]))
    cached = _from_cache(repo_id, names, optional, revision, cache)
    if cached is not None:  # all in the local hub cache: no network needed
        return cached
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ConnectionError(
            f"cannot load {repo_id!r}: HF_HUB_OFFLINE is set and the files are not in the local cache"
        )
    if not hub_available(timeout):
        url = urlparse(hub_endpoint())
        raise ConnectionError(
            f"cannot load {repo_id!r}: the Hugging Face Hub at {url.scheme}://{url.netloc} is not reachable "
            f"(no connection within {timeout:g} s) and the files are not in the local cache.\n"
            "Offline, pass a local directory holding model.safetensors and config.json instead "
            "(for example one written by transformers' GPT2LMHeadModel.save_pretrained)."
        )
    endpoint = hub_endpoint()
    _answers_http(f"{endpoint}/{repo_id}/resolve/{quote(revision or 'main', safe='')}/{names[0]}", timeout)
    folders = [Path(cache or constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"]
    if getattr(constants, "HF_XET_CACHE", None):  # huggingface_hub >= 0.30 may fetch through Xet
        folders.append(Path(constants.HF_XET_CACHE))
    done: dict[str, Path] = {}
    outcome: list[BaseException] = []
    finished = threading.Event()

    def fetch() -> None:
        try:
            for name in names:
                try:
                    path = hf_hub_download(
                        repo_id,
                        name,
                        revision=revision,
                        cache_dir=cache,
                        endpoint=endpoint,
                        etag_timeout=timeout,
                    )
                    done[name] = Path(path)
                except EntryNotFoundError as e:  # a 404 for the file itself (not a local-cache miss)
                    if name not in optional or isinstance(e, LocalEntryNotFoundError):
                        raise
                    done[name] = Path()  # absent: counts as progress
        except BaseException as e:  # handed to the caller's thread
            outcome.append(e)
        finally:
            finished.set()

    worker = threading.Thread(target=fetch, name=f"hub_download {repo_id}", daemon=True)
    worker.start()
    last, last_change = (-1, -1), time.monotonic()
    while not finished.wait(min(0.5, stall / 4)):
        now, seen = time.monotonic(), (len(done), _fingerprint(folders))
        if seen != last:
            last, last_change = seen, now
        elif now - last_change > stall:
            raise HubStalledError(
                f"download of {repo_id!r} from {endpoint} stalled: nothing arrived for {stall:g} s "
                f"({len(done)} of {len(names)} files done)"
            )
    if outcome:
        raise outcome[0]
    return {name: path for name, path in done.items() if path != Path()}


def _from_cache(
    repo_id: str, names: list[str], optional, revision: str | None, cache: str | Path | None
) -> dict[str, Path] | None:
    """Every file of ``names`` from the local hub cache (an optional one may be recorded there as
    absent from the repository), or None if any is not cached."""
    from huggingface_hub import try_to_load_from_cache

    found = {}
    for name in names:
        path = try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=revision)
        if isinstance(path, str):
            found[name] = Path(path)
        elif path is None or name not in optional:  # not cached, or cached as absent but required
            return None
    return found


def _from_hub(
    repo_id: str, revision: str | None, timeout: float
) -> tuple[dict[str, torch.Tensor], GPT2Config | None]:
    files = hub_download(repo_id, ("model.safetensors", "config.json"), revision, timeout)
    return _load_safetensors(files["model.safetensors"], files["config.json"])


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
