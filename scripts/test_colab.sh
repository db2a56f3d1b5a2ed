#!/usr/bin/env bash
# The Colab path, tested: build the gpt2ln wheel, make .venv-colab hold only what Colab
# preinstalls (tests/colab/colab-preinstalled.txt, at Colab's versions) plus the test
# harness (nbval), then run each notebook alone in an empty folder and its own copy of that
# venv, offline, under nbval, two at a time:
# its first cell installs the wheel as it installs gpt2ln from GitHub on Colab.
# Called by scripts/test.sh; runs on its own too, after scripts/setup.sh.
# .venv-colab is restored from the venv cache (scripts/venv_cache.sh) when its stamp is cached.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
start=$(date +%s)
echo "== the Colab path: each notebook alone, in Colab's preinstalled packages, from the wheel, offline"
venv=.venv-colab
pins=tests/colab/colab-preinstalled.txt
py=.venv/bin/python  # the course's own venv (scripts/setup.sh) builds the wheel and runs pytest
[ -x "$py" ] || py=python
pip_in() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }

# .venv-colab, rebuilt whenever the pins or the torch change. torch first, on its own, as
# scripts/setup.sh does (TORCH_SPEC, default the course's torch==2.13.0 CPU wheel); the pins
# then hold every other package at Colab's version.
harness="nbval==0.11.0"  # the test harness, beside Colab's own pytest and ipykernel
stamp="$(sha256sum < "$pins" | cut -c1-16) ${TORCH_SPEC:-torch==2.13.0} $harness"
# every package pinned: the stamp (and the Python) define it, no date needed
cache_key=$(echo "$stamp $("${PYTHON:-python3}" -c 'import sys; print(sys.executable, sys.version)')" \
  | sha256sum | cut -c1-16)
set_up_colab() {
  bash scripts/venv_cache.sh restore "$venv" "$cache_key"
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.colab-stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "test_colab: building $venv (Colab's preinstalled packages, no jupyter-book, no myst-nb)"
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    pip_in "${TORCH_SPEC:-torch==2.13.0}" -c "$pins"
    pip_in -r "$pins" "$harness"
    echo "$stamp" > "$venv/.colab-stamp"
    bash scripts/venv_cache.sh save "$venv" "$cache_key"
  fi
}
stage "colab: set-up: $venv" set_up_colab

# The wheel, built from the files git tracks (or would: untracked, not ignored), as a
# `pip install git+<repository>` builds it from a clone.
work=$(mktemp -d)
trap 'rm -rf "$work" .venv-colab-trash' EXIT  # the notebooks' used venv copies (tests/colab)
mkdir "$work/src" "$work/wheels"
git ls-files -z -co --exclude-standard | tar -c --null -T - | tar -x -C "$work/src"
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps "$work/src" -w "$work/wheels"
wheel=$(ls "$work"/wheels/gpt2ln-*.whl)
echo "test_colab: built $(basename "$wheel"); set-up took $(( $(date +%s) - start )) s"

# Two notebooks at a time, each in its own copy of $venv (the test's own_venv fixture), taken
# by whichever worker is free (worksteal: chapters 7 and 11 take ten times the others).
stage "colab: each notebook alone, from the wheel, offline" env GPT2LN_COLAB_PYTHON="$PWD/$venv/bin/python" \
  GPT2LN_COLAB_WHEEL="$wheel" bash scripts/offline.sh "$py" -m pytest -p no:cacheprovider -v -rs --durations=0 \
  -n 2 --dist worksteal tests/colab
stage "colab: removing the notebooks' venv copies" rm -rf .venv-colab-trash
echo "test_colab: the Colab path took $(( $(date +%s) - start )) s in all"
