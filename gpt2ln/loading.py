"""Moved: ``gpt2ln.loading`` (loading weights) is now ``gpt2ln.model.loading``.

Kept for notebooks handed out before the move: importing it gives that module itself (so a
change to one of its attributes changes the real one) and warns where the code lives now.
"""

import importlib
import sys
import warnings

warnings.warn(
    "gpt2ln.loading moved to gpt2ln.model.loading; import it from there", DeprecationWarning, stacklevel=2
)
sys.modules[__name__] = importlib.import_module("gpt2ln.model.loading")
