"""What the site offers to download, after the book build (scripts/build_book.sh): the whole
book as one PDF (scripts/build_pdf.py) and the notebooks archives (scripts/build_archives.py),
linked from the intro, the left sidebar of every page, how_to_use and instructors.

The PDF is read with pypdf: a bookmark and at least one page per chapter of _toc.yml in its
order, each chapter's title in its text, at least as many images as the chapter's page has,
math typeset (no TeX left) and live figures drawn (not their no-JavaScript fallback text).
Skipped (failed in CI) when Playwright, Chromium or the built site is missing: see conftest.py.
"""

from __future__ import annotations

import html
import re
import unicodedata
import zipfile
from html.parser import HTMLParser

import pytest
from sitetools import SITE, toc_pages

PDF = SITE / "gpt2ln.pdf"
ARCHIVES = ["gpt2ln-notebooks.zip", "gpt2ln-student-notebooks.zip"]
TOC_PAGES = toc_pages()


class _Article(HTMLParser):
    """The parts of a built page's <article> the PDF must show: its title (the first <h1>), its
    images, and the text of its live figures (caption, and the fallback shown without JavaScript)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0  # inside <article class="bd-article"> when > 0
        self.images: set[str] = set()  # the files its <img> show (an image shown twice counts once)
        self.title = ""
        self._in = None  # what the current text belongs to: "h1", "caption", "fallback"
        self._stack: list[str] = []
        self.captions: list[str] = []
        self.fallbacks: list[str] = []
        self.math: list[str] = []  # the TeX of its math, as MathJax finds it: "\\(x^2\\)"

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "article" and "bd-article" in classes:
            self.depth = 1
            return
        if not self.depth:
            return
        if tag not in ("img", "br", "hr", "input", "meta", "link", "source", "wbr"):
            self.depth += 1
            self._stack.append(self._in or "")
        if tag == "img":
            self.images.add(a.get("src") or "")
        elif tag == "h1" and not self.title and self._in is None:
            self._in = "h1"
        elif "g2-caption" in classes:
            self._in = "caption"
            self.captions.append("")
        elif "g2-fallback" in classes:
            self._in = "fallback"
            self.fallbacks.append("")
        elif "math" in classes and self._in is None:
            self._in = "math"
            self.math.append("")

    def handle_endtag(self, tag):
        if not self.depth or tag in ("img", "br", "hr", "input", "meta", "link", "source", "wbr"):
            return
        self.depth -= 1
        if self._stack:
            previous = self._stack.pop()
            self._in = previous or None

    def handle_data(self, data):
        if not self.depth or self._in is None:
            return
        if self._in == "h1":
            self.title += data
        elif self._in == "caption":
            self.captions[-1] += data
        elif self._in == "fallback":
            self.fallbacks[-1] += data
        elif self._in == "math":
            self.math[-1] += data


def _article(page: str) -> _Article:
    parser = _Article()
    parser.feed((SITE / page).read_text(encoding="utf-8"))
    parser.title = re.sub(r"\s+", " ", parser.title.replace("#", "")).strip()
    return parser


def _words(text: str) -> str:
    """Text compared on letters and digits only: PDF extraction splits lines, hyphens and spaces."""
    return re.sub(r"[^0-9a-z]+", "", unicodedata.normalize("NFKC", text).lower())  # NFKC: "ﬁ" -> "fi"


def _image_ids(page) -> set[int]:
    """The image objects a PDF page draws (Chromium embeds an image shown twice once), found in
    its resources and those of the forms it draws."""
    found: set[int] = set()

    def walk(resources, depth=0):
        xobjects = (resources or {}).get("/XObject") if resources is not None else None
        if xobjects is None or depth > 8:
            return
        for ref in xobjects.get_object().values():
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                found.add(ref.idnum if hasattr(ref, "idnum") else id(obj))
            elif obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"), depth + 1)

    walk(page.get("/Resources"))
    return found


@pytest.fixture(scope="module")
def pdf():
    from pypdf import PdfReader

    assert PDF.is_file(), f"no {PDF}: scripts/build_book.sh writes it after the HTML (scripts/build_pdf.py)"
    return PdfReader(PDF)


@pytest.fixture(scope="module")
def chapters(pdf) -> dict[str, dict]:
    """Each page of the table of contents -> its bookmark's title, first page, page count and text,
    matched in order with the PDF's bookmarks that point at a chapter (part bookmarks skipped)."""

    def flatten(items, depth=0):
        for item in items:
            if isinstance(item, list):
                yield from flatten(item, depth + 1)
            else:
                yield item.title, pdf.get_destination_page_number(item), depth

    marks = list(flatten(pdf.outline))
    # a part's bookmark is followed by a nested list: its chapters (one level deeper)
    leaves = [m for i, m in enumerate(marks) if not (i + 1 < len(marks) and marks[i + 1][2] > m[2])]
    assert len(leaves) == len(TOC_PAGES), (
        f"{len(leaves)} chapter bookmarks for {len(TOC_PAGES)} pages in _toc.yml: {[m[0] for m in leaves]}"
    )
    starts = [start for _title, start, _depth in leaves] + [len(pdf.pages)]
    result = {}
    for page, (title, start, _depth), end in zip(TOC_PAGES, leaves, starts[1:], strict=True):
        text = "\n".join(pdf.pages[i].extract_text() or "" for i in range(start, end))
        n_images = len(set().union(*(_image_ids(pdf.pages[i]) for i in range(start, end))))
        result[page] = {
            "title": title,
            "start": start,
            "pages": end - start,
            "text": text,
            "images": n_images,
        }
    return result


