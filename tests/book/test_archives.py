"""The notebooks archives the site offers (scripts/build_archives.py): the chapters with their
outputs cleared, the course package, requirements.txt and a README; and the student versions."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from gpt2ln.classroom.markup import BEGIN

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_archives = _script("build_archives")
booktoc = _script("booktoc")
TOC_NOTEBOOKS = [doc.source.name for doc in booktoc.chapters() if doc.is_notebook]


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("site")
    paths = build_archives.build_archives(out)
    return {p.name: p for p in paths}


def _notebooks(archive: Path) -> dict[str, nbformat.NotebookNode]:
    top = archive.name.removesuffix(".zip")
    with zipfile.ZipFile(archive) as zf:
        return {
            Path(name).name: nbformat.reads(zf.read(name).decode("utf-8"), as_version=4)
            for name in zf.namelist()
            if name.startswith(f"{top}/notebooks/") and name.endswith(".ipynb")
        }


def test_the_toc_has_the_eleven_chapters_as_notebooks():
    assert len(TOC_NOTEBOOKS) == 11 and TOC_NOTEBOOKS[0] == "01_why_normalize.ipynb", TOC_NOTEBOOKS


@pytest.mark.parametrize("name", list(build_archives.ARCHIVES))
def test_archive_holds_every_chapter_of_the_toc_with_outputs_cleared(archives, name):
    notebooks = _notebooks(archives[name])
    assert sorted(notebooks) == sorted(TOC_NOTEBOOKS), f"{name}: {sorted(notebooks)}"
    for file, nb in notebooks.items():
        nbformat.validate(nb)
        run = [
            i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)
        ]
        assert not run, f"{name}/{file}: code cells with outputs or execution counts: {run[:5]}"


@pytest.mark.parametrize("name", list(build_archives.ARCHIVES))
def test_archive_has_requirements_a_readme_and_the_package_in_one_folder(archives, name):
    top = name.removesuffix(".zip")
    with zipfile.ZipFile(archives[name]) as zf:
        names = zf.namelist()
        assert all(n.startswith(f"{top}/") for n in names), f"{name}: entries outside {top}/"
        for required in (
            "README.md",
            "requirements.txt",
            "pyproject.toml",
            "gpt2ln/__init__.py",
            "gpt2ln/assets/tiny/model.safetensors",
            "gpt2ln/assets/widgets/figures.js",
        ):
            assert f"{top}/{required}" in names, f"{name}: no {required}"
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")], f"{name}: bytecode"
        requirements = zf.read(f"{top}/requirements.txt").decode()
        readme = zf.read(f"{top}/README.md").decode()
    lines = [line.split("#")[0].strip() for line in requirements.splitlines()]
    assert "-e .[book]" in lines and any(line.startswith("jupyterlab") for line in lines), requirements
    for step in ("python -m venv", "pip install -r requirements.txt", "jupyter lab notebooks/"):
        assert step in readme, f"{name}: the README does not say `{step}`"
    for file in TOC_NOTEBOOKS:
        assert f"notebooks/{file}" in readme, f"{name}: the README does not list {file}"


def test_student_archive_replaces_every_solution_and_keeps_every_other_cell(archives):
    book = _notebooks(archives["gpt2ln-notebooks.zip"])
    student = _notebooks(archives["gpt2ln-student-notebooks.zip"])
    total = 0
    for file, nb in book.items():
        solutions = sum(c.source.count(BEGIN) for c in nb.cells if c.cell_type == "code")
        assert solutions >= 2, f"{file}: {solutions} solutions in the book's version"
        s = student[file]
        assert len(s.cells) == len(nb.cells), f"{file}: {len(s.cells)} cells, the book has {len(nb.cells)}"
        assert not any(BEGIN in c.source for c in s.cells), (
            f"{file}: a solution is left in the student version"
        )
        stubs = sum(c.source.count("raise NotImplementedError()") for c in s.cells if c.cell_type == "code")
        assert stubs == solutions, f"{file}: {stubs} stubs for {solutions} solutions"
        same = [
            i
            for i, (a, b) in enumerate(zip(nb.cells, s.cells, strict=True))
            if BEGIN not in a.source and a.source != b.source
        ]
        assert not same, f"{file}: cells without a solution changed: {same[:5]}"
        total += solutions
    assert total >= 22


def test_the_book_archive_has_the_solutions(archives):
    book = _notebooks(archives["gpt2ln-notebooks.zip"])
    for file, nb in book.items():
        assert any(BEGIN in c.source for c in nb.cells), f"{file}: no solution in the book's version"


def test_the_package_in_the_archive_imports_and_loads_the_shipped_model(archives, tmp_path):
    with zipfile.ZipFile(archives["gpt2ln-notebooks.zip"]) as zf:
        zf.extractall(tmp_path)
    folder = tmp_path / "gpt2ln-notebooks"
    code = (
        "import json, gpt2ln, gpt2ln.lab.tiny as t; "
        "model, tok = t.load_tiny(); "
        "print(json.dumps({'file': gpt2ln.__file__, 'params': sum(p.numel() for p in model.parameters())}))"
    )
    env = {**os.environ, "PYTHONPATH": str(folder)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder / "notebooks",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    info = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(folder.resolve()), info["file"]
    assert info["params"] > 0


def test_archives_are_reproducible(archives, tmp_path):
    again = build_archives.build_archive(tmp_path / "gpt2ln-notebooks.zip", student=False)
    assert again.read_bytes() == archives["gpt2ln-notebooks.zip"].read_bytes()
