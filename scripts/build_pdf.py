"""Print the built book into one PDF, ``_build/html/gpt2ln.pdf`` (scripts/build_book.sh calls it).

    python scripts/build_pdf.py [--site _build/html] [--out _build/html/gpt2ln.pdf]

Chromium (the system one the browser tests drive through Playwright) prints every page of
``_toc.yml``, in its order, from the built site served on 127.0.0.1, once MathJax has typeset
the math, the fonts and images have loaded and the live figures have drawn their first state;
``pypdf`` merges the pages into one file with an outline (a bookmark per part and chapter),
page numbers, and links between chapters that point into the PDF. Print CSS
(``PRINT_CSS``) hides the navigation and the buttons and opens collapsed code (exercise
solutions), since a reader cannot click on paper.

Why this route: the pages are already built and tested in this browser (math, figures, live
figures), so the PDF shows what the site shows, with no second toolchain; Jupyter Book's
``pdfhtml`` downloads its own browser at run time (fails offline), and its LaTeX route needs
a TeX installation of several hundred MB and renders neither the live figures nor the
widget snapshots.

With no Playwright or no Chromium it prints why and exits 0 (the site has no PDF), except in
CI (``CI`` set), where it exits 1.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
from booktoc import ROOT, Doc, chapters
from localsite import CHROMIUM_ARGS, find_chromium, serve

PDF_NAME = "gpt2ln.pdf"
# Added to every page before printing (the theme's own print CSS already hides the sidebars).
PRINT_CSS = """
@page { size: A4; margin: 14mm 12mm 16mm 12mm; }
@media print {
  html { font-size: 14px; }
  .bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
  .bd-footer-article, .prev-next-area, .header-article-items, .skip-link, #pst-back-to-top,
  .theme-switch-button, .search-button, .toggle-button, .gpt2ln-downloads, a.headerlink,
  button.copybtn, details.hide > summary { display: none !important; }
  .bd-main .bd-content { margin-left: 0 !important; }
  .bd-main .bd-content .bd-article-container, .bd-page-width { max-width: none !important; }
  .bd-article { padding: 0 !important; }
  div.cell_output img, figure img { max-width: 100% !important; height: auto; break-inside: avoid; }
  .gpt2ln-fig { break-inside: avoid; }
  .gpt2ln-fig .g2-diagram svg { min-width: 0 !important; }
  pre { white-space: pre-wrap !important; word-break: break-word; }
}
"""
# Open what a click would open on the site: collapsed cells (exercise solutions) and dropdowns.
_OPEN_JS = """() => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  document.querySelectorAll(".toggle-hidden").forEach(e => e.classList.remove("toggle-hidden"));
  document.querySelectorAll(".dropdown.toggle, .toggle.admonition").forEach(e => {
    e.classList.remove("toggle-hidden");
  });
}"""


def _settle(page) -> None:
    """Wait for MathJax, the widget snapshots, the live figures, fonts and images."""
    if page.evaluate("() => !!document.querySelector('.math') || !!window.MathJax"):
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
    if page.evaluate(
        "() => !!document.querySelector('script[type=\"application/vnd.jupyter.widget-view+json\"]')"
    ):
        page.wait_for_selector(".jupyter-widgets", state="attached")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.gpt2ln-fig')).every(f => f.matches('.g2-live'))"
    )
    page.evaluate(_OPEN_JS)
    page.add_style_tag(content=PRINT_CSS)
    page.emulate_media(media="print")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    # lazy images load only near the viewport: load them all
    page.evaluate(
        "() => document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })"
    )
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    if page.evaluate("() => !!window.MathJax && !!MathJax.typesetPromise"):
        page.evaluate("() => MathJax.typesetPromise()")  # math inside the opened cells


def _print_pages(site: Path, docs: list[Doc]) -> tuple[list[bytes], str]:
    """Each document printed by Chromium, and the base URL they were served from."""
    from playwright.sync_api import sync_playwright

    pdfs = []
    with serve(site) as base:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1000, "height": 1400}, color_scheme="light")
            context.set_default_timeout(60_000)
            for doc in docs:
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                response = page.goto(base + doc.page, wait_until="load")
                if response is None or response.status != 200:
                    raise RuntimeError(f"{doc.page}: HTTP {response.status if response else 'no response'}")
                _settle(page)
                if errors:
                    raise RuntimeError(f"{doc.page}: the page raised {errors[:3]}")
                pdfs.append(page.pdf(prefer_css_page_size=True, print_background=True, outline=False))
                page.close()
            browser.close()
    return pdfs, base


def _chapter_titles(site: Path, docs: list[Doc]) -> list[str]:
    """Each page's title, from its built HTML's <title> (``Title — book``)."""
    import html
    import re

    titles = []
    for doc in docs:
        text = (site / doc.page).read_text(encoding="utf-8", errors="replace")
        match = re.search(r"<title>(.*?)</title>", text, re.S)
        title = html.unescape(match.group(1)).strip() if match else doc.path
        titles.append(re.split(r"\s+[—–-]\s+gpt2ln", title)[0].strip())
    return titles


def _number_pages(writer) -> None:
    """Stamp ``n / N`` at the bottom centre of every page (Helvetica, one of PDF's built-in fonts).

    The page's own content streams are left as Chromium wrote them (compressed), wrapped in
    ``q``/``Q`` so that the number is drawn in the page's default coordinates."""
    from pypdf.generic import ArrayObject, DecodedStreamObject, DictionaryObject, NameObject

    def stream(data: bytes):
        obj = DecodedStreamObject()
        obj.set_data(data)
        return writer._add_object(obj)

    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
                NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
            }
        )
    )
    save = stream(b"q\n")
    total = len(writer.pages)
    for number, page in enumerate(writer.pages, start=1):
        box = page.mediabox
        label = f"{number} / {total}"
        x = float(box.left) + float(box.width) / 2 - 2.2 * len(label)
        y = float(box.bottom) + 20
        resources = page[NameObject("/Resources")].get_object()
        fonts = resources.get("/Font")
        if fonts is None:
            fonts = DictionaryObject()
            resources[NameObject("/Font")] = fonts
        fonts.get_object()[NameObject("/G2N")] = font
        contents = page.raw_get("/Contents")  # a reference to a stream, or an array of references
        parts = list(contents.get_object()) if isinstance(contents.get_object(), list) else [contents]
        text = stream(f"\nQ q 0.35 g BT /G2N 8 Tf {x:.1f} {y:.1f} Td ({label}) Tj ET Q\n".encode())
        page[NameObject("/Contents")] = ArrayObject([save, *parts, text])


