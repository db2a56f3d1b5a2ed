"""Fixtures for the browser tests: the built site served over HTTP, one Chromium.

The site in ``_build/html`` is served on 127.0.0.1 (not ``file://``) so that every
request is observable. ``scripts/test.sh`` runs these tests after the book build,
under ``scripts/offline.sh``: with the network cut off, a page that needs a CDN
fails them.
"""

from __future__ import annotations

import pytest
from sitetools import CHROMIUM_ARGS, SITE, find_chromium, in_ci, serve, why_unavailable

#: the test modules that drive Chromium over the built site (test_reader_view.py reads the HTML only)
BROWSER_MODULES = {"test_dark_mode", "test_downloads", "test_live_figures", "test_site"}
_REASON: list[str | None] = []


@pytest.fixture(autouse=True, scope="module")  # before the modules' own module fixtures
def _needs_site_and_browser(request):
    """Each browser test skips, saying why, when Playwright, Chromium or the built site is missing;
    in CI (CI set) it fails instead: there they must run."""
    if request.module.__name__ not in BROWSER_MODULES:
        return
    if not _REASON:
        _REASON.append(why_unavailable())
    if _REASON[0]:
        if in_ci():
            pytest.fail(f"browser tests cannot run in CI: {_REASON[0]}", pytrace=False)
        pytest.skip(f"browser tests skipped: {_REASON[0]}")


@pytest.fixture(scope="session")
def base_url():
    """The built site served on a free port of 127.0.0.1, for the whole session."""
    with serve(SITE) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="session")
def context(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(30_000)
    try:
        yield ctx
    finally:
        ctx.close()


def pytest_runtest_logreport(report):
    """Collect test_reader_view.py's lines in the process that prints the summary (xdist's
    controller, or the only process)."""
    from readerview import REPORT, REPORT_PROPERTY

    if report.when == "call":
        for name, value in report.user_properties:
            if name == REPORT_PROPERTY:
                REPORT.extend(value)


def pytest_terminal_summary(terminalreporter):
    """The per-chapter counts of test_reader_view.py (what a reader sees on each chapter page)."""
    from readerview import REPORT

    if REPORT:
        terminalreporter.section("chapter pages as a reader sees them (tests/browser/test_reader_view.py)")
        for line in REPORT:
            terminalreporter.write_line(line)
