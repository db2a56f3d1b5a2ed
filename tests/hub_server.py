"""A local stand-in for the Hugging Face Hub, for tests, and the GPT-2-shaped checkpoints it serves.

``LocalHub`` listens on 127.0.0.1 (a free port); point ``HF_ENDPOINT`` at ``hub.url``. It answers
``HEAD`` and ``GET /{repo_id}/resolve/{revision}/{filename}`` the way ``huggingface_hub``
(0.24 to 2.x) reads the Hub: ``X-Repo-Commit``, ``ETag`` (and ``X-Linked-Etag``/``X-Linked-Size``
as for LFS files), ``Content-Length``, byte ranges; and its 404s carry ``X-Error-Code``
(``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), which ``huggingface_hub`` turns into
its own exceptions. Every repository sits at one commit, ``COMMIT`` unless given; the revisions
it knows are that commit and ``main``. Modes, to test failures:

- ``"serve"``: a working Hub;
- ``"stall"``: accepts every connection and never sends a byte;
- ``"stall_body"``: answers ``HEAD``, then on ``GET`` sends the headers and half the body, and stops.

``hub.requests`` records ``"METHOD path"`` for every request answered.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
CORPUS = Path(__file__).resolve().parents[1] / "gpt2ln" / "assets" / "shakespeare_train.txt"
TINY = Path(__file__).resolve().parents[1] / "gpt2ln" / "assets" / "tiny"
RESOLVE = re.compile(r"^/(?P<repo>.+?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class LocalHub:
    """A Hub on 127.0.0.1 serving ``repos`` (``{repo_id: {filename: bytes}}``) from memory."""

    def __init__(self, repos: dict[str, dict[str, bytes]], commit: str = COMMIT, mode: str = "serve") -> None:
        if mode not in ("serve", "stall", "stall_body"):
            raise ValueError(f"mode: expected 'serve', 'stall' or 'stall_body', got {mode!r}")
        self.repos, self.commit, self.mode = repos, commit, mode
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._server: ThreadingHTTPServer | None = None
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> LocalHub:
        if self.mode == "stall":
            self._listener = socket.create_server(("127.0.0.1", 0))
            port = self._listener.getsockname()[1]
            self._thread = threading.Thread(target=self._accept_and_hold, daemon=True)
        else:
            self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
            self._server.daemon_threads = True
            port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._listener is not None:
            self._listener.close()
        for conn in self._held:
            conn.close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> LocalHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept_and_hold(self) -> None:
        assert self._listener is not None
        self._listener.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._held.append(conn)  # accepted, never read from or answered

    # -- HTTP ------------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

        return Handler

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        if code == "EntryNotFound":  # the revision exists: the Hub names its commit
            h.send_header("X-Repo-Commit", self.commit)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if h.command == "GET":
            h.wfile.write(data)

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append(f"{h.command} {h.path}")
        m = RESOLVE.match(h.path.split("?")[0])
        if m is None:
            return self._error(h, 404, "RepoNotFound", f"no route for {h.path}")
        repo, rev, name = unquote(m["repo"]), unquote(m["rev"]), unquote(m["file"])
        if repo not in self.repos:
            return self._error(h, 404, "RepoNotFound", f"Repository Not Found: {repo}")
        if rev not in (self.commit, "main"):
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        files = self.repos[repo]
        if name not in files:
            return self._error(h, 404, "EntryNotFound", f"Entry Not Found: {name}")
        data = files[name]
        start, end = 0, len(data)
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", "") or "")
        if ranged:
            start = int(ranged[1])
            end = int(ranged[2]) + 1 if ranged[2] else len(data)
        etag = hashlib.sha256(data).hexdigest()
        h.send_response(206 if ranged else 200)
        h.send_header("X-Repo-Commit", self.commit)
        h.send_header("ETag", f'"{etag}"')
        h.send_header("X-Linked-Etag", f'"{etag}"')
        h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Type", "application/octet-stream")
        if ranged:
            h.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        h.send_header("Content-Length", str(end - start))
        h.end_headers()
        if not body:
            return None
        chunk = data[start:end]
        if self.mode == "stall_body":
            h.wfile.write(chunk[: len(chunk) // 2])
            h.wfile.flush()
            self._stop.wait()  # never sends the rest
            return None
        h.wfile.write(chunk)
        return None


# -- checkpoints ------------------------------------------------------------------------------------
def _saved_model(hf_model) -> dict[str, bytes]:
    """``config.json`` and ``model.safetensors`` as transformers' ``save_pretrained`` writes them."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        hf_model.save_pretrained(tmp, safe_serialization=True)
        return {name: (Path(tmp) / name).read_bytes() for name in ("config.json", "model.safetensors")}