def _explicit_destinations(reader) -> int:
    """Chromium links a page's anchors (``href="#exercises"``) through named destinations, and every
    chapter names its own ``exercises``: merged, the names would collide and a link could jump into
    another chapter. Rewrite each such link to the explicit place (page, x, y) before merging; the
    merge maps those pages to the merged ones. Returns how many links it rewrote."""
    from pypdf.generic import ArrayObject, FloatObject, NameObject, NullObject

    named = reader.named_destinations
    rewritten = 0
    for page in reader.pages:
        for ref in page.get("/Annots") or []:
            annot = ref.get_object()
            dest = annot.get("/Dest")
            if dest is None or isinstance(dest, list) or str(dest) not in named:
                continue
            target = named[str(dest)]
            annot[NameObject("/Dest")] = ArrayObject(
                [
                    target.raw_get("/Page"),
                    NameObject("/XYZ"),
                    FloatObject(target.left or 0),
                    FloatObject(target.top or 0),
                    NullObject(),
                ]
            )
            rewritten += 1
    return rewritten


def _link_chapters(writer, base: str, starts: dict[str, int]) -> tuple[int, int]:
    """Links to pages of the book become jumps inside the PDF (to the chapter's first page);
    links to other files of the served site (downloads, sources) are dropped: they pointed at the
    print server. Returns (links redirected, links dropped)."""
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject

    moved = dropped = 0
    for page in writer.pages:
        annots = page.get("/Annots")
        if annots is None:
            continue
        kept = ArrayObject()
        for ref in annots.get_object():
            annot = ref.get_object()
            action = annot.get("/A")
            uri = action.get_object().get("/URI") if action is not None else None
            if uri is None or not str(uri).startswith(base):
                kept.append(ref)
                continue
            target, _fragment = urldefrag(str(uri))
            rel = unquote(urlsplit(target).path).lstrip("/")
            if rel in starts:
                annot[NameObject("/A")] = DictionaryObject(
                    {
                        NameObject("/S"): NameObject("/GoTo"),
                        NameObject("/D"): ArrayObject(
                            [writer.pages[starts[rel]].indirect_reference, NameObject("/Fit")]
                        ),
                    }
                )
                kept.append(ref)
                moved += 1
            else:
                dropped += 1
        page[NameObject("/Annots")] = kept
    return moved, dropped


