"""The terminal report: every output that did not pass, in full (its row, its message, the
command that regenerates the case); the passes summarised per operator and output (every row
with ``verbose``); the cases not run, one line per operator; then the one-line total."""

from __future__ import annotations

from .naming import format_ulps, format_value

__all__ = ["render_text", "row_cells", "pass_groups"]

_HEAD = ("verdict", "case", "output", "class", "dtype", "mismatch", "max abs err", "ulp", "detail")
#: terminal column order: the short columns first, the long case id last but one, so nothing
#: needs cutting (the detail of a failure also gets its own line below the row)
_ORDER = (0, 2, 4, 3, 5, 6, 7, 1, 8)


def row_cells(r) -> tuple[str, ...]:
    m = r.metrics
    if m is None:
        return (r.label, r.case_id, r.output, r.comparison_class or "-", r.dtype or "-", "-", "-",
                "-", r.reason)
    mism = f"{m.failures}/{m.n}"
    mx = m.max_abs
    err = format_value(mx.abs_err, "float32", -6) if mx is not None else "-"
    ulp = format_ulps(mx.ulps) if mx is not None else "-"
    return (r.label, r.case_id, r.output, r.comparison_class or "-", r.dtype or "-", mism, err,
            ulp, r.reason)


def pass_groups(report) -> list[dict]:
    """Passing outputs grouped by operator and output name, in golden order: count, dtypes and
    the closest call (the largest error / allowed) with its case."""
    groups: dict[tuple, dict] = {}
    for r in report.results:
        if r.status != "pass":
            continue
        g = groups.setdefault((r.op, r.output), {"op": r.op, "output": r.output, "count": 0,
                                                 "dtypes": [], "worst": None})
        g["count"] += 1
        if r.dtype and r.dtype not in g["dtypes"]:
            g["dtypes"].append(r.dtype)
        m = r.metrics
        if m is not None and (g["worst"] is None or m.max_badness > g["worst"].metrics.max_badness):
            g["worst"] = r
    return list(groups.values())


def _group_line(g) -> str:
    """``PASS   1553 x rotary_position_embedding_grad dx (3 dtypes); closest: 0.98 of the
    allowed error`` (the closest call's case id is in the JSON and HTML reports)."""
    text = f"PASS {g['count']:>6} x {g['op']} {g['output']}"
    if g["dtypes"]:
        text += f" ({', '.join(g['dtypes'])})" if len(g["dtypes"]) == 1 else \
            f" ({len(g['dtypes'])} dtypes)"
    w = g["worst"]
    if w is not None and w.metrics is not None and w.metrics.max_abs is not None:
        text += f"; closest: {w.metrics.max_badness:.3g} of the allowed error"
    return text


def render_text(report, width: int | None = None, verbose: bool = False,
                failures_only: bool = False) -> str:
    """The terminal report; ``verbose`` lists every passing row too, ``failures_only`` leaves
    the passes out (the total line stays)."""
    shown = [r for r in report.ordered() if verbose or r.status != "pass"]
    lines = []
    if shown:
        head = tuple(_HEAD[i] for i in _ORDER)
        rows = [tuple(cells[i] for i in _ORDER) for cells in map(row_cells, shown)]
        widths = [len(h) for h in head]
        for row in rows:
            for i, cell in enumerate(row[:-1]):
                widths[i] = max(widths[i], len(cell))
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths[:-1])) + "  " + head[-1])
        for r, row in zip(shown, rows):
            line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1])) + "  " + row[-1]
            lines.append(line[:width] if width else line)
            if r.status not in ("pass", "not_recorded") and r.message:
                lines.append(f"    {r.message}")
                lines += [f"    {line}" for line in r.diagnosis_lines()]
                if r.hint:
                    lines.append(f"    hint: {r.hint}")
                if r.regenerate:
                    lines.append(f"    regenerate: {r.regenerate}")
    if not verbose and not failures_only:
        lines += [_group_line(g) for g in pass_groups(report)]
    for op, n in report.not_run_by_op().items():
        lines.append(f"NOT RUN {n:>5} x {op}: {report.not_run_reason(op)} "
                     f"(ids in the JSON report; "
                     f"{report.not_run_effect()})")
    lines += report.pattern_lines()
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.timing_line():
        lines.append(report.timing_line())
    lines.append(report.summary_line())
    return "\n".join(lines)
