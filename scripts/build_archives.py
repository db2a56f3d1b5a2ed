"""Write the book's notebooks archives into the built site (scripts/build_book.sh calls it).

    python scripts/build_archives.py [OUT_DIR]     # default: _build/html

- ``gpt2ln-notebooks.zip``: every chapter of _toc.yml as a notebook (outputs cleared), the
  course package ``gpt2ln/`` they import (with its small model, corpus and figure scripts),
  ``pyproject.toml``, a ``requirements.txt`` and a README on running them locally;
- ``gpt2ln-student-notebooks.zip``: the same with the student versions of the chapters
  (``python -m gpt2ln.classroom.assign``: each solution replaced by ``raise NotImplementedError()``),
  for instructors.

Everything sits in one top folder (``gpt2ln-notebooks/``, ``gpt2ln-student-notebooks/``).
The archives are byte-for-byte reproducible: sorted entries, fixed timestamps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import zipfile
from pathlib import Path

import nbformat
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from booktoc import ROOT, chapters

ARCHIVES = {"gpt2ln-notebooks.zip": False, "gpt2ln-student-notebooks.zip": True}  # name: student?
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold: reproducible archives
# Installs the course package from the unpacked folder, with what the chapters use beyond it
# (its `book` extra: matplotlib, ipywidgets, transformers), and JupyterLab to open them.
REQUIREMENTS = """\
# From the unpacked folder: pip install -r requirements.txt
# The course package gpt2ln (in this folder), with torch, numpy, safetensors, huggingface_hub,
# tqdm, nbformat, and its `book` extra: matplotlib, ipywidgets, transformers.
-e .[book]
jupyterlab>=4
"""


def _title(notebook: nbformat.NotebookNode, fallback: str) -> str:
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _cleared(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    notebook = nbformat.from_dict(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return notebook


def _readme(titles: list[tuple[str, str]], student: bool, repo_url: str) -> str:
    name = "gpt2ln-student-notebooks" if student else "gpt2ln-notebooks"
    if student:
        what = [
            "The *student versions* of the chapters of *gpt2ln: normalization in transformers, built",
            "around GPT-2*, as Jupyter notebooks: in each exercise the solution is replaced by",
            "`raise NotImplementedError()`, and the check cell after it says whether the function you",
            "write is right.",
        ]
    else:
        what = [
            "The chapters of *gpt2ln: normalization in transformers, built around GPT-2*, as Jupyter",
            "notebooks with their outputs cleared.",
        ]
    lines = [
        f"# {name}",
        "",
        *what,
        "Next to them is the course package `gpt2ln` that they import (`gpt2ln/`, with the small",
        "trained GPT-2 and the text corpus the chapters use), so they run with no download beyond",
        "the installation.",
        "",
        "## Run them locally",
        "",
        "You need Python 3.10 or newer. From this folder:",
        "",
        "```bash",
        "python -m venv .venv",
        ". .venv/bin/activate            # on Windows: .venv\\Scripts\\activate",
        "pip install -r requirements.txt  # the package in this folder, its dependencies and JupyterLab",
        "jupyter lab notebooks/",
        "```",
        "",
        "Run each notebook from top to bottom. Nothing needs a GPU: on Linux without one,",
        "`pip install torch --index-url https://download.pytorch.org/whl/cpu` before the line above",
        "saves the large CUDA build of PyTorch. Chapters 9 and 10 load the released GPT-2 small from",
        "the Hugging Face Hub when it answers, and the shipped small model when not (set",
        "`HF_HUB_OFFLINE=1` to stay offline).",
        "",
    ]
    if student:
        lines += [
            "These notebooks were written by `python -m gpt2ln.classroom.assign notebooks -o student/`",
            "from the book's chapters; the book's page *For instructors* explains how to hand them out,",
            "and how to grade them, with nbgrader or without.",
            "",
        ]
    lines += ["## The chapters", ""]
    lines += [f"- `notebooks/{file}`: {title}" for file, title in titles]
    lines += ["", f"The book's sources, its tests and its issue tracker: {repo_url}", ""]
    return "\n".join(lines)


def _add(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def _package_files(root: Path) -> list[Path]:
    package = root / "gpt2ln"
    return sorted(
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def build_archive(out: Path, student: bool, root: Path = ROOT) -> Path:
    """Write one archive to ``out`` (a .zip path) and return it."""
    from gpt2ln.classroom.assign import make_student_notebook

    top = out.name.removesuffix(".zip")
    notebooks = [doc.source for doc in chapters(root) if doc.is_notebook]
    if not notebooks:
        raise ValueError(f"{root / '_toc.yml'} lists no notebooks")
    files: dict[str, bytes] = {}
    titles = []
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        titles.append((path.name, _title(notebook, path.stem)))
        if student:
            notebook, _removed = make_student_notebook(notebook, str(path.relative_to(root)))
        notebook = _cleared(notebook)
        nbformat.validate(notebook)
        files[f"notebooks/{path.name}"] = nbformat.writes(notebook).encode("utf-8") + b"\n"
    for path in _package_files(root):
        files[path.relative_to(root).as_posix()] = path.read_bytes()
    files["pyproject.toml"] = (root / "pyproject.toml").read_bytes()
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    repo_url = (config.get("repository") or {}).get("url", "")
    files["README.md"] = _readme(titles, student, repo_url).encode("utf-8")
    files["requirements.txt"] = REQUIREMENTS.encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".zip.tmp", delete=False) as tmp:
        with zipfile.ZipFile(tmp, "w") as zf:
            for name in sorted(files):
                _add(zf, f"{top}/{name}", files[name])
    Path(tmp.name).replace(out)  # never leave a half-written archive on the site
    return out


def build_archives(out_dir: Path, root: Path = ROOT) -> list[Path]:
    """Write both archives into ``out_dir``; return their paths."""
    return [build_archive(Path(out_dir) / name, student, root) for name, student in ARCHIVES.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=str(ROOT / "_build" / "html"))
    args = parser.parse_args(argv)
    for path in build_archives(Path(args.out_dir)):
        print(f"build_archives: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
