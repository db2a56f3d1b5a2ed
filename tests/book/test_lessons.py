"""The four lessons the course follows: the page that maps them, and their code against the checks.

`book/lessons.md` has one table per lesson (000, 001, 003, 004), each row saying where the course
covers an element and whether it follows or departs. Where the lessons themselves sit beside the
checkout (`../shared/seeds/`), lesson 004's `layer_norm` and `rms_norm` are read from it and run,
exactly as typed, through the course's checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from gpt2ln.exercises import check_layer_norm, check_rms_norm

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "book" / "lessons.md").read_text(encoding="utf-8")
CHAPTERS = {int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}


def _sections() -> dict[str, list[list[str]]]:
    """Lesson id -> the rows of its table (each a list of 3 cells)."""
    out = {}
    for m in re.finditer(r"^## Lesson (\d{3})\b.*?(?=^## |\Z)", PAGE, flags=re.M | re.S):
        rows = [
            [c.strip() for c in line.strip().strip("|").split(" | ")]
            for line in m.group(0).splitlines()
            if line.startswith("| ") and not line.startswith("| Element")
        ]
        out[m.group(1)] = rows
    return out


def test_lessons_page_has_a_table_for_each_lesson_with_a_verdict_on_every_row():
    sections = _sections()
    assert set(sections) == {"000", "001", "003", "004"}
    for lesson, rows in sections.items():
        assert len(rows) >= 8, f"lesson {lesson}: only {len(rows)} rows"
        for row in rows:
            assert len(row) == 3, f"lesson {lesson}: a row without three cells: {row}"
            assert re.match(r"(Follows|Departs)", row[2]), f"lesson {lesson}: no verdict in {row}"


def test_lessons_page_refers_only_to_chapters_that_exist():
    cited = {int(n) for n in re.findall(r"\b[Cc]h(?:apter|\.) (\d+)", PAGE)}
    assert cited and cited <= CHAPTERS, sorted(cited - CHAPTERS)


def _seed(prefix: str) -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent):
        found = sorted((base / "shared" / "seeds").glob(f"{prefix}_*.txt"))
        if found:
            return found[0]
    return None


def test_lesson_004_code_typed_as_given_passes_the_course_checks(capsys):
    seed = _seed("004")
    if seed is None:
        pytest.skip("the lessons are not beside this checkout (../shared/seeds)")
    text = seed.read_text(encoding="utf-8")
    code = text[text.index("def layer_norm(") :]
    namespace = {"torch": torch}
    exec(compile(code, str(seed), "exec"), namespace)  # the lesson's own text, nothing added
    check_layer_norm(namespace["layer_norm"])
    check_rms_norm(namespace["rms_norm"])
    out = capsys.readouterr().out
    assert "✓ check_layer_norm" in out and "✓ check_rms_norm" in out
