"""``--html PATH``: one self-contained file: the table, and for each failing output an error
heatmap over two axes (largest error/allowed ratio over the other axes) and its ulp histogram,
as PNG images embedded in base64. matplotlib (Agg backend) is imported only here; without it
the page is written without pictures and says so."""

from __future__ import annotations

import base64
import html
import io
import math

import numpy as np

from .metrics import ulp_bin_labels
from .render_text import row_cells
from ..goldens.atomic import write_text_atomic

__all__ = ["render_html", "write_html", "MAX_PICTURES"]

#: failing outputs that get pictures (the table lists every output)
MAX_PICTURES = 40

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
tr.fail td:first-child{background:#f6c6c6;font-weight:bold}
tr.problem td:first-child{background:#f3dfa2;font-weight:bold}
tr.pass td:first-child{background:#cdeccd}
code{font-size:12px} .msg{font-family:monospace;font-size:12px;white-space:pre-wrap}
section{border-top:2px solid #ddd;margin-top:1.5em;padding-top:.5em}
img{max-width:48%;margin-right:1%}
"""


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
        return plt
    except Exception:
        return None


def _png(fig, plt) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _pool(a: np.ndarray, limit: int = 256) -> tuple[np.ndarray, int, int]:
    """Max-pool a 2-D map down to at most limit x limit."""
    fr = max(1, math.ceil(a.shape[0] / limit))
    fc = max(1, math.ceil(a.shape[1] / limit))
    if fr == 1 and fc == 1:
        return a, 1, 1
    rows = math.ceil(a.shape[0] / fr) * fr
    cols = math.ceil(a.shape[1] / fc) * fc
    pad = np.zeros((rows, cols))
    pad[: a.shape[0], : a.shape[1]] = a
    return pad.reshape(rows // fr, fr, cols // fc, fc).max(axis=(1, 3)), fr, fc


def _heatmap(r, plt) -> str | None:
    m = r.metrics
    if m is None or m.heatmap is None:
        return None
    a = np.minimum(m.heatmap, 1e6)
    a, fr, fc = _pool(a)
    fig, ax = plt.subplots(figsize=(6, 4))
    with np.errstate(divide="ignore"):
        img = ax.imshow(np.log10(np.maximum(a, 1e-3)), aspect="auto", cmap="magma",
                        interpolation="nearest", vmin=-3, vmax=max(1.0, float(np.log10(max(a.max(), 1e-3)))))
    fig.colorbar(img, ax=ax, label="log10(error / allowed); > 0 fails")
    ax.set_title(f"{r.output}: worst element per cell", fontsize=10)
    ax.set_xlabel(_axis_label(r, 1, fc))
    ax.set_ylabel(_axis_label(r, 0, fr))
    return _png(fig, plt)


def _axis_label(r, which: int, factor: int) -> str:
    text = "columns" if which else "rows"
    hm = getattr(r, "heat_axes", None)
    if hm:
        text = hm[which] or text
    return text + (f" (x{factor} per pixel)" if factor > 1 else "")


def _histogram(r, plt) -> str | None:
    m = r.metrics
    if m is None or not any(m.ulp_hist):
        return None
    labels = ulp_bin_labels()
    counts = list(m.ulp_hist)
    last = max(i for i, c in enumerate(counts) if c) + 1
    labels, counts = labels[: max(last, 3)], counts[: max(last, 3)]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(range(len(counts)), counts, color="#4a7ab5")
    ax.set_yscale("symlog")
    ax.set_xticks(range(len(counts)))
    ax.set_xticklabels(labels, rotation=60, fontsize=8)
    ax.set_xlabel(f"|a - g| in ulps of {r.dtype}")
    ax.set_ylabel("elements")
    ax.set_title(f"{r.output}: ulp distance histogram", fontsize=10)
    return _png(fig, plt)


def render_html(report) -> str:
    e = html.escape
    plt = _pyplot()
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           f"<title>refspec compare: {e(report.summary_line())}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>refspec compare</h1><p><b>{e(report.summary_line())}</b></p>",
           f"<p>golden: <code>{e(report.golden)}</code><br>actual: <code>{e(str(report.actual))}</code></p>"]
    if plt is None:
        out.append("<p><b>matplotlib is not installed: the pictures are left out</b> "
                   "(pip install matplotlib, or the refspec[html] extra).</p>")
    out.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in
               ("verdict", "case", "output", "class", "dtype", "mismatch", "max abs err", "ulp",
                "detail")) + "</tr>")
    for r in report.ordered():
        cls = "problem" if r.is_problem else r.verdict
        cells = row_cells(r)
        link = f"<a href='#r{id(r)}'>{e(cells[0])}</a>" if not r.passed else e(cells[0])
        out.append(f"<tr class='{cls}'><td>{link}</td>" +
                   "".join(f"<td>{e(c)}</td>" for c in cells[1:]) + "</tr>")
    out.append("</table>")
    pictures = 0
    for r in report.ordered():
        if r.passed:
            continue
        out.append(f"<section id='r{id(r)}'><h3>{e(r.case_id)} : {e(r.output)} "
                   f"&mdash; {e(r.status)}</h3>")
        out.append(f"<p class='msg'>{e(r.message)}</p><p>{e(r.reason)}</p>")
        if r.rule:
            out.append(f"<p>rule: {e(r.rule)}</p>")
        if r.regenerate:
            out.append(f"<p>regenerate: <code>{e(r.regenerate)}</code></p>")
        m = r.metrics
        if m is not None and m.worst:
            out.append("<p>worst elements:</p><div class='msg'>" +
                       "<br>".join(e(r.element_line(x)) for x in m.worst) + "</div>")
        if plt is not None and m is not None and pictures < MAX_PICTURES:
            for img in (_heatmap(r, plt), _histogram(r, plt)):
                if img:
                    out.append(f"<img alt='{e(r.output)}' src='data:image/png;base64,{img}'>")
            pictures += 1
        out.append("</section>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_html(report, path) -> None:
    write_text_atomic(path, render_html(report))
