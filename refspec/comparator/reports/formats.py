"""The report formats a comparison can be written in (docs/compare.md, "Reports"): their names
and renderers, as data. ``refspec compare --json/--junit/--html PATH`` writes them through
``write_report``; a new format is one more entry of ``FORMATS`` (and, on the command line, one
more option of ``refspec.cli.compare``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import os

from ...goldens.atomic import temporaries, write_text_atomic
from .render_html import render_html
from .render_json import render_json
from .render_junit import render_junit

__all__ = ["ReportFormat", "FORMATS", "write_report", "clear_report"]


@dataclass(frozen=True)
class ReportFormat:
    """A format: its ``name`` (``--<name> PATH`` on the command line), ``render(report)``, the
    whole file as text, and whether it draws error maps (``heatmaps``: the comparison keeps a
    map of each output that does not pass, ``CompareOptions.heatmaps``)."""

    name: str
    render: Callable
    heatmaps: bool = False


#: the formats by name
FORMATS = {f.name: f for f in (ReportFormat("json", render_json),
                               ReportFormat("junit", render_junit),
                               ReportFormat("html", render_html, heatmaps=True))}


def write_report(report, name: str, path) -> None:
    """The report in the format ``name``, written to ``path`` atomically (under a temporary
    name in the same folder, then renamed: nothing half written), and the temporaries killed
    writers left beside it removed."""
    if name not in FORMATS:
        raise ValueError(f"unknown report format {name!r}; the formats: {', '.join(FORMATS)}")
    write_text_atomic(path, FORMATS[name].render(report))
    _remove_left_temporaries(path)


def clear_report(path) -> None:
    """Remove the report at ``path`` (a file) before a comparison that will write it again,
    so a comparison that is stopped (killed, interrupted, a damaged golden file) leaves no
    earlier report that would pass for its own; and the temporaries that writers killed
    while writing it left."""
    path = os.fspath(path)
    if os.path.isfile(path) or os.path.islink(path):
        os.remove(path)
    _remove_left_temporaries(path)


def _remove_left_temporaries(path) -> None:
    """The temporaries of ``path`` (``.NAME.PID.tmp``) whose writing process has ended."""
    for tmp in temporaries(path):
        pid = tmp.rsplit(".", 2)[-2]
        if pid.isdigit() and not _running(int(pid)):
            try:
                os.remove(tmp)
            except FileNotFoundError:
                pass


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:            # another user's process
        return True
    return True
