#!/usr/bin/env bash
# Set up and run every check: ruff, the unit tests, every notebook under nbval
# (offline), and the book build with -W -n --keep-going.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"
ruff check .
echo "== unit tests and notebooks (nbval), offline"
bash scripts/offline.sh python -m pytest -p no:cacheprovider -n 2 --dist loadfile --nbval-lax tests notebooks
echo "== book build"
bash scripts/build_book.sh --no-setup
