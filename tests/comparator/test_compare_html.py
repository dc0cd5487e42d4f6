"""The HTML report stays readable: in a real browser (Debian's headless Chromium driven by
Playwright) at 1280 px there is no horizontal overflow, the failing row and its numeric
columns are on screen, and the failing element is marked in the worst-elements list; an
isolated failing element stands out on the heat map (red pixels counted in the picture). The
browser test is skipped only when no Chromium is installed (CI installs it, .ci/run)."""

from __future__ import annotations

import base64
import io
import re
import shutil

import pytest

import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.comparator.render_html import render_html
from refspec.goldens.example import rope_grad_case

#: sweep-style case ids: long, with no spaces to break at
LONG = "rope_grad/soc=A2/mode=interleave/layout=BSND/cos=B1SD/dtype=bfloat16/x=1/dist=vendor/"
FLIP = (1, 3, 37, 5)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    g = d / "g.h5"
    ids = [LONG + f"B2N4S64D{16 * (k + 1)}" for k in range(3)]
    with goldens.GoldenWriter(g, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        for k, cid in enumerate(ids):
            w.write_case(rope_grad_case(shape=(2, 4, 64, 16 * (k + 1)), dtype='bfloat16', seed=k,
                                        case_id=cid))
    arrays = {}
    with goldens.open(g) as gf:
        for cid in ids:
            case = gf[cid]
            arrays[cid] = {n: case.expected[n][()].copy() for n in case.output_names}
    dx = arrays[ids[0]]["dx"]
    dx[FLIP] = -dx[FLIP] if dx[FLIP] != 0 else 1.0          # one element wrong
    return compare(str(g), arrays, heatmaps=True, heatmap_axes="SD")


def _heatmap_png(report):
    html = render_html(report)
    imgs = re.findall(r"src='data:image/png;base64,([^']+)'", html)
    assert imgs, "no pictures"
    return imgs[0]


def test_isolated_failure_stands_out_on_the_heat_map(report):
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(base64.b64decode(_heatmap_png(report))), format="png")
    rgb = img[..., :3]
    red = (rgb[..., 0] > 0.8) & (rgb[..., 1] < 0.15) & (rgb[..., 2] < 0.15)
    # the failing cell and the ring drawn around it: far more than the cell's own 2 pixels
    assert red.sum() >= 60, red.sum()


def test_worst_list_marks_failing_elements(report):
    html = render_html(report)
    section = html[html.index("worst elements:"):]
    first = section[: section.index("</tr>", section.index("</tr>") + 5)]
    assert "b=1, n=3, s=37, d=5" in first and "class='fails'" in first
    assert "class='ok'" in section                 # the others are marked as within the rule


def _chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed (apt-get install chromium)")
def test_html_in_a_browser_at_1280_px(report, tmp_path):
    from playwright.sync_api import sync_playwright
    path = tmp_path / "r.html"
    path.write_text(render_html(report))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(path.as_uri())
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 1280, f"page is {width} px wide"
            row = page.locator("tr.fail").first
            assert row.is_visible()
            assert "dx" in row.inner_text() and "B2N4S64D16" in row.inner_text()
            for cell in row.locator("td").all():
                box = cell.bounding_box()
                assert box is not None and box["width"] > 0 and box["x"] + box["width"] <= 1280
            for cell in row.locator("td.num").all():      # numbers not cut
                assert cell.evaluate("c => c.scrollWidth <= c.clientWidth"), cell.inner_text()
            assert row.locator("td.err").inner_text().strip() not in ("", "-")
            mark = page.locator("table.worst td.fails").first
            mark.scroll_into_view_if_needed()
            assert mark.is_visible() and mark.inner_text().startswith("fails")
            box = mark.bounding_box()
            assert box["x"] + box["width"] <= 1280
            element = mark.locator("xpath=..").inner_text()
            assert "b=1, n=3, s=37, d=5" in element
        finally:
            browser.close()
