"""The terminal report: one row per case and output, failures first, then the one-line total."""

from __future__ import annotations

from .naming import format_ulps, format_value

__all__ = ["render_text", "row_cells"]

_HEAD = ("verdict", "case", "output", "class", "dtype", "mismatch", "max abs err", "ulp", "detail")
#: terminal column order: the short columns first, the long case id last but one, so nothing
#: needs cutting (the detail of a failure also gets its own line below the row)
_ORDER = (0, 2, 4, 3, 5, 6, 7, 1, 8)


def row_cells(r) -> tuple[str, ...]:
    m = r.metrics
    if m is None:
        return (r.status.upper() if r.is_problem else r.verdict.upper(), r.case_id, r.output,
                r.comparison_class or "-", r.dtype or "-", "-", "-", "-", r.reason)
    mism = f"{m.failures}/{m.n}" if m.failures else f"0/{m.n}"
    mx = m.max_abs
    err = format_value(mx.abs_err, "float32", -6) if mx is not None else "-"
    ulp = format_ulps(mx.ulps) if mx is not None else "-"
    return (r.verdict.upper(), r.case_id, r.output, r.comparison_class or "-", r.dtype or "-",
            mism, err, ulp, r.reason)


def render_text(report, width: int | None = None, max_rows: int | None = None) -> str:
    head = tuple(_HEAD[i] for i in _ORDER)
    rows = [tuple(cells[i] for i in _ORDER) for cells in map(row_cells, report.ordered())]
    if max_rows is not None and len(rows) > max_rows:
        hidden = len(rows) - max_rows
        rows = rows[:max_rows]
    else:
        hidden = 0
    widths = [len(h) for h in head]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths[:-1])) + "  " + head[-1]]
    failing = {id(r): r for r in report.ordered() if not r.passed}
    for r, row in zip(report.ordered(), rows):
        line = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths[:-1])) + "  " + row[-1]
        lines.append(line[:width] if width else line)
        if id(r) in failing and r.message:
            lines.append(f"    {r.message}")
            if r.regenerate:
                lines.append(f"    regenerate: {r.regenerate}")
    if hidden:
        lines.append(f"... {hidden} more rows (all passing)")
    for note in report.notes:
        lines.append(f"note: {note}")
    lines.append(report.summary_line())
    return "\n".join(lines)
