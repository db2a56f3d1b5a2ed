"""The nbgrader course of `python -m gpt2ln.classroom.assign --nbgrader`: its cell metadata, and nbgrader
itself (requirements-nbgrader.txt) generating, autograding and giving feedback on it, offline.

The end-to-end tests need nbgrader: they skip without it, except in CI (CI set), where
scripts/test.sh installs it and a missing nbgrader fails. nbgrader executes each submitted
notebook: 3 submissions of chapters 2 and 6, and one of chapter 7 once its pre-norm block
exercise is there.
"""

import html
import importlib.util
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from gpt2ln.classroom.assign import exercise_index, main, points
from gpt2ln.classroom.nbgrader_course import CONFIG, SCHEMA_VERSION, make_source_notebook, write_course

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
HAVE_NBGRADER = importlib.util.find_spec("nbgrader") is not None
IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

ANSWER = """\
def my_norm(x):
    \"\"\"Docstring stays.\"\"\"
    ### BEGIN SOLUTION
    return x - x.mean()
    ### END SOLUTION
"""


def _chapter(*extra_cells):
    nb = new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    )
    nb.cells = [
        new_markdown_cell("# A chapter\n\nProse."),
        new_code_cell("import torch"),
        new_markdown_cell("### Exercise 9.1 — Center (difficulty: ★★★ hard, about 5 minutes)\n\nDo it."),
        new_code_cell(ANSWER, metadata={"tags": ["hide-input"]}),
        new_code_cell("from gpt2ln.exercises import check_x\n\ncheck_x(my_norm)"),
        new_markdown_cell("### Exercise 9.2 — Again (difficulty: ★☆☆ easy, about 5 minutes)"),
        new_code_cell(ANSWER.replace("my_norm", "my_norm2")),
        new_code_cell("print('between')"),
        new_code_cell("check_y(my_norm2)"),
        new_markdown_cell("## Later\n\nMore prose."),
        new_code_cell("check_y(my_norm2)  # a later use, not the exercise's check"),
        *extra_cells,
    ]
    return nb


def _roles(nb):
    return [
        (c.metadata.nbgrader["grade_id"], c.metadata.nbgrader["grade"], c.metadata.nbgrader["solution"])
        for c in nb.cells
    ]


# ----------------------------------------------------------- points and cell metadata
def test_points_are_the_filled_stars():
    assert [points(d) for d in (1, 2, 3)] == [1, 2, 3]
    with pytest.raises(ValueError, match="1 to 3"):
        points(4)
    with pytest.raises(TypeError, match="int"):
        points(2.0)


def test_answers_checks_and_read_only_cells_get_nbgrader_metadata():
    nb = _chapter()
    src, exercises = make_source_notebook(nb, "ch.ipynb")
    assert [c.metadata.nbgrader["grade_id"] for c in src.cells] == [
        "cell_000",
        "cell_001",
        "cell_002",
        "ex9_1_answer",
        "ex9_1_check",
        "cell_005",
        "ex9_2_answer",
        "cell_007",
        "ex9_2_check",
        "cell_009",
        "cell_010",
    ]
    answer, check = src.cells[3].metadata.nbgrader, src.cells[4].metadata.nbgrader
    assert answer == {
        "grade": False,
        "grade_id": "ex9_1_answer",
        "locked": False,
        "schema_version": SCHEMA_VERSION,
        "solution": True,
        "task": False,
    }
    assert check["grade"] and check["locked"] and not check["solution"] and check["points"] == 3
    assert src.cells[8].metadata.nbgrader["points"] == 1
    read_only = [m for m in (c.metadata.nbgrader for c in src.cells) if m["grade_id"].startswith("cell_")]
    assert all(m["locked"] and not m["grade"] and not m["solution"] for m in read_only)
    assert [(e["number"], e["points"], e["answer_cells"], e["check_cell"]) for e in exercises] == [
        ("9.1", 3, [3], 4),
        ("9.2", 1, [6], 8),
    ]
    # the solution stays (nbgrader removes it), the book's hide-input tag goes; input unchanged
    assert src.cells[3].source == ANSWER and src.cells[3].metadata.get("tags") == []
    assert "nbgrader" not in nb.cells[3].metadata and nb.cells[3].metadata.tags == ["hide-input"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda nb: nb.cells.pop(4), "needs exactly one check cell.*got 0"),
        (lambda nb: nb.cells.insert(5, new_code_cell("check_x(my_norm)")), "got 2"),
        (lambda nb: nb.cells.pop(3), "exercise 9.1 .*no code cell with a '### BEGIN SOLUTION'"),
        (
            lambda nb: nb.cells.append(new_code_cell(ANSWER)),
            "cell 11: a solution region outside any exercise",
        ),
        (
            lambda nb: nb.cells.insert(5, new_markdown_cell("### BEGIN SOLUTION\nWhy.\n### END SOLUTION")),
            "cell 5: a solution region in a markdown cell",
        ),
        (lambda nb: nb.cells.insert(4, new_code_cell("### BEGIN SOLUTION\nx = 1")), "without a matching"),
    ],
)
def test_notebooks_off_the_exercise_markup_raise_value_error_naming_the_cell(change, words):
    nb = _chapter()
    change(nb)
    with pytest.raises(ValueError, match=words):
        make_source_notebook(nb, "ch.ipynb")


