"""The classroom: what turns the package into a course (exercises, grading, live figures, glue)."""

from .glue import glue

__all__ = ["glue"]
