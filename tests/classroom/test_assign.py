"""Student notebooks: solutions removed, everything else kept; the exercise index."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from gpt2ln.classroom.assign import (
    CODE_STUB,
    MARKDOWN_STUB,
    exercise_index,
    exercise_table,
    main,
    make_student_notebook,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"

SOLUTION = """\
import torch


def my_layer_norm(x, g, b, eps=1e-5):
    \"\"\"Docstring stays.\"\"\"
    ### BEGIN SOLUTION
    u = x.mean(-1, keepdim=True)
    if True:
        s = ((x - u) ** 2).mean(-1, keepdim=True)
    return (x - u) * torch.rsqrt(s + eps) * g + b
    ### END SOLUTION


def my_count(config):
    ### BEGIN SOLUTION
    return 2 * config.n_embd * (2 * config.n_layer + 1)
    ### END SOLUTION
"""


def _notebook():
    nb = new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nb.cells = [
        new_markdown_cell("# A chapter\n\nSome prose."),
        new_code_cell(
            "x = 1\nx",
            execution_count=3,
            outputs=[new_output("execute_result", data={"text/plain": "1"}, execution_count=3)],
        ),
        new_markdown_cell(
            "### Exercise 9.1 — Write a norm (difficulty: ★★☆ medium, about 15 minutes)\n\nDo it."
        ),
        new_code_cell(SOLUTION, execution_count=4, metadata={"tags": ["keep-me"]}),
        new_code_cell(
            "check(my_layer_norm)", execution_count=5, outputs=[new_output("stream", text="✓ ok\n")]
        ),
        new_markdown_cell(
            "### Exercise 9.2 — Explain (difficulty: ★☆☆ easy, about 5 minutes)\n\nWhy?\n\n"
            "### BEGIN SOLUTION\nBecause.\n\nReally.\n### END SOLUTION\n\nAfter."
        ),
        new_code_cell(
            "print('unrelated')", execution_count=6, outputs=[new_output("stream", text="unrelated\n")]
        ),
    ]
    return nb


def test_code_solutions_become_raise_not_implemented_keeping_the_def_line():
    student, n = make_student_notebook(_notebook())
    assert n == 3  # two code regions, one markdown region
    assert student.cells[3].source == (
        "import torch\n\n\n"
        "def my_layer_norm(x, g, b, eps=1e-5):\n"
        '    """Docstring stays."""\n'
        f"    {CODE_STUB}\n\n\n"
        "def my_count(config):\n"
        f"    {CODE_STUB}\n"
    )


def test_student_code_cell_defines_functions_that_raise_not_implemented():
    student, _ = make_student_notebook(_notebook())
    namespace = {}
    exec(student.cells[3].source, namespace)
    with pytest.raises(NotImplementedError):
        namespace["my_layer_norm"](None, None, None)


def test_outputs_and_execution_counts_are_cleared():
    student, _ = make_student_notebook(_notebook())
    for cell in student.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_other_cells_metadata_and_the_input_are_unchanged():
    nb = _notebook()
    before = nbformat.writes(nb)
    student, _ = make_student_notebook(nb)
    assert nbformat.writes(nb) == before  # the instructor notebook is not modified
    assert student.metadata == nb.metadata
    for i in (0, 1, 2, 4, 6):
        assert student.cells[i].source == nb.cells[i].source
        assert student.cells[i].metadata == nb.cells[i].metadata
        assert student.cells[i].id == nb.cells[i].id
    assert student.cells[3].metadata == {"tags": ["keep-me"]}


def test_markdown_solutions_are_replaced_by_a_note():
    student, _ = make_student_notebook(_notebook())
    md = student.cells[5].source
    assert "Because" not in md and "BEGIN SOLUTION" not in md
    assert md.endswith(f"Why?\n\n{MARKDOWN_STUB}\n\nAfter.")


def test_crlf_line_endings_are_kept():
    nb = new_notebook()
    nb.cells = [
        new_code_cell("def f():\r\n    ### BEGIN SOLUTION\r\n    return 1\r\n    ### END SOLUTION\r\n")
    ]
    student, n = make_student_notebook(nb)
    assert n == 1 and student.cells[0].source == f"def f():\r\n    {CODE_STUB}\r\n"


@pytest.mark.parametrize(
    "source, line, words",
    [
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n", 2, "without a matching '### END SOLUTION'"),
        ("def f():\n    return 1\n    ### END SOLUTION\n", 3, "without a matching '### BEGIN SOLUTION'"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", 2, "nested"),
        ("def f():\n    ### BEGIN SOLUTION\n    return 1\n### END SOLUTION\n", 4, "indented"),
        ("def f():\n    ### BEGIN SOLUTION:\n    return 1\n    ### END SOLUTION\n", 2, "malformed"),
    ],
    ids=["begin-unclosed", "end-unopened", "nested", "indentation-differs", "malformed"],
)
def test_unmatched_markers_raise_value_error_naming_notebook_cell_and_line(source, line, words):
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# T"), new_code_cell(source)]
    with pytest.raises(ValueError, match=f"ch9.ipynb: cell 1, line {line}: .*{words}"):
        make_student_notebook(nb, "ch9.ipynb")


def _write(path: Path, nb=None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or _notebook(), path)
    return path


def test_cli_writes_student_notebooks_into_the_output_directory(tmp_path, capsys):
    src = _write(tmp_path / "instructor" / "09_demo.ipynb")
    _write(tmp_path / "instructor" / "10_plain.ipynb", new_notebook(cells=[new_markdown_cell("# Plain")]))
    out = tmp_path / "student"
    assert main([str(src.parent), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "09_demo.ipynb: 3 solutions removed" in printed
    assert "10_plain.ipynb: 0 solutions removed" in printed
    student = nbformat.read(out / "09_demo.ipynb", as_version=4)
    nbformat.validate(student)
    assert CODE_STUB in student.cells[3].source
    assert (out / "10_plain.ipynb").exists()


def test_cli_refuses_to_write_into_the_input_directory(tmp_path, capsys):
    src = _write(tmp_path / "09_demo.ipynb")
    before = src.read_bytes()
    assert main([str(src), "-o", str(tmp_path)]) == 2
    assert "refusing to write" in capsys.readouterr().err
    assert src.read_bytes() == before


def test_cli_reports_a_missing_input_clearly(tmp_path, capsys):
    assert main([str(tmp_path / "missing.ipynb"), "-o", str(tmp_path / "out")]) == 2
    assert "no such notebook or directory" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_reports_bad_markers_and_writes_nothing(tmp_path, capsys):
    good = _write(tmp_path / "in" / "a.ipynb")
    bad_nb = new_notebook(cells=[new_code_cell("### BEGIN SOLUTION\nx = 1\n")])
    _write(tmp_path / "in" / "b.ipynb", bad_nb)
    assert main([str(good.parent), "-o", str(tmp_path / "out")]) == 2
    assert "b.ipynb: cell 0, line 1" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_python_dash_m_entry_point_runs(tmp_path):
    src = _write(tmp_path / "in" / "09_demo.ipynb")
    result = subprocess.run(
        [sys.executable, "-m", "gpt2ln.classroom.assign", str(src), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "3 solutions removed" in result.stdout


def test_exercise_index_parses_the_headings(tmp_path):
    src = _write(tmp_path / "09_demo.ipynb")
    rows = exercise_index([src])
    assert [
        (r["number"], r["title"], r["stars"], r["difficulty"], r["level"], r["minutes"]) for r in rows
    ] == [
        ("9.1", "Write a norm", "★★☆", 2, "medium", 15),
        ("9.2", "Explain", "★☆☆", 1, "easy", 5),
    ]
    assert rows[0]["chapter_title"] == "A chapter" and rows[0]["notebook"] == "09_demo.ipynb"
    assert [(r["points"], r["cell"]) for r in rows] == [(2, 2), (1, 5)]
    assert "| 9.1 | Write a norm | A chapter (`09_demo.ipynb`) | ★★☆ medium | 2 | 15 min |" in exercise_table(
        [tmp_path]
    )


def test_exercise_index_rejects_a_malformed_heading(tmp_path):
    src = _write(
        tmp_path / "x.ipynb", new_notebook(cells=[new_markdown_cell("### Exercise 9.1: no difficulty")])
    )
    with pytest.raises(ValueError, match="cannot parse the exercise heading"):
        exercise_index([src])


def test_exercise_index_rejects_a_heading_with_no_filled_star(tmp_path):
    heading = "### Exercise 9.1 — Free (difficulty: ☆☆☆, about 5 minutes)"
    src = _write(tmp_path / "x.ipynb", new_notebook(cells=[new_markdown_cell(heading)]))
    with pytest.raises(ValueError, match="no filled star"):
        exercise_index([src])


def test_instructors_index_lists_every_exercise():
    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    table = [line for line in page.splitlines() if line.startswith("|")]
    for r in exercise_index([NOTEBOOKS]):
        row = f"| {r['number']} | {r['title']} |"
        assert any(line.startswith(row) for line in table), (
            f"book/instructors.md lacks a row {row!r}: run "
            "`python -m gpt2ln.classroom.assign --index notebooks` and update its table"
        )


def test_instructors_index_is_exactly_the_generated_table_with_points():
    page = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    table = exercise_table([NOTEBOOKS])
    assert table in page, (
        "book/instructors.md's exercise table differs from the notebooks' (title, difficulty, points "
        "or time): replace it by the output of `python -m gpt2ln.classroom.assign --index notebooks`"
    )
    assert page.count("| Exercise | Title |") == 1
    assert "| Points |" in table.splitlines()[0]


# ----------------------------------------------------- the real notebooks, student version
def _with_exercises():
    if not NOTEBOOKS.is_dir():
        return []
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if "### BEGIN SOLUTION" in p.read_text("utf-8"))


def _expected_failing_cell(student):
    """The first code solution cell if its stub is top level, else the first check cell from
    there on; None if no code cell had a solution (the notebook then runs to the end)."""
    stubs = [i for i, c in enumerate(student.cells) if c.cell_type == "code" and CODE_STUB in c.source]
    if not stubs:
        return None
    first = stubs[0]
    if CODE_STUB in student.cells[first].source.splitlines():
        return first
    return next(
        i
        for i, c in enumerate(student.cells)
        if i >= first and c.cell_type == "code" and "check_" in c.source
    )


def _without_the_run_up(student, instructor, expected):
    """The student notebook less its run-up: the code cells after the setup (every cell before
    the first "## " section) and before the first stub. Those cells are the instructor
    notebook's own, unchanged (asserted here), and every notebook lane runs them in full
    (floors, Colab, the book build); here they cost most of each chapter's run (chapters 7, 8
    and 11 train their models there) to reach a stub and a check that need only the setup.
    Returns the shorter notebook and the expected failing cell's index in it."""
    cells = student.cells
    first_stub = next(i for i, c in enumerate(cells) if c.cell_type == "code" and CODE_STUB in c.source)
    solution = "### BEGIN SOLUTION"
    first_solution = next(
        i for i, c in enumerate(instructor.cells) if c.cell_type == "code" and solution in c.source
    )
    run_up = [c.source for c in cells[:first_stub] if c.cell_type == "code"]
    assert run_up == [c.source for c in instructor.cells[:first_solution] if c.cell_type == "code"], (
        "the student notebook's code before its first stub differs from the instructor's"
    )
    first_section = next(
        (i for i, c in enumerate(cells) if c.cell_type == "markdown" and "\n## " in "\n" + c.source), 0
    )
    keep = [i for i in range(len(cells)) if i < first_section or i >= first_stub]
    short = nbformat.from_dict(dict(student))
    short.cells = [cells[i] for i in keep]
    return short, keep.index(expected)


