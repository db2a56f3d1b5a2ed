"""Browser tests of the built book (see conftest.py for how the site is served).

One crawl from the landing page loads every reachable page once and records what
the browser saw; most tests below read that record. Skipped, with one line saying
why, when Playwright, Chromium or the built site is missing, except in CI
(``CI`` set), where that is a failure.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import unquote, urldefrag, urlsplit

import pytest
from axetools import axe_unavailable, blocking, describe, run_axe
from sitetools import (
    NON_TOC_PAGES,
    SCREENSHOTS,
    SITE,
    colab_url,
    in_ci,
    notebook_pages,
    toc_pages,
)

_AXE_REASON = axe_unavailable()
TOC_PAGES = toc_pages()
# Every page of the site: the table of contents, then the built pages outside it (index.html
# only redirects to the first page).
ALL_PAGES = TOC_PAGES + sorted(p for p in NON_TOC_PAGES - {"index.html"} if (SITE / p).is_file())
NOTEBOOK_PAGES = notebook_pages()
WIDGET_PAGE = "notebooks/01_why_normalize.html"
SCREENSHOT_PAGES = {"intro": "book/intro.html", "01_why_normalize": WIDGET_PAGE}

# Evaluated in each page once it has settled: what the page shows.
_INSPECT_JS = """() => {
  const skip = new Set(["PRE", "CODE", "SCRIPT", "STYLE", "TEXTAREA", "MJX-CONTAINER"]);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let el = node.parentElement; el; el = el.parentElement) {
        if (skip.has(el.tagName)) return NodeFilter.FILTER_REJECT;
      }
      return NodeFilter.FILTER_ACCEPT;
    },
  });
  const rawTex = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.textContent;
    for (const marker of ["\\\\(", "\\\\[", "$$"]) {
      const i = t.indexOf(marker);
      if (i >= 0) rawTex.push(t.slice(Math.max(0, i - 30), i + 40).trim());
    }
  }
  const math = Array.from(document.querySelectorAll(".math"));
  return {
    links: Array.from(document.querySelectorAll("a[href]"), a => a.href),
    ids: Array.from(document.querySelectorAll("[id], a[name]"), e => e.id || e.getAttribute("name")),
    mathElements: math.length,
    mathUnrendered: math.filter(e => !e.querySelector("mjx-container")).map(e => e.textContent.slice(0, 60)),
    mathErrors: Array.from(document.querySelectorAll("mjx-merror"), e => e.textContent.slice(0, 60)),
    rawTex: rawTex,
    images: Array.from(document.images,
                       i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0})),
    figures: Array.from(document.querySelectorAll(".cell"))
      .filter(cell => Array.from(cell.querySelectorAll(".cell_output img"))
                           .some(img => !img.closest(".jupyter-widgets")))
      .map(cell => {
        const next = cell.nextElementSibling;  // prose, not a heading, a new section or code
        const prose = next && ["P", "UL", "OL", "DL", "BLOCKQUOTE"].includes(next.tagName);
        const caption = prose ? next.textContent.trim() : "";
        const code = (cell.querySelector(".cell_input pre") || {textContent: ""}).textContent.trim();
        return {code: code.split("\\n").slice(-1)[0].slice(0, 80), caption: caption.slice(0, 80)};
      }),
    mathjaxScripts: document.querySelectorAll('script[src*="tex-mml-chtml"]').length,
    widgetScripts: document.querySelectorAll('script[src*="embed-amd"]').length,
  };
}"""


@dataclass
class PageRecord:
    """What the browser saw on one page."""

    url: str
    from_landing: bool = True  # reached by following links from index.html
    status: int | None = None
    problems: list[str] = field(default_factory=list)  # console errors, page errors, failed requests
    info: dict = field(default_factory=dict)  # the result of _INSPECT_JS
    axe: list[dict] | None = None  # axe-core's WCAG 2 A/AA violations (None: axe-core missing)


def _rel(url: str, base_url: str) -> str:
    """A same-origin URL as a path relative to the site root, without query or fragment."""
    path = unquote(urlsplit(url).path)
    return path[len(urlsplit(base_url).path) :]


def _settle(page, pending: set) -> None:
    """Wait until MathJax has typeset, widgets have rendered, fonts and images have loaded
    and no request has been in flight for a moment (Playwright's "networkidle" is unreliable)."""
    has_math = page.evaluate("() => !!document.querySelector('.math') || !!window.MathJax")
    if has_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
    has_widgets = page.evaluate(
        """() => !!document.querySelector('script[type="application/vnd.jupyter.widget-view+json"]')"""
    )
    if has_widgets:
        page.wait_for_selector(".jupyter-widgets", state="attached")
    page.evaluate("() => document.fonts.ready.then(() => true)")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
    quiet = 0
    for _ in range(100):  # at most 10 s
        quiet = 0 if pending else quiet + 1
        if quiet >= 3:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{page.url}: requests still in flight after 10 s: {sorted(pending)[:5]}")


def _redirects(url: str) -> bool:
    """Whether the built file behind url is a meta-refresh redirect (as index.html is)."""
    path = SITE / unquote(urlsplit(url).path).lstrip("/")
    return path.is_file() and 'http-equiv="Refresh"' in path.read_text(errors="replace")[:500]


def _load(context, url: str) -> tuple[object, PageRecord]:
    """Open url in a new tab, recording every error the browser reports; the caller closes the tab."""
    page = context.new_page()
    record = PageRecord(url=url)
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and record.problems.append(f"console error: {m.text} ({m.location.get('url') or 'inline'})")
        ),
    )
    page.on("pageerror", lambda e: record.problems.append(f"uncaught exception: {e}"))
    pending: set[str] = set()
    page.on("request", lambda r: pending.add(r.url))
    page.on("requestfinished", lambda r: pending.discard(r.url))

    def failed(request) -> None:
        pending.discard(request.url)
        record.problems.append(f"request failed: {request.url} ({request.failure})")

    page.on("requestfailed", failed)
    page.on(
        "response",
        lambda r: r.status >= 400 and record.problems.append(f"HTTP {r.status}: {r.url}"),
    )
    response = page.goto(url, wait_until="load")
    record.status = response.status if response else None
    if _redirects(url):  # index.html: on to the root page
        page.wait_for_url(lambda u: u != url)
        page.wait_for_load_state("load")
    _settle(page, pending)
    return page, record


