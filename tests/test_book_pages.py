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


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(page: str) -> str:
    """A page's text with its line breaks folded into spaces."""
    return " ".join((BOOK / page).read_text(encoding="utf-8").split())


def test_execution_page_states_the_budgets_that_check_exec_times_enforces():
    check = _script("check_exec_times")
    text = _prose("execution.md")
    stated: dict[int, int] = {}
    for seconds, chapters in re.findall(r"(\d+) s for chapters? ([\d, and]+?)[;.]", text):
        for n in re.findall(r"\d+", chapters):
            stated[int(n)] = int(seconds)
    chapters = sorted(int(p.name.split("_")[0]) for p in ROOT.glob("notebooks/*.ipynb"))
    assert stated == {n: check.BUDGETS.get(n, 60) for n in chapters}
    pages = re.search(r"(\d+) s for each of the pages ((?:\{doc\}`\w+`(?:, | and )?)+)", text)
    assert pages, "book/execution.md does not state the budget of the executed pages"
    assert {f"book/{p}": int(pages[1]) for p in re.findall(r"`(\w+)`", pages[2])} == check.PAGE_BUDGETS
    assert f"{check.TOTAL_BUDGET} s for all of them together" in text
    # what fails: a chapter that did not run, always; a budget overrun only in CI
    assert "fails if a chapter did not execute" in text and "fails the check only in CI" in text
