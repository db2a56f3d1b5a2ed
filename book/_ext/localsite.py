"""The built site on this machine: a Chromium to open it and a quiet local HTTP server for it.

Shared by ``scripts/build_pdf.py`` (which prints the site to the PDF) and ``tests/browser`` (which
checks it): both add ``book/_ext`` to ``sys.path`` and import from here, so neither imports the
other. The site is served over HTTP on 127.0.0.1 (not ``file://``), so that every request a page
makes is observable. Not a Sphinx extension: the build never loads it.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Headless Chromium as root on a machine with no network: no sandbox, no GPU, and none of the
#: background requests (updates, sync) that would be refused.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def find_chromium() -> str | None:
    """The browser to drive: $CHROMIUM, else Debian's /usr/bin/chromium, else one on PATH."""
    for candidate in (
        os.environ.get("CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a tab closed mid-request (BrokenPipeError): the browser's events report real failures


@contextmanager
def serve(directory: Path | str) -> Iterator[str]:
    """Serve ``directory`` on a free port of 127.0.0.1 for the ``with`` block; yields the base URL
    (``http://127.0.0.1:PORT/``)."""
    server = _Server(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