def bpe_checkpoint(
    n_layer: int = 2, n_embd: int = 64, vocab_size: int = 384, n_ctx: int = 128, seed: int = 0
):
    """A GPT-2-shaped checkpoint: a randomly initialised ``transformers`` ``GPT2LMHeadModel``
    (``n_layer`` blocks, width ``n_embd``, 64 dimensions per head like GPT-2) and a byte-level BPE
    trained with ``tokenizers`` on the first 20 kB of the shipped corpus (``vocab_size`` tokens:
    256 bytes, merges, ``<|endoftext|>``). The files are the ones GPT-2's repository has:
    ``config.json``, ``model.safetensors``, ``vocab.json``, ``merges.txt``, ``tokenizer.json``,
    ``tokenizer_config.json``. Returns ``(files, hf_model, tokenizer)``: the model in eval mode and
    the ``tokenizers`` tokenizer it was saved from."""
    import tempfile

    import torch
    import transformers
    from tokenizers import ByteLevelBPETokenizer

    text = CORPUS.read_text(encoding="utf-8")[:20_000]
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([text], vocab_size=vocab_size, min_frequency=2, special_tokens=["<|endoftext|>"])
    files: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_model(tmp)
        for name in ("vocab.json", "merges.txt"):
            files[name] = (Path(tmp) / name).read_bytes()
    files["tokenizer.json"] = tok._tokenizer.to_str().encode()
    files["tokenizer_config.json"] = json.dumps({"model_max_length": n_ctx}).encode()
    eot = tok.token_to_id("<|endoftext|>")
    cfg = transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_positions=n_ctx,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=max(1, n_embd // 64),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    files |= _saved_model(hf)
    return files, hf, tok


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (openai/gpt-2 ``src/encoder.py``): printable bytes map
    to themselves, the others to characters from 256 up, in order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_checkpoint() -> dict[str, bytes]:
    """The shipped small GPT-2 (``gpt2ln/assets/tiny``: transformers' layout) with a byte-level
    GPT-2 tokenizer of 256 tokens and no merges, so a byte is a token with the byte's own id, as
    with ``gpt2ln.ByteTokenizer``. No ``tokenizer.json``: transformers builds it from
    ``vocab.json`` + ``merges.txt``. What the chapters run against when the local Hub serves
    ``openai-community/gpt2``: trained weights, so every assert of chapters 9 and 10 holds."""
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    config = {
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": None,
        "unk_token": None,
    }
    return {
        "config.json": (TINY / "config.json").read_bytes(),
        "model.safetensors": (TINY / "model.safetensors").read_bytes(),
        "vocab.json": json.dumps(vocab, ensure_ascii=False).encode(),
        "merges.txt": b"#version: 0.2\n",
        "tokenizer_config.json": json.dumps(config).encode(),
    }


def serve_forever(repos: dict[str, dict[str, bytes]], commit: str) -> None:  # pragma: no cover - manual use
    """Serve from the command line (``python tests/hub_server.py``) until interrupted."""
    with LocalHub(repos, commit) as hub:
        print(f"HF_ENDPOINT={hub.url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    from gpt2ln.model.loading import GPT2_REPO, GPT2_REVISION

    serve_forever({GPT2_REPO: byte_checkpoint()}, GPT2_REVISION)
