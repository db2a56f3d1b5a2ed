"""The package's shape: three layers whose imports run one way (model <- lab <- classroom), no
import cycle, a root that holds only the map and thin aliases, and a forward path small enough to
read. All read from the source with ``ast`` and ``tokenize``, without importing anything."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpt2ln"
#: the forward path (model/gpt2.py and what it imports at module level) may hold at most this many
#: lines of code
MAX_FORWARD_LOC = 450
#: imported by gpt2.py but no part of the forward: loading (for from_pretrained), and the decoding
#: loop with its cache (for generate)
NOT_FORWARD = {"gpt2ln.model.loading", "gpt2ln.model.generate", "gpt2ln.model.kv_cache"}
LAYERS = ("gpt2ln.model", "gpt2ln.lab", "gpt2ln.classroom")
#: what a module of the model may not import at import time (directly): training, grading, live
#: figures, benchmarking, several processes, compiled code
NOT_IN_THE_MODEL = {
    "ctypes",
    "subprocess",
    "multiprocessing",
    "concurrent",
    "tqdm",
    "nbformat",
    "ipywidgets",
    "IPython",
    "myst_nb",
    "matplotlib",
    "torch.profiler",
    "torch._inductor",
    "torch.utils.cpp_extension",
}


def _modules() -> dict[str, Path]:
    """``{"gpt2ln.model": path, "gpt2ln": path to __init__.py, "gpt2ln.exercises.ch07": ...}``."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _external(path: Path) -> set[str]:
    """The modules outside gpt2ln that a file imports at module level (``torch.nn``, ``os``, ...)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] != "gpt2ln"}


def _layer(name: str) -> str | None:
    return next((layer for layer in LAYERS if name == layer or name.startswith(layer + ".")), None)


def _reach(start: list[str], modules: dict[str, Path], top_level_only: bool = True) -> set[str]:
    """Every gpt2ln module that importing ``start`` runs, followed to the end (a package's own
    ``__init__`` aside: importing gpt2ln.model.norms runs gpt2ln/__init__.py, which is the map)."""
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += _imports(name, modules[name], modules, top_level_only)
    return seen


def _imports(name: str, path: Path, modules: dict[str, Path], top_level_only: bool) -> set[str]:
    """The gpt2ln modules that module ``name`` imports (anywhere in it, or at module level only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from . import gemv` names a module; `from .norms import make_norm` names the module norms
            targets = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
            targets = targets or [base]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def _code_lines(path: Path) -> int:
    """Lines holding code: no blank lines, comments or docstrings."""
    source = path.read_text(encoding="utf-8")
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docstrings.update(range(first.lineno, first.end_lineno + 1))
    t = tokenize
    skip = {t.COMMENT, t.NL, t.NEWLINE, t.INDENT, t.DEDENT, t.ENDMARKER}
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_root_shows_three_layers_and_only_aliases_beside_them():
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == {
        "model",
        "lab",
        "classroom",
    }
    root = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= 5, root
    for path in root:  # an alias or facade: a docstring that says where the code is, no code of its own
        tree = ast.parse(path.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree) or ""
        assert "gpt2ln/classroom" in doc or "is now ``gpt2ln." in doc, (path.name, doc)
        defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert set(defs) <= {"__getattr__"}, (path.name, defs)
    init = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8")))
    assert (
        all(f"gpt2ln/{layer}/" in init for layer in ("model", "lab", "classroom")) and "model/gpt2.py" in init
    )


def test_the_import_finder_reads_relative_imports():
    modules = _modules()
    assert {"gpt2ln", "gpt2ln.model", "gpt2ln.model.loading", "gpt2ln.exercises", "gpt2ln.lab.fast"} <= set(
        modules
    )
    assert _imports("gpt2ln.model.blocks", modules["gpt2ln.model.blocks"], modules, True) == {
        "gpt2ln.model.attention",
        "gpt2ln.model.config",
        "gpt2ln.model.hooks",
        "gpt2ln.model.mlp",
        "gpt2ln.model.norms",
    }
    assert "gpt2ln.model.norms" in _imports("gpt2ln.lab.fast", modules["gpt2ln.lab.fast"], modules, True)


def test_the_model_reaches_nothing_of_the_lab_or_the_classroom():
    """At import time, followed to the end; and not even inside a function."""
    modules = _modules()
    model = [n for n in modules if _layer(n) == "gpt2ln.model"]
    reached = _reach(model, modules)
    assert {_layer(n) for n in reached} == {"gpt2ln.model"}, sorted(reached)
    anywhere = _reach(model, modules, top_level_only=False)
    assert {_layer(n) for n in anywhere} == {"gpt2ln.model"}, sorted(anywhere)
    for name in sorted(reached):
        bad = {
            m
            for m in _external(modules[name])
            if any(m == b or m.startswith(b + ".") for b in NOT_IN_THE_MODEL)
        }
        assert not bad, f"{name} imports {sorted(bad)} at import time"


def test_the_lab_imports_nothing_of_the_classroom():
    modules = _modules()
    lab = [n for n in modules if _layer(n) == "gpt2ln.lab"]
    anywhere = _reach(lab, modules, top_level_only=False)
    assert {_layer(n) for n in anywhere} <= {"gpt2ln.model", "gpt2ln.lab"}, sorted(anywhere)


def test_the_direction_check_fails_on_a_wrong_import(tmp_path):
    """The checks above can fail: a model module importing the lab is seen."""
    modules = _modules()
    bad = tmp_path / "norms.py"
    bad.write_text("from ..lab import fast\nimport ctypes\n")
    modules["gpt2ln.model.norms"] = bad
    assert "gpt2ln.lab.fast" in _reach(["gpt2ln.model.norms"], modules)
    assert "ctypes" in _external(bad)


def test_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_inside_gpt2ln():
    """Every import counts, those inside functions too: a cycle hidden in a function is still one."""
    modules = _modules()
    graph = {name: _imports(name, path, modules, top_level_only=False) for name, path in modules.items()}
    assert _find_cycle(graph) is None, f"import cycle: {' -> '.join(_find_cycle(graph))}"


def test_loading_does_not_import_the_model_class():
    modules = _modules()
    assert "gpt2ln.model.gpt2" not in _imports(
        "gpt2ln.model.loading", modules["gpt2ln.model.loading"], modules, False
    )


def test_forward_path_fits_in_the_line_budget():
    """model/gpt2.py plus every gpt2ln module it imports at module level (transitively), except
    loading and the decoding loop: at most MAX_FORWARD_LOC lines of code."""
    modules = _modules()
    seen, todo = set(), ["gpt2ln.model.gpt2"]
    while todo:
        name = todo.pop()
        if name not in seen and name not in NOT_FORWARD:
            seen.add(name)
            todo += _imports(name, modules[name], modules, top_level_only=True)
    readable = {"gpt2ln.model.gpt2", "gpt2ln.model.blocks", "gpt2ln.model.attention", "gpt2ln.model.norms"}
    assert readable | {"gpt2ln.model.config", "gpt2ln.model.mlp", "gpt2ln.model.hooks"} <= seen
    counts = {name: _code_lines(modules[name]) for name in sorted(seen)}
    assert sum(counts.values()) <= MAX_FORWARD_LOC, counts
