"""Moved: ``gpt2ln.seeds`` (several seeds at once) is now ``gpt2ln.lab.seeds``, and its ``glue`` is
``gpt2ln.classroom.glue``.

Kept for notebooks handed out before the move: every name of ``gpt2ln.lab.seeds`` reads through
from here, and ``glue`` is the classroom's. It warns where the code lives now.
"""

import warnings
from typing import Any

from .classroom.glue import glue
from .lab import seeds as _seeds

warnings.warn(
    "gpt2ln.seeds moved to gpt2ln.lab.seeds (glue: gpt2ln.classroom.glue); import them from there",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str) -> Any:
    return getattr(_seeds, name)


__all__ = [*(n for n in dir(_seeds) if not n.startswith("__")), "glue"]
