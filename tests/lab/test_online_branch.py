"""The online branch of chapters 9 and 10, executed against a local Hub (tests/hub_server.py).

``gpt2ln.load_gpt2_or_tiny`` is what both chapters call: GPT-2 and its tokenizer from the Hub at a
pinned revision, else the shipped small model with one line saying why. Here a server on
127.0.0.1, reached through ``HF_ENDPOINT``, stands in for the Hub: first serving a GPT-2-shaped
checkpoint made with transformers (the branch works end to end), then failing in each way the
real one can (a missing file, an unknown revision, a server that accepts and never answers, one
that stops mid-download, nothing listening, offline mode), each of which must end in the
one-line fallback within seconds. Last, chapters 9 and 10 themselves run against it.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import socket
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from hub_server import COMMIT, LocalHub, bpe_checkpoint, byte_checkpoint

import gpt2ln
import gpt2ln.model.loading as loading
from gpt2ln import GPT2
from gpt2ln.lab.pretrained import FALLBACK_LINE, TINY_SOURCE, load_gpt2_or_tiny
from gpt2ln.model.loading import GPT2_REPO, GPT2_REVISION, is_released_gpt2

REPO = "test-org/gpt2-bpe"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: a failure must be reported within this many seconds (the loader runs with timeout=1 s here)
FALLBACK_WITHIN_S = 6.0


@pytest.fixture(scope="module")
def bpe():
    """(files, transformers model, tokenizers tokenizer) of a 2-block, width-64 GPT-2 with a BPE."""
    return bpe_checkpoint()


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """An empty Hugging Face cache of its own, online mode; set HF_ENDPOINT per test."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at import
    return monkeypatch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _logits(model_fn, idx):
    with torch.no_grad():
        return model_fn(idx)


# -- the online branch works --------------------------------------------------------------------------
def test_from_pretrained_with_a_revision_reads_the_local_hub_and_matches_transformers(bpe, hub_env):
    files, hf, _ = bpe
    with LocalHub({REPO: files}) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        assert gpt2ln.hub_available(timeout=1.0)
        model = GPT2.from_pretrained(REPO, revision=COMMIT)
    assert f"GET /{REPO}/resolve/{COMMIT}/model.safetensors" in hub.requests
    assert not any("pytorch_model.bin" in r for r in hub.requests)  # safetensors only
    idx = torch.randint(0, hf.config.vocab_size, (2, 20))
    torch.testing.assert_close(_logits(model, idx), _logits(lambda i: hf(i).logits, idx), atol=1e-5, rtol=0)
    # now cached: loads again with nothing listening
    hub_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    again = GPT2.from_pretrained(REPO, revision=COMMIT)
    torch.testing.assert_close(_logits(again, idx), _logits(model, idx), atol=0, rtol=0)


def test_chapter_loader_picks_the_hub_model_and_its_bpe_tokenizer(bpe, hub_env, capsys):
    files, hf, tok = bpe
    with LocalHub({REPO: files}) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        run = load_gpt2_or_tiny(REPO, COMMIT, timeout=1.0)
    out = capsys.readouterr().out.splitlines()
    assert out == [run.message] and out[0].startswith(f"loaded {REPO}@{COMMIT[:7]} from the Hugging Face Hub")
    assert run.from_hub and not run.released and "not the released" in run.message and run.error == ""
    assert (run.model.config.n_layer, run.model.config.n_embd) == (2, 64) and not run.model.training
    text = "ROMEO:\nBut soft, what light through yonder window breaks? It is the east"
    ids = run.tokenizer.encode(text)
    assert ids == tok.encode(text).ids and len(ids) < len(text.encode())  # BPE merged some bytes
    assert run.tokenizer.decode(ids) == text
    assert len(run.tokenizer) == run.model.config.vocab_size == hf.config.vocab_size
    idx = torch.tensor([ids])
    expected = _logits(lambda i: hf(i).logits, idx)
    torch.testing.assert_close(_logits(run.model, idx), expected, atol=1e-5, rtol=0)


