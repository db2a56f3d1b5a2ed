"""pytest settings for the notebooks under nbval (the chapters in this folder).

nbval (0.11) waits a hard-coded 5 s for each output message of a cell after the kernel has
replied; when one is late it stops the kernel, so that cell fails with "Timeout of 5 seconds
exceeded waiting for output" and every later cell of the notebook with "Kernel dead on test
start". On a loaded CI machine a kernel can miss 5 s, and one late message then fails the rest
of a chapter. Here the wait is NBVAL_OUTPUT_TIMEOUT seconds (default 60); a cell's own run time
is still bounded by --nbval-cell-timeout. And a cell that fails with the kernel gone says how
it went (its exit code and signal: SIGKILL is what the kernel's OOM killer sends, or that nbval
stopped it). scripts/test_colab.sh's notebooks run alone in an empty folder: tests/colab copies
this file beside each one.
"""

import os
import signal

import pytest

NBVAL_OUTPUT_TIMEOUT = float(os.environ.get("NBVAL_OUTPUT_TIMEOUT", "60"))


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "output_timeout")


def pytest_collection_modifyitems(items):
    for item in items:
        if _is_nbval_cell(item):
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT


def _exit_code(kernel) -> int | None:
    """The kernel process's exit code, None while it runs (or where it cannot be read)."""
    proc = getattr(getattr(getattr(kernel, "km", None), "provisioner", None), "process", None)
    return proc.poll() if proc is not None else None


try:  # remember how the kernel had ended before nbval's stop() shuts it down and forgets it
    from nbval.kernel import RunningKernel
except ImportError:  # no nbval: nothing to patch
    pass
else:
    _nbval_stop = RunningKernel.stop

    def _stop(self):
        self.gpt2ln_exit_code = _exit_code(self)
        _nbval_stop(self)

    RunningKernel.stop = _stop


def _kernel_gone(item) -> str | None:
    """Why the notebook's kernel is no longer running, or None while it runs."""
    kernel = getattr(item.parent, "kernel", None)
    if kernel is None:
        return None
    if getattr(kernel, "km", None) is not None:
        code = _exit_code(kernel)
    else:  # nbval's RunningKernel.stop() deletes km
        code = getattr(kernel, "gpt2ln_exit_code", None)
        if code is None:
            return (
                "nbval stopped this notebook's kernel while it ran (a cell ran past "
                "--nbval-cell-timeout, or an output came later than NBVAL_OUTPUT_TIMEOUT): "
                "see the first failing cell"
            )
    if code is None:
        return None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        oom = ": the OOM killer sends SIGKILL when memory runs out" if -code == signal.SIGKILL else ""
        return f"the kernel process was killed by {name} (exit code {code}){oom}"
    return f"the kernel process exited with code {code}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and _is_nbval_cell(item):
        why = _kernel_gone(item)
        if why:
            report.sections.append(("kernel", why))
