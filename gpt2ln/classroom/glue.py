"""``glue``: put a value computed in a chapter into the book's text.

The one glue helper of the book: ``glue(name, value, fmt)`` formats the value, hands it to
myst-nb's ``glue`` inside a kernel of the book build (the value then appears wherever the text
says ``{glue:text}`name```, and not in the cell's output), and returns the text, so anywhere else
(plain Jupyter, Colab) it is an ordinary function that prints nothing.
"""

from __future__ import annotations

from typing import Any


def glue(name: str, value: Any, fmt: str = "") -> str:
    """Put ``format(value, fmt)`` into the book's text as ``{glue:text}`name```, and return it.

    In a kernel with myst-nb installed this is myst-nb's ``glue`` with ``display=False`` (the
    value is not shown in the cell's output); without myst-nb (Colab) it only returns the text.
    """
    text = format(value, fmt)
    try:
        from IPython import get_ipython
        from myst_nb import glue as _glue
    except ImportError:  # outside the book build there is no text to put it into
        return text
    if get_ipython() is not None:  # in a kernel: the build reads the glued value from the output
        _glue(name, text, display=False)
    return text


def span(lo: Any, hi: Any, fmt: str = "", sep: str = " to ") -> str:
    """The range ``lo to hi`` as text, or one number when both ends print the same.

    A summary such as "0.14 to 0.14 times as large" says nothing a single number does not, and
    it reads as a spread that is not there; ``span(0.1401, 0.1398, ".2f")`` gives ``"0.14"``.
    """
    a, b = format(lo, fmt), format(hi, fmt)
    return a if a == b else f"{a}{sep}{b}"
