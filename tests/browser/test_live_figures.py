"""Browser tests of the live figures (gpt2ln.classroom.live_figures) on the built site, with no kernel.

On each page that has one: drag a bar, move a slider, pick a prompt or a placement, and check
that the figure changes and that the numbers it displays equal what gpt2ln computes for the
same inputs; no console error, no request outside the site, at most 300 KB of figure script
per page. The keyboard works every control (the bars are sliders), no interactive element sits
inside an image, the figures stay readable in the theme's dark mode (contrast measured), and
axe-core finds no serious or critical WCAG 2 A/AA violation in them (axe.min.js from
$AXE_JS, else .cache/axe, where scripts/fetch_vendor.sh puts it). Screenshots of the
figures go to ``_build/screenshots/live_*.png``.
Skipped (failed in CI) when Playwright, Chromium or the built site is missing: see conftest.py.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
from nested_close import assert_nested_close as same
from sitetools import SCREENSHOTS, SITE, in_ci

import gpt2ln
from gpt2ln import GPT2Config
from gpt2ln.classroom import live_figures as live

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


# ---------------------------------------------------------------- issue 19: what the lesson promises


def _bar_heights(fig, panel: str) -> list[float]:
    """The on-screen heights (CSS px) of a panel's bars."""
    return [b.bounding_box()["height"] for b in fig.locator(f'svg[data-role="{panel}"] rect.g2-bar').all()]


@pytest.mark.parametrize("tab", ["notebooks/01_why_normalize.html"], indirect=True)
def test_scale_slider_grows_the_input_bars_on_screen_while_the_outputs_stay_put(tab):
    fig = tab.figure("norm_explorer")
    fig.scroll_into_view_if_needed()
    assert state(fig)["inputs"]["scale"] == pytest.approx(1.0)
    before = {p: _bar_heights(fig, p) for p in ("input", "layer_norm", "rms_norm")}
    ticks = fig.locator('svg[data-role="input"] .g2-tick').all_text_contents()
    scale = fig.locator('input[data-role="scale"]')
    scale.focus()
    for _ in range(20):  # 1 -> 10^0.2 = 1.58: nothing clipped yet, every bar 1.58x as tall
        scale.press("ArrowRight")
    mid = state(fig)
    assert mid["inputs"]["scale"] == pytest.approx(10**0.2) and mid["outputs"]["clipped"] == []
    grown = _bar_heights(fig, "input")
    for h0, h1 in zip(before["input"], grown, strict=True):
        if h0 > 3:  # bars a few pixels tall and up: rounding aside, 1.58x
            assert h1 == pytest.approx(h0 * 10**0.2, rel=0.05, abs=0.6), (h0, h1)
    assert fig.locator('svg[data-role="input"] .g2-tick').all_text_contents() == ticks, "the axis moved"
    scale.press("End")  # scale 10: the tallest bars run off the axis and are marked
    top = state(fig)
    assert top["inputs"]["scale"] == pytest.approx(10.0)
    after = _bar_heights(fig, "input")
    print(f"tallest input bar: {max(before['input']):.1f} px at scale 1, {max(after):.1f} px at scale 10")
    assert max(after) > 2.4 * max(before["input"]) and sum(after) > 3 * sum(before["input"])
    clipped = top["outputs"]["clipped"]
    y = 10.0 * torch.tensor(top["inputs"]["x"], dtype=torch.float64)
    want = [i for i, v in enumerate(y.tolist()) if abs(v) > _input_lim(fig)]
    assert clipped == want and clipped, "bars beyond the axis are the clipped ones"
    marked = [int(m.get_attribute("data-i")) for m in fig.locator("path.g2-clip").all() if m.is_visible()]
    assert marked == clipped
    flagged = fig.locator('svg[data-role="input"] rect[data-clipped="true"]').count()
    assert flagged == len(clipped)
    assert f"{len(clipped)} of 16 input bars" in fig.locator('[data-role="clip-note"]').inner_text()
    for p in ("layer_norm", "rms_norm"):
        close_to(_bar_heights(fig, p), before[p], 0.6, f"{p} bars on screen (px)")
    _check_explorer(fig, top)
    screenshot(fig, "norm_explorer_scale_10")
    assert not tab.problems, "\n".join(tab.problems)


