"""gpt2ln: normalization in transformers, built around GPT-2. The package behind the book.

Three layers, each in its own folder; imports run one way, model <- lab <- classroom:

* ``gpt2ln/model/``: **the model a learner reads.** GPT-2 with pluggable normalization,
  named as in the official code (``ln_1``, ``ln_2``, ``ln_f``, ``c_attn``, ``c_proj``, ``c_fc``,
  ``wte``, ``wpe``). Start reading at ``model/gpt2.py``; ``model/__init__.py`` lists the files in
  reading order. It imports nothing of the other two.
* ``gpt2ln/lab/``: **what the book runs on it.** Data, training, several seeds at once, the
  shipped small model, variance numerics, timing and the benchmark (``python -m gpt2ln.lab.bench``).
  Its corner ``lab/fast/`` holds the fast paths (one-pass norm kernels, the C library, a
  multi-core GEMV, the choice of decoding step); importing ``gpt2ln`` plugs them into the model.
* ``gpt2ln/classroom/``: **the course.** Exercise checks that name the mistake, the exercise
  markup, student notebooks and the nbgrader course (``python -m gpt2ln.classroom.assign``),
  the live figures, and ``glue``.

``from gpt2ln import ...`` gives the names below (the model's and the lab's).
``gpt2ln.exercises`` is the checks' short name. ``gpt2ln.widgets``, ``gpt2ln.seeds`` and
``gpt2ln.loading`` still import, for notebooks handed out before the move, and warn where the code
lives now.
"""

from . import lab, model
from .lab import *  # noqa: F403  (the lab's names; importing it plugs its fast paths into the model)
from .model import *  # noqa: F403  (the model's names)
from .model import GPT2

load_pretrained = GPT2.from_pretrained  # GPT-2 from a local directory, a .safetensors file or the hub

__version__ = "0.1.0"

__all__ = sorted([*model.__all__, *lab.__all__, "load_pretrained"])
