"""The prose pages agree with the chapters: learning-path times, citations."""

import re
from pathlib import Path

import pytest
import yaml

from gpt2ln.assign import exercise_index

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def _toc_notebooks() -> list[Path]:
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    return [ROOT / f"{doc}.ipynb" for doc in re.findall(r"file:\s*(notebooks/\S+)", toc)]


def _learning_path() -> dict[int, str]:
    """Chapter number -> the Exercises column of the learning-path table in book/intro.md."""
    page = (BOOK / "intro.md").read_text(encoding="utf-8")
    section = page.split("## A learning path", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and (m := re.match(r"(\d+)\.\s", cells[1])):
            rows[int(m[1])] = cells[3]
    return rows


@pytest.mark.parametrize("path", _toc_notebooks(), ids=lambda p: p.name)
def test_learning_path_states_each_chapters_exercise_minutes(path):
    chapter = int(path.name.split("_")[0])
    rows = _learning_path()
    assert chapter in rows, f"book/intro.md's learning path has no row for chapter {chapter} ({path.name})"
    minutes = sum(r["minutes"] for r in exercise_index([path]))
    assert rows[chapter] == f"{minutes} min", (
        f"book/intro.md: chapter {chapter}'s exercises take {minutes} min by their headings, "
        f"the learning path says {rows[chapter]!r}"
    )


def test_every_reference_is_cited():
    bib = (BOOK / "references.bib").read_text(encoding="utf-8")
    keys = re.findall(r"^@\w+\{([^,\s]+),", bib, flags=re.M)
    assert keys, "no entries in book/references.bib"
    sources = [p.read_text(encoding="utf-8") for p in [*BOOK.glob("*.md"), *ROOT.glob("notebooks/*.ipynb")]]
    cited = {
        key.strip()
        for text in sources
        for group in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", text)
        for key in group.split(",")
    }
    uncited = sorted(set(keys) - cited)
    assert not uncited, f"entries of book/references.bib that no page cites: {uncited}"


def test_new_pages_are_in_the_table_of_contents():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = {c["file"] for part in toc["parts"] for c in part["chapters"]}
    assert {"book/notation", "book/glossary"} <= files
