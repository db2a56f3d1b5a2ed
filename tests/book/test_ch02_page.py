"""Chapter 2 as a reader sees it: the lesson on the page, the checks folded away.

Reads the notebook's source (the built page shows what these tags leave): every cell tagged
``remove-cell`` is a Colab form titled ``#@title Checks: ...``; few asserts and no bookkeeping
words are visible; the exercises come in the order the chapter promises.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

NB = Path(__file__).resolve().parents[2] / "notebooks" / "02_layernorm.ipynb"
CELLS = json.loads(NB.read_text(encoding="utf-8"))["cells"]
HIDDEN = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
BOOKKEEPING = [
    "ATEN_CPU_CAPABILITY",
    "float path",
    "portable path",
    "GPT2LN_SEED",
    "gpt2ln.fused",
    "STATUS",
    "MIN_NUMEL",
    "~/.cache/gpt2ln",
    "worker process",
    "nbval",
    "book/quotes",
    "git blob",
    "component card",
    "myst_nb",
]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


def _tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def _visible(cell: dict) -> bool:
    return not (_tags(cell) & HIDDEN)


def test_check_cells_are_folded_forms_removed_from_the_site():
    for i, cell in enumerate(CELLS):
        if "remove-cell" in _tags(cell):
            assert _src(cell).startswith(("#@title Checks: ", "#@title Setup: ")), f"cell {i}"
            assert cell["metadata"].get("cellView") == "form", f"cell {i}"


def test_at_most_five_visible_asserts():
    n = sum(
        len(re.findall(r"^\s*assert\b", _src(c), re.M))
        for c in CELLS
        if c["cell_type"] == "code" and _visible(c)
    )
    assert n <= 5, n


def test_no_bookkeeping_words_on_the_page():
    for i, cell in enumerate(CELLS):
        if cell["cell_type"] == "markdown" or (_visible(cell) and i > 1):  # cell 1: the shared install cell
            for word in BOOKKEEPING:
                assert word not in _src(cell), f"cell {i}: {word!r}"


def test_glue_comes_from_the_package_once_and_is_never_defined_inline():
    code = "\n".join(_src(c) for c in CELLS if c["cell_type"] == "code")
    assert code.count("from gpt2ln.classroom import glue") == 1
    assert "def glue" not in code


def test_exercise_2_1_comes_before_the_chapters_own_layer_norm():
    where = {
        "exercise": next(i for i, c in enumerate(CELLS) if "### Exercise 2.1" in _src(c)),
        "norm_np": next(i for i, c in enumerate(CELLS) if "def norm_np" in _src(c)),
        "norm_torch": next(i for i, c in enumerate(CELLS) if "def norm_torch" in _src(c)),
    }
    assert where["exercise"] < where["norm_np"] < where["norm_torch"], where
    assert "hide-input" in _tags(CELLS[where["norm_torch"]])  # the exercise's answer, folded


def test_layer_norm_is_built_by_hand_once_in_numpy_and_once_in_torch():
    code = [_src(c) for c in CELLS if c["cell_type"] == "code"]
    defs = [m for s in code for m in re.findall(r"^def (\w+)\(x, g, b", s, re.M)]
    # norm_np, norm_torch, the exercise's answer; the rest are the named mistakes
    assert {"norm_np", "norm_torch", "layer_norm_ex"} <= set(defs)
    assert not {"ln_correct", "layer_norm_64"} & set(defs)


def test_every_glued_name_is_used_in_the_text_and_every_used_name_is_glued():
    code = "\n".join(_src(c) for c in CELLS if c["cell_type"] == "code")
    text = "\n".join(_src(c) for c in CELLS if c["cell_type"] == "markdown")
    glued = set(re.findall(r'glue\("(\w+)"', code))
    used = set(re.findall(r"\{glue:text\}`(\w+)", text))
    assert glued == used, (glued, used)
