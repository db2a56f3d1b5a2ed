"""scripts/check_exec_times.py reads the build's execution table: it always fails on a chapter that
did not run, warns past a time budget on a user's machine, and fails past it only in CI."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def _rows(time="1.0", status="✅"):
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    rows = [(f"notebooks/{n}", time, status) for n in notebooks]
    return rows + [(page, time, status) for page in check.PAGE_BUDGETS]


def _budget(doc):
    if doc in check.PAGE_BUDGETS:
        return check.PAGE_BUDGETS[doc]
    return check.BUDGETS[int(doc.split("/")[1].split("_")[0])]


def test_passes_when_every_chapter_ran_in_time_with_or_without_ci(tmp_path, monkeypatch):
    for i, ci in enumerate((None, "true")):
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        assert check.main([str(_page(tmp_path / str(i), _rows()))]) == 0


def test_over_budget_only_warns_on_a_users_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CI", raising=False)
    rows = _rows()
    rows[0] = (rows[0][0], "999.0", "✅")
    assert check.main([str(_page(tmp_path, rows))]) == 0
    captured = capsys.readouterr()
    assert "warning, over budget" in captured.err and rows[0][0] in captured.err
    assert "SLOW" in captured.out and "999.0 s" in captured.out


def test_over_budget_fails_in_ci(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")
    rows = _rows()
    rows[0] = (rows[0][0], "999.0", "✅")
    assert check.main([str(_page(tmp_path / "one", rows))]) == 1
    assert "over budget" in capsys.readouterr().err
    # the total alone over its budget: every chapter exactly at its own budget, which add up to more
    at_budget = [(doc, str(_budget(doc)), status) for doc, _, status in _rows()]
    assert sum(_budget(doc) for doc, _, _ in at_budget) > check.TOTAL_BUDGET
    assert check.main([str(_page(tmp_path / "total", at_budget))]) == 1
    assert "all notebooks" in capsys.readouterr().err


def test_ci_set_to_false_or_empty_does_not_enforce(tmp_path, monkeypatch):
    rows = _rows()
    rows[0] = (rows[0][0], "999.0", "✅")
    for i, value in enumerate(("", "0", "false")):
        monkeypatch.setenv("CI", value)
        assert check.main([str(_page(tmp_path / str(i), rows))]) == 0


def test_a_failed_or_missing_chapter_fails_with_or_without_ci(tmp_path, monkeypatch, capsys):
    for i, ci in enumerate((None, "true")):
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        rows = _rows()
        rows[0] = (rows[0][0], "1.0", "❌")
        assert check.main([str(_page(tmp_path / f"failed{i}", rows))]) == 1
        assert "did not execute cleanly" in capsys.readouterr().err
        assert check.main([str(_page(tmp_path / f"missing{i}", _rows()[1:]))]) == 1
        assert "not executed by the build" in capsys.readouterr().err


def test_budgets_of_the_training_chapters():
    # chapter 7 runs post-norm with two inits (45 runs), chapter 11 eight variants (99 runs)
    assert {n: check.BUDGETS[n] for n in (7, 8, 11)} == {7: 240, 8: 180, 11: 240}
