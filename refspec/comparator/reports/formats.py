"""The report formats a comparison can be written in (docs/compare.md, "Reports"): their names
and renderers, as data. ``refspec compare --json/--junit/--html PATH`` writes them through
``write_report``; a new format is one more entry of ``FORMATS`` (and, on the command line, one
more option of ``refspec.cli.compare``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...goldens.atomic import write_text_atomic
from .render_html import render_html
from .render_json import render_json
from .render_junit import render_junit

__all__ = ["ReportFormat", "FORMATS", "write_report"]


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
    """The report in the format ``name``, written to ``path`` atomically (nothing half
    written)."""
    if name not in FORMATS:
        raise ValueError(f"unknown report format {name!r}; the formats: {', '.join(FORMATS)}")
    write_text_atomic(path, FORMATS[name].render(report))
