"""tests/browser/readerview.py reads a built page as a reader sees it: checked here on a small page
shaped like myst-nb's output, so the browser-lane test (test_reader_view.py) cannot pass by
reading nothing."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readerview", ROOT / "tests" / "browser" / "readerview.py")
readerview = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("readerview", readerview)  # dataclasses look their module up
_spec.loader.exec_module(readerview)

PAGE = """<html><body><nav>GPT2LN_SEED in the sidebar</nav><article class="bd-article">
<h1>Title<a class="headerlink" href="#">#</a></h1><p>We run on the portable float path.</p>
<div class="cell docutils container"><div class="cell_input docutils container"><pre>assert a
x = 1
  assert b</pre></div><div class="cell_output docutils container"><pre>ConnectionError: offline
UserWarning: x</pre></div></div>
<div class="cell tag_hide-input docutils container"><details class="hide above-input">
<summary>Show code cell source</summary><div class="cell_input docutils container">
<pre>assert c  # GPT2LN_SEED, nbval</pre></div></details>
<div class="cell_output docutils container"><pre>gpt2ln.fused.STATUS</pre></div></div>
<div class="cell tag_hide-output docutils container">
<div class="cell_input docutils container"><pre>y = 2</pre>
</div><details class="hide below-input"><summary>Show code cell output</summary>
<div class="cell_output docutils container"><pre>Traceback MIN_NUMEL</pre></div></details></div>
<div class="solution dropdown admonition"><p class="admonition-title">Solution</p><p>book/quotes</p></div>
<p>| a | b | |---|---| | 1 | 2 |</p><p>| a | b | |—|—|</p><table><tr><td>|</td></tr></table>
</article></body></html>"""


def test_reader_view_counts_what_is_shown_and_leaves_out_what_is_folded(tmp_path):
    page = tmp_path / "p.html"
    page.write_text(PAGE, encoding="utf-8")
    view = readerview.reader_view(page)
    assert view.asserts() == 2  # the folded cell's assert is not seen
    assert view.terms() == {"float path": 1, "portable path": 1, "gpt2ln.fused": 1, "STATUS": 1}
    assert view.error_names() == ["ConnectionError", "UserWarning"]  # the folded output's is not
    assert "book/quotes" not in view.text and "Solution" in view.prose
    assert "GPT2LN_SEED" not in view.text  # the sidebar is not the page
    assert len(readerview.raw_tables(page)) == 2