def _input_lim(fig) -> float:
    """The input panel's fixed axis, read off its top tick."""
    ticks = [
        float(t) for t in fig.locator('svg[data-role="input"] .g2-tick').all_text_contents() if _is_num(t)
    ]
    return max(ticks)


def _is_num(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("tab", ["notebooks/05_rmsnorm.html"], indirect=True)
def test_a_focused_bar_answers_the_arrow_keys_with_gpt2lns_numbers(tab):
    fig = tab.figure("norm_explorer")
    fig.scroll_into_view_if_needed()
    before = state(fig)
    fig.locator('button[data-role="reset"]').focus()
    tab.page.keyboard.press("Tab")  # the next stop after the controls is the first bar
    active = tab.page.evaluate(
        "() => [document.activeElement.getAttribute('role'), document.activeElement.dataset.i]"
    )
    assert active == ["slider", "0"], f"Tab from the controls reached {active}"
    tab.page.keyboard.press("Tab")
    bar = fig.locator('svg[data-role="input"] rect[data-i="1"]')
    assert bar.evaluate("b => b === document.activeElement")
    for attr in ("aria-valuenow", "aria-valuemin", "aria-valuemax", "aria-label"):
        assert bar.get_attribute(attr), f"the bar has no {attr}"
    lim = _input_lim(fig)
    v0 = float(bar.get_attribute("aria-valuenow"))
    y0 = before["outputs"]["input"][1]
    assert v0 == pytest.approx(y0, abs=1e-4)
    for _ in range(3):
        tab.page.keyboard.press("ArrowUp")
    up = state(fig)
    assert up["outputs"]["input"][1] == pytest.approx(y0 + 3 * lim / 20, abs=1e-9)
    assert float(bar.get_attribute("aria-valuenow")) == pytest.approx(y0 + 3 * lim / 20, abs=1e-4)
    others = [
        i for i, (a, b) in enumerate(zip(before["inputs"]["x"], up["inputs"]["x"], strict=True)) if a != b
    ]
    assert others == [1]
    _check_explorer(fig, up)
    tab.page.keyboard.press("PageDown")
    tab.page.keyboard.press("ArrowLeft")
    down = state(fig)
    assert down["outputs"]["input"][1] == pytest.approx(y0 + 3 * lim / 20 - 11 * lim / 20, abs=1e-9)
    _check_explorer(fig, down)
    tab.page.keyboard.press("End")
    assert state(fig)["outputs"]["input"][1] == pytest.approx(lim)
    tab.page.keyboard.press("Home")
    end = state(fig)
    assert end["outputs"]["input"][1] == pytest.approx(-lim)
    _check_explorer(fig, end)
    assert not tab.problems, "\n".join(tab.problems)


# Interactive elements (focusable, or with an interactive role) that sit inside an element whose
# role makes its children presentational (img): axe's nested-interactive.
_NESTED_INTERACTIVE_JS = """fig => Array.from(fig.querySelectorAll(
    'a[href], button, input, select, textarea, [tabindex], [role=button], [role=slider], [role=radio]'))
  .filter(e => e.parentElement.closest('[role=img]'))
  .map(e => e.outerHTML.slice(0, 80))"""


@pytest.mark.parametrize("tab", list(LIVE_PAGES), indirect=True, ids=list(LIVE_PAGES))
def test_no_interactive_element_sits_inside_an_image_and_every_control_is_focusable(tab):
    for fig in tab.page.locator(".gpt2ln-fig").all():
        assert fig.evaluate(_NESTED_INTERACTIVE_JS) == []
        draggable = fig.locator(".g2-draggable rect.g2-bar").all()
        for bar in draggable:
            assert bar.get_attribute("tabindex") == "0" and bar.get_attribute("role") == "slider"
        clickable = fig.locator("g[data-component]").all()
        for comp in clickable:
            assert comp.get_attribute("tabindex") == "0" and comp.get_attribute("role") == "button"
            assert comp.get_attribute("aria-label")


@pytest.mark.parametrize("tab", ["notebooks/07_pre_vs_post_norm.html"], indirect=True)
def test_block_diagram_shows_residual_dropout_and_answers_the_keyboard(tab):
    fig = tab.figure("block_diagram")
    fig.scroll_into_view_if_needed()
    fig.locator('input[data-role="position"][value="pre"]').check()
    drawn = [g.get_attribute("data-component") for g in fig.locator("g[data-component]").all()]
    assert drawn == ["ln_1", "attn", "attn.resid_dropout", "ln_2", "mlp", "mlp.dropout", "ln_f"]
    assert fig.locator("g.g2-drop").count() == 2
    note = fig.locator('[data-role="dropout-note"]').inner_text()
    assert "p_resid = 0.1" in note and "off at eval" in note
    comp = fig.locator('g[data-component="attn.resid_dropout"]')
    comp.focus()
    tab.page.keyboard.press("Enter")
    assert state(fig)["outputs"]["selected"]["name"] == "attn.resid_dropout"
    assert tab.page.evaluate("() => document.activeElement.dataset.component") == "attn.resid_dropout", (
        "the redraw lost the focus"
    )
    assert "probability p_resid = 0.1" in fig.locator('[data-role="info"]').inner_text()
    tab.page.keyboard.press("Tab")
    tab.page.keyboard.press("Tab")  # attn.resid_dropout -> ln_2 -> mlp
    tab.page.keyboard.press(" ")
    assert state(fig)["outputs"]["selected"]["name"] == "mlp"
    assert fig.locator('g[data-component="mlp"]').get_attribute("aria-pressed") == "true"
    screenshot(fig, "block_diagram_dropout")
    assert not tab.problems, "\n".join(tab.problems)


@pytest.mark.parametrize("tab", ["notebooks/08_qk_norm.html"], indirect=True)
def test_qk_norm_figure_names_rmsnorm_and_switches_to_layernorm_with_gpt2lns_numbers(tab):
    fig = tab.figure("qk_norm")
    fig.scroll_into_view_if_needed()
    st = state(fig)
    assert st["inputs"]["norm"] == "rms_norm"
    title = fig.locator('[data-panel="qk_norm"] .g2-title').text_content()
    assert "RMSNorm" in title and "LayerNorm" not in title
    assert "Gemma 3, OLMo 2 and Qwen 3" in fig.inner_text()
    ref = live.qk_norm_explorer()
    slider = fig.locator('input[data-role="scale"]')
    slider.focus()
    for _ in range(40):
        slider.press("ArrowLeft")  # s = 10^-0.4: small enough that eps shows, large enough to differ
    for norm, word in (("layer_norm", "LayerNorm"), ("rms_norm", "RMSNorm")):
        fig.locator(f'input[data-role="norm"][value="{norm}"]').check()
        st = state(fig)
        assert st["inputs"]["norm"] == norm
        assert word in fig.locator('[data-panel="qk_norm"] .g2-title').text_content()
        # what gpt2ln's attention computes, eps 1e-5 passed explicitly
        q = st["inputs"]["scale"] * torch.tensor(ref.data["q"], dtype=torch.float64)
        keys = st["inputs"]["scale"] * torch.tensor(ref.data["keys"], dtype=torch.float64)
        f = gpt2ln.rms_norm if norm == "rms_norm" else gpt2ln.layer_norm
        weights = ((f(keys, eps=1e-5) @ f(q, eps=1e-5)) / math.sqrt(q.shape[0])).softmax(-1)
        close_to(st["outputs"]["qk_norm"]["weights"], weights, 1e-9, f"{norm} row")
        shown = number(fig.locator('[data-panel="qk_norm"] [data-stat="max_weight"]').inner_text())
        close_to(shown, weights.max().item(), 5e-4, "displayed largest weight")
    rms = state(fig)["outputs"]["qk_norm"]["weights"]
    fig.locator('input[data-role="norm"][value="layer_norm"]').check()
    ln = state(fig)["outputs"]["qk_norm"]["weights"]
    assert max(abs(a - b) for a, b in zip(rms, ln, strict=True)) > 1e-3, "the switch changed nothing"
    assert not tab.problems, "\n".join(tab.problems)


@pytest.mark.parametrize("tab", ["notebooks/10_norms_inside_gpt2.html"], indirect=True)
def test_residual_lens_shows_a_new_line_as_an_arrow_not_backslash_n(tab):
    fig = tab.figure("residual_lens")
    fig.scroll_into_view_if_needed()
    i = next(i for i, p in enumerate(live.DEFAULT_PROMPTS) if "\n" in p)
    fig.locator('select[data-role="prompt"]').select_option(str(i))
    t = live.DEFAULT_PROMPTS[i].index("\n")  # one token per byte: the new line's token
    for token in (t, t + 2):
        fig.locator(f'button[data-token="{token}"]').click()
        text = fig.inner_text() + " ".join(fig.locator("svg text").all_text_contents())
        assert "\\n" not in text, "the figure prints \\n literally"
        assert "↵" in fig.locator(".g2-panels").inner_text() + fig.locator("svg text").first.text_content()
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- dark mode: contrast


def _luminance(rgb) -> float:
    """WCAG relative luminance of an sRGB color (0-255 channels)."""

    def lin(c: float) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


# For each visible text (SVG <text> and HTML elements with their own text) and each bar of the
# page's live figures: its color as painted (fill or color, alpha and the opacity of it and its
# ancestors applied) and the background behind it (every ancestor's background-color composited
# from <html> down). Colors come back as [r, g, b] in 0-255.
_COLORS_JS = """() => {
  const parse = c => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const v = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const over = (top, bottom, a) => [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a));
  function background(el) {
    const chain = []; for (let e = el; e; e = e.parentElement) chain.unshift(e);
    let bg = [255, 255, 255];
    for (const e of chain) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) bg = over(c, bg, c[3]);
    }
    return bg;
  }
  function opacity(el) {
    let o = 1;
    for (let e = el; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
    return o;
  }
  const out = {texts: [], bars: []};
  for (const fig of document.querySelectorAll('.gpt2ln-fig')) {
    const texts = Array.from(fig.querySelectorAll('*')).filter(e => e.closest('svg') ? e.tagName === 'text'
      : Array.from(e.childNodes).some(n => n.nodeType === 3 && n.textContent.trim()));
    for (const e of texts) {
      if (e.tagName === 'OPTION' || e.tagName === 'SCRIPT' || e.tagName === 'STYLE') continue;
      const r = e.getBoundingClientRect(); if (!r.width || !r.height) continue;
      const cs = getComputedStyle(e);
      const fg = parse(e.closest('svg') ? cs.fill : cs.color);
      if (!fg) continue;
      const bg = background(e.closest('svg') ? e.closest('svg') : e);
      out.texts.push({text: e.textContent.trim().slice(0, 40), kind: fig.dataset.kind,
                      fg: over(fg, bg, fg[3] * opacity(e)), bg: bg});
    }
    for (const e of fig.querySelectorAll('rect.g2-bar')) {
      const r = e.getBoundingClientRect(); if (!r.width || r.height < 1) continue;
      const fg = parse(getComputedStyle(e).fill), bg = background(e.closest('svg'));
      out.bars.push({kind: fig.dataset.kind, fg: over(fg, bg, fg[3] * opacity(e)), bg: bg,
                     box: [r.x, r.y, r.width, r.height]});
    }
  }
  return out;
}"""


def _set_theme(page, theme: str) -> None:
    """The theme's light/dark switch, as its toggle button sets it (pydata-sphinx-theme)."""
    page.evaluate(
        """t => {
          document.documentElement.dataset.theme = t;
          document.documentElement.dataset.mode = t;
          try { localStorage.setItem('theme', t); localStorage.setItem('mode', t); } catch (e) {}
        }""",
        theme,
    )
    page.wait_for_timeout(100)


@pytest.mark.parametrize("theme", ["dark", "light"])
@pytest.mark.parametrize("tab", list(LIVE_PAGES), indirect=True, ids=list(LIVE_PAGES))
def test_live_figures_stay_readable_in_dark_and_light_mode(tab, theme):
    """Text at >= 4.5:1 against the page (WCAG 1.4.3), bars at >= 3:1 (1.4.11), from the computed
    colors; and, from a screenshot, the painted bars against the painted background."""
    from PIL import Image

    page = tab.page
    _set_theme(page, theme)
    colors = page.evaluate(_COLORS_JS)
    assert colors["texts"] and all(len(t["fg"]) == 3 for t in colors["texts"])
    page_bg = colors["texts"][0]["bg"]
    assert (_luminance(page_bg) < 0.05) == (theme == "dark"), f"the page did not switch to {theme}: {page_bg}"
    bad = [
        f"{t['kind']}: {t['text']!r} {contrast(t['fg'], t['bg']):.2f}"
        for t in colors["texts"]
        if contrast(t["fg"], t["bg"]) < 4.5
    ]
    assert not bad, f"text below 4.5:1 in {theme} mode:\n" + "\n".join(bad)
    bad = [
        f"{b['kind']}: {contrast(b['fg'], b['bg']):.2f}"
        for b in colors["bars"]
        if contrast(b["fg"], b["bg"]) < 3
    ]
    assert not bad, f"bars below 3:1 in {theme} mode:\n" + "\n".join(sorted(set(bad)))
    # the screenshot: what is painted at each tall enough bar's centre against the figure's corner
    for fig in page.locator(".gpt2ln-fig").all():
        fig.scroll_into_view_if_needed()
        box = fig.bounding_box()
        shot = Image.open(io.BytesIO(fig.screenshot())).convert("RGB")
        sx, sy = shot.width / box["width"], shot.height / box["height"]
        corner = shot.getpixel((int(4 * sx), int(box["height"] * sy) - int(4 * sy)))
        assert (_luminance(corner) < 0.05) == (theme == "dark"), f"figure background {corner} in {theme} mode"
        kind = fig.get_attribute("data-kind")
        for bar in fig.locator("rect.g2-bar").all():
            b = bar.bounding_box()
            if b is None or b["height"] < 4 or b["width"] < 4:
                continue
            px = shot.getpixel(
                (
                    int((b["x"] - box["x"] + b["width"] / 2) * sx),
                    int((b["y"] - box["y"] + b["height"] / 2) * sy),
                )
            )
            assert contrast(px, corner) >= 3, f"{kind}: a bar painted {px} on {corner} in {theme} mode"
        if theme == "dark":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shot.save(SCREENSHOTS / f"live_dark_{kind}.png")
    assert not tab.problems, "\n".join(tab.problems)


# ---------------------------------------------------------------- axe-core on the live figures


def axe_js() -> Path | None:
    """axe.min.js (npm axe-core): $AXE_JS, else the copy scripts/fetch_vendor.sh puts in .cache/axe."""
    from axetools import AXE_JS

    for candidate in (os.environ.get("AXE_JS"), AXE_JS):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


_AXE_RUN_JS = """async () => {
  const r = await axe.run(Array.from(document.querySelectorAll('.gpt2ln-fig')),
                          {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}});
  return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.map(n => n.target.join(' ')).slice(0, 4).join('; '));
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("tab", list(LIVE_PAGES), indirect=True, ids=list(LIVE_PAGES))
def test_axe_finds_no_serious_violation_in_the_live_figures(tab, theme):
    path = axe_js()
    if path is None:
        if in_ci():
            pytest.fail("axe-core is missing (set AXE_JS to axe.min.js)", pytrace=False)
        pytest.skip("axe-core is missing: npm pack axe-core, then AXE_JS=/path/to/axe.min.js")
    _set_theme(tab.page, theme)
    tab.page.add_script_tag(path=str(path))
    found = tab.page.evaluate(_AXE_RUN_JS)
    assert not found, "axe-core, WCAG 2 A/AA, in the live figures:\n" + "\n".join(found)
