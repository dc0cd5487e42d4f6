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
from .naming import format_ulps, format_value
from .render_text import pass_groups, row_cells
from ..goldens.atomic import write_text_atomic

__all__ = ["render_html", "write_html", "MAX_PICTURES"]

#: failing outputs that get pictures (the table lists every output)
MAX_PICTURES = 40

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:100%}
table{border-collapse:collapse;font-size:13px;width:100%;table-layout:fixed}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;
      overflow-wrap:anywhere}
th{background:#f2f2f2}
td.num,th.num{white-space:nowrap;text-align:right;overflow:hidden}
col.verdict{width:7em} col.output{width:9em} col.class{width:7.5em} col.dtype{width:5.5em}
col.mismatch{width:8em} col.err{width:7em} col.ulp{width:4.5em} col.case{width:30%}
tr.fail td:first-child,tr.rejected td:first-child{background:#f6c6c6;font-weight:bold}
tr.problem td:first-child{background:#f3dfa2;font-weight:bold}
tr.too_strict td:first-child{background:#dcd3f0;font-weight:bold}
tr.not_recorded td:first-child{background:#e4e4e4;font-weight:bold}
tr.pass td:first-child{background:#cdeccd}
code{font-size:12px;overflow-wrap:anywhere} .msg{font-family:monospace;font-size:12px;
  white-space:pre-wrap;overflow-wrap:anywhere}
table.worst td.fails{background:#f6c6c6;font-weight:bold} table.worst td.ok{color:#2a7a2a}
section{border-top:2px solid #ddd;margin-top:1.5em;padding-top:.5em}
img{max-width:48%;margin-right:1%}
"""

_COLS = ("verdict", "case", "output", "class", "dtype", "mismatch", "err", "ulp", "detail")
_HEADS = ("verdict", "case", "output", "class", "dtype", "mismatch", "max abs err", "ulp",
          "detail")
_NUMERIC = {"mismatch", "err", "ulp"}


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
    """The error map: cells within the rule in shades of blue (log10 of error / allowed), cells
    that fail in red, and a red ring around each when there are few, so one failing element
    stands out in a large map."""
    m = r.metrics
    if m is None or m.heatmap is None:
        return None
    a, fr, fc = _pool(np.minimum(m.heatmap, 1e6))
    fails = a > 1.0
    fig, ax = plt.subplots(figsize=(6, 4))
    with np.errstate(divide="ignore"):
        img = ax.imshow(np.log10(np.clip(a, 1e-3, 1.0)), aspect="auto", cmap="Blues",
                        interpolation="nearest", vmin=-3, vmax=0)
    if fails.any():
        from matplotlib.colors import ListedColormap
        ax.imshow(np.ma.masked_where(~fails, np.ones_like(a)), aspect="auto",
                  cmap=ListedColormap(["#e00000"]), interpolation="nearest", vmin=0, vmax=1)
        ys, xs = np.nonzero(fails)
        if ys.size <= 50:
            ax.scatter(xs, ys, s=220, facecolors="none", edgecolors="#e00000", linewidths=1.8)
    fig.colorbar(img, ax=ax, label="log10(error / allowed); red: fails")
    ax.set_title(f"{r.output}: worst element per cell ({int(fails.sum())} failing cells)",
                 fontsize=10)
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


def _table(rows, e, link: bool) -> list[str]:
    out = ["<table><colgroup>" + "".join(f"<col class='{c}'>" for c in _COLS) + "</colgroup><tr>"
           + "".join(f"<th class='{'num ' + c if c in _NUMERIC else c}'>{h}</th>"
                     for c, h in zip(_COLS, _HEADS)) + "</tr>"]
    for r in rows:
        cls = "problem" if r.is_problem else r.status
        cells = row_cells(r)
        first = f"<a href='#r{id(r)}'>{e(cells[0])}</a>" if link else e(cells[0])
        tds = [first] + [e(c) for c in cells[1:]]
        out.append(f"<tr class='{cls}'>" + "".join(
            f"<td class='{'num ' + c if c in _NUMERIC else c}'>{t}</td>" for c, t in zip(_COLS, tds))
            + "</tr>")
    out.append("</table>")
    return out


def _worst_table(r, e) -> str:
    """The worst elements, each marked as failing (error above what the rule allows) or not."""
    rows = ["<table class='worst'><tr><th>element</th><th>actual</th><th>should be</th>"
            "<th class='num'>ulp</th><th class='num'>error / allowed</th><th>verdict</th></tr>"]
    for x in r.metrics.worst:
        fails = x.badness > 1.0 or x.kind != "numeric"
        idx = ", ".join(f"{k}={v}" for k, v in r.index(x).items())
        rows.append(
            f"<tr><td><code>{e(r.output)}[{e(idx)}]</code></td><td>{e(format_value(x.actual, r.dtype or 'float32'))}</td>"
            f"<td>{e(format_value(x.golden, r.dtype or 'float32', 2))}</td>"
            f"<td class='num'>{e(format_ulps(x.ulps))}</td><td class='num'>{x.badness:.3g}</td>"
            f"<td class='{'fails' if fails else 'ok'}'>{'fails' if fails else 'within'}"
            f"{' (' + x.kind + ')' if x.kind != 'numeric' else ''}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def render_html(report) -> str:
    """The self-contained HTML page of a report: the header, the outputs that did not pass,
    the passes by operator and output, the cases not run, then a section per failing output
    (its worst elements, heat map and ulp histogram)."""
    e = html.escape
    plt = _pyplot()
    ordered = report.ordered()
    failing = [r for r in ordered if r.status != "pass"]
    passing = [r for r in ordered if r.status == "pass"]
    out = _header(report, e, plt)
    patterns = report.pattern_lines()
    if patterns:
        out.append("<h2>Patterns across cases</h2><ul>"
                   + "".join(f"<li>{e(p.removeprefix('pattern: '))}</li>" for p in patterns)
                   + "</ul>")
    if failing:
        out.append(f"<h2>Not passed ({len(failing)})</h2>")
        out += _table(failing, e, link=True)
    out += _passed(report, passing, e)
    out += _not_run(report, e)
    pictures = 0
    for r in failing:
        out += _failing_section(r, e, plt if pictures < MAX_PICTURES else None)
        if plt is not None and r.metrics is not None and pictures < MAX_PICTURES:
            pictures += 1
    out.append("</body></html>\n")
    return "\n".join(out)


def _header(report, e, plt) -> list[str]:
    """The page's head, the total line, the files, the slowest cases, the matplotlib note."""
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width'>",
           f"<title>refspec compare: {e(report.summary_line())}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>refspec compare</h1><p><b>{e(report.summary_line())}</b></p>",
           f"<p>golden: <code>{e(report.golden)}</code><br>actual: <code>{e(str(report.actual))}</code></p>"]
    if report.timings:
        slow = sorted(report.timings.items(), key=lambda kv: -kv[1])[:10]
        out.append(f"<p>{e(report.timing_line())}</p><details><summary>the slowest cases"
                   "</summary><table><tr><th>case</th><th class='num'>ms (median)</th></tr>"
                   + "".join(f"<tr><td>{e(c)}</td><td class='num'>{t * 1e3:.3g}</td></tr>"
                             for c, t in slow) + "</table></details>")
    if plt is None:
        out.append("<p><b>matplotlib is not installed: the pictures are left out</b> "
                   "(pip install matplotlib, or the refspec[html] extra).</p>")
    return out


def _passed(report, passing, e) -> list[str]:
    """The passes grouped by operator and output (with the closest call), then every one."""
    groups = pass_groups(report)
    if not groups:
        return []
    out = [f"<h2>Passed ({len(passing)})</h2><table><tr><th>operator</th><th>output</th>"
           "<th class='num'>outputs</th><th>dtypes</th><th>closest call</th></tr>"]
    for g in groups:
        w = g["worst"]
        closest = (f"{w.metrics.max_badness:.3g} of the allowed error in {w.case_id}"
                   if w is not None and w.metrics is not None else "")
        out.append(f"<tr class='pass'><td>{e(g['op'])}</td><td>{e(g['output'])}</td>"
                   f"<td class='num'>{g['count']}</td><td>{e(', '.join(g['dtypes']))}</td>"
                   f"<td>{e(closest)}</td></tr>")
    out.append("</table>")
    out.append(f"<details><summary>every passing output ({len(passing)})</summary>")
    out += _table(passing, e, link=False)
    out.append("</details>")
    return out


def _not_run(report, e) -> list[str]:
    """The cases not run, by operator, and their ids."""
    if not report.not_run:
        return []
    return [f"<h2>Not run ({len(report.not_run)} cases)</h2><p>No output and no status "
            + f"({e(report.not_run_effect())})"
            + "</p><ul>" + "".join(f"<li>{e(op)}: {n} ({e(report.not_run_reason(op))})</li>"
                                   for op, n in report.not_run_by_op().items()) + "</ul>",
            "<details><summary>case ids</summary><div class='msg'>"
            + "<br>".join(e(n.case_id) for n in report.not_run) + "</div></details>"]


def _failing_section(r, e, plt) -> list[str]:
    """The section of an output that did not pass; its pictures when ``plt`` is given."""
    out = [f"<section id='r{id(r)}'><h3>{e(r.case_id)} : {e(r.output)} "
           f"&mdash; {e(r.label)}</h3>",
           f"<p class='msg'>{e(r.message)}</p><p>{e(r.reason)}</p>"]
    if r.diagnosis:
        out.append("<p>diagnosis:</p><ol class='diagnosis'>" + "".join(
            f"<li><b>{e(f.kind)}</b>: {e(f.summary)}</li>" for f in r.diagnosis) + "</ol>")
    if r.hint:
        out.append(f"<p>hint: {e(r.hint)}</p>")
    if r.rule:
        out.append(f"<p>rule: {e(r.rule)}</p>")
    if r.regenerate:
        out.append(f"<p>regenerate: <code>{e(r.regenerate)}</code></p>")
    m = r.metrics
    if m is not None and m.worst:
        out.append("<p>worst elements:</p>" + _worst_table(r, e))
    if plt is not None and m is not None:
        for img in (_heatmap(r, plt), _histogram(r, plt)):
            if img:
                out.append(f"<img alt='{e(r.output)}' src='data:image/png;base64,{img}'>")
    out.append("</section>")
    return out


def write_html(report, path) -> None:
    write_text_atomic(path, render_html(report))
