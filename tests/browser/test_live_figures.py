"""Browser tests of the live figures (gpt2ln.widgets) on the built site, with no kernel.

On each page that has one: drag a bar, move a slider, pick a prompt or a placement, and check
that the figure changes and that the numbers it displays equal what gpt2ln computes for the
same inputs; no console error, no request outside the site, at most 300 KB of figure script
per page. Screenshots of the figures go to ``_build/screenshots/live_*.png``.
Skipped like test_site.py when Playwright, Chromium or the built site is missing.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from sitetools import SCREENSHOTS, SITE, in_ci, why_unavailable

_REASON = why_unavailable()
if _REASON:
    if in_ci():
        pytest.fail(f"browser tests cannot run in CI: {_REASON}", pytrace=False)
    pytest.skip(f"browser tests skipped: {_REASON}", allow_module_level=True)

from nested_close import assert_nested_close as same  # noqa: E402

import gpt2ln  # noqa: E402
from gpt2ln import GPT2Config  # noqa: E402
from gpt2ln import widgets as live  # noqa: E402

LIVE_PAGES = {
    "notebooks/01_why_normalize.html": ["norm_explorer"],
    "notebooks/05_rmsnorm.html": ["norm_explorer"],
    "notebooks/07_pre_vs_post_norm.html": ["block_diagram"],
    "notebooks/08_qk_norm.html": ["qk_norm"],
    "notebooks/10_norms_inside_gpt2.html": ["residual_lens"],
    "notebooks/11_beyond_layernorm.html": ["block_diagram"],
}
MAX_FIGURE_BYTES = 300_000  # the interactive JavaScript (and its data and CSS) per page

# Bytes of every <script> and <style> inside the page's live figures.
_FIGURE_BYTES_JS = """() => Array.from(document.querySelectorAll(".gpt2ln-fig script, .gpt2ln-fig style"))
  .reduce((n, e) => n + new TextEncoder().encode(e.textContent).length, 0)"""


class Tab:
    """A page with every problem recorded: console errors, uncaught exceptions, failed
    requests, HTTP errors, and requests that leave the site."""

    def __init__(self, context, base_url: str, path: str | None = None):
        self.page = context.new_page()
        self.problems: list[str] = []
        self.base_url = base_url
        p = self.page
        p.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        p.on("pageerror", lambda e: self.problems.append(f"uncaught exception: {e}"))
        p.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        p.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))
        p.on("request", self._check_request)
        if path is not None:
            p.goto(base_url + path, wait_until="load")
            p.wait_for_function("() => document.querySelectorAll('.gpt2ln-fig').length > 0")
            live_js = (
                "() => Array.from(document.querySelectorAll('.gpt2ln-fig')).every(f => f.matches('.g2-live'))"
            )
            p.wait_for_function(live_js)

    def _check_request(self, request) -> None:
        url = request.url
        if not (url.startswith(self.base_url) or url.startswith(("data:", "blob:", "about:"))):
            self.problems.append(f"request outside the site: {url}")

    def figure(self, kind: str, n: int = 0):
        return self.page.locator(f'.gpt2ln-fig[data-kind="{kind}"]').nth(n)

    def close(self) -> None:
        self.page.close()


def state(fig) -> dict:
    return json.loads(fig.get_attribute("data-state"))


def close_to(a, b, tol: float, what: str) -> None:
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    err = (a - b).abs().max().item()
    assert err <= tol, f"{what}: differs by {err:.2e} (> {tol})"


def number(text: str) -> float:
    return float(re.search(r"[-+]?\d[\d,]*\.?\d*(?:e[-+]?\d+)?", text).group(0).replace(",", ""))


def screenshot(fig, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"live_{name}.png"
    fig.scroll_into_view_if_needed()
    fig.screenshot(path=str(path))
    assert path.stat().st_size > 5_000, f"{path} looks empty"


@pytest.fixture
def tab(context, base_url, request):
    t = Tab(context, base_url, request.param)
    yield t
    t.close()


# ---------------------------------------------------------------- every page with a live figure


@pytest.mark.parametrize("tab", list(LIVE_PAGES), indirect=True, ids=list(LIVE_PAGES))
def test_live_figures_load_offline_with_no_errors_and_under_300_kb(tab):
    path = tab.page.url.removeprefix(tab.base_url)
    kinds = tab.page.eval_on_selector_all(".gpt2ln-fig", "els => els.map(e => e.dataset.kind)")
    assert kinds == LIVE_PAGES[path], f"{path}: live figures {kinds}"
    ids = tab.page.eval_on_selector_all(".gpt2ln-fig", "els => els.map(e => e.id)")
    assert tab.page.evaluate("ids => ids.every(id => window.gpt2lnFigures[id])", ids), (
        "a figure did not register"
    )
    weight = tab.page.evaluate(_FIGURE_BYTES_JS)
    print(f"{path}: live figures add {weight / 1000:.0f} KB")
    assert 0 < weight <= MAX_FIGURE_BYTES, f"{path}: the live figures add {weight} bytes"
    tab.page.wait_for_timeout(200)
    assert not tab.problems, f"{path}:\n" + "\n".join(tab.problems)


# ---------------------------------------------------------------- chapter 1: LayerNorm vs RMSNorm


def _check_explorer(fig, st: dict) -> None:
    """The state's outputs and the displayed statistics equal gpt2ln on the state's inputs."""
    inp = st["inputs"]
    y = inp["scale"] * torch.tensor(inp["x"], dtype=torch.float64) + inp["shift"]
    ln, rn = gpt2ln.layer_norm(y, eps=1e-5), gpt2ln.rms_norm(y, eps=1e-5)
    close_to(st["outputs"]["layer_norm"], ln, 1e-5, "LayerNorm panel")
    close_to(st["outputs"]["rms_norm"], rn, 1e-5, "RMSNorm panel")
    for panel, v in (("input", y), ("layer_norm", ln), ("rms_norm", rn)):
        box = fig.locator(f'[data-panel="{panel}"]')
        shown = [number(box.locator(f'[data-stat="{k}"]').inner_text()) for k in ("mean", "std", "rms")]
        want = [v.mean().item(), v.std(correction=0).item(), v.pow(2).mean().sqrt().item()]
        close_to(shown, want, 5e-4 + 1e-6, f"displayed mean/std/RMS of {panel}")


@pytest.mark.parametrize("tab", ["notebooks/01_why_normalize.html"], indirect=True)
def test_norm_explorer_answers_a_drag_and_the_sliders_with_gpt2lns_numbers(tab):
    fig = tab.figure("norm_explorer")
    fig.scroll_into_view_if_needed()
    before = state(fig)
    _check_explorer(fig, before)

    # drag feature 3 up to a quarter of the panel's height
    bar = fig.locator('svg[data-role="input"] rect[data-i="3"]').bounding_box()
    panel = fig.locator('svg[data-role="input"]').bounding_box()
    x0 = bar["x"] + bar["width"] / 2
    tab.page.mouse.move(x0, bar["y"] + bar["height"] / 2)
    tab.page.mouse.down()
    for frac in (0.4, 0.3, 0.25):
        tab.page.mouse.move(x0, panel["y"] + frac * panel["height"], steps=3)
    tab.page.mouse.up()
    dragged = state(fig)
    changed = [
        i
        for i, (a, b) in enumerate(zip(before["inputs"]["x"], dragged["inputs"]["x"], strict=True))
        if a != b
    ]
    assert changed == [3], f"the drag changed features {changed}, expected [3]"
    assert dragged["inputs"]["x"][3] > before["inputs"]["x"][3]
    _check_explorer(fig, dragged)

    # the scale slider: LayerNorm and RMSNorm do not move
    scale = fig.locator('input[data-role="scale"]')
    scale.focus()
    for _ in range(30):
        scale.press("ArrowLeft")
    scaled = state(fig)
    assert math.isclose(scaled["inputs"]["scale"], 10 ** float(scale.input_value()), rel_tol=1e-9)
    assert scaled["inputs"]["scale"] < 0.6
    close_to(
        scaled["outputs"]["layer_norm"], dragged["outputs"]["layer_norm"], 1e-3, "LayerNorm after scaling"
    )
    close_to(scaled["outputs"]["rms_norm"], dragged["outputs"]["rms_norm"], 1e-3, "RMSNorm after scaling")
    assert fig.locator('[data-role="scale-readout"]').inner_text() == f"{scaled['inputs']['scale']:.2f}"
    _check_explorer(fig, scaled)

    # the shift slider: RMSNorm moves, LayerNorm does not
    shift = fig.locator('input[data-role="shift"]')
    shift.focus()
    for _ in range(20):
        shift.press("ArrowRight")
    shifted = state(fig)
    assert math.isclose(shifted["inputs"]["shift"], 2.0, abs_tol=1e-9)
    close_to(
        shifted["outputs"]["layer_norm"], scaled["outputs"]["layer_norm"], 1e-3, "LayerNorm after shifting"
    )
    moved = (
        (torch.tensor(shifted["outputs"]["rms_norm"]) - torch.tensor(scaled["outputs"]["rms_norm"]))
        .abs()
        .max()
    )
    assert moved > 0.1, "RMSNorm's output did not move with the shift"
    _check_explorer(fig, shifted)

    # a classic mistake: the displayed error equals chapter 2's formula in Python
    fig.locator('select[data-role="mistake"]').select_option("bessel")
    st = state(fig)
    y = torch.tensor(st["outputs"]["input"], dtype=torch.float64)
    wrong = (y - y.mean()) * torch.rsqrt(y.var(correction=1) + 1e-5)
    err = (wrong - gpt2ln.layer_norm(y)).abs().max().item()
    shown = number(fig.locator('[data-role="mistake-error"]').inner_text())
    assert math.isclose(shown, err, rel_tol=6e-3), f"displayed error {shown}, gpt2ln {err}"
    screenshot(fig, "norm_explorer")
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- chapters 7 and 11: the block


def _check_diagram(tab, fig, config: GPT2Config, positions) -> None:
    ref = live.block_diagram(config, positions=positions)
    for position in positions:
        fig.locator(f'input[data-role="position"][value="{position}"]').check()
        st = state(fig)
        assert st["inputs"]["position"] == position
        want = live.block_diagram_outputs(ref.data, {"position": position, "selected": None})
        assert st["outputs"]["order"] == want["order"], position
        shown = [g.get_attribute("data-component") for g in fig.locator("g[data-component]").all()]
        assert shown == want["order"], f"{position}: drawn {shown}"
        n_sum = len(_sums(position))
        assert fig.locator('[data-role="bypass"]').count() == n_sum, f"{position}: bypass lines"
        assert number(fig.locator('[data-role="totals"]').inner_text()) == want["norm_params_per_block"]
    for name in ("ln_1", "attn"):
        fig.locator(f'g[data-component="{name}"]').click()
        comp = ref.data["components"][name]
        params = fig.locator('[data-role="params"]').inner_text()
        assert f"{comp['params']:,}" in params and f"{comp['params'] * config.n_layer:,}" in params, params
        assert state(fig)["outputs"]["selected"]["name"] == name
        href = fig.locator('[data-role="link"]').get_attribute("href")
        page, _, anchor = href.partition("#")
        target = SITE / "notebooks" / page
        assert target.is_file(), f"{name} links to {href}: no such page"
        assert f'id="{anchor}"' in target.read_text(encoding="utf-8"), (
            f"{name} links to {href}: no such section"
        )


def _sums(position: str) -> list[dict]:
    return [s for s in live.block_layout(position)["steps"] if "branch" in s]


@pytest.mark.parametrize("tab", ["notebooks/07_pre_vs_post_norm.html"], indirect=True)
def test_block_diagram_switches_pre_and_post_and_shows_gpt2s_parameter_counts(tab):
    fig = tab.figure("block_diagram")
    fig.scroll_into_view_if_needed()
    _check_diagram(tab, fig, GPT2Config.from_preset("gpt2"), ("pre", "post"))
    fig.locator('input[data-role="position"][value="pre"]').check()
    fig.locator('g[data-component="ln_1"]').click()
    params = fig.locator('[data-role="params"]').inner_text()
    assert "1,536" in params and "18,432" in params, params
    screenshot(fig, "block_diagram")
    assert not tab.problems, "\n".join(tab.problems)


@pytest.mark.parametrize("tab", ["notebooks/11_beyond_layernorm.html"], indirect=True)
def test_block_diagram_shows_all_five_placements(tab):
    fig = tab.figure("block_diagram")
    fig.scroll_into_view_if_needed()
    _check_diagram(tab, fig, GPT2Config.from_preset("gpt2"), live.POSITIONS)
    fig.locator('input[data-role="position"][value="peri"]').check()
    screenshot(fig, "block_diagram_peri")
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- chapter 8: QK-norm


@pytest.mark.parametrize("tab", ["notebooks/08_qk_norm.html"], indirect=True)
def test_qk_norm_slider_saturates_the_plain_row_and_not_the_normed_one(tab):
    fig = tab.figure("qk_norm")
    fig.scroll_into_view_if_needed()
    before = state(fig)
    slider = fig.locator('input[data-role="scale"]')
    slider.focus()
    slider.press("End")  # s = 10
    after = state(fig)
    assert after["inputs"]["scale"] == pytest.approx(10.0) and before["inputs"]["scale"] == pytest.approx(1.0)
    data = json.loads(
        tab.page.evaluate("id => JSON.stringify(window.gpt2lnFigures[id].state())", fig.get_attribute("id"))
    )
    assert data == after
    ref = live.qk_norm_explorer()  # the chapter's figure: the default query and keys
    want = live.qk_norm_outputs(ref.data, after["inputs"])
    for key in ("plain", "qk_norm"):
        close_to(after["outputs"][key]["weights"], want[key]["weights"], 1e-5, f"{key} weights")
        box = fig.locator(f'[data-panel="{key}"]')
        close_to(
            number(box.locator('[data-stat="entropy"]').inner_text()), want[key]["entropy"], 5e-4, "entropy"
        )
        close_to(
            number(box.locator('[data-stat="max_weight"]').inner_text()), want[key]["max_weight"], 5e-4, "max"
        )
    assert after["outputs"]["plain"]["max_weight"] > 0.99 > before["outputs"]["plain"]["max_weight"]
    close_to(
        after["outputs"]["qk_norm"]["weights"], before["outputs"]["qk_norm"]["weights"], 1e-4, "QK-normed row"
    )
    slider.press("Home")
    slider.press("PageUp")
    assert state(fig)["inputs"]["scale"] != after["inputs"]["scale"]
    slider.press("End")
    screenshot(fig, "qk_norm")
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- chapter 10: the residual stream


@pytest.mark.parametrize("tab", ["notebooks/10_norms_inside_gpt2.html"], indirect=True)
def test_residual_lens_shows_the_shipped_models_numbers_for_the_picked_token(tab):
    fig = tab.figure("residual_lens")
    fig.scroll_into_view_if_needed()
    n_prompts = fig.locator('select[data-role="prompt"] option').count()
    assert n_prompts >= 20
    fig.locator('select[data-role="prompt"]').select_option("5")
    fig.locator('button[data-token="4"]').click()
    st = state(fig)
    assert st["inputs"] == {"prompt": 5, "token": 4}
    model, tok = gpt2ln.load_tiny()
    text = live.DEFAULT_PROMPTS[5]
    assert st["outputs"]["text"] == text
    with torch.no_grad():
        _, cache = model.run_with_cache(torch.tensor([tok.encode(text)]))
        L = model.config.n_layer
        norms = [cache[f"resid_pre.{l}"][0, 4].norm().item() for l in range(L + 1)]
        lens = [
            (model.ln_f(cache[f"resid_pre.{l}"][0, 4]) @ model.wte.weight.T).softmax(-1) for l in range(L + 1)
        ]
    rows = fig.locator('table[data-role="lens"] tr[data-layer]')
    assert rows.count() == L + 1
    for l in range(L + 1):
        row = rows.nth(l)
        assert abs(number(row.locator('[data-col="norm"]').inner_text()) - norms[l]) < 6e-3
        assert abs(number(row.locator('[data-col="p"]').inner_text()) - lens[l].max().item()) < 6e-4
        top = tok.decode([int(lens[l].argmax())])
        assert row.locator('[data-col="top"]').inner_text() == {" ": "␣", "\n": "↵"}.get(top, top)
    close_to(st["outputs"]["norms"], norms, 1e-3, "norms in the state")
    after = cache["ln_f.out"][0, 4].norm().item()
    assert abs(st["outputs"]["norm_after_ln_f"] - after) < 1e-3
    bars = fig.locator('svg[data-role="norms"] rect[data-layer]').count()
    assert bars == L + 2, "one bar per layer and one after ln_f"
    screenshot(fig, "residual_lens")
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- two figures of one kind on a page


def test_two_figures_of_the_same_kind_on_one_page_work_independently(context, base_url):
    t = Tab(context, base_url)
    try:
        a, b = live.norm_explorer(), live.norm_explorer(seed=1)
        t.page.set_content(f"<!doctype html><html><body>{a._repr_html_()}{b._repr_html_()}</body></html>")
        t.page.wait_for_function("() => document.querySelectorAll('.gpt2ln-fig.g2-live').length === 2")
        first, second = t.figure("norm_explorer", 0), t.figure("norm_explorer", 1)
        s2 = state(second)
        shift = first.locator('input[data-role="shift"]')
        shift.focus()
        shift.press("ArrowRight")
        assert state(first)["inputs"]["shift"] == pytest.approx(0.1)
        assert state(second) == s2, "moving one figure's slider changed the other"
        assert not t.problems, "\n".join(t.problems)
    finally:
        t.close()


# How Jupyter front ends show an HTML output: JupyterLab and VS Code set the output's innerHTML on a
# node that may not be in the page yet, then replace each <script> by a fresh copy so that it runs
# (innerHTML alone never runs scripts); the node is attached afterwards.
_JUPYTER_INSERT_JS = """html => {
  const host = document.createElement("div");
  host.innerHTML = html;
  for (const old of Array.from(host.querySelectorAll("script"))) {
    const s = document.createElement("script");
    for (const a of Array.from(old.attributes)) s.setAttribute(a.name, a.value);
    s.textContent = old.textContent;
    old.parentNode.replaceChild(s, old);
  }
  setTimeout(() => document.body.appendChild(host), 50);
}"""


def test_figures_mount_when_inserted_the_way_jupyter_front_ends_insert_outputs(context, base_url):
    t = Tab(context, base_url)
    try:
        t.page.set_content("<!doctype html><html><body></body></html>")
        figs = [live.norm_explorer(), live.qk_norm_explorer(), live.block_diagram()]
        for fig in figs:
            t.page.evaluate(_JUPYTER_INSERT_JS, fig._repr_html_())
        t.page.wait_for_function("() => document.querySelectorAll('.gpt2ln-fig.g2-live').length === 3")
        for fig in figs:
            shown = state(t.page.locator(f"#{fig.id}"))
            assert shown["inputs"] == fig.state()["inputs"]
            same(shown["outputs"], fig.state()["outputs"], 1e-9, fig.kind)
        assert not t.problems, "\n".join(t.problems)
    finally:
        t.close()