def _book_notebooks():
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if exercise_index([p]))


@pytest.mark.parametrize("path", _book_notebooks(), ids=lambda p: p.stem)
def test_every_book_exercise_has_one_answer_and_one_check_worth_its_stars(path):
    nb = nbformat.read(path, as_version=4)
    src, exercises = make_source_notebook(nb, path.name)
    assert [e["number"] for e in exercises] == [r["number"] for r in exercise_index([path])]
    ids = [c.metadata.nbgrader["grade_id"] for c in src.cells]
    assert len(set(ids)) == len(ids) == len(src.cells)
    graded = {
        c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"]
        for c in src.cells
        if c.metadata.nbgrader["grade"]
    }
    assert graded == {e["grade_id"]: e["difficulty"] for e in exercises}
    for e in exercises:
        assert re.search(r"\bcheck_\w+\(", src.cells[e["check_cell"]].source)
        assert all("### BEGIN SOLUTION" in src.cells[j].source for j in e["answer_cells"])
    if HAVE_NBGRADER:  # nbgrader's own validator (schema 3, unique ids, points on grade cells)
        from nbgrader.nbgraderformat import MetadataValidator

        MetadataValidator().validate_nb(src)


def test_cli_writes_a_course_and_keeps_an_existing_config(tmp_path, capsys):
    course = tmp_path / "course"
    assert main(["--nbgrader", str(course), str(NOTEBOOKS / "02_layernorm.ipynb")]) == 0
    assert "2 exercises, 3 points" in capsys.readouterr().out
    assert (course / "nbgrader_config.py").read_text(encoding="utf-8") == CONFIG
    written = nbformat.read(course / "source" / "02_layernorm" / "02_layernorm.ipynb", as_version=4)
    assert all("nbgrader" in c.metadata for c in written.cells)
    (course / "nbgrader_config.py").write_text("c = get_config()  # mine\n", encoding="utf-8")
    assert main(["--nbgrader", str(course), str(NOTEBOOKS)]) == 0
    assert (course / "nbgrader_config.py").read_text(encoding="utf-8") == "c = get_config()  # mine\n"
    assert len(list((course / "source").iterdir())) == len(_book_notebooks())


def test_cli_refuses_notebooks_without_exercises_and_mixed_modes(tmp_path, capsys):
    plain = tmp_path / "plain.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Title")]), plain)
    assert main(["--nbgrader", str(tmp_path / "c"), str(plain)]) == 2
    assert "no notebook with an '### Exercise" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    with pytest.raises(SystemExit):
        main(["--nbgrader", str(tmp_path / "c"), "--index", str(plain)])


def test_write_course_skips_notebooks_without_exercises(tmp_path):
    plain = tmp_path / "in" / "00_plain.ipynb"
    plain.parent.mkdir()
    nbformat.write(new_notebook(cells=[new_markdown_cell("# Title")]), plain)
    nbformat.write(_chapter(), tmp_path / "in" / "09_demo.ipynb")
    written = write_course([tmp_path / "in"], tmp_path / "course")
    assert [dst.relative_to(tmp_path / "course").as_posix() for _, dst, _ in written] == [
        "source/09_demo/09_demo.ipynb"
    ]