@pytest.fixture(scope="session")
def crawl(context, base_url) -> dict[str, PageRecord]:
    """Every page reachable from index.html over same-origin links, loaded once each, then the
    built pages outside the table of contents that no link reaches (genindex.html, search.html)."""
    records: dict[str, PageRecord] = {}
    queue = deque([base_url + "index.html"])
    seen = {"index.html"}
    extras = deque(base_url + rel for rel in sorted(NON_TOC_PAGES) if (SITE / rel).is_file())
    while queue or extras:
        from_landing = bool(queue)
        url = queue.popleft() if queue else extras.popleft()
        if not from_landing and _rel(url, base_url) in seen:
            continue
        page, record = _load(context, url)
        record.from_landing = from_landing
        final = _rel(page.url, base_url)  # index.html redirects to the root document
        record.info = page.evaluate(_INSPECT_JS)
        if _AXE_REASON is None:
            record.axe = run_axe(page)
        page.close()
        records[_rel(url, base_url)] = records[final] = record
        seen.add(final)
        for link in record.info["links"]:
            target, _fragment = urldefrag(link)
            if not target.startswith(base_url):
                continue
            rel = _rel(target, base_url)
            if from_landing and rel.endswith(".html") and rel not in seen:
                seen.add(rel)
                queue.append(base_url + rel)
    return records


def _fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


# --- the whole site ---------------------------------------------------------


def test_every_page_in_the_toc_is_reached_from_the_landing_page(crawl):
    reached = {rel for rel, record in crawl.items() if record.from_landing}
    missing = sorted(set(TOC_PAGES) - reached)
    assert not missing, f"pages in _toc.yml that no link from index.html reaches: {missing}"


