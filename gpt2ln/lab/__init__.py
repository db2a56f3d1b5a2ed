"""The lab: what the book runs on the model (data, training, seeds, measurements, the fast paths).

* ``data.py``: the byte tokenizer and the shipped Shakespeare corpus.
* ``train.py``: a small, seeded training loop (AdamW, warm-up and cosine), evaluation, ``get_device``.
* ``seeds.py``: several seeds of a training run at once, on worker processes; ``Spread``.
* ``tiny.py``: the small GPT-2 the package ships; ``pretrained.py``: the released GPT-2 from
  the Hub, or the small one offline.
* ``records.py``: results of runs too long for the build, committed with the script that made them.
* ``numerics.py``: one-pass, two-pass and Welford variance, and Welford's merge.
* ``timing.py``: timing with warm-up and interleaving, copy bandwidth; ``bench.py``: the benchmark
  record (``python -m gpt2ln.lab.bench``).
* ``fast/``: the fast paths (one-pass norm kernels, the C library, the multi-core GEMV, the choice
  of decoding step); importing the lab plugs them into the model.

The lab imports the model and nothing of the classroom.
"""

from . import fast  # noqa: F401  (plugs the fast paths into the model)
from .data import ByteTokenizer, get_batch, load_corpus, load_tokens
from .numerics import (
    variance_one_pass,
    variance_two_pass,
    variance_welford,
    variance_welford_parallel,
    welford_merge,
)
from .pretrained import load_gpt2_or_tiny
from .timing import copy_bandwidth, time_fn, time_interleaved
from .tiny import load_tiny
from .train import TrainConfig, evaluate_loss, get_device, lr_at, lr_sensitivity, train

__all__ = [
    "ByteTokenizer",
    "TrainConfig",
    "copy_bandwidth",
    "evaluate_loss",
    "get_batch",
    "get_device",
    "load_corpus",
    "load_gpt2_or_tiny",
    "load_tiny",
    "load_tokens",
    "lr_at",
    "lr_sensitivity",
    "time_fn",
    "time_interleaved",
    "train",
    "variance_one_pass",
    "variance_two_pass",
    "variance_welford",
    "variance_welford_parallel",
    "welford_merge",
]
