"""Student versions of the book's notebooks, and the index of their exercises.

Usage::

    python -m gpt2ln.classroom.assign notebooks -o student/   # write student notebooks
    python -m gpt2ln.classroom.assign --index notebooks       # print the exercise table
    python -m gpt2ln.classroom.assign --nbgrader course/      # an nbgrader course (nbgrader_course.py)

In every code cell each region from a line ``### BEGIN SOLUTION`` to the matching
``### END SOLUTION`` (same indentation; the markers nbgrader uses) becomes
``raise NotImplementedError()`` at that indentation; the lines outside, such as
the ``def`` line above, stay. In markdown cells the region becomes
``*(Solution removed in the student version.)*``. Outputs and execution counts
are cleared; everything else (other cells, cell and notebook metadata) is kept.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import nbformat

from .markup import BEGIN, END, exercise_index, notebook_exercises, notebook_paths, points, strip_regions
from .nbgrader_course import write_course

__all__ = [
    "BEGIN",
    "END",
    "exercise_index",
    "exercise_table",
    "main",
    "make_student_notebook",
    "notebook_exercises",
    "points",
    "write_student_notebooks",
]

CODE_STUB = "raise NotImplementedError()"
_LEVELS = {0: "", 1: "easy", 2: "medium", 3: "hard"}
MARKDOWN_STUB = "*(Solution removed in the student version.)*"


def make_student_notebook(
    nb: nbformat.NotebookNode, name: str = "notebook"
) -> tuple[nbformat.NotebookNode, int]:
    """A student copy of ``nb`` (the input is not changed) and how many solutions it removed.

    Raises ValueError naming ``name``, the cell index (0-based) and the line (1-based
    within the cell) for unmatched, nested or malformed markers.
    """
    student = nbformat.from_dict(nb)  # a deep copy
    total = 0
    for index, cell in enumerate(student.cells):
        where = f"{name}: cell {index}"
        if cell.cell_type == "code":
            cell.source, n = strip_regions(cell.source, CODE_STUB, where)
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown":
            cell.source, n = strip_regions(cell.source, MARKDOWN_STUB, where)
        else:
            n = 0
        if n and "hide-input" in cell.metadata.get("tags", []):
            # the book hides solutions behind a toggle; a student's stub stays visible
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != "hide-input"]
        total += n
    return student, total


def write_student_notebooks(paths: Iterable[str | Path], out_dir: str | Path) -> list[tuple[Path, Path, int]]:
    """Write the student version of every notebook in ``paths`` into ``out_dir``.

    Returns (input, written path, solutions removed) for each notebook. Refuses (ValueError) to write into a
    directory that holds one of the inputs, which would overwrite the instructor
    version, and to write two notebooks to one name. Validates each result.
    """
    notebooks = notebook_paths(paths)
    out_dir = Path(out_dir)
    targets: dict[Path, Path] = {}
    for src in notebooks:
        if src.parent.resolve() == out_dir.resolve():
            raise ValueError(
                f"refusing to write into {str(out_dir)!r}: it holds the instructor notebook {str(src)!r}, "
                "which the student version would overwrite; choose another output directory"
            )
        dst = out_dir / src.name
        if dst in targets:
            raise ValueError(f"{str(targets[dst])!r} and {str(src)!r} would both be written to {str(dst)!r}")
        targets[dst] = src
    converted = []
    for dst, src in targets.items():  # convert everything before writing anything
        student, n = make_student_notebook(nbformat.read(src, as_version=4), str(src))
        nbformat.validate(student)
        converted.append((src, dst, student, n))
    out_dir.mkdir(parents=True, exist_ok=True)
    for _, dst, student, _ in converted:
        nbformat.write(student, dst)
    return [(src, dst, n) for src, dst, _, n in converted]


def exercise_table(paths: Iterable[str | Path]) -> str:
    """The exercise index as a markdown table (for ``book/instructors.md``)."""
    lines = [
        "| Exercise | Title | Chapter | Difficulty | Points | Time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in exercise_index(paths):
        lines.append(
            f"| {r['number']} | {r['title']} | {r['chapter_title']} (`{r['notebook']}`) "
            f"| {r['stars']} {_LEVELS[r['difficulty']]} | {r['points']} | {r['minutes']} min |"
        )
    return "\n".join(lines)


def _defaultnotebook_paths() -> list[Path]:
    """``notebooks`` in the working directory, else the book's, next to this package."""
    for candidate in (Path("notebooks"), Path(__file__).resolve().parents[2] / "notebooks"):
        if candidate.is_dir():
            return [candidate]
    raise FileNotFoundError("no notebooks given and no 'notebooks' directory here: name them")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: student notebooks (``-o DIR``), an nbgrader course (``--nbgrader DIR``),
    or the exercise table (``--index``)."""
    parser = argparse.ArgumentParser(
        prog="python -m gpt2ln.classroom.assign",
        description="Write student versions of notebooks: each '### BEGIN SOLUTION' ... "
        "'### END SOLUTION' region becomes 'raise NotImplementedError()', outputs are cleared. "
        "With --nbgrader, write an nbgrader course instead.",
    )
    parser.add_argument(
        "paths", nargs="*", help="notebooks, or directories of notebooks (default with --nbgrader: notebooks)"
    )
    parser.add_argument("-o", "--output", help="directory for the student notebooks (not the input's)")
    parser.add_argument("--index", action="store_true", help="print the exercise table instead")
    parser.add_argument(
        "--nbgrader",
        metavar="COURSE_DIR",
        help="write an nbgrader course: COURSE_DIR/nbgrader_config.py and "
        "COURSE_DIR/source/<chapter>/<chapter>.ipynb for every chapter with exercises",
    )
    args = parser.parse_args(argv)
    if sum(map(bool, (args.index, args.output, args.nbgrader))) > 1:
        parser.error("choose one of -o/--output, --nbgrader and --index")
    try:
        if args.nbgrader:
            paths = args.paths or _defaultnotebook_paths()
            course = write_course(paths, args.nbgrader)
            for src, dst, exercises in course:
                pts = sum(e["points"] for e in exercises)
                print(f"{src} -> {dst}: {len(exercises)} exercises, {pts} points")
            print(
                f"nbgrader course with {len(course)} assignments written to {args.nbgrader}; "
                f"then: cd {args.nbgrader} && nbgrader generate_assignment {course[0][1].stem}"
            )
            return 0
        if not args.paths:
            parser.error("name the notebooks, or directories of notebooks")
        if args.index:
            print(exercise_table(args.paths))
            return 0
        if not args.output:
            parser.error("the output directory -o/--output is required (or --index, or --nbgrader)")
        written = write_student_notebooks(args.paths, args.output)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for src, dst, n in written:
        print(f"{src} -> {dst}: {n} solution{'s' if n != 1 else ''} removed")
    print(f"{len(written)} notebook{'s' if len(written) != 1 else ''} written to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
