"""The HTML report stays readable: in a real browser (Debian's headless Chromium driven by
Playwright) at 1280 and 1400 px there is no horizontal overflow, the failing row and the whole
text of every numeric cell are on screen, a negative case's row is not a tall block of its
rule's text, and the failing element is marked in the worst-elements list; an isolated failing
element stands out on the heat map (red pixels counted in the picture, and the ring around it),
whose ticks are integers, and the marks of a small map stay inside their cells. The report is
read from the top: in the browser, on the smoke cases and a large failing output, the first
table gives every failing output's first finding, every mark lies in its cell, and no text of a
picture is cut. The browser tests are skipped only when no Chromium is installed (CI installs
it, .ci/run)."""

from __future__ import annotations

import base64
import io
import re
from html import escape
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import refspec
import refspec.goldens as goldens
from refspec.cli import main
from refspec.comparator import compare
from refspec.comparator.reports.pictures import MARK_CELL, heatmap_svg, integer_ticks
from refspec.comparator.reports.render_html import render_html
from refspec.goldens.cases import CaseData
from refspec.goldens.example import rope_grad_case
from browser import launch, needs_chromium

#: sweep-style case ids: long, with no spaces to break at
LONG = "rope_grad/soc=A2/mode=interleave/layout=BSND/cos=B1SD/dtype=bfloat16/x=1/dist=vendor/"
FLIP = (1, 3, 37, 5)
#: a negative case the kernel accepts: its row's detail is the long text of the rule it broke
NEG = LONG + "B2N4S64D31"
RULE = ("dy: D=31 must be even, and mode: 2 is not supported on A2: the tiling of the vendor's "
        "kernel splits D in halves of whole 32-byte blocks")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    g = d / "g.h5"
    ids = [LONG + f"B2N4S64D{16 * (k + 1)}" for k in range(3)]
    with goldens.GoldenWriter(g, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        for k, cid in enumerate(ids):
            w.write_case(rope_grad_case(shape=(2, 4, 64, 16 * (k + 1)), dtype='bfloat16', seed=k,
                                        case_id=cid))
        neg = rope_grad_case(shape=(1, 1, 4, 8), dtype="float32", seed=3)
        w.write_case(CaseData(NEG, neg.op, {**neg.params, "soc": "A2"}, 3, neg.inputs,
                              regenerate="r", error=refspec.TilingError(RULE)))
    arrays = {}
    with goldens.open(g) as gf:
        for cid in ids:
            case = gf[cid]
            arrays[cid] = {n: case.expected[n][()].copy() for n in case.output_names}
    dx = arrays[ids[0]]["dx"]
    dx[FLIP] = -dx[FLIP] if dx[FLIP] != 0 else 1.0          # one element wrong
    dcos = arrays[ids[1]]["dcos"]
    dcos[...] = dcos * 40 + 1                                 # thousands of ulps: wide numbers
    return compare(str(g), arrays, heatmaps=True, heatmap_axes="SD", status={NEG: 0})


def _heatmap_png(report):
    html = render_html(report)
    imgs = re.findall(r"href='data:image/png;base64,([^']+)'", html)
    assert imgs, "no pictures"
    return imgs[0]


def _marks(svg):
    """The failing-cell marks of a heat map: (row, col, cx, cy, rx, ry, stroke width), and the
    map's cell size in the picture's units."""
    img = re.search(r"<image class='map' data-rows='(\d+)' data-cols='(\d+)' x='(\d+)' "
                    r"y='(\d+)' width='(\d+)' height='(\d+)'", svg)
    rows, cols, x0, y0, w, h = map(int, img.groups())
    marks = [tuple(float(v) for v in m) for m in re.findall(
        r"<ellipse class='mark' data-row='(\d+)' data-col='(\d+)' cx='([\d.]+)' cy='([\d.]+)' "
        r"rx='([\d.]+)' ry='([\d.]+)' fill='none' stroke='[^']+' stroke-width='([\d.]+)'", svg)]
    return marks, (x0, y0, w / cols, h / rows)


def test_isolated_failure_stands_out_on_the_heat_map(report):
    import matplotlib.image as mpimg
    img = mpimg.imread(io.BytesIO(base64.b64decode(_heatmap_png(report))), format="png")
    rgb = img[..., :3]
    red = (rgb[..., 0] > 0.8) & (rgb[..., 1] < 0.15) & (rgb[..., 2] < 0.15)
    # the failing cell: 5 x 30 pixels of a 64 x 16 map
    ys, xs = np.nonzero(red)
    assert (np.ptp(ys) + 1, np.ptp(xs) + 1) == (5, 30), (np.ptp(ys), np.ptp(xs))
    # and the ring drawn around it, wider than the cell is high: it stands out
    html = render_html(report)
    svg = html[html.index("<svg"):html.index("</svg>")]
    marks, (x0, y0, cw, ch) = _marks(svg)
    assert len(marks) == 1
    row, col, cx, cy, rx, ry, _ = marks[0]
    assert (row, col) == (FLIP[2], FLIP[3])
    assert rx >= 15 and ry >= 15
    assert cx - rx < x0 + col * cw and cx + rx > x0 + (col + 1) * cw
    assert cy - ry < y0 + row * ch and cy + ry > y0 + (row + 1) * ch


@pytest.mark.parametrize("shape", [(4, 8), (2, 3), (12, 20)])
def test_marks_of_a_small_map_stay_in_their_cells(shape):
    """Cells of a small map are large: each failing cell's mark (stroke included) lies inside
    it and covers no neighbour."""
    heat = np.full(shape, 0.5)
    heat[1::2, ::3] = 5.0
    marks, (x0, y0, cw, ch) = _marks(heatmap_svg(heat, "dx", "S", "D"))
    assert len(marks) == int((heat > 1).sum())
    for row, col, cx, cy, rx, ry, stroke in marks:
        assert heat[int(row), int(col)] > 1
        assert x0 + col * cw <= cx - rx - stroke / 2 and cx + rx + stroke / 2 <= x0 + (col + 1) * cw
        assert y0 + row * ch <= cy - ry - stroke / 2 and cy + ry + stroke / 2 <= y0 + (row + 1) * ch


def test_heat_map_ticks_are_integers():
    assert integer_ticks(4) == [0, 1, 2, 3] and integer_ticks(64) == [0, 10, 20, 30, 40, 50, 60]
    assert integer_ticks(1) == [0] and integer_ticks(9) == [0, 2, 4, 6, 8]
    heat = np.zeros((3, 5))
    heat[1, 2] = 2.0
    svg = heatmap_svg(heat, "dx", "S", "D")
    ticks = re.findall(r"<text[^>]*class='tick'[^>]*>([^<]*)</text>", svg)
    assert sorted(ticks) == sorted(["0", "1", "2"] + ["0", "1", "2", "3", "4"]), ticks
    assert "(1 failing cells)" in svg


def test_table_of_failures_gives_each_first_finding(report):
    """Every failing output with a diagnosis has its first finding in the row under it, in the
    table at the top; the section below lists all of them."""
    html = render_html(report)
    table = html[html.index("<h2>Not passed"):html.index("</table>")]
    diagnosed = [r for r in report.ordered() if r.status != "pass" and r.diagnosis]
    assert diagnosed
    for r in diagnosed:
        f = r.diagnosis[0]
        row = table[table.index(f"href='#r{id(r)}'"):]
        more = row[row.index("<tr class='more'>"):row.index("</tr>", row.index("<tr class='more'>"))]
        assert f"diagnosis: <b>{f.kind}</b>: {escape(f.summary)}" in more, more


def test_worst_list_marks_failing_elements(report):
    html = render_html(report)
    section = html[html.index("worst elements:"):]
    first = section[: section.index("</tr>", section.index("</tr>") + 5)]
    assert "b=1, n=3, s=37, d=5" in first and "class='fails'" in first
    assert "class='ok'" in section                 # the others are marked as within the rule


@needs_chromium
@pytest.mark.parametrize("viewport", [1280, 1400])
def test_html_in_a_browser(report, tmp_path, viewport):
    from playwright.sync_api import sync_playwright
    path = tmp_path / "r.html"
    path.write_text(render_html(report))
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": viewport, "height": 900})
            page.goto(path.as_uri())
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= viewport, f"page is {width} px wide"
            row = page.locator("tr.fail").first
            assert row.is_visible()
            assert "dx" in row.inner_text() and "B2N4S64D16" in row.inner_text()
            for cell in row.locator("td").all():
                box = cell.bounding_box()
                assert box is not None and box["width"] > 0 and box["x"] + box["width"] <= viewport
            assert row.locator("td.err").inner_text().strip() not in ("", "-")
            # every number, and every numeric column's name, whole: none clipped
            cut = page.evaluate("""() => [...document.querySelectorAll('td.num, th.num')]
                .filter(c => c.offsetParent !== null && c.scrollWidth > c.clientWidth)
                .map(c => c.innerText)""")
            assert not cut, cut
            assert page.locator("td.ulp", has_text="e+03").count() >= 1    # the widest numbers
            # the negative case's row: a line or two, its rule's text under it, across the table
            neg = page.locator("tr.fail", has_text="(status)").first
            assert neg.bounding_box()["height"] <= 45, neg.bounding_box()
            detail = neg.locator("xpath=following-sibling::tr[1]")
            assert "mode: 2 is not supported on A2" in detail.inner_text()
            assert detail.bounding_box()["height"] <= 45, detail.bounding_box()
            mark = page.locator("table.worst td.fails").first
            mark.scroll_into_view_if_needed()
            assert mark.is_visible() and mark.inner_text().startswith("fails")
            box = mark.bounding_box()
            assert box["x"] + box["width"] <= viewport
            element = mark.locator("xpath=..").inner_text()
            assert "b=1, n=3, s=37, d=5" in element
        finally:
            browser.close()


# --- the report read from the top, in the browser ------------------------------------------------

IMPLS = Path(__file__).resolve().parents[1] / "impls"


@pytest.fixture(scope="module")
def reading_reports(tmp_path_factory):
    """The reports a reader meets first: the smoke cases of RotaryPositionEmbeddingGrad (4 x 8
    heat maps) judged for a kernel that lost a minus (failures of thousands of ulps, each
    diagnosed) and for a right float32 kernel held to rtol = atol = 0 (failures of an ulp or
    two: histograms of few bins); and one large failing output (2 x 4 x 128 x 128 float32,
    errors of up to 1e7 ulps and more)."""
    from refspec.comparator.sources.implementation import Implementation
    d = tmp_path_factory.mktemp("reading")
    smoke = d / "smoke.h5"
    result = CliRunner().invoke(main, ["generate", "-o", str(smoke), "--op", "rope_grad"])
    assert result.exit_code == 0, result.output
    kernels = IMPLS / "numpy_float32.py"
    reports = {
        "lost_minus": compare(str(smoke), Implementation(f"{kernels}:LOST_MINUS", repeat=0),
                              heatmaps=True),
        "exact": compare(str(smoke), Implementation(f"{kernels}:EVERY", repeat=0), heatmaps=True,
                         rtol=0.0, atol=0.0)}
    big, cid = d / "big.h5", "rope_grad/large/B2N4S128D128"
    with goldens.GoldenWriter(big, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(2, 4, 128, 128), dtype="float32", seed=5, case_id=cid))
    with goldens.open(big) as gf:
        case = gf[cid]
        arrays = {n: case.expected[n][()].copy() for n in case.output_names}
    noise = np.random.default_rng(5).standard_normal(arrays["dx"].shape).astype(np.float32)
    arrays["dx"] = arrays["dx"] * (1 + noise / 2)
    reports["large"] = compare(str(big), {cid: arrays}, heatmaps=True, fast=False)
    for name, r in reports.items():
        assert r.failures, f"{name}: nothing failed"
    return reports


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize("viewport", [1280, 1400])
@pytest.mark.parametrize("which", ["lost_minus", "exact", "large"])
def test_report_read_from_the_top(reading_reports, tmp_path, viewport, which):
    """In Chromium: the first table shows every failing output's first finding under its row;
    every mark of a failing cell lies inside its cell when the cells can hold it (the 4 x 8
    maps); no text of a picture is cut by the picture's edge and no picture reaches past the
    window."""
    from playwright.sync_api import sync_playwright
    report = reading_reports[which]
    path = tmp_path / "r.html"
    path.write_text(render_html(report))
    expected = {f"r{id(r)}": f"diagnosis: {r.diagnosis[0].line()}"
                for r in report.ordered() if r.status != "pass" and r.diagnosis}
    assert expected or which == "large"
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport={"width": viewport, "height": 900})
            page.goto(path.as_uri())
            first = page.locator("h2", has_text="Not passed").locator(
                "xpath=following-sibling::table[1]")
            shown = page.evaluate("""t => Object.fromEntries([...t.querySelectorAll('tr.fail')]
                .map(r => [r.querySelector('a').getAttribute('href').slice(1),
                           r.nextElementSibling.classList.contains('more')
                           ? r.nextElementSibling.innerText : '']))""", first.element_handle())
            for rid, line in expected.items():
                assert line in shown[rid].replace("\n", " "), (line, shown[rid])
            marks = page.evaluate("""() => [...document.querySelectorAll('svg.pic')]
              .filter(s => s.querySelector('image.map'))
              .flatMap(s => { const m = s.querySelector('image.map'), b = m.getBoundingClientRect();
                const ch = b.height / +m.dataset.rows, cw = b.width / +m.dataset.cols;
                const k = b.width / m.width.baseVal.value;
                return [...s.querySelectorAll('ellipse.mark')].map(e => {
                  const r = e.getBoundingClientRect(), h = k * e.getAttribute('stroke-width') / 2;
                  return {cell: [b.left + e.dataset.col * cw, b.top + e.dataset.row * ch, cw, ch, k],
                          mark: [r.left - h, r.top - h, r.right + h, r.bottom + h]}; }); })""")
            inside = 0
            for m in marks:
                x, y, cw, ch, k = m["cell"]
                if min(cw, ch) / k < MARK_CELL:           # cells too small to hold a mark
                    continue
                x0, y0, x1, y1 = m["mark"]
                assert x - 0.5 <= x0 and x1 <= x + cw + 0.5 and y - 0.5 <= y0 and \
                    y1 <= y + ch + 0.5, m
                inside += 1
            assert inside or which == "large", "no mark on the small maps"
            cut = page.evaluate("""() => [...document.querySelectorAll('svg.pic')].flatMap(s => {
                const b = s.getBoundingClientRect();
                return [...s.querySelectorAll('text')].map(t => [t, t.getBoundingClientRect()])
                  .filter(([t, r]) => r.left < b.left - 0.5 || r.right > b.right + 0.5 ||
                                      r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5)
                  .map(([t, r]) => [t.textContent, r.right - b.right, b.left - r.left]); })""")
            assert not cut, cut
            wide = page.evaluate("""w => [...document.querySelectorAll('svg.pic')]
                .filter(s => s.getBoundingClientRect().right > w).length""", viewport)
            assert wide == 0
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport
        finally:
            browser.close()
