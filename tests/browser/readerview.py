"""A built chapter page as a reader sees it without clicking anything.

Parses ``_build/html`` (no browser needed). Cells tagged ``remove-cell``/``remove-input``/
``remove-output`` are absent from the built page already. What the page folds is excluded here:
``hide-input``/``hide-cell``/``hide-output`` parts (myst-nb puts them in ``<details>``; only the
"Show code cell ..." summary is visible) and dropdowns (an exercise's solution,
``:class: dropdown``: only its title is visible). Then it counts, in what is left, the bookkeeping
terms (they belong on book/checked.md, "How this book is checked"), the ``assert`` statements in
visible code, and the error and warning names in visible outputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Bookkeeping that a chapter page does not say (issues 26 and 27): book/checked.md says it, once.
# (name, pattern); the patterns are case-insensitive unless they start with (?-i).
TERMS: list[tuple[str, str]] = [
    ("ATEN_CPU_CAPABILITY", r"ATEN_CPU_CAPABILITY"),
    ("float path", r"float[ -]paths?\b"),
    ("portable path", r"portable (?:float )?paths?\b"),
    ("GPT2LN_ (an environment variable)", r"GPT2LN_[A-Z]"),
    ("gpt2ln.fused", r"gpt2ln\.fused"),
    ("gpt2ln.lab.fast", r"gpt2ln\.lab\.fast"),
    ("STATUS", r"(?-i:\bSTATUS\b)"),
    ("MIN_NUMEL", r"MIN_NUMEL"),
    ("~/.cache/gpt2ln", r"\.cache/gpt2ln"),
    ("worker process", r"worker[ -]process"),
    ("nbval", r"\bnbval\b"),
    ("CI", r"(?-i:\bCI\b)"),
    ("book/quotes", r"book/quotes"),
    ("git blob", r"git blob|blob id"),
    ("the version floor", r"oldest transformers|the course allows|version floors?\b"),
    ("a library's version in prose", r"\btransformers \d+\.(?:\d+|x)\b"),
    ("a test that checks", r"\ba test checks\b|\bchecked by a test\b|\btests? check"),
    ("the machine that built this page", r"machine that built this page"),
]
_TERMS = [(name, re.compile(p, re.I)) for name, p in TERMS]
ASSERT = re.compile(r"^\s*assert\b", re.M)
# Traceback, NameError, ConnectionError, UserWarning, FutureWarning, ...
ERROR_NAMES = re.compile(r"\bTraceback\b|\b[A-Z]\w*(?:Error|Warning)\b")
# a markdown table that reached the page as text: a separator row |---| (or its typographic
# dashes, which commonmark's replacements make of ---)
RAW_TABLE = re.compile(r"\|\s*:?(?:-{3,}|[—–]+)\s*:?\s*\|")


@dataclass
class ReaderView:
    page: str
    prose: str = ""  # visible text outside code cells
    code: list[str] = field(default_factory=list)  # visible code of each code cell
    outputs: list[str] = field(default_factory=list)  # visible text of each cell output

    @property
    def text(self) -> str:
        return "\n".join([self.prose, *self.code, *self.outputs])

    def terms(self) -> dict[str, int]:
        """{term: occurrences} of the bookkeeping terms the reader sees."""
        found = {}
        for name, pattern in _TERMS:
            n = len(pattern.findall(self.text))
            if n:
                found[name] = n
        return found

    def asserts(self) -> int:
        return sum(len(ASSERT.findall(code)) for code in self.code)

    def error_names(self) -> list[str]:
        return [m.group(0) for out in self.outputs for m in ERROR_NAMES.finditer(out)]


def _soup(html: str):
    from bs4 import BeautifulSoup

    return BeautifulSoup(html, "html.parser")


def _drop_folded(root) -> None:
    """Remove what a reader sees only after a click: <details> bodies (not their summary) and
    dropdown admonitions' bodies (not their title)."""
    for details in root.find_all("details"):
        for child in list(details.children):
            if getattr(child, "name", None) != "summary":
                child.extract()
    for box in root.select(".dropdown, .toggle"):
        if box.name == "details":
            continue
        for child in list(box.children):
            classes = getattr(child, "get", lambda *_: None)("class") or []
            if "admonition-title" not in classes:
                child.extract()


def reader_view(path: Path, page: str | None = None) -> ReaderView:
    soup = _soup(path.read_text(encoding="utf-8"))
    root = soup.select_one("article.bd-article") or soup.select_one("main") or soup.body or soup
    for tag in root.find_all(["script", "style", "template"]):
        tag.decompose()
    for tag in root.select("a.headerlink, .tag_remove-cell, .tag_remove-input .cell_input, "
                           ".tag_remove-output .cell_output"):
        tag.decompose()
    _drop_folded(root)
    view = ReaderView(page or path.name)
    for cell_input in root.select("div.cell_input"):
        view.code.append(cell_input.get_text())
        cell_input.decompose()
    for cell_output in root.select("div.cell_output"):
        view.outputs.append(cell_output.get_text())
        cell_output.decompose()
    view.prose = root.get_text(" ")
    return view


def raw_tables(path: Path) -> list[str]:
    """Paragraphs of the page that hold a markdown table's separator row as text."""
    soup = _soup(path.read_text(encoding="utf-8"))
    return [p.get_text()[:120] for p in soup.find_all("p") if RAW_TABLE.search(p.get_text())]


#: lines for the end of the test run (conftest.py prints them): the counts of every chapter
REPORT: list[str] = []
