"""The Colab path: each notebook alone, among Colab's preinstalled packages, installs gpt2ln
with its own first cell and runs top to bottom offline under nbval.

scripts/test_colab.sh builds the wheel and .venv-colab (tests/colab/colab-preinstalled.txt:
Colab's packages at Colab's versions, plus nbval; no jupyter-book, no myst-nb) and sets
GPT2LN_COLAB_PYTHON and GPT2LN_COLAB_WHEEL. The first cell reads the pip spec from
GPT2LN_PIP_SPEC, which points it at the wheel instead of GitHub; pip runs with no index, so
the install must be satisfied by what Colab already has. Without those variables (the unit
test run) this module skips.

Each notebook runs in a copy of .venv-colab of its own (hard links: a second or two), so no run
sees what another installed, and two runs can go at once (scripts/test_colab.sh runs two).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PINS = Path(__file__).with_name("colab-preinstalled.txt")
PY = os.environ.get("GPT2LN_COLAB_PYTHON", "")
WHEEL = os.environ.get("GPT2LN_COLAB_WHEEL", "")
# Run .venv-colab's Python outside the repository: there `python -c` puts the checkout on sys.path,
# and its gpt2ln.egg-info (from setup.sh's editable install) would count as an installed gpt2ln.
OUTSIDE = tempfile.gettempdir()
TRASH = ".venv-colab-trash"  # the notebooks' venv copies, once used (scripts/test_colab.sh removes it)
if not (PY and WHEEL):
    pytest.skip("the Colab path runs from scripts/test_colab.sh (it builds the wheel and .venv-colab)",
                allow_module_level=True)


def colab_pins() -> dict[str, str]:
    """{normalized name: version} of every pin in colab-preinstalled.txt."""
    pins = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[norm(name)] = version
    return pins


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(py: str | Path = PY) -> dict[str, str]:
    """{normalized name: version} of every distribution in the venv of ``py`` (.venv-colab by default)."""
    code = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version " \
           "for d in m.distributions()}))"
    run = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True, cwd=OUTSIDE)
    out = run.stdout
    return {norm(k): v for k, v in json.loads(out).items()}


@pytest.fixture
def own_venv():
    """A copy of .venv-colab for one notebook, without gpt2ln; yields its Python.

    Hard links (``cp -al``): pip and Python only add files (and replace them by renaming), so
    nothing done in the copy reaches .venv-colab. The copy's ``bin/python`` is the venv's own
    link to the base interpreter, and a venv's interpreter finds its packages from where it
    sits, so the copy's Python uses the copy's site-packages."""
    venv = Path(PY).parent.parent
    # beside .venv-colab, on its file system (hard links cannot cross one)
    copy = Path(tempfile.mkdtemp(prefix=".venv-colab-run-", dir=venv.parent)) / "venv"
    if subprocess.run(["cp", "-al", str(venv), str(copy)], capture_output=True).returncode != 0:
        shutil.rmtree(copy, ignore_errors=True)  # no hard links here: a plain copy (slower, the same)
        subprocess.run(["cp", "-a", str(venv), str(copy)], check=True)
    py = copy / "bin" / Path(PY).name
    uninstall = [str(py), "-m", "pip", "uninstall", "-y", "-q", "gpt2ln"]
    subprocess.run(uninstall, capture_output=True, cwd=OUTSIDE)
    yield py
    # Out of the way at once, removed after the last notebook (scripts/test_colab.sh): unlinking
    # its ~45,000 files takes 2 s on a quiet machine and up to 20 s beside a running notebook.
    trash = venv.parent / TRASH
    trash.mkdir(exist_ok=True)
    os.replace(copy.parent, trash / copy.parent.name)


def first_cell_spec() -> str:
    """The first cell's pip spec (``gpt2ln[extra] @ git+...``) with the wheel in place of GitHub."""
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    src = next(c for c in nb.cells if c.cell_type == "code").source
    extra = re.search(r'"(gpt2ln\[\w+\]) @ git\+', src)
    assert extra, "the first cell should install gpt2ln[<extra>] @ git+<repository>"
    return f"{extra.group(1)} @ {Path(WHEEL).as_uri()}"


