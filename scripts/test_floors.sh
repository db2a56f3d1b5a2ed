#!/usr/bin/env bash
# The floors lane: every notebook under nbval, and the unit tests that touch a dependency,
# in .venv-floors, where every direct dependency in requirements.txt sits at the LOWEST
# version requirements.txt allows (uv's --resolution lowest-direct). A notebook or a test
# that needs a newer release than requirements.txt declares fails here.
#
# torch is held at the torch of .venv (the local 2.13.0 CPU wheel on the course's machines):
# a CPU torch 2.4 is not on PyPI (PyPI's Linux torch is a multi-GB CUDA build), so torch's
# own floor is not tested here. Python is 3.11 (FLOORS_PYTHON), the one the torch wheel fits.
#
# The notebooks run on ATen's portable float path (ATEN_CPU_CAPABILITY=default; set
# FLOORS_ATEN_CPU_CAPABILITY to another value, or empty for the machine's own path): in
# scripts/test.sh's matrix this lane covers both the floors and the portable float path.
#
# .venv-floors is rebuilt whenever requirements.txt, pyproject.toml, the held torch or this
# script change (a hash stamp inside it). A clean clone restores it from the venv cache
# (scripts/venv_cache.sh; key: the stamp and the UTC date, since indirect dependencies resolve
# to their newest) and builds it only on a miss. Building needs the package registry; the
# tests then run offline.
# Usage: bash scripts/test_floors.sh [pytest args for the notebook run, default: notebooks]
#   FLOORS_UNIT_TESTS="tests/x.py ..." runs those unit tests instead of the list below
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh

VENV=${FLOORS_VENV:-.venv-floors}
FLOORS_PYTHON=${FLOORS_PYTHON:-3.11}
MAIN_PY=${MAIN_PYTHON:-.venv/bin/python}  # has uv (requirements.txt) and the torch to hold
[ -x "$MAIN_PY" ] || { echo "test_floors.sh: no .venv: run scripts/setup.sh first" >&2; exit 1; }
"$MAIN_PY" -m uv --version >/dev/null 2>&1 || "$MAIN_PY" -m pip install --quiet --disable-pip-version-check uv
uv() { "$MAIN_PY" -m uv "$@"; }

torch_version=$("$MAIN_PY" -c "import torch; print(torch.__version__)")
overrides=$(mktemp)
trap 'rm -f "$overrides"' EXIT
echo "torch==$torch_version" >"$overrides"
# uv reads no pip config: pass on the wheel folders pip is configured with (the local torch).
find_links=()
for dir in $(
  { echo "${PIP_FIND_LINKS:-}"; "$MAIN_PY" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p"; } \
    | tr ' ' '\n' | sort -u
); do
  [ -d "$dir" ] && find_links+=(--find-links "$dir")
done

stamp=$(cat requirements.txt pyproject.toml "$overrides" "$0" | sha256sum | cut -d' ' -f1)
cache_key=$(echo "$stamp $FLOORS_PYTHON $(date -u +%F)" | sha256sum | cut -c1-16)
set_up_floors() {
  bash scripts/venv_cache.sh restore "$VENV" "$cache_key"
  if [ "$(cat "$VENV/.floors-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "== floors: building $VENV (Python $FLOORS_PYTHON, lowest-direct, torch==$torch_version)"
    rm -rf "$VENV"
    UV_PYTHON_DOWNLOADS=never uv venv --quiet --python "$FLOORS_PYTHON" "$VENV"
    uv pip install --quiet --python "$VENV/bin/python" --resolution lowest-direct \
      "${find_links[@]}" --override "$overrides" -r requirements.txt
    echo "$stamp" >"$VENV/.floors-stamp"
    bash scripts/venv_cache.sh save "$VENV" "$cache_key"
  fi
  # gpt2ln from this clone, every time (a restored venv has none)
  uv pip install --quiet --python "$VENV/bin/python" --no-deps -e .
}
stage "floors: set-up: $VENV" set_up_floors
PY=$VENV/bin/python
# two workers, one file each (as the main lane); FLOORS_XDIST="-p no:xdist" runs them in one
read -r -a xdist <<<"${FLOORS_XDIST:--n 2 --dist loadfile}"
"$PY" - <<'EOF'
from importlib.metadata import version
names = ["torch", "transformers", "numpy", "matplotlib", "ipywidgets", "safetensors",
         "huggingface_hub", "tqdm", "jupyter-book", "nbval", "pytest"]
print("== floors:", ", ".join(f"{n} {version(n)}" for n in names))
EOF

# The unit tests that touch a dependency's API where a floor can differ from the newest
# release. Every unit test also runs in the main lane (scripts/test.sh, .venv, newest); this
# lane runs again only what the floors could break, each file for the reason given:
#   test_loading.py, test_model.py  transformers loading and matching (tests/hf_utils.py),
#                                   safetensors, huggingface_hub
#   test_tiny.py                    transformers loads the shipped tiny model; safetensors
#   test_train.py                   tqdm (gpt2ln/lab/train.py)
#   test_widgets.py                 nbformat, nbclient: the live-figure cells (setup + live
#                                   cells only), executed, their HTML output parsed
#   test_assign.py                  nbformat (gpt2ln/classroom/assign.py); nbclient runs each
#                                   student notebook from its setup to its first exercise check
#   test_notebooks_clean.py         nbformat
#   test_norms.py, test_variants.py, test_exercises_*.py   numpy (arrays in and out)
#   test_requirements.py            packaging, and the files this lane reads
# (test_assign's student runs used to execute each chapter up to its first exercise, its
# training included: 2,078 s of 3,078 s of test time in a measured run of every unit test
# (under load), and the long pole of this stage's 470 s. They now skip the run-up, whose
# cells are the instructor notebook's own, which the notebook stage below runs in full.)
# Left out: test_quotes.py (checks the book's quotes against the installed transformers
# source, which the book pins to one 5.x release on purpose), test_nbgrader.py (nbgrader
# is in requirements-nbgrader.txt, not requirements.txt), tests/browser (the built site).
unit_tests=(
  tests/model/test_loading.py tests/model/test_model.py tests/lab/test_tiny.py tests/lab/test_train.py
  tests/classroom/test_widgets.py tests/classroom/test_assign.py tests/book/test_notebooks_clean.py
  tests/model/test_norms.py tests/model/test_variants.py tests/classroom/test_exercises_*.py
  tests/book/test_requirements.py
)
# FLOORS_UNIT_TESTS (space-separated paths) runs others instead, e.g. to try this script quickly
if [ -n "${FLOORS_UNIT_TESTS:-}" ]; then read -r -a unit_tests <<<"$FLOORS_UNIT_TESTS"; fi
stage "floors: unit tests, offline" \
  bash scripts/offline.sh "$PY" -m pytest -p no:cacheprovider -q "${xdist[@]}" "${unit_tests[@]}"

# The notebooks on the portable float path: no other lane runs them there (the book build
# and the Colab lane run the machine's own path).
float_path=${FLOORS_ATEN_CPU_CAPABILITY-default}
notebooks() {
  if [ -n "$float_path" ]; then export ATEN_CPU_CAPABILITY=$float_path; fi
  bash scripts/offline.sh "$PY" -m pytest -p no:cacheprovider -q "${xdist[@]}" --nbval-lax "$@"
}
stage "floors: notebooks (nbval), ATEN_CPU_CAPABILITY=${float_path:-native}, offline" \
  notebooks "${@:-notebooks}"
