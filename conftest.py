"""pytest settings for every run from the repository root, the notebooks under nbval included.

nbval (0.11) waits a hard-coded 5 s for each output message of a cell after the kernel has
replied; when one is late it stops the kernel, so that cell fails with "Timeout of 5 seconds
exceeded waiting for output" and every later cell of the notebook with "Kernel dead on test
start". On a loaded CI machine a kernel can miss 5 s, and one late message then fails the rest
of a chapter. Here the wait is NBVAL_OUTPUT_TIMEOUT seconds (default 60); a cell's own run time
is still bounded by --nbval-cell-timeout. scripts/test_colab.sh's notebooks run alone in an
empty folder: tests/colab copies this file beside each one.
"""

import os

NBVAL_OUTPUT_TIMEOUT = float(os.environ.get("NBVAL_OUTPUT_TIMEOUT", "60"))


def pytest_collection_modifyitems(items):
    for item in items:
        if type(item).__name__ == "IPyNbCell" and hasattr(item, "output_timeout"):
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT
