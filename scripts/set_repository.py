"""Copy _config.yml's `repository: url` and `branch` into every notebook's first cell.

Colab opens a notebook without _config.yml, so the first cell repeats the repository it
installs gpt2ln from (`REPO, BRANCH = "...", "..."`); tests/test_notebooks_clean.py checks
that they agree. After changing `repository:` in _config.yml (a fork), run
``python scripts/set_repository.py``. Only that one line of each notebook changes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r'^(\s*REPO, BRANCH = )"[^"]*", "[^"]*"', re.M)


def set_repository(notebook: Path, url: str, branch: str) -> bool:
    """Rewrite the ``REPO, BRANCH`` line of ``notebook``'s first code cell; True if it changed."""
    text = notebook.read_text(encoding="utf-8")
    nb = json.loads(text)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(cell["source"])
    if not LINE.search(source):
        raise ValueError(f"{notebook.name}: expected a line `REPO, BRANCH = ...` in the first code cell")
    new = LINE.sub(lambda m: f'{m.group(1)}"{url}", "{branch}"', source, count=1)
    cell["source"] = new.splitlines(keepends=True)
    out = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if out == text:
        return False
    notebook.write_text(out, encoding="utf-8")
    return True


def main() -> int:
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    url, branch = repo["url"], repo.get("branch", "main")
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    changed = [nb.name for nb in notebooks if set_repository(nb, url, branch)]
    print(f"set_repository: {url} @ {branch}; changed {len(changed)} notebooks {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
