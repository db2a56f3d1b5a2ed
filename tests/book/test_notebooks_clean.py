"""Notebooks are committed clean, start the same way, and are all in the book."""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has stored outputs: clear them"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_a_title_and_the_colab_setup_cell(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert 'importlib.util.find_spec("gpt2ln") is None' in first_code.source
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_table_of_contents(path):
    assert f"notebooks/{path.stem}" in (ROOT / "_toc.yml").read_text()


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in notebooks/"


def first_code_cell(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return next(c for c in nb.cells if c.cell_type == "code").source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_setup_cell_installs_from_the_repository_and_branch_in_config(path):
    import yaml

    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    url, branch = repo["url"], repo["branch"]
    source = first_code_cell(path)
    assert f'REPO, BRANCH = "{url}", "{branch}"' in source, (
        f"{path.name}: the set-up cell should install from _config.yml's repository ({url}, branch {branch})"
    )
    assert '@ git+{REPO}@{BRANCH}"' in source and '"GPT2LN_PIP_SPEC"' in source


def test_every_notebook_has_the_same_setup_cell():
    cells = {path.name: first_code_cell(path) for path in NOTEBOOKS}
    first = cells[NOTEBOOKS[0].name]
    assert [name for name, cell in cells.items() if cell != first] == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_setup_cell_is_hidden_on_the_site_and_one_folded_line_in_colab(path):
    """remove-cell: the site does not show it; a form cell (#@title + cellView form): Colab
    shows its title only. scripts/set_setup_cell.py writes it in every notebook."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    assert "remove-cell" in cell.metadata.get("tags", []), f"{path.name}: tag the set-up cell remove-cell"
    assert cell.metadata.get("cellView") == "form", f'{path.name}: the set-up cell needs "cellView": "form"'
    assert cell.source.splitlines()[0] == "#@title Setup: install gpt2ln where it is missing (Colab)"


def test_setup_cell_is_what_the_script_writes():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "set_setup_cell.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_setup_cell_installs_an_extra_of_only_what_colab_preinstalls():
    """The first cell's extra adds nothing Colab lacks (no jupyter-book, no myst-nb): the
    Colab-path test (tests/colab) checks the versions too."""
    extra = re.search(r'"gpt2ln\[(\w+)\] @ git\+', first_code_cell(NOTEBOOKS[0])).group(1)
    line = re.search(rf"^{extra} = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert line, f"pyproject.toml has no one-line extra {extra!r}"
    wanted = re.findall(r'"([^"]+)"', line.group(1))
    assert wanted
    colab = (ROOT / "tests" / "colab" / "colab-preinstalled.txt").read_text().lower().replace("_", "-")
    for requirement in wanted:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")
        assert f"\n{name}==" in colab, f"gpt2ln[{extra}] asks for {name}, which Colab does not preinstall"


def test_colab_launch_button_points_at_a_github_repository():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"].startswith("https://github.com/")
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solution_cells_are_hidden_behind_a_toggle_in_the_book(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "### BEGIN SOLUTION" in cell.source:
            assert "hide-input" in cell.metadata.get("tags", []), (
                f"{path.name} cell {i} holds a solution: tag it hide-input so the book hides it"
            )


def test_set_repository_rewrites_only_the_first_cells_repository_line(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("set_repository", ROOT / "scripts" / "set_repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    copy = tmp_path / NOTEBOOKS[0].name
    copy.write_bytes(NOTEBOOKS[0].read_bytes())
    assert module.set_repository(copy, "https://github.com/someone/fork", "pages")
    before, after = NOTEBOOKS[0].read_text().splitlines(), copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and '\\"https://github.com/someone/fork\\", \\"pages\\"' in changed[0][1]
    assert not module.set_repository(copy, "https://github.com/someone/fork", "pages")  # already set