def test_every_built_page_is_in_the_toc():
    built = {
        str(p.relative_to(SITE))
        for p in SITE.rglob("*.html")
        if not p.relative_to(SITE).parts[0].startswith("_") and p.relative_to(SITE).parts[0] != "reports"
    }
    orphans = sorted(built - set(TOC_PAGES) - NON_TOC_PAGES)
    assert not orphans, f"built pages that are not in _toc.yml (orphans): {orphans}"


def test_every_internal_link_resolves(crawl, base_url):
    ids = {rel: set(rec.info["ids"]) for rel, rec in crawl.items()}
    checked: dict[str, int] = {}
    broken = []
    for source, record in crawl.items():
        for link in record.info["links"]:
            target, fragment = urldefrag(link)
            if not target.startswith(base_url):
                continue
            rel = _rel(target, base_url)
            if rel.endswith(".html") or rel.endswith("/") or rel == "":
                rel = rel if rel.endswith(".html") else rel + "index.html"
                if rel not in crawl or crawl[rel].status != 200:
                    broken.append(f"{source} -> {rel}: page not found")
                elif fragment and unquote(fragment) not in ids[rel]:
                    broken.append(f"{source} -> {rel}#{fragment}: no such anchor")
            else:
                if target not in checked:
                    checked[target] = _fetch(target)[0]
                if checked[target] != 200:
                    broken.append(f"{source} -> {rel}: HTTP {checked[target]}")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken)))


def test_pages_outside_the_toc_load_without_errors(crawl):
    problems = [f"{rel}: {p}" for rel, rec in crawl.items() if rel not in TOC_PAGES for p in rec.problems]
    assert not problems, "\n".join(problems)


def test_some_pages_have_math(crawl):
    with_math = [rel for rel, rec in crawl.items() if rec.info["mathElements"]]
    assert len(with_math) >= 2, f"expected math on the notation page and the chapters, found {with_math}"


def test_every_page_is_checked_by_axe_core(crawl):
    if _AXE_REASON:
        if in_ci():
            pytest.fail(f"axe-core is missing in CI: {_AXE_REASON}")
        pytest.skip(f"accessibility checks skipped: {_AXE_REASON}")
    unchecked = sorted(rel for rel, rec in crawl.items() if rec.axe is None)
    assert not unchecked, f"pages axe-core did not check: {unchecked}"
    assert set(TOC_PAGES) <= set(crawl), "the crawl missed pages of the table of contents"


@pytest.mark.parametrize("page", ALL_PAGES)
def test_page_has_no_serious_or_critical_wcag_violations(crawl, page):
    """axe-core (WCAG 2 A/AA) on every page of the site: no violation of impact serious or critical."""
    if _AXE_REASON:
        if in_ci():
            pytest.fail(f"axe-core is missing in CI: {_AXE_REASON}")
        pytest.skip(f"accessibility checks skipped: {_AXE_REASON}")
    found = blocking(crawl[page].axe)
    assert not found, f"{page}: axe-core finds WCAG 2 A/AA violations:\n{describe(found)}"


# --- every page in the table of contents ------------------------------------


@pytest.mark.parametrize("page", TOC_PAGES)
def test_page_loads_without_console_errors_or_failed_requests(crawl, page):
    record = crawl[page]
    assert record.status == 200, f"{page}: HTTP {record.status}"
    assert not record.problems, f"{page}:\n" + "\n".join(record.problems)
    # MathJax and the widget manager once each: twice means the `_static` folder trap.
    assert record.info["mathjaxScripts"] <= 1, f"{page}: MathJax is loaded more than once"
    assert record.info["widgetScripts"] <= 1, f"{page}: the widget manager is loaded more than once"


@pytest.mark.parametrize("page", TOC_PAGES)
def test_math_is_rendered(crawl, page):
    info = crawl[page].info
    assert not info["mathUnrendered"], f"{page}: math not typeset by MathJax: {info['mathUnrendered'][:5]}"
    assert not info["mathErrors"], f"{page}: MathJax errors: {info['mathErrors'][:5]}"
    assert not info["rawTex"], f"{page}: raw TeX left in the text: {info['rawTex'][:5]}"