def build_pdf(site: Path, out: Path, root: Path = ROOT) -> dict:
    """Print every page of the table of contents into ``out``; returns what it did."""
    from pypdf import PdfReader, PdfWriter

    started = time.perf_counter()
    docs = chapters(root)
    missing = [d.page for d in docs if not (site / d.page).is_file()]
    if missing:
        raise FileNotFoundError(f"not built in {site}: {missing} (run scripts/build_book.sh first)")
    pdfs, base = _print_pages(site, docs)
    titles = _chapter_titles(site, docs)
    writer = PdfWriter()
    starts: dict[str, int] = {}
    parts: dict[str, object] = {}
    outline = []
    anchors = 0
    for doc, title, data in zip(docs, titles, pdfs, strict=True):
        start = len(writer.pages)
        starts[doc.page] = start
        reader = PdfReader(io.BytesIO(data))
        anchors += _explicit_destinations(reader)
        writer.append(reader, import_outline=False)
        parent = None
        if doc.part:
            if doc.part not in parts:
                parts[doc.part] = writer.add_outline_item(title=doc.part, page_number=start)
            parent = parts[doc.part]
        outline.append((title, start, len(writer.pages) - start))
        writer.add_outline_item(title=title, page_number=start, parent=parent)
    moved, dropped = _link_chapters(writer, base, starts)
    _number_pages(writer)
    book_title = titles[0]
    writer.add_metadata(
        {"/Title": book_title, "/Author": "The gpt2ln authors", "/Creator": "scripts/build_pdf.py"}
    )
    writer.page_mode = "/UseOutlines"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".pdf.tmp")
    with open(tmp, "wb") as f:
        writer.write(f)
    tmp.replace(out)
    return {
        "path": out,
        "pages": len(writer.pages),
        "bytes": out.stat().st_size,
        "seconds": time.perf_counter() - started,
        "chapters": outline,
        "links_moved": moved,
        "links_dropped": dropped,
        "links_in_chapters": anchors,
    }


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the built book into one PDF.")
    parser.add_argument(
        "--site", default=str(ROOT / "_build" / "html"), help="the built HTML (default _build/html)"
    )
    parser.add_argument("--out", help=f"the PDF (default SITE/{PDF_NAME}, which the site links)")
    args = parser.parse_args(argv)
    site = Path(args.site).resolve()
    out = Path(args.out) if args.out else site / PDF_NAME
    why = None
    try:
        import playwright  # noqa: F401
    except ImportError:
        why = "the Python package playwright is missing (bash scripts/setup.sh installs it)"
    if why is None and find_chromium() is None:
        why = "no Chromium (as root: apt-get install chromium; or set CHROMIUM=/path/to/chromium)"
    if why:
        print(f"build_pdf: no PDF: {why}", file=sys.stderr)
        return 1 if _in_ci() else 0
    result = build_pdf(site, out)
    for title, start, n in result["chapters"]:
        print(f"  p. {start + 1:>3}  ({n:>2} pages)  {title}")
    print(
        f"build_pdf: {result['path']}: {result['pages']} pages, {result['bytes'] / 1e6:.1f} MB, "
        f"{len(result['chapters'])} chapters, {result['links_moved']} links between chapters and "
        f"{result['links_in_chapters']} within them, "
        f"in {result['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
