"""The book's table of contents (_toc.yml), for the scripts that build the downloads.

``chapters()`` lists every document in reading order with its part caption, e.g.
``Doc(path="notebooks/02_layernorm", source=Path(".../notebooks/02_layernorm.ipynb"),
part="Part I — The normalization layer")``; the root document comes first with part None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Doc:
    path: str  # without extension, relative to the repository root: "book/intro"
    source: Path  # the .md or .ipynb file
    part: str | None  # the caption of its part in _toc.yml, None for the root and uncaptioned parts

    @property
    def page(self) -> str:
        """Its built page, relative to _build/html: ``book/intro.html``."""
        return f"{self.path}.html"

    @property
    def is_notebook(self) -> bool:
        return self.source.suffix == ".ipynb"


def _resolve(root: Path, name: str) -> tuple[str, Path]:
    stem = name.removesuffix(".md").removesuffix(".ipynb")
    for suffix in (".ipynb", ".md"):
        if (root / f"{stem}{suffix}").is_file():
            return stem, root / f"{stem}{suffix}"
    raise FileNotFoundError(f"_toc.yml names {name!r}, but neither {stem}.ipynb nor {stem}.md exists")


def chapters(root: Path = ROOT) -> list[Doc]:
    """Every document of _toc.yml in reading order (root first, then parts, chapters, sections)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    docs = [Doc(*_resolve(root, toc["root"]), None)]

    def walk(node: dict, part: str | None) -> None:
        if "file" in node:
            docs.append(Doc(*_resolve(root, node["file"]), part))
        for child in node.get("chapters") or []:
            walk(child, part)
        for child in node.get("sections") or []:
            walk(child, part)

    for part in toc.get("parts") or []:
        walk(part, part.get("caption"))
    for node in toc.get("chapters") or []:
        walk(node, None)
    return docs
