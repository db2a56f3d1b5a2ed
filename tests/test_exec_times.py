"""scripts/check_exec_times.py reads the build's execution table and enforces budgets."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_exec_times", ROOT / "scripts" / "check_exec_times.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

ROW = (
    '<tr><td><p><a href="x"><span>{doc}</span></a></p></td><td><p>2026-11-29</p></td>'
    "<td><p>force</p></td><td><p>{t}</p></td><td><p>{s}</p></td></tr>"
)


def _page(tmp_path, rows):
    html = tmp_path / "html"
    (html / "book").mkdir(parents=True)
    head = (
        "<table><thead><tr><th><p>Document</p></th><th><p>Modified</p></th><th><p>Method</p></th>"
        "<th><p>Run Time (s)</p></th><th><p>Status</p></th></tr></thead><tbody>"
    )
    body = "".join(ROW.format(doc=d, t=t, s=s) for d, t, s in rows)
    (html / "book" / "execution.html").write_text(head + body + "</tbody></table>", encoding="utf-8")
    return html


def test_reads_runtime_and_status(tmp_path):
    html = _page(tmp_path, [("notebooks/02_layernorm", "8.27", "✅"), ("notebooks/05_rmsnorm", "61.5", "❌")])
    assert check.read_times(html) == {
        "notebooks/02_layernorm": (8.27, "✅"),
        "notebooks/05_rmsnorm": (61.5, "❌"),
    }


def test_fails_when_a_chapter_is_over_budget_or_missing(tmp_path, capsys):
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    rows = [(f"notebooks/{n}", "1.0", "✅") for n in notebooks]
    rows += [(page, "1.0", "✅") for page in check.PAGE_BUDGETS]
    assert check.main([str(_page(tmp_path / "a", rows))]) == 0
    rows[0] = (rows[0][0], "999.0", "✅")
    assert check.main([str(_page(tmp_path / "b", rows))]) == 1
    assert "budget" in capsys.readouterr().err
    assert check.main([str(_page(tmp_path / "c", rows[1:]))]) == 1
    assert "not executed by the build" in capsys.readouterr().err
