"""Import paths from before the three-layer layout still work for notebooks already handed out:
``gpt2ln.exercises`` is the checks' package itself, and ``gpt2ln.widgets``, ``gpt2ln.seeds`` and
``gpt2ln.loading`` are the moved modules (or read through to them), with a warning that says where
the code lives now."""

import importlib
import subprocess
import sys

import pytest

import gpt2ln


def test_every_public_name_imports_from_the_top():
    for name in gpt2ln.__all__:
        assert getattr(gpt2ln, name) is not None, name
    assert gpt2ln.train.__module__ == "gpt2ln.lab.train"  # the function, no module shadowing it


def test_exercises_is_the_classroom_package_itself():
    import gpt2ln.exercises
    from gpt2ln.classroom import exercises
    from gpt2ln.classroom.exercises import ch04

    assert gpt2ln.exercises is exercises
    assert importlib.import_module("gpt2ln.exercises.ch04") is ch04  # not a second copy
    from gpt2ln.exercises import check_layer_norm  # what student notebooks write

    assert check_layer_norm is exercises.check_layer_norm


@pytest.mark.parametrize(
    ("old", "new", "name"),
    [
        ("gpt2ln.widgets", "gpt2ln.classroom.live_figures", "norm_explorer"),
        ("gpt2ln.loading", "gpt2ln.model.loading", "GPT2_REVISION"),
        ("gpt2ln.seeds", "gpt2ln.lab.seeds", "chapter_seeds"),
    ],
)
def test_an_old_module_path_warns_and_gives_the_code(old, new, name):
    """Run in a fresh interpreter: the warning is raised once, when the module is first imported."""
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    import {old} as old\n"
        f"import {new} as new\n"
        f"assert getattr(old, {name!r}) is getattr(new, {name!r})\n"
        f"assert any({new!r} in str(x.message) and x.category is DeprecationWarning for x in w), w\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_old_seeds_path_keeps_glue():
    with pytest.warns(DeprecationWarning):
        seeds = importlib.reload(importlib.import_module("gpt2ln.seeds"))
    from gpt2ln.classroom import glue

    assert seeds.glue is glue and seeds.run_jobs is importlib.import_module("gpt2ln.lab.seeds").run_jobs


def test_a_patch_through_an_old_path_reaches_the_real_module(monkeypatch):
    import gpt2ln.loading
    from gpt2ln.model import loading

    assert gpt2ln.loading is loading
    monkeypatch.setattr(gpt2ln.loading, "GPT2_REVISION", "x" * 40)
    assert loading.GPT2_REVISION == "x" * 40
