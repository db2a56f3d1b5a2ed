"""Autograded checks for the book's exercises.

Each ``check_<name>(fn)`` runs the learner's function on inputs it chooses, compares
with a reference, and either prints one success line or raises ``AssertionError``
saying which property failed and the likely mistake. Checks are grouped by chapter
(``ch02`` for chapter 2, ...) and re-exported here.
"""

from ._core import call, fail, passed

__all__ = ["call", "fail", "passed"]
