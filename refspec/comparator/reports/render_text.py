"""The terminal report: every output that did not pass, in full (its row, its message, the
command that regenerates the case); the passes summarised per operator and output (every row
with ``verbose``); the cases not run, one line per operator; then the one-line total."""

from __future__ import annotations

import shutil
import sys

from ..judging.naming import format_ratio, format_ulps, format_value
from .detail import detail_lines

__all__ = ["render_text", "row_cells", "pass_groups", "terminal_width", "HEAD"]

#: the columns; "ulp@max" is the ulp distance of the element of "max abs err" (the worst ulp
#: distance of an output is in its histogram and its message's element)
HEAD = ("verdict", "case", "output", "class", "dtype", "mismatch", "max abs err", "ulp@max",
        "detail")
#: terminal column order: the short columns first, the long case id last but one
_ORDER = (0, 2, 4, 3, 5, 6, 7, 1, 8)
#: the detail under a row that did not pass (its reason is in the row)
TERMINAL_DETAIL = ("message", "diagnosis", "hint", "regenerate")
#: the narrowest case column before a shortened id stops being of use
_MIN_CASE = 24


def terminal_width() -> int | None:
    """The width of the terminal standard output writes to; None when it is not a terminal
    (then lines are written whole)."""
    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _middle_cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: its head and tail around "..."."""
    if len(text) <= width:
        return text
    tail = (width - 3) // 2
    return text[: width - 3 - tail] + "..." + text[len(text) - tail:]


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
        text += f"; closest: {format_ratio(w.metrics.max_badness)} of the allowed error"
    return text


def _table(shown, width: int | None) -> list[str]:
    """The rows of ``shown`` with what follows each failure. With a ``width``, a row that would
    be wider gets a shortened case id and its detail on a line of its own."""
    head = tuple(HEAD[i] for i in _ORDER)
    rows = [tuple(cells[i] for i in _ORDER) for cells in map(row_cells, shown)]
    widths = [len(h) for h in head]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))
    inline = width is None or sum(widths[:-1]) + 2 * len(widths[:-1]) + max(
        len(row[-1]) for row in rows) <= width
    case_line = False
    if not inline:
        room = width - sum(widths[:-2]) - 2 * len(widths[:-2])
        if room >= _MIN_CASE:
            widths[-2] = min(widths[-2], room)
            rows = [row[:-2] + (_middle_cut(row[-2], room), row[-1]) for row in rows]
            head = head[:-1]
        else:                             # no room for the column: the id on a line of its own
            case_line = True
            head = head[:-2]

    def line(cells):
        return "  ".join([c.ljust(w) for c, w in zip(cells[:-1], widths)] + [cells[-1]])

    lines = [line(head)]
    for r, row in zip(shown, rows):
        if inline:
            lines.append(line(row))
        else:
            lines.append(line(row[:-2] if case_line else row[:-1]))
            lines += [f"    {text}" for text in (row[-2:] if case_line else row[-1:]) if text]
        if r.status not in ("pass", "not_recorded") and r.message:
            lines += [f"    {text}" for text in detail_lines(r, TERMINAL_DETAIL)]
    return lines


def render_text(report, width: int | None = None, verbose: bool = False,
                failures_only: bool = False) -> str:
    """The terminal report; ``verbose`` lists every passing row too, ``failures_only`` leaves
    the passes out (the total line stays). ``width``: the terminal's (``terminal_width``);
    None writes every row on one line, however long."""
    shown = [r for r in report.ordered() if verbose or r.status != "pass"]
    lines = []
    if shown:
        lines += _table(shown, width)
    if not verbose and not failures_only:
        lines += [_group_line(g) for g in pass_groups(report)]
    for op, n in report.not_run_by_op().items():
        lines.append(f"NOT RUN {n:>5} x {op}: {report.not_run_reason(op)} "
                     f"(ids in the JSON report; "
                     f"{report.not_run_effect()})")
    lines += report.pattern_lines()
    lines.append(report.provenance_line())
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.timing_line():
        lines.append(report.timing_line())
    lines.append(report.summary_line())
    return "\n".join(lines)