# -- the released weights are recognised by their bytes, not by a name ------------------------------
def test_a_checkpoint_served_as_gpt2_at_the_pinned_revision_is_not_taken_for_the_released_one(hub_env):
    with LocalHub({GPT2_REPO: byte_checkpoint()}, GPT2_REVISION) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        run = load_gpt2_or_tiny(verbose=False)  # the chapters' call: openai-community/gpt2 at the pin
    assert run.from_hub and not run.released
    assert "SHA-256 differs" in run.message and "no reference values" in run.message
    assert run.tokenizer.encode(" is") == [32, 105, 115]  # the served byte-level tokenizer
    # cached now (tokenizer.json recorded as absent from the repository): loads with no network
    hub_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    again = load_gpt2_or_tiny(verbose=False)
    assert again.from_hub and not again.released and again.tokenizer.encode(" is") == [32, 105, 115]


def test_released_gpt2_is_recognised_by_size_and_sha256_of_its_safetensors(bpe, hub_env, tmp_path):
    files, _, _ = bpe
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(files["model.safetensors"])
    assert re.fullmatch(r"[0-9a-f]{64}", loading.GPT2_SAFETENSORS_SHA256)
    assert re.fullmatch(r"[0-9a-f]{40}", GPT2_REVISION)
    assert not is_released_gpt2(weights) and not is_released_gpt2(tmp_path / "absent.safetensors")
    # pretend these bytes were the release: recognised, wherever they come from
    data = files["model.safetensors"]
    hub_env.setattr(loading, "GPT2_SAFETENSORS_BYTES", len(data))
    hub_env.setattr(loading, "GPT2_SAFETENSORS_SHA256", hashlib.sha256(data).hexdigest())
    assert is_released_gpt2(weights)
    with LocalHub({REPO: files}) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        run = load_gpt2_or_tiny(REPO, COMMIT, timeout=1.0, verbose=False)
    assert run.released and "has the released SHA-256" in run.message
    flipped = bytearray(files["model.safetensors"])
    flipped[-1] ^= 1  # same size, one bit different
    weights.write_bytes(bytes(flipped))
    assert not is_released_gpt2(weights)


# -- every failure ends in the one-line fallback, quickly -------------------------------------------------
def _assert_fallback(run, out: str, repo: str, revision: str, reason: str) -> None:
    lines = out.splitlines()
    assert lines == [run.message], f"expected one line, got {lines}"
    head, tail = FALLBACK_LINE.split("{reason}")
    head = head.format(repo=repo, rev=revision[:7])
    tail = tail.format(tiny=TINY_SOURCE)
    assert lines[0].startswith(head) and lines[0].endswith(tail), lines[0]
    plain, detail = reason
    assert plain in lines[0], (plain, lines[0])
    assert not re.search(r"[A-Za-z]*(Error|Warning|Exception)\b", lines[0]), lines[0]  # plain words
    assert re.search(detail, run.error), (detail, run.error)  # the reason, for whoever needs it
    assert not run.from_hub and not run.released and run.source == TINY_SOURCE
    assert (run.model.config.n_layer, run.model.config.vocab_size) == (4, 256)  # the shipped model
    assert run.tokenizer.encode(" is") == [32, 105, 115]