def test_the_pdf_is_one_file_of_many_pages(pdf):
    size = PDF.stat().st_size
    assert len(pdf.pages) >= len(TOC_PAGES), f"{len(pdf.pages)} pages for {len(TOC_PAGES)} chapters"
    assert 100_000 < size < 200_000_000, f"{PDF}: {size} bytes"
    assert (pdf.metadata or {}).get("/Title"), "the PDF has no title in its metadata"


def test_every_chapter_has_a_bookmark_in_toc_order_and_at_least_one_page(chapters):
    starts = [c["start"] for c in chapters.values()]
    assert starts == sorted(starts), f"chapters out of order: {starts}"
    empty = [page for page, c in chapters.items() if c["pages"] < 1]
    assert not empty, f"chapters with no page: {empty}"


@pytest.mark.parametrize("page", TOC_PAGES)
def test_chapter_title_is_its_bookmark_and_in_its_text(chapters, page):
    title = _article(page).title
    assert title, f"{page}: no <h1> in the built page"
    chapter = chapters[page]
    assert _words(chapter["title"]) == _words(title), (
        f"{page}: bookmark {chapter['title']!r}, page title {title!r}"
    )
    assert _words(title) in _words(chapter["text"]), f"{page}: the title {title!r} is not in its pages' text"


@pytest.mark.parametrize("page", TOC_PAGES)
def test_chapter_has_at_least_the_images_of_its_page(chapters, page):
    expected = len(_article(page).images)
    got = chapters[page]["images"]
    assert got >= expected, (
        f"{page}: {got} images in its {chapters[page]['pages']} PDF pages, {expected} on the page"
    )


@pytest.mark.parametrize("page", TOC_PAGES)
def test_chapter_math_is_typeset_in_the_pdf(chapters, page):
    """No formula of the page is left as its TeX source (what a page shows when MathJax did not run)."""
    text = re.sub(r"\s+", "", chapters[page]["text"])
    raw = [m for m in _article(page).math if re.sub(r"\s+", "", m) in text and "\\" in m]
    assert not raw, f"{page}: TeX left in the PDF's text: {raw[:5]}"


@pytest.mark.parametrize("page", [p for p in TOC_PAGES if (SITE / p).is_file() and _article(p).captions])
def test_live_figures_are_drawn_in_the_pdf(chapters, page):
    """Each live figure is printed in its first state: its caption is there, and its fallback
    text (shown only when the figure's script did not run) is not."""
    article = _article(page)
    text = _words(chapters[page]["text"])
    for caption in article.captions:
        assert _words(html.unescape(caption)) in text, f"{page}: live figure {caption!r} is not in the PDF"
    for fallback in article.fallbacks:
        assert _words(fallback)[:60] not in text, (
            f"{page}: a live figure printed its fallback: {fallback[:80]!r}"
        )


def test_the_pdf_has_an_image_for_every_figure_of_the_book(chapters):
    total_html = sum(len(_article(page).images) for page in TOC_PAGES)
    total_pdf = sum(c["images"] for c in chapters.values())
    assert total_html >= 20, f"only {total_html} images in the built pages"
    assert total_pdf >= total_html


