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

# The browser tests (tests/browser) drive a system Chromium through Playwright (never
# `playwright install`): install Debian's where we can, as CI does.
have_browser() {
  [ -n "${CHROMIUM:-}" ] && [ -x "$CHROMIUM" ] && return 0
  command -v chromium || command -v chromium-browser || command -v google-chrome
} >/dev/null 2>&1
if ! have_browser; then
  sudo=""
  [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; }; then
    echo "setup: installing Debian's chromium for the browser tests"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null \
      || echo "setup: could not install chromium: the browser tests will skip (in CI they fail)"
  else
    echo "setup: no Chromium: the browser tests will skip; to run them, apt-get install chromium as root or set CHROMIUM=/path/to/chromium"
  fi
fi
.venv/bin/python -c "import torch, gpt2ln; print(f'setup: done (torch {torch.__version__}, gpt2ln {gpt2ln.__version__})')"
