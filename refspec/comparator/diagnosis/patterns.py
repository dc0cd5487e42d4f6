"""Failures across cases (docs/compare.md, "Patterns across cases"): the judged outputs grouped
by operator and output name, and for each group with failures what sets its failing cases apart
from its passing ones: a case parameter, the output's class (reduced or not, and over which
axes), or a pair of them, so a pattern across a sweep is one line ("dsin: 9 of 9 mode=half
cases fail, 0 of 15 others") instead of one row per case; or, when nothing sets them apart,
that line says so.

A *feature* gives each judged output a value: a scalar case parameter, the output's class, or a
pair of them. The failures' values of a feature are its *values* (at most ``MAX_VALUES``); the
feature separates the failures when every case with those values fails (a clean split), or at
least half of them do (no failure lies outside them either way). The best separator has a
clean split first, then the fewest values, then the simplest feature (the output's class, one
parameter, the class with its axes, a pair), then the largest share of failing cases among
those with its values and the most other cases. Pairs are tried only when no single feature
gives a clean split.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

__all__ = ["Pattern", "failure_patterns", "output_class"]

_IGNORED = ("op", "seed")
#: a pattern names at most this many values of its feature
MAX_VALUES = 4
#: a pair of features is named for at most this many combinations of values, each shared by at
#: least two failing cases (more would list the failures rather than say what they share)
MAX_PAIRS = 2
#: the feature that says whether an output sums terms, and the one that adds over which axes
CLASS, REDUCED_OVER = "class", "reduced over"
_SIMPLICITY = {CLASS: 0, REDUCED_OVER: 2}        # a parameter: 1; a pair: 3


@dataclass(frozen=True)
class Pattern:
    """The failures of one operator's output: ``failed`` of ``total`` cases; when every failure
    has ``param`` in ``values`` (and cases with other values exist), how many cases have those
    values (``with_value``) and how many others there are (none of which fail). ``param`` is a
    case parameter, ``"class"`` or ``"reduced over"`` (the output's class: ``reduced`` or
    ``not reduced``, or the axes it sums over), or two of them joined by ``+`` (``values``
    then holds pairs)."""

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
            return (f"{head} {self.failed} of {self.total} cases fail, and no parameter or "
                    "output class sets them apart")
        return (f"{head} {self.failed} of {self.with_value} {self._cases()} fail, "
                f"0 of {self.others} others")

    def _cases(self) -> str:
        names = self.param.split("+")
        if len(names) == 1:
            values = "|".join(str(v) for v in self.values)
            return (f"cases where {self.output} is {values}" if names[0] in (CLASS, REDUCED_OVER)
                    else f"{names[0]}={values} cases")
        combos = " | ".join(", ".join(_term(n, v, self.output) for n, v in zip(names, pair))
                            for pair in self.values)
        return f"{combos} cases"

    def to_dict(self) -> dict:
        return {"op": self.op, "output": self.output, "failed": self.failed, "total": self.total,
                "param": self.param,
                "values": [list(v) if isinstance(v, tuple) else v for v in self.values],
                "with_value": self.with_value, "others": self.others, "line": self.line()}


def _term(name: str, value, output: str) -> str:
    return f"{output} {value}" if name in (CLASS, REDUCED_OVER) else f"{name}={value}"


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


def output_class(r, fine: bool = False) -> str:
    """``reduced`` when the output sums more than one term per element (a reduction or a
    row reduction), else ``not reduced``; ``fine``: a reduction named by the axes it sums over
    where its shape shows them (its axes of size 1), ``reduced over B+N``."""
    reduced = r.comparison_class in ("reduction", "row_reduction") and (r.reduced_terms or 0) > 1
    if not reduced:
        return "not reduced"
    if fine and r.comparison_class == "reduction" and r.shape and r.axes:
        letters = [a for a, n in zip(r.axes, r.shape) if n == 1]
        if letters:
            return "reduced over " + "+".join(letters)
    return "reduced"


def _pattern(op: str, output: str, rows: list, failed: list) -> Pattern:
    """The best separator of the failing rows (module docstring), or no parameter."""
    singles = [(CLASS, lambda r: output_class(r))]
    singles += [(p, lambda r, p=p: r.params.get(p)) for p in _params(rows)]
    singles += [(REDUCED_OVER, lambda r: output_class(r, fine=True))]
    best = _best(op, output, rows, failed, singles, pair=False)
    if best is None or best[0][0]:
        pairs = [(f"{a}+{b}", lambda r, fa=fa, fb=fb: (fa(r), fb(r)))
                 for (a, fa), (b, fb) in combinations(singles[:-1], 2)]
        found = _best(op, output, rows, failed, pairs, pair=True)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best[1] if best else Pattern(op, output, len(failed), len(rows))


def _best(op, output, rows, failed, features, pair: bool):
    """(ranking key, Pattern) of the best of ``features`` ((name, value of a row) pairs), or
    None when none separates the failures."""
    best = None
    n_failed = len(failed)
    for name, value_of in features:
        values = tuple(dict.fromkeys(value_of(r) for r in failed))
        if len(values) > MAX_VALUES or any(isinstance(v, (list, dict)) for v in values):
            continue
        with_value = sum(1 for r in rows if value_of(r) in values)
        others = len(rows) - with_value
        if others == 0 or n_failed < with_value / 2 or \
                (pair and (len(values) > MAX_PAIRS or n_failed < 2 * len(values))):
            continue
        simplicity = 3 if pair else _SIMPLICITY.get(name, 1)
        key = (n_failed < with_value, len(values), simplicity, -n_failed / with_value, -others)
        if best is None or key < best[0]:
            best = (key, Pattern(op, output, n_failed, len(rows), name, values, with_value, others))
    return best


def _params(rows: list):
    """The parameters every row has, in the first row's order (scalars only)."""
    first = rows[0].params
    for param, value in first.items():
        if param in _IGNORED or isinstance(value, (list, dict, tuple)):
            continue
        if all(param in r.params for r in rows):
            yield param