def test_links_in_the_pdf_stay_in_it_or_leave_for_the_web(pdf, chapters):
    """A link between pages of the book jumps inside the PDF, a link to a section of the same page
    stays in its chapter, and no link points at the server the pages were printed from."""
    import bisect

    starts = sorted(c["start"] for c in chapters.values())
    page_index = {p.indirect_reference.idnum: i for i, p in enumerate(pdf.pages)}
    local, inside, problems = 0, 0, []
    for i, page in enumerate(pdf.pages):
        for ref in page.get("/Annots") or []:
            annot = ref.get_object()
            action = annot.get("/A")
            action = action.get_object() if action is not None else {}
            uri = str(action.get("/URI", ""))
            if uri:
                if not uri.startswith(("https://", "http://", "mailto:")) or "127.0.0.1" in uri:
                    problems.append(f"p. {i + 1}: a link to {uri}")
                continue
            dest = annot.get("/Dest", action.get("/D"))
            if dest is None or not isinstance(dest, list):
                problems.append(f"p. {i + 1}: a link with no explicit destination: {dest!r}")
                continue
            target = page_index.get(dest[0].idnum)
            if target is None:
                problems.append(f"p. {i + 1}: a link to a page that is not in the PDF")
            elif "/Dest" in annot:  # an anchor of the same page
                local += 1
                if bisect.bisect_right(starts, target) != bisect.bisect_right(starts, i):
                    problems.append(f"p. {i + 1}: a link to a section of its page lands in another chapter")
            else:
                inside += 1
    assert not problems, "\n".join(problems[:10])
    assert inside >= 50 and local >= 20, f"{inside} links between chapters, {local} within them"


def test_the_pages_have_formulas_and_live_figures_for_the_pdf_checks_to_check():
    math = {page: len(_article(page).math) for page in TOC_PAGES}
    assert sum(math.values()) >= 100 and math["book/notation.html"] >= 10, math
    assert sum(len(_article(page).captions) for page in TOC_PAGES) >= 5


# --- links from the site ------------------------------------------------------------


def _hrefs(page: str) -> list[str]:
    return re.findall(r'<a\b[^>]*\bhref="([^"]+)"', (SITE / page).read_text(encoding="utf-8"))


def _relative_to_root(page: str, name: str) -> str:
    return "../" * page.count("/") + name


@pytest.mark.parametrize("page", TOC_PAGES)
def test_every_page_links_the_pdf_and_the_notebooks_in_its_sidebar(page):
    sidebar = (SITE / page).read_text(encoding="utf-8").split('class="gpt2ln-downloads', 1)
    assert len(sidebar) == 2, f"{page}: no Downloads section in the left sidebar"
    links = re.findall(r'href="([^"]+)"', sidebar[1].split("</nav>", 1)[0])
    for name in ("gpt2ln.pdf", "gpt2ln-notebooks.zip"):
        assert _relative_to_root(page, name) in links, f"{page}: the sidebar does not link {name}: {links}"


@pytest.mark.parametrize(
    ("page", "names"),
    [
        ("book/intro.html", ["gpt2ln.pdf", "gpt2ln-notebooks.zip"]),
        ("book/how_to_use.html", ["gpt2ln.pdf", "gpt2ln-notebooks.zip"]),
        ("book/instructors.html", ["gpt2ln-student-notebooks.zip", "gpt2ln-notebooks.zip"]),
    ],
)
def test_page_text_links_the_downloads(page, names):
    body = (
        (SITE / page).read_text(encoding="utf-8").split('class="bd-article"', 1)[1].split("</article>", 1)[0]
    )
    links = re.findall(r'href="([^"]+)"', body)
    for name in names:
        assert _relative_to_root(page, name) in links, f"{page}: its text does not link {name}"


@pytest.mark.parametrize("name", ARCHIVES)
def test_the_site_carries_the_notebooks_archive(name):
    path = SITE / name
    assert path.is_file(), f"no {path}: scripts/build_book.sh writes it (scripts/build_archives.py)"
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert zf.testzip() is None, f"{name}: a corrupt entry"
    top = name.removesuffix(".zip")
    notebooks = [n for n in names if n.startswith(f"{top}/notebooks/") and n.endswith(".ipynb")]
    expected = [p for p in TOC_PAGES if p.startswith("notebooks/")]
    assert len(notebooks) == len(expected), f"{name}: {len(notebooks)} notebooks, {len(expected)} chapters"
    for required in ("README.md", "requirements.txt"):
        assert f"{top}/{required}" in names, f"{name}: no {required}"