# --------------------------------------------------------------- nbgrader, end to end
@dataclass(frozen=True)
class Case:
    """A chapter graded end to end: submissions made, and the classic mistake given to one exercise."""

    chapter: str
    check: str  # the check that the mistaken exercise's check cell calls
    body: str  # the mistaken body of that exercise's answer
    words: str  # words of the check's message naming the mistake
    submissions: tuple[str, ...] = ("solved", "untouched", "mistake")


CASES = [
    Case(
        "02_layernorm",
        "check_layer_norm",
        "u = x.mean(dim=-1, keepdim=True)\n"
        "s = ((x - u) ** 2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)\n"
        "return (x - u) / torch.sqrt(s + eps) * g + b",
        "Bessel-corrected (unbiased) variance: divided by d - 1 instead of d",
    ),
    Case(
        "06_attention_and_mlp",
        "check_gelu",
        "return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))",
        "used exact erf GELU",
    ),
]
if "check_pre_norm_block(" in (NOTEBOOKS / "07_pre_vs_post_norm.ipynb").read_text(encoding="utf-8"):
    # chapter 7's pre-norm block exercise; the chapter trains models (about 40 s of CPU a run),
    # so only the submission with the mistake is graded
    CASES.append(
        Case(
            "07_pre_vs_post_norm",
            "check_pre_norm_block",
            "h = ln_1(x + attn(x))\nreturn ln_2(h + mlp(h))",
            "post-norm",
            ("mistake",),
        )
    )


def _mistaken(case: Case, source: nbformat.NotebookNode, exercises: list[dict]) -> dict:
    """The exercise whose check cell calls case.check."""
    found = [e for e in exercises if f"{case.check}(" in source.cells[e["check_cell"]].source]
    assert len(found) == 1, f"{case.chapter}: {len(found)} exercises checked by {case.check}"
    return found[0]


def _with_body(source: str, body: str) -> str:
    """source with its solution region (markers included) replaced by body, indented alike."""
    lines = source.splitlines()
    begin = next(i for i, line in enumerate(lines) if line.strip() == "### BEGIN SOLUTION")
    end = next(i for i, line in enumerate(lines) if line.strip() == "### END SOLUTION")
    indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
    return "\n".join(lines[:begin] + [indent + b for b in body.splitlines()] + lines[end + 1 :])


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # nbgrader runs `alembic` from PATH; the kernels must import this checkout's gpt2ln
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    assert "ERROR" not in result.stderr, result.stderr
    return result


def _need_nbgrader():
    if not HAVE_NBGRADER:
        if IN_CI:
            pytest.fail("nbgrader is not installed: scripts/test.sh installs requirements-nbgrader.txt")
        pytest.skip("nbgrader is not installed (pip install -r requirements-nbgrader.txt)")


