"""``--html PATH``: one self-contained file: the table, and for each failing output an error
heatmap over two axes (largest error/allowed ratio over the other axes) and its ulp histogram,
drawn as inline SVG by ``refspec.comparator.reports.pictures`` (docs/compare.md, "Reports")."""

from __future__ import annotations

import html

from ..judging.metrics import ulp_bin_labels
from ..judging.naming import format_ratio, format_ulps, format_value
from .detail import detail
from .pictures import heatmap_svg, histogram_svg
from .render_text import HEAD, pass_groups, row_cells

__all__ = ["render_html", "MAX_PICTURES"]

#: failing outputs that get pictures (the table lists every output)
MAX_PICTURES = 40
#: the detail of a failing output's section, every finding listed (the worst elements follow as
#: a table, then the pictures)
HTML_DETAIL = ("message", "reason", "diagnosis", "hint", "rule", "regenerate")

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:100%}
table{border-collapse:collapse;font-size:13px;width:100%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;
      overflow-wrap:anywhere}
th{background:#f2f2f2;overflow-wrap:normal}
td.num,th.num,td.verdict,td.output,td.class,td.dtype{white-space:nowrap;overflow-wrap:normal}
td.num,th.num{text-align:right}
th.verdict,th.output,th.class,th.dtype,th.num{width:1%}
tr.more td{border-top:none;color:#444;padding-left:2em}
tr.fail td:first-child,tr.rejected td:first-child{background:#f6c6c6;font-weight:bold}
tr.problem td:first-child{background:#f3dfa2;font-weight:bold}
tr.too_strict td:first-child{background:#dcd3f0;font-weight:bold}
tr.not_recorded td:first-child{background:#e4e4e4;font-weight:bold}
tr.pass td:first-child{background:#cdeccd}
code{font-size:12px;overflow-wrap:anywhere} .msg{font-family:monospace;font-size:12px;
  white-space:pre-wrap;overflow-wrap:anywhere}
table.worst td.fails{background:#f6c6c6;font-weight:bold} table.worst td.ok{color:#2a7a2a}
section{border-top:2px solid #ddd;margin-top:1.5em;padding-top:.5em}
svg.pic{max-width:48%;height:auto;margin-right:1%;vertical-align:top}
"""

#: the table's columns: every one of the terminal's but the detail, which has a row of its own
#: under each row, across the table
_COLS = ("verdict", "case", "output", "class", "dtype", "mismatch", "err", "ulp")
_NUMERIC = {"mismatch", "err", "ulp"}


def _heatmap(r) -> str | None:
    m = r.metrics
    if m is None or m.heatmap is None:
        return None
    axes = getattr(r, "heat_axes", None) or ("rows", "columns")
    return heatmap_svg(m.heatmap, f"{r.output}: worst element per cell",
                       axes[0] or "rows", axes[1] or "columns", uid=str(id(r)))


def _histogram(r) -> str | None:
    m = r.metrics
    if m is None or not any(m.ulp_hist):
        return None
    labels = ulp_bin_labels()
    counts = list(m.ulp_hist)
    last = max(i for i, c in enumerate(counts) if c) + 1
    return histogram_svg(counts[: max(last, 3)], labels[: max(last, 3)],
                         f"{r.output}: ulp distance histogram", f"|a - g| in ulps of {r.dtype}")


def _table(rows, e, link: bool) -> list[str]:
    out = ["<table><tr>" + "".join(f"<th class='{'num ' + c if c in _NUMERIC else c}'>{h}</th>"
                                   for c, h in zip(_COLS, HEAD)) + "</tr>"]
    for r in rows:
        cls = "problem" if r.is_problem else r.status
        cells = row_cells(r)
        first = f"<a href='#r{id(r)}'>{e(cells[0])}</a>" if link else e(cells[0])
        tds = [first] + [e(c) for c in cells[1:len(_COLS)]]
        out.append(f"<tr class='{cls}'>" + "".join(
            f"<td class='{'num ' + c if c in _NUMERIC else c}'>{t}</td>" for c, t in zip(_COLS, tds))
            + "</tr>")
        more = [e(cells[-1])] if cells[-1] else []
        if link:
            more += _first_finding(r, e)
        if more:
            out.append(f"<tr class='more'><td colspan='{len(_COLS)}'>{'<br>'.join(more)}</td></tr>")
    out.append("</table>")
    return out


def _first_finding(r, e) -> list[str]:
    """The first finding of a failing output's diagnosis as a line of the table (the others are
    in its section); none when it has no diagnosis."""
    items = dict(detail(r, ("diagnosis",)))
    if "diagnosis" not in items:
        return []
    f, more = items["diagnosis"][0], len(r.diagnosis) - 1
    return [f"<span class='finding'>diagnosis: <b>{e(f.kind)}</b>: {e(f.summary)}"
            + (f" <a href='#r{id(r)}'>(+{more} more)</a>" if more else "") + "</span>"]


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
            f"<td class='num'>{e(format_ulps(x.ulps))}</td><td class='num'>{e(format_ratio(x.badness))}</td>"
            f"<td class='{'fails' if fails else 'ok'}'>{'fails' if fails else 'within'}"
            f"{' (' + x.kind + ')' if x.kind != 'numeric' else ''}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def render_html(report) -> str:
    """The self-contained HTML page of a report, read from the top: the header, the patterns
    across cases and the notes, the outputs that did not pass (each with its first finding),
    the passes by operator and output, the cases not run, then a section per failing output
    (its worst elements, heat map and ulp histogram)."""
    e = html.escape
    ordered = report.ordered()
    failing = [r for r in ordered if r.status != "pass"]
    passing = [r for r in ordered if r.status == "pass"]
    out = _header(report, e)
    patterns = report.pattern_lines()
    if patterns:
        out.append("<h2>Patterns across cases</h2><ul>"
                   + "".join(f"<li>{e(p.removeprefix('pattern: '))}</li>" for p in patterns)
                   + "</ul>")
    if report.notes:
        out.append("<ul class='notes'>" + "".join(f"<li>note: {e(n)}</li>" for n in report.notes)
                   + "</ul>")
    if failing:
        out.append(f"<h2>Not passed ({len(failing)})</h2>")
        out += _table(failing, e, link=True)
    out += _passed(report, passing, e)
    out += _not_run(report, e)
    pictures = 0
    for r in failing:
        out += _failing_section(r, e, pictures < MAX_PICTURES)
        if r.metrics is not None:
            pictures += 1
    out.append("</body></html>\n")
    return "\n".join(out)


def _header(report, e) -> list[str]:
    """The page's head, the total line, the files, the slowest cases."""
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           "<meta name='viewport' content='width=device-width'>",
           f"<title>refspec compare: {e(report.summary_line())}</title>",
           f"<style>{_CSS}</style></head><body>",
           f"<h1>refspec compare</h1><p><b>{e(report.summary_line())}</b></p>",
           f"<p>golden: <code>{e(report.golden)}</code><br>actual: <code>{e(str(report.actual))}</code></p>",
           f"<p>{e(report.provenance_line())}</p>"]
    if report.timings:
        slow = sorted(report.timings.items(), key=lambda kv: -kv[1])[:10]
        out.append(f"<p>{e(report.timing_line())}</p><details><summary>the slowest cases"
                   "</summary><table><tr><th>case</th><th class='num'>ms (median)</th></tr>"
                   + "".join(f"<tr><td>{e(c)}</td><td class='num'>{t * 1e3:.3g}</td></tr>"
                             for c, t in slow) + "</table></details>")
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
        closest = (f"{format_ratio(w.metrics.max_badness)} of the allowed error in {w.case_id}"
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


def _failing_section(r, e, pictures: bool) -> list[str]:
    """The section of an output that did not pass; its pictures when ``pictures``."""
    out = [f"<section id='r{id(r)}'><h3>{e(r.case_id)} : {e(r.output)} "
           f"&mdash; {e(r.label)}</h3>"]
    items = dict(detail(r, HTML_DETAIL, most_findings=None))
    out.append(f"<p class='msg'>{e(items['message'])}</p><p>{e(items['reason'])}</p>")
    if "diagnosis" in items:
        out.append("<p>diagnosis:</p><ol class='diagnosis'>" + "".join(
            f"<li><b>{e(f.kind)}</b>: {e(f.summary)}</li>" for f in items["diagnosis"]) + "</ol>")
    for name in ("hint", "rule"):
        if name in items:
            out.append(f"<p>{name}: {e(items[name])}</p>")
    if "regenerate" in items:
        out.append(f"<p>regenerate: <code>{e(items['regenerate'])}</code></p>")
    m = r.metrics
    if m is not None and m.worst:
        out.append("<p>worst elements:</p>" + _worst_table(r, e))
    if pictures and m is not None:
        out += [svg for svg in (_heatmap(r), _histogram(r)) if svg]
    out.append("</section>")
    return out
