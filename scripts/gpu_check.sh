#!/usr/bin/env bash
# On a machine with a CUDA GPU: run the unit tests there, then the side-by-side benchmark,
# writing book/benchmarks/cuda.json (book/performance.md renders it when it exists).
# Usage: bash scripts/gpu_check.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python
"$PY" - <<'PYEOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check.sh: torch sees no CUDA device (torch %s)" % torch.__version__)
print("CUDA device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PYEOF
echo "== unit tests (on the machine with the GPU)"
"$PY" -m pytest -p no:cacheprovider -q --ignore=tests/browser tests
echo "== benchmark on cuda (fp32 and bf16)"
"$PY" -m gpt2ln.lab.bench --device cuda "$@" --out book/benchmarks/cuda.json
