"""Failures across cases (docs/compare.md, "Patterns"): the judged outputs grouped by operator
and output name, and for each group with failures the case parameter whose value they share,
so a pattern across a sweep is one line ("dsin: 9 of 9 mode=half cases fail, 0 of 15
others") instead of one row per case."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pattern", "failure_patterns"]

_IGNORED = ("op", "seed")
#: a pattern names at most this many values of its parameter
MAX_VALUES = 4


@dataclass(frozen=True)
class Pattern:
    """The failures of one operator's output: ``failed`` of ``total`` cases; when every failure
    has ``param`` in ``values`` (and cases with other values exist), how many cases have those
    values (``with_value``) and how many others there are (none of which fail)."""

    op: str
    output: str
    failed: int
    total: int
    param: str | None = None
    values: tuple = ()
    with_value: int = 0
    others: int = 0

    def line(self) -> str:
        head = f"{self.op} {self.output}:"
        if self.param is None:
            if self.failed == self.total:
                return f"{head} all {self.total} cases fail"
            return f"{head} {self.failed} of {self.total} cases fail, no one parameter sets them apart"
        values = "|".join(str(v) for v in self.values)
        return (f"{head} {self.failed} of {self.with_value} {self.param}={values} cases fail, "
                f"0 of {self.others} others")

    def to_dict(self) -> dict:
        return {"op": self.op, "output": self.output, "failed": self.failed, "total": self.total,
                "param": self.param, "values": list(self.values), "with_value": self.with_value,
                "others": self.others, "line": self.line()}


def failure_patterns(results) -> list[Pattern]:
    """One ``Pattern`` per (operator, output) with a failing judged output, in report order."""
    groups: dict[tuple, list] = {}
    for r in results:
        if r.status in ("pass", "fail", "too_strict"):
            groups.setdefault((r.op, r.output), []).append(r)
    out = []
    for (op, output), rows in groups.items():
        failed = [r for r in rows if r.status == "fail"]
        if failed and len(rows) > 1:
            out.append(_pattern(op, output, rows, failed))
    return out


def _pattern(op: str, output: str, rows: list, failed: list) -> Pattern:
    """The parameter whose values among the failures set them apart best: the fewest values,
    then the largest share of failing cases with those values, then the most other cases
    (a parameter is named only when at least half its cases with those values fail)."""
    best, best_key = None, None
    for param in _params(rows):
        values = tuple(dict.fromkeys(r.params.get(param) for r in failed))
        with_value = sum(1 for r in rows if r.params.get(param) in values)
        others = len(rows) - with_value
        if others == 0 or len(values) > MAX_VALUES or len(failed) < with_value / 2:
            continue
        key = (-len(values), len(failed) / with_value, others)
        if best_key is None or key > best_key:
            best_key = key
            best = Pattern(op, output, len(failed), len(rows), param, values, with_value, others)
    return best or Pattern(op, output, len(failed), len(rows))


def _params(rows: list):
    """The parameters every row has, in the first row's order (scalars only)."""
    first = rows[0].params
    for param, value in first.items():
        if param in _IGNORED or isinstance(value, (list, dict, tuple)):
            continue
        if all(param in r.params for r in rows):
            yield param