@pytest.mark.parametrize("name", _with_exercises())
def test_student_notebook_runs_until_the_first_exercise_check(name, tmp_path):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    assert main([str(NOTEBOOKS / name), "-o", str(tmp_path)]) == 0
    student = nbformat.read(tmp_path / name, as_version=4)
    nbformat.validate(student)
    expected = _expected_failing_cell(student)
    if expected is not None:
        instructor = nbformat.read(NOTEBOOKS / name, as_version=4)
        student, expected = _without_the_run_up(student, instructor, expected)
    client = NotebookClient(
        student, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    if expected is None:
        client.execute()
        return
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    failing = [
        i
        for i, c in enumerate(student.cells)
        if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)
    ]
    early = " (before any exercise: does the instructor notebook run?)" if failing[:1] < [expected] else ""
    assert failing == [expected], (
        f"expected the first error in cell {expected} (the first exercise check), got it in cell(s) "
        f"{failing}{early}: {info.value.ename}: {info.value.evalue}"
    )
    err = info.value
    assert err.ename == "NotImplementedError" or (
        err.ename == "AssertionError" and "not implemented yet" in err.evalue
    ), (err.ename, err.evalue)


def test_student_version_shows_the_stub_the_book_hid():
    nb = _notebook()
    nb.cells[3].metadata["tags"] = ["keep-me", "hide-input"]
    student, _ = make_student_notebook(nb, "ch.ipynb")
    assert student.cells[3].metadata["tags"] == ["keep-me"]
    assert nb.cells[3].metadata["tags"] == ["keep-me", "hide-input"]  # the input is not changed
