"""Write the set-up cell (the first code cell) of every notebook, identically.

The cell installs gpt2ln where it is missing (Colab). On the site it is not shown (tag
``remove-cell``); in Colab it is one folded line (a form cell: ``#@title`` and
``"cellView": "form"``). Only that cell changes; the rest of each file is written back
byte for byte as it was (json, indent 1, non-ASCII kept). Run it again after a merge:

    python scripts/set_setup_cell.py          # rewrite the cell where it differs
    python scripts/set_setup_cell.py --check  # exit 1 if a notebook's cell differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TITLE = "#@title Setup: install gpt2ln where it is missing (Colab)"
SOURCE = f'''{TITLE}
# In Colab (or anywhere gpt2ln is missing) install the course package and what the notebooks
# use (the [book] extra: matplotlib, ipywidgets, transformers); where gpt2ln is installed, nothing.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("gpt2ln") is None:
    REPO, BRANCH = "https://github.com/gpt2ln/gpt2ln", "main"  # _config.yml's repository: url, branch
    spec = os.environ.get("GPT2LN_PIP_SPEC", f"gpt2ln[book] @ git+{{REPO}}@{{BRANCH}}")  # tests: a wheel
    print(f"gpt2ln is not installed: pip install {{spec}}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)
    importlib.invalidate_caches()'''
TAG = "remove-cell"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def fix(cell: dict) -> dict:
    """The cell with the canonical source, the tag and the form view (other metadata kept)."""
    meta = dict(cell.get("metadata", {}))
    tags = [t for t in meta.get("tags", []) if t != TAG]
    meta["cellView"] = "form"
    meta["tags"] = [TAG, *tags]
    return {**cell, "metadata": meta, "source": _lines(SOURCE)}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    differ = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        i = next(k for k, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
        new = fix(nb["cells"][i])
        if new == nb["cells"][i]:
            continue
        differ.append(path.name)
        if not check:
            nb["cells"][i] = new
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    verb = "differ" if check else "rewritten"
    print(f"set-up cell {verb}: {', '.join(differ) or 'none'}")
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
