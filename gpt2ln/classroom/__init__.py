"""The classroom: what turns the book into a course.

* ``exercises/``: the checks behind every exercise, one module per chapter; each names the mistake.
* ``markup.py``: the exercise markup in the chapters (solution regions, points) and its parser.
* ``assign.py``: student notebooks and the nbgrader course (``python -m gpt2ln.classroom.assign``);
  ``nbgrader_course.py`` writes the course.
* ``live_figures.py``: the figures a reader drags in the browser (``live`` in the chapters).
* ``glue.py``: ``glue``, which puts a computed value into the book's text, and ``span``, a range
  "a to b" that is one number when both ends print the same.

The classroom imports the model and the lab; nothing imports the classroom at import time.
"""

from .glue import glue, span

__all__ = ["glue", "span"]