def colab_env(py: str | Path = PY) -> dict[str, str]:
    """The environment a notebook runs in: its venv (.venv-colab or a copy) first on PATH, no path
    to the repository, pip with no index (offline, and nothing of Colab's may be replaced)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PATH=f"{Path(py).parent}{os.pathsep}{env.get('PATH', '')}",
        GPT2LN_PIP_SPEC=first_cell_spec(),
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYDEVD_DISABLE_FILE_VALIDATION="1",  # ipykernel 6.17's debugger note on frozen modules
    )
    return env


def uninstall_gpt2ln() -> None:
    subprocess.run([PY, "-m", "pip", "uninstall", "-y", "-q", "gpt2ln"],
                   capture_output=True, check=True, cwd=OUTSIDE)
    assert "gpt2ln" not in installed()


def test_the_wheel_carries_every_module_and_asset_git_tracks():
    tracked = subprocess.run(["git", "ls-files", "gpt2ln"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    data = ("gpt2ln/assets/", "gpt2ln/lab/fast/csrc/")  # the shipped model and widgets; the C sources
    shipped = [p for p in tracked if p.endswith(".py") or p.startswith(data)]
    assert any(p.startswith("gpt2ln/assets/tiny/") for p in shipped)
    assert {f"gpt2ln/lab/fast/csrc/{f}" for f in ("decode_step.c", "norms.c", "common.h")} <= set(shipped)
    with zipfile.ZipFile(WHEEL) as whl:
        names = set(whl.namelist())
        missing = [p for p in shipped if p not in names]
        assert not missing, f"the wheel lacks {missing}: list them in pyproject.toml's package-data"
        for p in shipped:
            if p.startswith(data):
                assert whl.read(p) == (ROOT / p).read_bytes(), f"{p} differs in the wheel"


def test_colab_venv_holds_colabs_versions_and_no_book_tools():
    have, pins = installed(), colab_pins()
    wrong = {n: (have.get(n), v) for n, v in pins.items() if have.get(n) != v}
    assert not wrong, f"(installed, Colab's) differ: {wrong}: rebuild with scripts/test_colab.sh"
    for tool in ("jupyter-book", "myst-nb"):
        assert tool not in have, f"{tool} is in .venv-colab, but Colab does not preinstall it"
    assert "torch" in have


def test_first_cell_installs_gpt2ln_and_replaces_none_of_colabs_packages(tmp_path):
    uninstall_gpt2ln()
    report = tmp_path / "report.json"
    run = subprocess.run([PY, "-m", "pip", "install", "--dry-run", "--report", str(report),
                          first_cell_spec()], env=colab_env(), capture_output=True, text=True, cwd=OUTSIDE)
    assert run.returncode == 0, (
        "the first cell's install needs a package or version that Colab does not preinstall "
        f"(pip, with no index):\n{run.stderr[-2000:]}"
    )
    to_install = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert to_install == ["gpt2ln"], f"the first cell would install {to_install} on Colab"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_is_one_folded_line_in_colab(path):
    """Colab shows a form cell (first line ``#@title ...``, metadata ``cellView: form``) as its
    title only; the site drops it (``remove-cell``). The runs below execute it all the same."""
    cell = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert cell.source.startswith("#@title Setup: install gpt2ln where it is missing (Colab)\n")
    assert cell.metadata.get("cellView") == "form"
    assert "remove-cell" in cell.metadata.get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_alone_from_its_first_cell_in_colabs_packages(path, tmp_path, own_venv):
    py = own_venv
    before = installed(py)
    assert "gpt2ln" not in before and before == installed(), "the copy should hold .venv-colab, no gpt2ln"
    folder = tmp_path / "colab"
    folder.mkdir()
    shutil.copy(path, folder / path.name)
    # nbval's patience for output (the harness only, not what a Colab user runs)
    shutil.copy(ROOT / "notebooks" / "conftest.py", folder / "conftest.py")
    run = subprocess.run(
        [str(py), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-lax", "--nbval-current-env",
         path.name],
        cwd=folder, env=colab_env(py), capture_output=True, text=True,
    )
    assert run.returncode == 0, f"{path.name} failed alone on Colab's packages:\n{run.stdout[-6000:]}"
    after = installed(py)
    # the first cell installed gpt2ln, from the wheel, not editable, and changed nothing else
    assert after.pop("gpt2ln", None) is not None, "the first cell did not install gpt2ln"
    assert after == before, {n: (before.get(n), after.get(n)) for n in set(before) | set(after)
                             if before.get(n) != after.get(n)}
    code = "import importlib.metadata as m; print(m.distribution('gpt2ln').read_text('direct_url.json'))"
    run = subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True, cwd=OUTSIDE)
    origin = json.loads(run.stdout)
    assert origin["url"] == Path(WHEEL).as_uri() and "archive_info" in origin, origin  # not editable