FAILURES = {
    # name: (what the server does, revision asked for,
    #        (expected plain words in the printed line, expected exception in run.error))
    "file missing (404)": (
        "no model.safetensors",
        COMMIT,
        ("a file is missing", r"EntryNotFound.*model\.safetensors"),
    ),
    "revision wrong": ("serve", "f" * 40, ("does not know this revision", r"RevisionNotFound")),
    "repository unknown": (
        "other repo",
        COMMIT,
        ("does not know this repository", r"RepositoryNotFound|404"),
    ),
    "never answers": (
        "stall",
        COMMIT,
        ("did not answer in time", r"HubStalledError: .* sent no answer within 1 s"),
    ),
    "stops mid-download": (
        "stall_body",
        COMMIT,
        ("did not answer in time", r"HubStalledError: .* nothing arrived for 2 s"),
    ),
    "nothing listening": ("closed port", COMMIT, ("no network", r"ConnectionError: .*not reachable")),
    "HF_HUB_OFFLINE": ("offline", COMMIT, ("HF_HUB_OFFLINE", r"ConnectionError: .*HF_HUB_OFFLINE")),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_each_hub_failure_falls_back_in_one_line_within_seconds(failure, bpe, hub_env, capsys):
    behaviour, revision, reason = FAILURES[failure]
    files, _, _ = bpe
    repos = {REPO: files}
    if behaviour == "no model.safetensors":
        kept = {k: v for k, v in files.items() if k != "model.safetensors"}
        repos = {REPO: kept | {"pytorch_model.bin": b"not loaded"}}
    elif behaviour == "other repo":
        repos = {"someone/else": files}
    mode = behaviour if behaviour in ("stall", "stall_body") else "serve"
    with LocalHub(repos, mode=mode) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        if behaviour == "closed port":
            hub_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
        if behaviour == "offline":
            hub_env.setenv("HF_HUB_OFFLINE", "1")
        start = time.perf_counter()
        # stall: the no-progress backstop, 120 s by default; a server that stops mid-download is
        # otherwise left to huggingface_hub's own read timeout and retries
        run = load_gpt2_or_tiny(REPO, revision, timeout=1.0, stall=2.0)
        elapsed = time.perf_counter() - start
    _assert_fallback(run, capsys.readouterr().out, REPO, revision, reason)
    with capsys.disabled():
        print(f"\n{failure}: fell back in {elapsed:.2f} s: {run.message[:160]}")
    assert elapsed < FALLBACK_WITHIN_S, f"{failure}: {elapsed:.1f} s"
    if behaviour == "no model.safetensors":
        assert not any("pytorch_model.bin" in r for r in hub.requests)  # never asks for the pickle


def test_hub_download_refuses_a_non_positive_timeout_or_stall():
    with pytest.raises(ValueError, match="timeout and stall must be positive, got 0 and 120"):
        loading.hub_download(REPO, ("config.json",), timeout=0)


# -- the chapters themselves, online ----------------------------------------------------------------------
@pytest.mark.parametrize("chapter", ["09_gpt2_forward.ipynb", "10_norms_inside_gpt2.ipynb"])
def test_chapter_loads_gpt2_only_through_the_tested_loader_at_the_pinned_revision(chapter):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOKS / chapter, as_version=4)
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    calls = re.findall(r"load_gpt2_or_tiny\(([^)]*)\)", code)
    # the pin spelled out, or the loader's defaults, which are the pin
    assert calls in (["GPT2_REPO, revision=GPT2_REVISION, timeout=3.0"], [""]), calls
    if calls == [""]:
        defaults = inspect.signature(gpt2ln.load_gpt2_or_tiny).parameters
        assert (defaults["repo_id"].default, defaults["revision"].default, defaults["timeout"].default) == (
            GPT2_REPO, GPT2_REVISION, 3.0)
    else:
        assert "from gpt2ln.model.loading import GPT2_REPO, GPT2_REVISION" in code
    for other in ("hub_available(", "AutoTokenizer", "hf_hub_download(", 'from_pretrained("'):
        assert other not in code, f"{chapter}: loads from the Hub outside load_gpt2_or_tiny ({other})"


@pytest.mark.parametrize("chapter", ["09_gpt2_forward.ipynb", "10_norms_inside_gpt2.ipynb"])
def test_chapter_runs_its_online_branch_against_the_local_hub(chapter, hub_env):
    """The chapter, top to bottom, with the local Hub serving the shipped small model (trained
    weights, so every assert holds) and a byte-level BPE tokenizer as ``openai-community/gpt2`` at
    the pinned revision: it loads them from the Hub, says they are not the released weights, and
    every cell passes."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOKS / chapter, as_version=4)
    with LocalHub({GPT2_REPO: byte_checkpoint()}, GPT2_REVISION) as hub:
        hub_env.setenv("HF_ENDPOINT", hub.url)
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
        )
        client.execute()  # a failing cell raises CellExecutionError
    assert f"GET /{GPT2_REPO}/resolve/{GPT2_REVISION}/model.safetensors" in hub.requests
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    printed = "".join(out.get("text", "") for cell in code for out in cell.get("outputs", []))
    assert f"loaded {GPT2_REPO}@{GPT2_REVISION[:7]} from the Hugging Face Hub" in printed
    assert "not the released file" in printed and "could not load" not in printed.lower()
