"""Dark mode: the static figures of every page stay readable.

The theme follows the reader's system (``default_mode: auto``), so a context with
``color_scheme="dark"`` gets the dark pages (``html[data-theme=dark]``), as the theme's toggle
gives them. A matplotlib PNG with a transparent background and black text would sit on a dark
page, unreadable; the figures must bring their own light background (matplotlib's white
facecolor). Checked two ways: each figure file is opaque at its border, and each figure as the
browser draws it in dark mode has its marks (text, lines) at a contrast of at least 4.5:1 with
its background. (The live figures' own dark-mode contrast is tested in test_live_figures.py.)
Skipped (failed in CI) when Playwright, Chromium or the built site is missing: see conftest.py.
"""

from __future__ import annotations

import io
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from PIL import Image
from sitetools import SCREENSHOTS, SITE, toc_pages

TOC_PAGES = toc_pages()
MIN_CONTRAST = 4.5  # WCAG 2 AA for text; a figure's labels are text
# The fraction of a figure's pixels its darkest marks must cover at least (ignores stray pixels).
INK_FRACTION = 0.002


@pytest.fixture(scope="module")
def dark(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark")
    ctx.set_default_timeout(30_000)
    try:
        yield ctx
    finally:
        ctx.close()


def _luminance(rgb: np.ndarray) -> np.ndarray:
    """WCAG relative luminance of sRGB colors, [..., 3] uint8 -> [...]."""
    c = rgb.astype(np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return 0.2126 * c[..., 0] + 0.7152 * c[..., 1] + 0.0722 * c[..., 2]


def marks_contrast(png: bytes) -> tuple[float, tuple[int, int, int]]:
    """The contrast of a drawn figure's marks with its background: the background is its most
    common color; the marks are the pixels most different from it, taken at the INK_FRACTION
    quantile so that a few stray pixels do not count. Returns (ratio, background color)."""
    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    colors, counts = np.unique(rgb // 8, axis=0, return_counts=True)
    background = colors[counts.argmax()] * 8 + 4
    lum, lum_bg = _luminance(rgb), _luminance(background)
    ratio = (np.maximum(lum, lum_bg) + 0.05) / (np.minimum(lum, lum_bg) + 0.05)
    return float(np.quantile(ratio, 1 - INK_FRACTION)), tuple(int(v) for v in background)


def test_marks_contrast_tells_readable_from_unreadable():
    """The measure itself: black text on white passes, black text on the dark page does not."""

    def drawn(bg, ink):
        img = np.full((60, 200, 3), bg, dtype=np.uint8)
        img[20:30, 20:180] = ink  # a line of "text": 13% of the pixels
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        return buf.getvalue()

    assert marks_contrast(drawn((255, 255, 255), (0, 0, 0)))[0] > 15
    assert marks_contrast(drawn((18, 18, 18), (0, 0, 0)))[0] < 1.5


def _figure_file(path) -> str | None:
    """Why a figure file would be unreadable on a dark page, or None."""
    with Image.open(path) as img:
        if "A" not in img.getbands() and not (img.mode == "P" and "transparency" in img.info):
            return None
        alpha = np.asarray(img.convert("RGBA"))[..., 3]
    border = np.concatenate([alpha[0], alpha[-1], alpha[:, 0], alpha[:, -1]])
    if border.min() < 255:
        return f"{path.name}: transparent background (save it with an opaque facecolor)"
    return None


@pytest.mark.parametrize("page", TOC_PAGES)
def test_static_figures_are_opaque_and_readable_in_dark_mode(dark, base_url, page):
    tab = dark.new_page()
    try:
        tab.goto(base_url + page, wait_until="load")
        theme = tab.evaluate("() => document.documentElement.dataset.theme")
        assert theme == "dark", f"{page}: the page is in {theme!r} mode, not dark"
        tab.evaluate(
            "() => document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })"
        )
        tab.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
        images = tab.locator(".bd-article img")
        problems, checked = [], 0
        for k in range(images.count()):
            element = images.nth(k)
            if not element.is_visible():
                continue  # in a collapsed cell
            element.scroll_into_view_if_needed()
            box = element.bounding_box()
            if not box or box["width"] < 40 or box["height"] < 40:
                continue  # an icon
            path = SITE / unquote(urlsplit(element.evaluate("e => e.currentSrc || e.src")).path).lstrip("/")
            problem = _figure_file(path)
            if problem:
                problems.append(problem)
            ratio, background = marks_contrast(element.screenshot())
            if ratio < MIN_CONTRAST:
                problems.append(
                    f"{path.name}: marks at {ratio:.1f}:1 on background {background} in dark mode"
                )
            checked += 1
        assert not problems, f"{page}: figures unreadable in dark mode:\n" + "\n".join(problems)
        if page == "notebooks/01_why_normalize.html":
            assert checked >= 1, f"{page}: no figure checked"
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(SCREENSHOTS / "dark_01_why_normalize.png"), full_page=True)
    finally:
        tab.close()
