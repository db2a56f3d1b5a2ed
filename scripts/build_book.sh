#!/usr/bin/env bash
# Set up (unless --no-setup) and build the book into _build/html, executing every
# notebook. -W -n --keep-going: any failing cell or warning fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "--no-setup" ] || bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
bash scripts/fetch_vendor.sh  # MathJax and the widget manager, served locally
bash scripts/offline.sh jupyter-book build . -W -n --keep-going --all

.venv/bin/python scripts/check_exec_times.py
echo "book: open _build/html/index.html"
