"""A built chapter page as a reader sees it without clicking anything.

Parses ``_build/html`` (no browser needed). Cells tagged ``remove-cell``/``remove-input``/
``remove-output`` are absent from the built page already. What the page folds is excluded here:
``hide-input``/``hide-cell``/``hide-output`` parts (myst-nb puts them in ``<details>``; only the
"Show code cell ..." summary is visible) and dropdowns (an exercise's solution,
``:class: dropdown``: only its title is visible). Then it counts, in what is left, the bookkeeping
terms (they belong on book/checked.md, "How this book is checked"), the ``assert`` statements in
visible code, and the error and warning names in visible outputs.

Two things are looked for on every page of the site, not only the chapters: a markdown table that
reached the page as a paragraph of pipes (``raw_tables``), and a range whose two ends are the same
number, "0.14 to 0.14" (``same_number_ranges``; ``gpt2ln.classroom.span`` writes ranges that
cannot be).

Run as a script on built pages, it prints what a reader sees on each and exits 1 if a page would
fail the reader-view tests, so a chapter can be checked before it is declared in
``test_reader_view.READER_CLEAN``::

    python tests/browser/readerview.py _build/html/notebooks/07_pre_vs_post_norm.html
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
MARKDOWN_ROW = re.compile(r"^\s*\|.*\|\s*$", re.M)  # | a | b |
RAW_TABLE = re.compile(r"\|\s*:?(?:-{3,}|[—–]+)\s*:?\s*\|")
MAX_ASSERTS = 5  # visible assert statements a chapter page may show

# A range whose two ends print the same: "0.14 to 0.14", "3–3", "17.0 to 17.0 times",
# "between 2 and 2", "5 % to 5 %". The ends must be the same text (0.14 to 0.140 is not caught),
# and a number that continues (0.14 to 0.145) is not the same number.
_NUM = r"[-−+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+−]?\d+)?"
_UNIT = r"(?:\s?(?:%|×|x\b|s\b|ms\b|µs\b|GB\b|MB\b|MiB\b|nats?\b))?"
_END = r"(?![\w.]|,\d)"  # the second end stops there: 0.14 to 0.145 is a range
SAME_RANGE = re.compile(
    rf"(?<![\w.,\-−+])(?P<a>{_NUM})(?P<u>{_UNIT})(?:\s+to\s+|\s*[–—]\s*|-)(?P=a)(?P=u){_END}"
    rf"|\bbetween\s+(?P<b>{_NUM})(?P<v>{_UNIT})\s+and\s+(?P=b)(?P=v){_END}"
)


@dataclass
class ReaderView:
    page: str
    prose: str = ""  # visible text outside code cells
    prose_words: str = ""  # the same without inline code (`0.14 to 0.14` quoted as an example)
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

    def same_number_ranges(self) -> list[str]:
        """Ranges with two equal ends in the prose and the outputs (code is not read: ``3-3`` is
        arithmetic there, and an inline literal quotes, it does not state)."""
        return same_number_ranges("\n".join([self.prose_words, *self.outputs]))

    def problems(self, chapter: bool = True) -> list[str]:
        """What fails the reader-view tests on this page: for a chapter, bookkeeping terms, more
        than MAX_ASSERTS asserts and error names as well as the checks of every page."""
        found = []
        if chapter:
            if terms := self.terms():
                found.append(f"bookkeeping terms {terms}")
            if (n := self.asserts()) > MAX_ASSERTS:
                found.append(f"{n} visible asserts (at most {MAX_ASSERTS})")
            if names := self.error_names():
                found.append(f"error names in outputs {names}")
        if ranges := self.same_number_ranges():
            found.append(f"ranges with equal ends {ranges}")
        return found


def same_number_ranges(text: str) -> list[str]:
    """Every range in ``text`` whose two ends are the same number: "0.14 to 0.14", "3–3"."""
    return [m.group(0) for m in SAME_RANGE.finditer(" ".join(text.split()))]


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
    for literal in root.find_all("code"):
        literal.decompose()
    view.prose_words = root.get_text(" ")
    return view


def raw_tables(path: Path) -> list[str]:
    """Text blocks of the page (paragraphs, list items, table cells, rendered outputs) that hold a
    markdown table's separator row as text. Code cells' sources are not read. In printed output
    (``<pre>``) only a markdown table counts (rows that open and close with a pipe): a text table
    aligned in columns, ``a | b`` over ``--|--``, is meant to be read as printed."""
    soup = _soup(path.read_text(encoding="utf-8"))
    for tag in soup.find_all(["script", "style", "template"]):
        tag.decompose()
    for tag in soup.select("div.cell_input"):
        tag.decompose()
    blocks = soup.find_all(["p", "li", "td", "th", "blockquote"])
    printed = [b for b in soup.select("div.cell_output pre") if MARKDOWN_ROW.search(b.get_text())]
    found = [b for b in blocks + printed if RAW_TABLE.search(b.get_text())]
    # a list item holding a paragraph is one table, not two: keep the innermost block
    inner = [b for b in found if not any(o is not b and any(p is b for p in o.parents) for o in found)]
    return [b.get_text()[:120] for b in inner]


def site_pages(site: Path) -> list[str]:
    """Every HTML page of a built site, relative to it (``book/intro.html``, ``genindex.html``,
    ``index.html``, ...), without what Sphinx copies into folders named ``_*`` (``_static``, with
    the vendored MathJax and widget files, ``_sources``, ``_images``)."""
    pages = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site)
        if not any(part.startswith("_") for part in rel.parts[:-1]):
            pages.append(rel.as_posix())
    return pages


#: lines for the end of the test run (conftest.py prints them): the counts of every chapter
REPORT: list[str] = []
#: the user property under which test_reader_view.py hands its lines to the summary
REPORT_PROPERTY = "reader_view_report"


def main(argv: list[str]) -> int:
    """Print what a reader sees on each built page given and what would fail; 1 if anything."""
    failed = 0
    for arg in argv:
        path = Path(arg)
        view = reader_view(path)
        chapter = path.parent.name == "notebooks"
        problems = view.problems(chapter=chapter)
        if tables := raw_tables(path):
            problems.append(f"{len(tables)} markdown tables shown as text: {tables}")
        note = "" if chapter else " (not a chapter: only tables and ranges count)"
        print(f"{arg}: terms {sum(view.terms().values())}, asserts {view.asserts()}, "
              f"error names {len(view.error_names())}{note}")
        for problem in problems:
            print(f"  FAIL {problem}")
        failed |= bool(problems)
    return int(failed)


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
