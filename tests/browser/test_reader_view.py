"""The built chapter pages as a reader sees them: the lesson, not the proof (issues 26, 27).

Reads ``_build/html`` with BeautifulSoup (no browser): hidden cells are absent from the page and
folded parts (hide-input/hide-cell/hide-output, dropdowns) are left out (``readerview.py``).
For every chapter in ``READER_CLEAN`` it fails on

* a bookkeeping term (``readerview.TERMS``: ATEN_CPU_CAPABILITY, float path, GPT2LN_, STATUS,
  ...): book/checked.md, "How this book is checked", says those things;
* more than ``MAX_ASSERTS`` visible ``assert`` statements;
* an error or warning name (Traceback, ...Error, ...Warning) in a visible output.

Chapters are rewritten one at a time: declare a chapter in ``READER_CLEAN`` when it passes (check
it first with ``python tests/browser/readerview.py _build/html/notebooks/NN_x.html``, which
applies the same rules, ``ReaderView.problems``). The counts of all chapters print at the end of
the run either way.

Every page of the site (every HTML page under ``_build/html``, not only the table of contents) is
checked for a markdown table that reached it as a paragraph of pipes, and for a range whose two
ends are the same number ("0.14 to 0.14": issue 27; ``gpt2ln.classroom.span`` prints one number).
"""

from __future__ import annotations

import pytest
from readerview import MAX_ASSERTS, REPORT_PROPERTY, raw_tables, reader_view, site_pages
from sitetools import SITE, in_ci, notebook_pages, toc_pages

#: chapters whose built pages must pass, by the issue that rewrote them for the reader. Declare
#: more by adding an entry ({27: [6, 7, ...]} or a range); a chapter may be declared once only.
CLEAN_BY_ISSUE: dict[int, list[int] | range] = {
    26: range(1, 6),  # chapters 1-5
    27: range(6, 12),  # chapters 6-11
}
READER_CLEAN: list[int] = sorted(n for chapters in CLEAN_BY_ISSUE.values() for n in chapters)

if not (SITE / "index.html").is_file():
    if in_ci():
        raise RuntimeError(f"the book is not built (no {SITE}/index.html): bash scripts/build_book.sh")
    pytest.skip(f"the book is not built (no {SITE}/index.html)", allow_module_level=True)

CHAPTERS = {int(page.split("/")[-1][:2]): page for page in notebook_pages()}


def test_every_declared_chapter_exists_and_is_declared_once():
    assert set(READER_CLEAN) <= set(CHAPTERS), sorted(set(READER_CLEAN) - set(CHAPTERS))
    assert len(READER_CLEAN) == len(set(READER_CLEAN)), READER_CLEAN


def test_report_the_counts_of_every_chapter(record_property):
    """Always passes; prints (at the end of the run) what each chapter's reader sees. The lines go
    through the test's report (``record_property``), so they reach the summary from an xdist worker."""
    lines = [f"{'chapter':<38} {'terms':>5} {'asserts':>7} {'errors':>6}  clean?  terms seen"]
    for n, page in sorted(CHAPTERS.items()):
        view = reader_view(SITE / page, page)
        terms, asserts, errors = view.terms(), view.asserts(), view.error_names()
        ok = not view.problems()
        flag = ("yes" if ok else "no") + (" (declared)" if n in READER_CLEAN else "")
        seen = ", ".join(f"{t} x{k}" for t, k in terms.items())
        lines.append(f"{page:<38} {sum(terms.values()):>5} {asserts:>7} {len(errors):>6}  {flag:<6}  {seen}")
    record_property(REPORT_PROPERTY, lines)


@pytest.mark.parametrize("n", READER_CLEAN)
def test_chapter_page_shows_no_bookkeeping(n):
    terms = reader_view(SITE / CHAPTERS[n]).terms()
    assert not terms, f"{CHAPTERS[n]} shows bookkeeping {terms}: it belongs on book/checked.md"


@pytest.mark.parametrize("n", READER_CLEAN)
def test_chapter_page_shows_at_most_a_few_asserts(n):
    asserts = reader_view(SITE / CHAPTERS[n]).asserts()
    assert asserts <= MAX_ASSERTS, (
        f"{CHAPTERS[n]} shows {asserts} assert statements (at most {MAX_ASSERTS}): move the checks "
        "that do not teach into a remove-cell cell (#@title Checks: ..., cellView form)"
    )


@pytest.mark.parametrize("n", READER_CLEAN)
def test_chapter_outputs_show_no_error_or_warning_names(n):
    names = reader_view(SITE / CHAPTERS[n]).error_names()
    assert not names, f"{CHAPTERS[n]}'s visible outputs name {names}"


PAGES = site_pages(SITE)


def test_every_page_of_the_table_of_contents_is_read():
    assert PAGES and set(toc_pages()) <= set(PAGES), sorted(set(toc_pages()) - set(PAGES))


@pytest.mark.parametrize("page", PAGES)
def test_no_markdown_table_renders_as_a_paragraph_of_pipes(page):
    found = raw_tables(SITE / page)
    assert not found, (
        f"{page}: a markdown table reached the page as text (_config.yml's nb_render_markdown_format "
        f"must be myst, or emit HTML): {found}"
    )


@pytest.mark.parametrize("page", PAGES)
def test_no_range_has_two_equal_ends(page):
    found = reader_view(SITE / page, page).same_number_ranges()
    assert not found, (
        f"{page} shows a range whose ends are the same number {found}: write one number "
        "(gpt2ln.classroom.span(lo, hi, fmt) does), or say why the spread is not there"
    )
