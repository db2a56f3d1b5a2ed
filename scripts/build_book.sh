#!/usr/bin/env bash
# Set up (unless --no-setup) and build the book into _build/html, executing every
# notebook. -W -n --keep-going: any failing cell or warning fails the build.
# Then the downloads the site links, into _build/html: the notebooks archives
# (gpt2ln-notebooks.zip, gpt2ln-student-notebooks.zip) and, unless --no-pdf, the whole
# book as one PDF (gpt2ln.pdf, printed by Chromium; skipped with a line saying why
# where there is no Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
setup=1 pdf=1
for arg in "$@"; do
  case "$arg" in
    --no-setup) setup=0 ;;
    --no-pdf) pdf=0 ;;
    *) echo "usage: $0 [--no-setup] [--no-pdf]" >&2; exit 2 ;;
  esac
done
source scripts/stages.sh  # each step timed (scripts/test.sh's table of stage times)
[ "$setup" = 0 ] || bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
bash scripts/fetch_vendor.sh  # MathJax and the widget manager, served locally
stage "book build (every notebook executed), offline" \
  bash scripts/offline.sh jupyter-book build . -W -n --keep-going --all

.venv/bin/python scripts/check_exec_times.py
stage "book: notebooks archives" .venv/bin/python scripts/build_archives.py _build/html
[ "$pdf" = 0 ] || stage "book: PDF" bash scripts/offline.sh .venv/bin/python scripts/build_pdf.py --site _build/html
echo "book: open _build/html/index.html"
