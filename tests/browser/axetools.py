"""axe-core in the browser tests: WCAG 2 A/AA checks of a loaded page.

axe-core comes from the npm registry into ``.cache/axe/axe.min.js`` (git-ignored, not part of
the site; ``scripts/fetch_vendor.sh`` fetches it, pinned) and is injected into the page under
test, so the check needs no network.
"""

from __future__ import annotations

from sitetools import ROOT

AXE_JS = ROOT / ".cache" / "axe" / "axe.min.js"
# WCAG 2.0 level A and AA, as the course's accessibility goal states them.
AXE_TAGS = ["wcag2a", "wcag2aa"]
# What fails a page: axe's two highest impact levels.
BLOCKING = ("serious", "critical")

_RUN_JS = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id,
    impact: v.impact,
    help: v.help,
    count: v.nodes.length,
    targets: v.nodes.slice(0, 4).map(n => n.target.join(" ")),
  }));
}"""


def axe_unavailable() -> str | None:
    """None when axe-core is there, else how to get it."""
    if not AXE_JS.is_file():
        return f"no {AXE_JS.relative_to(ROOT)} (bash scripts/fetch_vendor.sh fetches axe-core from npm)"
    return None


def run_axe(page) -> list[dict]:
    """The WCAG 2 A/AA violations axe-core finds on ``page`` (a settled Playwright page):
    ``[{id, impact, help, count, targets}]``."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(path=str(AXE_JS))
    return page.evaluate(_RUN_JS, AXE_TAGS)


def blocking(violations: list[dict]) -> list[dict]:
    return [v for v in violations if v["impact"] in BLOCKING]


def describe(violations: list[dict]) -> str:
    return "\n".join(
        f"  {v['impact']}: {v['id']} ({v['help']}) on {v['count']} element(s), e.g. {v['targets']}"
        for v in violations
    )
