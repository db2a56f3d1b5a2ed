"""The book's exercise markup, read from notebooks: solution regions and exercise headings.

A solution region runs from a line ``### BEGIN SOLUTION`` to the matching ``### END
SOLUTION`` (same indentation; the markers nbgrader uses). An exercise is a markdown heading
``### Exercise N.k — title (difficulty: ★★☆ medium, about M minutes)``. ``gpt2ln.classroom.assign``
(student notebooks, the exercise index) and ``gpt2ln.classroom.nbgrader_course`` (an nbgrader course)
both read them through this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import nbformat

__all__ = [
    "BEGIN",
    "END",
    "exercise_index",
    "notebook_exercises",
    "notebook_paths",
    "notebook_title",
    "points",
    "strip_regions",
]

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"

HEADING = re.compile(
    r"^###\s+Exercise\s+(?P<chapter>\d+)\.(?P<k>\d+)\s*[—–-]\s*(?P<title>.+?)\s*"
    r"\(difficulty:\s*(?P<stars>[★☆]{3})(?:\s+(?P<level>[^,()]*?))?\s*,\s*"
    r"about\s+(?P<minutes>\d+)\s*min(?:utes?)?\s*\)\s*$"
)


def strip_regions(source: str, stub: str, where: str) -> tuple[str, int]:
    """Replace each marked region of one cell's source by ``stub``; return (source, regions).

    Raises ValueError naming ``where`` and the line for unmatched, nested or malformed markers.
    """
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    begin: tuple[int, str] | None = None  # (line number, indentation) of the open BEGIN
    n = 0
    for i, line in enumerate(lines, start=1):
        text = line.rstrip("\r\n")
        stripped = text.strip()
        indent = text[: len(text) - len(text.lstrip())]
        is_begin, is_end = stripped == BEGIN, stripped == END
        if not (is_begin or is_end) and stripped.startswith((BEGIN, END)):
            raise ValueError(
                f"{where}, line {i}: malformed marker {stripped!r}: put {BEGIN!r} or {END!r} "
                "alone on its line"
            )
        if is_begin:
            if begin is not None:
                raise ValueError(
                    f"{where}, line {i}: nested {BEGIN!r} (the one on line {begin[0]} is not closed yet)"
                )
            begin = (i, indent)
        elif is_end:
            if begin is None:
                raise ValueError(f"{where}, line {i}: {END!r} without a matching {BEGIN!r}")
            if indent != begin[1]:
                raise ValueError(
                    f"{where}, line {i}: {END!r} is indented {len(indent)} characters, but its "
                    f"{BEGIN!r} on line {begin[0]} is indented {len(begin[1])}"
                )
            out.append(begin[1] + stub + line[len(text) :])  # keep the END line's line ending
            begin, n = None, n + 1
        elif begin is None:
            out.append(line)
    if begin is not None:
        raise ValueError(f"{where}, line {begin[0]}: {BEGIN!r} without a matching {END!r}")
    return "".join(out), n


def notebook_paths(paths: Iterable[str | Path]) -> list[Path]:
    """The notebooks named, a directory standing for the ``*.ipynb`` files directly in it."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.glob("*.ipynb") if not q.name.startswith("."))
        elif p.is_file():
            if p.suffix != ".ipynb":
                raise ValueError(f"expected a notebook (.ipynb) or a directory, got {str(p)!r}")
            found.append(p)
        else:
            raise FileNotFoundError(f"no such notebook or directory: {str(p)!r}")
    return found


def notebook_title(nb: nbformat.NotebookNode) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def points(difficulty: int) -> int:
    """An exercise's points in the nbgrader course: one per filled star (★ 1, ★★ 2, ★★★ 3)."""
    if isinstance(difficulty, bool) or not isinstance(difficulty, int):
        raise TypeError(f"expected the difficulty as an int (filled stars), got {type(difficulty).__name__}")
    if not 1 <= difficulty <= 3:
        raise ValueError(f"expected a difficulty of 1 to 3 filled stars, got {difficulty}")
    return difficulty


def notebook_exercises(nb: nbformat.NotebookNode, name: str = "notebook") -> list[dict]:
    """The exercises of one notebook, in order, parsed from their headings (see exercise_index).

    Each row also has ``cell``, the index of the markdown cell holding the heading.
    """
    chapter_title = notebook_title(nb)
    rows = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if not re.match(r"^###\s+Exercise\b", line):
                continue
            m = HEADING.match(line.strip())
            if m is None:
                raise ValueError(
                    f"{name}: cell {index}: cannot parse the exercise heading {line!r}; expected "
                    "'### Exercise N.k — title (difficulty: ★★☆ medium, about M minutes)'"
                )
            difficulty = m["stars"].count("★")
            if difficulty == 0:
                raise ValueError(f"{name}: cell {index}: exercise heading {line!r} has no filled star (★)")
            rows.append(
                {
                    "notebook": Path(name).name,
                    "chapter_title": chapter_title,
                    "number": f"{m['chapter']}.{m['k']}",
                    "chapter": int(m["chapter"]),
                    "title": m["title"],
                    "stars": m["stars"],
                    "difficulty": difficulty,
                    "points": points(difficulty),
                    "level": (m["level"] or "").strip(),
                    "minutes": int(m["minutes"]),
                    "cell": index,
                }
            )
    return rows


def exercise_index(paths: Iterable[str | Path]) -> list[dict]:
    """Every exercise of the notebooks in ``paths`` (files or directories), in order.

    Each is a dict: ``notebook`` (file name), ``chapter_title`` (its ``# Title``),
    ``number`` ("2.1"), ``chapter`` (2), ``title``, ``stars`` ("★★☆"), ``difficulty``
    (1-3, the filled stars), ``points`` (its nbgrader points, see ``points``), ``level``
    (the word after the stars, or ""), ``minutes``, ``cell`` (the heading's cell index).
    Parsed from markdown headings ``### Exercise N.k — title (difficulty: ★★☆ medium,
    about M minutes)``; a heading that starts ``### Exercise`` but does not parse, or
    has no filled star, raises ValueError, so none is silently left out.
    """
    rows = []
    for path in notebook_paths(paths):
        rows += notebook_exercises(nbformat.read(path, as_version=4), str(path))
    return rows
