"""An nbgrader course made from the book's notebooks, ready for ``nbgrader generate_assignment``.

Usage::

    python -m gpt2ln.classroom.assign --nbgrader course/            # every chapter with exercises
    cd course && nbgrader generate_assignment 02_layernorm

It writes ``course/nbgrader_config.py`` and ``course/source/<chapter>/<chapter>.ipynb``
for every notebook with exercises, each cell carrying nbgrader's metadata (schema 3):

- a code cell with a ``### BEGIN SOLUTION`` region inside an exercise is an
  *autograded answer* (``solution``), grade id ``ex<N>_<k>_answer``;
- the exercise's check cell (the code cell after the answer that calls a
  ``check_...(`` function) is an *autograder test* (``grade``, ``locked``) worth the
  exercise's points (one per filled star), grade id ``ex<N>_<k>_check``;
- every other cell is *read-only* (``locked``), grade id ``cell_<index>``.

An exercise is a markdown heading ``### Exercise N.k — title (difficulty: ★★☆ medium,
about M minutes)``; its section runs to the next markdown heading of level 1 to 3. It
must hold at least one answer cell and exactly one check cell after it; solution
markers outside an exercise or in markdown raise ValueError (nbgrader would refuse them
or need manual grading).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import nbformat

from .markup import notebook_exercises, notebook_paths, strip_regions

__all__ = ["CONFIG", "SCHEMA_VERSION", "make_source_notebook", "write_course"]

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema (nbgrader 0.7 to 0.9)
_CHECK_CALL = re.compile(r"\bcheck_\w+\s*\(")
_SECTION_END = re.compile(r"^#{1,3}\s", re.M)

CONFIG = '''\
"""nbgrader configuration of the gpt2ln course (written by `python -m gpt2ln.classroom.assign --nbgrader`).

Run every nbgrader command from this directory. The notebooks import the `gpt2ln`
package: grade in an environment where it is installed (then no cell needs the network).
"""

c = get_config()  # noqa: F821 (nbgrader provides it)

c.CourseDirectory.course_id = "gpt2ln"

# Seconds each cell may run under `nbgrader autograde` (nbgrader's default is 30); the
# training cells of chapters 7, 8 and 11 can take longer (the book build allows each of those
# chapters 180 s on two cores).
c.Execute.timeout = 600

# A failed check raises AssertionError with a sentence naming the property that failed
# and the likely mistake. The minimal traceback shows that sentence, and only it, in the
# autograded notebook and in the feedback.
c.Execute.extra_arguments = ["--InteractiveShell.xmode=Minimal"]
'''


def _meta(
    grade_id: str, *, grade: bool = False, solution: bool = False, locked: bool = False, **extra
) -> dict:
    """nbgrader cell metadata, as its "Create Assignment" toolbar writes it."""
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": locked,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    meta.update(extra)
    return meta


def _has_region(cell: nbformat.NotebookNode, where: str) -> bool:
    """Whether the cell holds a solution region (markers are validated as in assign)."""
    return strip_regions(cell.source, "", where)[1] > 0


def make_source_notebook(
    nb: nbformat.NotebookNode, name: str = "notebook"
) -> tuple[nbformat.NotebookNode, list[dict]]:
    """nbgrader's source version of ``nb`` (the input is not changed) and its exercises.

    Returns the notebook, every cell carrying ``metadata.nbgrader``, outputs cleared, and
    the exercise rows of ``gpt2ln.classroom.markup.exercise_index`` with ``answer_cells`` (indices),
    ``check_cell`` and ``grade_id`` (the check's) added. Raises ValueError naming ``name``,
    the exercise and the cell when the notebook does not follow the exercise markup.
    """
    src = nbformat.from_dict(nb)  # a deep copy
    cells = src.cells
    exercises = notebook_exercises(src, name)
    role: dict[int, dict] = {}
    for ex in exercises:
        number, start = ex["number"], ex["cell"]
        end = next(
            (
                j
                for j in range(start + 1, len(cells))
                if cells[j].cell_type == "markdown" and _SECTION_END.search(cells[j].source)
            ),
            len(cells),
        )
        tag = "ex" + number.replace(".", "_")
        answers = [
            j
            for j in range(start + 1, end)
            if cells[j].cell_type == "code" and _has_region(cells[j], f"{name}: cell {j}")
        ]
        if not answers:
            raise ValueError(
                f"{name}: exercise {number} (cell {start}) has no code cell with a "
                "'### BEGIN SOLUTION' ... '### END SOLUTION' region before the next heading"
            )
        checks = [
            j
            for j in range(answers[0] + 1, end)
            if j not in answers and cells[j].cell_type == "code" and _CHECK_CALL.search(cells[j].source)
        ]
        if len(checks) != 1:
            raise ValueError(
                f"{name}: exercise {number} (cell {start}) needs exactly one check cell (a code cell "
                f"calling a check_...( function) after its answer, got {len(checks)}: cells {checks}"
            )
        for n, j in enumerate(answers, start=1):
            role[j] = _meta(f"{tag}_answer" + (f"_{n}" if n > 1 else ""), solution=True)
        role[checks[0]] = _meta(f"{tag}_check", grade=True, locked=True, points=ex["points"])
        ex.update(answer_cells=answers, check_cell=checks[0], grade_id=f"{tag}_check")
    for j, cell in enumerate(cells):
        if j not in role:
            if cell.cell_type in ("code", "markdown") and _has_region(cell, f"{name}: cell {j}"):
                where = "in a markdown cell" if cell.cell_type == "markdown" else "outside any exercise"
                raise ValueError(
                    f"{name}: cell {j}: a solution region {where}: nbgrader can autograde only code "
                    "answers inside an '### Exercise N.k' section that has a check cell"
                )
            role[j] = _meta(f"cell_{j:03d}", locked=True)
        cell.metadata["nbgrader"] = role[j]
        if cell.metadata.get("tags") and "hide-input" in cell.metadata["tags"] and role[j]["solution"]:
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != "hide-input"]
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return src, exercises


def write_course(paths: Iterable[str | Path], course_dir: str | Path) -> list[tuple[Path, Path, list[dict]]]:
    """Write an nbgrader course into ``course_dir`` from the notebooks in ``paths``.

    ``course_dir/source/<stem>/<stem>.ipynb`` for each notebook with at least one exercise
    (others are skipped), and ``course_dir/nbgrader_config.py`` unless one is there
    already (an instructor's settings are kept). Converts and validates every notebook
    before writing anything. Returns (input, written path, exercises) per notebook.
    """
    course_dir = Path(course_dir)
    converted = []
    for path in notebook_paths(paths):
        nb = nbformat.read(path, as_version=4)
        src, exercises = make_source_notebook(nb, str(path))
        if not exercises:
            continue
        nbformat.validate(src)
        converted.append((path, course_dir / "source" / path.stem / path.name, src, exercises))
    if not converted:
        raise ValueError("no notebook with an '### Exercise N.k' heading among the inputs")
    for _, dst, src, _ in converted:
        dst.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(src, dst)
    config = course_dir / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG, encoding="utf-8")
    return [(path, dst, exercises) for path, dst, _, exercises in converted]
