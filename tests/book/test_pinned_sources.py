"""Sources the book cites beyond openai/gpt-2 and transformers (tests/test_quotes.py) are pinned:
every link to code on GitHub names a commit, and the RMSNorm reference code that chapter 5
quotes is verbatim, checked against a byte-for-byte copy in book/quotes/."""

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PINNED = ROOT / "book" / "quotes"
RMSNORM = json.loads((PINNED / "bzhangGo-rmsnorm" / "source.json").read_text(encoding="utf-8"))
GITHUB_CODE = re.compile(
    r"https?://github\.com/(?P<repo>[\w.-]+/[\w.-]+)/(?:blob|tree|raw)/(?P<ref>[^/\s)]+)/[^\s)}\"'`>]*"
)


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _texts() -> list[tuple[str, str]]:
    """(where, text) for every notebook cell, book page, the bibliography and the README."""
    found = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text(encoding="utf-8"))["cells"]):
            found.append((f"{nb.name} cell {i}", "".join(cell["source"])))
    pages = [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md")), ROOT / "book" / "references.bib"]
    found += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in pages]
    return found


def test_links_to_code_of_other_projects_name_a_commit():
    links = [(where, m) for where, text in _texts() for m in GITHUB_CODE.finditer(text)]
    assert any(m["repo"] == "karpathy/llm.c" for _, m in links), "the llm.c citation is gone"
    for where, m in links:
        if m["repo"] == "gpt2ln/gpt2ln":
            continue  # the course's own repository
        assert re.fullmatch(r"[0-9a-f]{40}", m["ref"]), f"{where}: {m.group(0)} is not pinned to a commit"


def test_rmsnorm_reference_copy_is_the_file_at_the_stated_commit():
    assert _git_blob_id((ROOT / RMSNORM["file"]).read_bytes()) == RMSNORM["blob"]
    assert _git_blob_id((ROOT / RMSNORM["license_file"]).read_bytes()) == RMSNORM["license_blob"]


def test_chapter_5_quotes_the_rmsnorm_reference_code_verbatim_at_its_permalinks():
    lines = (ROOT / RMSNORM["file"]).read_text(encoding="utf-8").split("\n")
    text = "\n".join(t for where, t in _texts() if where.startswith("05_rmsnorm.ipynb"))
    base = f"https://github.com/{RMSNORM['repo']}/blob/{RMSNORM['commit']}/{RMSNORM['path']}"
    (start, _), (first, last) = RMSNORM["quoted_lines"].values()
    assert f"{base}#L{start})" in text and f"`{lines[start - 1].strip()}`" in text
    assert f"{base}#L{first}-L{last})" in text
    block = "\n".join(line.strip() for line in lines[first - 1 : last])
    fences = re.findall(r"```python\n(.*?)\n\s*```", text, flags=re.S)
    assert any("\n".join(f.strip() for f in fence.split("\n")) == block for fence in fences), (
        f"chapter 5 does not quote lines {first}-{last} of {RMSNORM['path']} verbatim:\n{block}"
    )
    assert "x_normed = x / (rms_x + self.eps)" in block  # the eps-outside-the-root line the text is about
