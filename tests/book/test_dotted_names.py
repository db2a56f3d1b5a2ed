"""Every dotted ``gpt2ln.…`` name written in the book's pages and chapters resolves: a module that
imports, or an attribute of one. Prose that names a moved or renamed function fails here."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"(?<![\w./-])gpt2ln(?:\.[A-Za-z_]\w*)+")
#: file names that look like dotted names: the PDF, and pip's egg-info folder
NOT_NAMES = {"gpt2ln.pdf", "gpt2ln.egg"}


def written_names() -> dict[str, list[str]]:
    """``{dotted name: [files that write it]}`` over book/ and notebooks/ (pages, chapters, pages' code)."""
    found: dict[str, list[str]] = {}
    files = [*ROOT.glob("book/**/*.md"), *ROOT.glob("book/**/*.py"), *ROOT.glob("notebooks/*.ipynb")]
    for path in files:
        if "_build" in path.parts or "quotes" in path.parts:
            continue
        for name in set(NAME.findall(path.read_text(encoding="utf-8"))):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def resolve(name: str) -> object:
    """The object ``name`` names: the longest prefix that imports as a module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # old paths still resolve
                obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


NAMES = written_names()


def test_the_book_writes_dotted_names():
    assert len(NAMES) > 20 and "gpt2ln.layer_norm" in NAMES


@pytest.mark.parametrize("name", sorted(set(NAMES) - NOT_NAMES))
def test_each_dotted_name_resolves(name):
    try:
        resolve(name)
    except (ImportError, AttributeError) as err:
        pytest.fail(f"{name}, written in {', '.join(sorted(NAMES[name]))}, does not resolve: {err}")


def test_a_moved_name_fails():
    with pytest.raises(AttributeError):
        resolve("gpt2ln.model.kv_cache.choose_step")