def test_nbgrader_generates_every_chapter_with_exercises(tmp_path, monkeypatch):
    """nbgrader's generate_assignment (in this process) accepts every chapter's source version:
    answers stubbed, checks locked with their points and checksums."""
    _need_nbgrader()
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    written = write_course([NOTEBOOKS], tmp_path)
    assert len(written) == len(_book_notebooks())
    for _, dst, exercises in written:
        config = Config()
        config.CourseDirectory.root = str(tmp_path)
        config.CourseDirectory.assignment_id = dst.stem
        GenerateAssignment(coursedir=CourseDirectory(config=config), config=config).start()
        release = nbformat.read(tmp_path / "release" / dst.stem / dst.name, as_version=4)
        meta = {c.metadata.nbgrader["grade_id"]: (c, c.metadata.nbgrader) for c in release.cells}
        for e in exercises:
            m = meta[e["grade_id"]][1]
            assert m["locked"] and m["points"] == e["points"] and len(m["checksum"]) == 32
            answer = meta[e["grade_id"].replace("_check", "_answer")][0]
            assert "raise NotImplementedError()" in answer.source and "BEGIN SOLUTION" not in answer.source


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course of the chapters in CASES, each released, submitted, autograded and given
    feedback; returns (course dir, {(chapter, submission): {grade_id: (score, max)}},
    {chapter: (exercises, the mistaken exercise)}, seconds taken)."""
    _need_nbgrader()
    from nbgrader.api import Gradebook

    start = time.perf_counter()
    course = tmp_path_factory.mktemp("course")
    written = write_course([NOTEBOOKS / f"{case.chapter}.ipynb" for case in CASES], course)
    exercises = {dst.stem: ex for _, dst, ex in written}
    info = {}
    for case in CASES:
        ch, name = case.chapter, f"{case.chapter}.ipynb"
        _nbgrader(course, "generate_assignment", ch)
        source = nbformat.read(course / "source" / ch / name, as_version=4)
        release = nbformat.read(course / "release" / ch / name, as_version=4)
        wrong = _mistaken(case, source, exercises[ch])
        info[ch] = (exercises[ch], wrong)
        # a student who solved every exercise but one, in the released notebook
        answers = {j: source.cells[j].source for e in exercises[ch] for j in e["answer_cells"]}
        mistake = nbformat.from_dict(release)
        for j, text in answers.items():
            assert (
                mistake.cells[j].metadata.nbgrader["grade_id"]
                == source.cells[j].metadata.nbgrader["grade_id"]
            )
            mistake.cells[j].source = _with_body(text, case.body) if j in wrong["answer_cells"] else text
        made = {"solved": source, "untouched": release, "mistake": mistake}
        for who in case.submissions:
            (course / "submitted" / who / ch).mkdir(parents=True)
            nbformat.write(made[who], course / "submitted" / who / ch / name)
        _nbgrader(course, "autograde", ch)
        _nbgrader(course, "generate_feedback", ch)
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for case in CASES:
            for who in case.submissions:
                nb = gb.find_submission_notebook(case.chapter, case.chapter, who)
                scores[case.chapter, who] = {g.name: (g.score, g.max_score) for g in nb.grades}
    seconds = time.perf_counter() - start
    print(f"nbgrader: {len(scores)} submissions of {len(CASES)} chapters graded in {seconds:.0f} s: {scores}")
    return course, scores, info, seconds


def _graded(case: Case, who: str) -> bool:
    return who in case.submissions


def test_release_has_the_stubs_and_no_solution(graded):
    course = graded[0]
    for case in CASES:
        text = (course / "release" / case.chapter / f"{case.chapter}.ipynb").read_text(encoding="utf-8")
        assert "raise NotImplementedError()" in text and "BEGIN SOLUTION" not in text


def test_the_instructor_version_scores_full_marks(graded):
    _, scores, info, _ = graded
    for case in filter(lambda c: _graded(c, "solved"), CASES):
        exercises = info[case.chapter][0]
        assert scores[case.chapter, "solved"] == {
            e["grade_id"]: (e["points"], e["points"]) for e in exercises
        }


def test_the_untouched_release_autogrades_to_zero_on_each_exercise(graded):
    _, scores, info, _ = graded
    for case in filter(lambda c: _graded(c, "untouched"), CASES):
        exercises = info[case.chapter][0]
        assert scores[case.chapter, "untouched"] == {e["grade_id"]: (0, e["points"]) for e in exercises}


def test_a_classic_mistake_loses_exactly_its_checks_points(graded):
    _, scores, info, _ = graded
    for case in CASES:
        exercises, wrong = info[case.chapter]
        expected = {e["grade_id"]: (0 if e is wrong else e["points"], e["points"]) for e in exercises}
        assert scores[case.chapter, "mistake"] == expected


def _feedback_text(course: Path, who: str, ch: str) -> str:
    page = (course / "feedback" / who / ch / f"{ch}.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_the_feedback_shows_the_checks_message_naming_the_mistake(graded):
    course = graded[0]
    for case in CASES:
        ch = case.chapter
        text = _feedback_text(course, "mistake", ch)
        message = f"AssertionError: {case.check}: "
        assert message in text, f"{ch}: the feedback lacks the failed check's message"
        shown = text.split(message, 1)[1].split("In [", 1)[0]  # up to the next cell
        assert case.words in shown, (
            f"{ch}: the feedback lacks the check's message naming the mistake ({case.words!r})"
        )
        assert "Likely mistake:" in shown
        assert "Traceback (most recent call last)" not in text  # the message alone, not a stack
        if _graded(case, "solved"):
            assert "AssertionError" not in _feedback_text(course, "solved", ch)
        if _graded(case, "untouched"):
            assert "is not implemented yet" in _feedback_text(course, "untouched", ch)
