"""``--json PATH``: the whole report, machine-readable (schema ``refspec-compare/3``,
docs/compare.md, "Reports"; NaN and infinities are the strings "nan", "inf", "-inf" so the file
is strict JSON)."""

from __future__ import annotations

import json


__all__ = ["render_json"]


def render_json(report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n"
