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


def test_raw_table_check_catches_the_performance_pages_fourteen_tables():
    """The performance page as it was built when text/markdown outputs were parsed as CommonMark
    (data/performance_raw_tables.html, saved from that build): 14 tables, each a paragraph of pipes
    with typographic dashes, |—|—|. The check finds each of them once."""
    page = ROOT / "tests" / "book" / "data" / "performance_raw_tables.html"
    found = readerview.raw_tables(page)
    assert len(found) == 14, found
    assert found[0].startswith("| platform | CPUs |") and "|—|—|" in found[0]


def test_raw_table_check_reads_text_blocks_and_outputs_but_not_code(tmp_path):
    page = tmp_path / "p.html"
    page.write_text(
        '<html><body><div class="cell_input"><pre>lines = ["|" + "---|" * n]  # |---|---|</pre></div>'
        '<ul><li><p>| a | b |\n|---|---|</p></li></ul>'
        '<div class="cell_output"><pre>| x | y |\n| --- | --- |</pre></div>'
        '<div class="cell_output"><pre>mistake | error\n--------|------\nbessel  | 1e-3</pre></div>'
        "<table><tr><td>a real table</td></tr></table></body></html>",
        encoding="utf-8",
    )
    found = readerview.raw_tables(page)
    # the list item's once; the aligned text table a cell prints is not a markdown table
    assert found == ["| a | b |\n|---|---|", "| x | y |\n| --- | --- |"], found


RANGES_WITH_EQUAL_ENDS = [
    "less than half as large (0.14 to 0.14 times as large)",
    "in 3–3 seeds",
    "17.0 to 17.0 times",
    "the runs end 12 % to 12 % below it",
    "between 2 and 2 s",
    "from -1 to -1",
    "1,000 to 1,000 steps",
    "1e-05 to 1e-05",
]
RANGES = [
    "0.14 to 0.19",
    "0.14 to 0.145",
    "from 5 to 5,000",
    "seeds 0, 1 and 2",
    "on 2026-12-12",
    "pages 3-4",
    "10 to 100 times",
    "0.14 (0.14 to 0.19 over the seeds)",
]


def test_same_number_ranges_are_caught():
    for text in RANGES_WITH_EQUAL_ENDS:
        assert readerview.same_number_ranges(text), text
    assert readerview.same_number_ranges("as large (0.14 to 0.14 times)") == ["0.14 to 0.14"]


def test_ranges_with_two_ends_pass():
    for text in RANGES:
        assert readerview.same_number_ranges(text) == [], text


def test_span_writes_what_the_range_check_accepts():
    from gpt2ln.classroom import span

    assert readerview.same_number_ranges(f"({span(0.1401, 0.1398, '.2f')} times as large)") == []
    assert readerview.same_number_ranges(f"({span(0.14, 0.19, '.2f')} times as large)") == []


def test_a_page_fails_on_a_range_in_its_prose_or_outputs_not_in_its_code(tmp_path):
    page = tmp_path / "ch.html"
    page.write_text(
        '<html><body><article class="bd-article"><p>It is 0.14 to 0.14 times as large.</p>'
        '<p>A test fails on <code class="literal">3–3</code>, quoted.</p>'
        '<div class="cell"><div class="cell_input"><pre>x = 3-3</pre></div>'
        '<div class="cell_output"><pre>ratio 17.0 to 17.0</pre></div></div></article></body></html>',
        encoding="utf-8",
    )
    view = readerview.reader_view(page)
    assert view.same_number_ranges() == ["0.14 to 0.14", "17.0 to 17.0"]
    assert view.problems(chapter=False) == ["ranges with equal ends ['0.14 to 0.14', '17.0 to 17.0']"]
    assert readerview.main([str(page)]) == 1


def test_problems_of_a_chapter_page_are_the_declared_rules(tmp_path):
    page = tmp_path / "p.html"
    page.write_text(PAGE, encoding="utf-8")
    problems = readerview.reader_view(page).problems()
    assert [p.split(" ")[0] for p in problems] == ["bookkeeping", "error"]  # 2 asserts are allowed
    clean = tmp_path / "clean.html"
    clean.write_text('<article class="bd-article"><p>0.14 to 0.19</p></article>', encoding="utf-8")
    assert readerview.reader_view(clean).problems() == [] and readerview.main([str(clean)]) == 0


def test_site_pages_are_every_page_but_the_copied_assets(tmp_path):
    for rel in ("index.html", "genindex.html", "book/intro.html", "notebooks/01_x.html",
                "_static/x.html", "_sources/book/intro.html", "_static/mathjax/a.html", "reports/x.err.log"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p></p>", encoding="utf-8")
    assert readerview.site_pages(tmp_path) == ["book/intro.html", "genindex.html", "index.html",
                                               "notebooks/01_x.html"]
