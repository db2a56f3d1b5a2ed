"""The package's shape: no import cycle inside gpt2ln, and a forward path small enough to read.

Both are read from the source with ``ast`` and ``tokenize``, without importing anything."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpt2ln"
#: the forward path (model.py and what it imports at module level) may hold at most this many lines
#: of code; loading and device are imported by it only for from_pretrained and are not counted
MAX_FORWARD_LOC = 450
# loading and device build no part of the forward; fused is the optional compiled speed path of the
# RMSNorm/DyT modules (inference only), kept out of the readable teaching path like the GEMV.
NOT_FORWARD = {"gpt2ln.loading", "gpt2ln.device", "gpt2ln.fused"}


def _modules() -> dict[str, Path]:
    """``{"gpt2ln.model": path, "gpt2ln": path to __init__.py, "gpt2ln.exercises.ch07": ...}``."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


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


def test_the_reader_finds_the_modules():
    modules = _modules()
    expected = {"gpt2ln", "gpt2ln.model", "gpt2ln.loading", "gpt2ln.kv_cache", "gpt2ln.exercises.ch07"}
    assert expected <= set(modules)
    assert _imports("gpt2ln.blocks", modules["gpt2ln.blocks"], modules, True) == {
        "gpt2ln.attention",
        "gpt2ln.config",
        "gpt2ln.norms",
    }


def test_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_inside_gpt2ln():
    """Every import counts, those inside functions too: a cycle hidden in a function is still one."""
    modules = _modules()
    graph = {name: _imports(name, path, modules, top_level_only=False) for name, path in modules.items()}
    assert _find_cycle(graph) is None, f"import cycle: {' -> '.join(_find_cycle(graph))}"


def test_loading_does_not_import_the_model():
    modules = _modules()
    assert "gpt2ln.model" not in _imports("gpt2ln.loading", modules["gpt2ln.loading"], modules, False)


def test_forward_path_fits_in_the_line_budget():
    """model.py plus every gpt2ln module it imports at module level (transitively), except loading
    device and fused: at most MAX_FORWARD_LOC lines of code."""
    modules = _modules()
    seen, todo = set(), ["gpt2ln.model"]
    while todo:
        name = todo.pop()
        if name not in seen and name not in NOT_FORWARD:
            seen.add(name)
            todo += _imports(name, modules[name], modules, top_level_only=True)
    assert {"gpt2ln.model", "gpt2ln.blocks", "gpt2ln.attention", "gpt2ln.norms", "gpt2ln.config"} <= seen
    counts = {name: _code_lines(modules[name]) for name in sorted(seen)}
    assert sum(counts.values()) <= MAX_FORWARD_LOC, counts