@pytest.mark.parametrize("page", TOC_PAGES)
def test_every_image_loads(crawl, page):
    broken = [img["src"] for img in crawl[page].info["images"] if not img["ok"]]
    assert not broken, f"{page}: images that did not load: {broken}"


# --- notebook pages ---------------------------------------------------------


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_colab_link_opens_this_notebook(crawl, page):
    expected = colab_url(page.removesuffix(".html") + ".ipynb")
    assert expected in crawl[page].info["links"], f"{page}: no link to {expected}"


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_notebook_can_be_downloaded_as_ipynb(crawl, page, base_url):
    url = base_url + "_sources/" + page.removesuffix(".html") + ".ipynb"
    assert url in crawl[page].info["links"], f"{page}: no download link to {url}"
    status, body = _fetch(url)
    assert status == 200, f"{url}: HTTP {status}"
    notebook = json.loads(body)
    assert notebook["nbformat"] == 4 and notebook["cells"], f"{url} is not a notebook"


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_exercise_solutions_are_hidden_until_toggled(context, base_url, page):
    tab, _record = _load(context, base_url + page)
    try:
        cells = tab.locator(".cell").filter(has=tab.locator("pre", has_text="### BEGIN SOLUTION"))
        n = cells.count()
        assert n >= 1, f"{page}: no exercise solution found"
        for i in range(n):
            cell = cells.nth(i)
            source = cell.locator(".cell_input pre").first
            assert not source.is_visible(), f"{page}: solution {i + 1} of {n} is visible before its toggle"
            cell.locator("summary").first.click()
            source.wait_for(state="visible", timeout=5_000)
            assert source.is_visible(), f"{page}: solution {i + 1} of {n} still hidden after its toggle"
    finally:
        tab.close()


@pytest.mark.parametrize("page", NOTEBOOK_PAGES)
def test_every_figure_is_followed_by_its_caption(crawl, page):
    """myst-nb gives output images their file path as alt text, so the prose after a figure is its
    description: every code cell that shows a figure must be followed by text, not by code."""
    figures = crawl[page].info["figures"]
    uncaptioned = [f["code"] for f in figures if len(f["caption"]) < 20]
    assert not uncaptioned, f"{page}: figures with no text right after them (cells ending {uncaptioned})"


def test_no_dead_sliders_the_live_figure_and_its_static_fallback(context, base_url):
    """The website has no kernel, so chapter 1 shows no ipywidgets controls (they would draw but
    never answer); its live figure is there instead, with a static figure after it for print."""
    tab, record = _load(context, base_url + WIDGET_PAGE)
    try:
        assert tab.locator(".jupyter-widgets.widget-slider").count() == 0, "a kernel-only slider on the site"
        assert tab.locator(".gpt2ln-fig").count() >= 1, "no live figure on chapter 1"
        fallback = tab.evaluate(
            """() => {
              const cell = document.querySelector(".gpt2ln-fig").closest(".cell");
              for (let el = cell.nextElementSibling; el; el = el.nextElementSibling) {
                const imgs = Array.from(el.querySelectorAll(".cell_output img"));
                if (imgs.length) return imgs.every(i => i.complete && i.naturalWidth > 0);
              }
              return null;
            }"""
        )
        assert fallback is not None, "no static figure after the live figure in its section"
        assert fallback, "the static figure after the live figure did not load"
        assert not record.problems, "\n".join(record.problems)
    finally:
        tab.close()


def test_screenshots_of_two_pages(context, base_url):
    """For a person to look at: _build/screenshots/*.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for name, page in SCREENSHOT_PAGES.items():
        tab, _record = _load(context, base_url + page)
        try:
            path = SCREENSHOTS / f"{name}.png"
            tab.screenshot(path=str(path), full_page=True)
        finally:
            tab.close()
        assert path.stat().st_size > 10_000, f"{path} looks empty"
