"""Helpers for the browser tests: where the site and Chromium are, what the toc lists.

The site in ``_build/html`` is served over HTTP on 127.0.0.1 (not ``file://``) so
that every request is observable. ``scripts/test.sh`` runs these tests after the
book build, under ``scripts/offline.sh``: with the network cut off, a page that
needs a CDN fails them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from localsite import CHROMIUM_ARGS, find_chromium, serve  # noqa: E402, F401  (shared with scripts/build_pdf.py)

# The built site; GPT2LN_SITE=/path/to/html tests another build.
SITE = Path(os.environ.get("GPT2LN_SITE") or ROOT / "_build" / "html").resolve()
SCREENSHOTS = SITE.parent / "screenshots"
# Built pages that are not chapters and need not be in the table of contents.
NON_TOC_PAGES = {"genindex.html", "search.html", "index.html"}


def why_unavailable() -> str | None:
    """None when the browser tests can run, else what is missing and how to get it."""
    if importlib.util.find_spec("playwright") is None:
        return "the Python package playwright is missing (bash scripts/setup.sh installs it)"
    if find_chromium() is None:
        return "no Chromium found (as root: apt-get install chromium; or set CHROMIUM=/path/to/chromium)"
    if not (SITE / "index.html").is_file():
        return f"the book is not built (no {SITE}/index.html: bash scripts/build_book.sh)"
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def toc_docs() -> list[str]:
    """Every document in _toc.yml (root first), without extension: ``book/intro``, ..."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    docs = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                docs.append(node["file"])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    walk(child)

    walk(toc)
    return [str(Path(d).with_suffix("")) if Path(d).suffix in (".md", ".ipynb") else d for d in docs]


def toc_pages() -> list[str]:
    """The built page of every document in the table of contents: ``book/intro.html``, ..."""
    return [f"{doc}.html" for doc in toc_docs()]


def notebook_pages() -> list[str]:
    """The pages built from notebooks: ``notebooks/01_why_normalize.html``, ..."""
    return [f"{doc}.html" for doc in toc_docs() if (ROOT / f"{doc}.ipynb").is_file()]


def colab_url(notebook: str) -> str:
    """The Colab URL for a notebook path in the repository, built from _config.yml."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]
    owner_name = repo["url"].rstrip("/").split("github.com/", 1)[1]
    prefix = (repo.get("path_to_book") or "").strip("/")
    path = f"{prefix}/{notebook}" if prefix else notebook
    colab = config["launch_buttons"]["colab_url"].rstrip("/")
    return f"{colab}/github/{owner_name}/blob/{repo.get('branch', 'main')}/{path}"
