"""Fixtures for the browser tests: the built site served over HTTP, one Chromium.

The site in ``_build/html`` is served on 127.0.0.1 (not ``file://``) so that every
request is observable. ``scripts/test.sh`` runs these tests after the book build,
under ``scripts/offline.sh``: with the network cut off, a page that needs a CDN
fails them.
"""

from __future__ import annotations

import functools
import http.server
import threading

import pytest
from sitetools import CHROMIUM_ARGS, SITE, find_chromium


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a tab closed mid-request (BrokenPipeError): the browser's events report real failures


@pytest.fixture(scope="session")
def base_url():
    """The built site served on a free port of 127.0.0.1, for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


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


def pytest_terminal_summary(terminalreporter):
    """The per-chapter counts of test_reader_view.py (what a reader sees on each chapter page)."""
    from readerview import REPORT

    if REPORT:
        terminalreporter.section("chapter pages as a reader sees them (tests/browser/test_reader_view.py)")
        for line in REPORT:
            terminalreporter.write_line(line)
