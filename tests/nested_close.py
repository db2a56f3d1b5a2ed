"""One assertion shared by the widget tests (tests/test_widgets.py, tests/browser): two JSON-like
structures (a figure's state) are equal, their floats to within an absolute tolerance."""

from __future__ import annotations

import math


def assert_nested_close(a, b, tol: float, path: str = "") -> None:
    """Assert a and b (dicts, lists, numbers, strings) are equal, floats to within tol."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_nested_close(a[k], b[k], tol, f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (u, v) in enumerate(zip(a, b, strict=True)):
            assert_nested_close(u, v, tol, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=tol), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"
