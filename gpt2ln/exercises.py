"""``gpt2ln.exercises``: the exercise checks, by their short name (the chapters and the student
notebooks import them from here). The code lives in ``gpt2ln/classroom/exercises/``; this module is
that package (and ``gpt2ln.exercises.ch01`` ... are its modules), not a copy."""

import sys

from .classroom import exercises as _exercises

for _name, _module in list(sys.modules.items()):  # gpt2ln.exercises.chNN is gpt2ln.classroom.exercises.chNN
    if _name.startswith("gpt2ln.classroom.exercises."):
        sys.modules["gpt2ln.exercises." + _name.rsplit(".", 1)[1]] = _module
sys.modules[__name__] = _exercises
