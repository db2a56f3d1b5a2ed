#!/usr/bin/env bash
# Set up everything the book and the tests need, in .venv (safe to re-run).
#
# torch is installed first and on its own: on the course's CPU machines
# `torch==2.13.0` is a CPU wheel on local disk. Elsewhere set TORCH_SPEC to the
# torch you want (any release >= 2.4 works), e.g. TORCH_SPEC="torch" or a CPU
# build from PyTorch's own index via PIP_INDEX_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"; }

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing ${TORCH_SPEC:-torch==2.13.0}"
  pip_install "${TORCH_SPEC:-torch==2.13.0}"
fi
echo "setup: installing requirements.txt and the gpt2ln package (editable)"
pip_install -r requirements.txt
pip_install --no-deps -e .
.venv/bin/python -c "import torch, gpt2ln; print(f'setup: done (torch {torch.__version__}, gpt2ln {gpt2ln.__version__})')"
