"""Choosing cases (docs/sweeps.md, "Selecting"; docs/compare.md): the command line's filters
over a sweep's cases (``--op``, ``--soc``, ``--dtype``, ``--mode``, ``--layout``, and
``--where AXIS=VALUE`` for any axis of a record), shards of a
selection (``--shard K/N``), and the cases of a golden file named by ids or shell patterns
(``--case``) and operators.

A filter other than ``--op`` names an axis: it matches the cases of the operators that have an
axis answering it (``--mode`` is RoPE's ``mode`` and NormRopeConcat's ``rope_type``, which the
records say) and reads its values with that axis's own parser.
"""

from __future__ import annotations

import fnmatch
import re

from .. import ops
from ..ops.axes import env_value
from .constraints import SweepError
from .format import UnknownCaseError

__all__ = ["FILTERS", "normalize_filter", "parse_where", "filter_cases", "parse_shard", "shard",
           "match_ids", "select_ids", "narrow", "operator_ids", "profiles"]

#: the filters of ``refspec list`` / ``generate`` besides ``--op``
FILTERS = ("soc", "dtype", "mode", "layout")


def _answering(kind: str) -> list:
    """The axes of every registered operator that a ``--<kind>`` filter matches."""
    return [a for op in ops.OPERATORS.values() for a in op.sweep.axes if a.answers(kind)]


def normalize_filter(kind: str, value: str, option: str | None = None):
    """A ``--op``/``--soc``/``--dtype``/``--mode``/``--layout`` value in canonical form (an
    operator's id; an axis's value), or SweepError naming what is allowed; ``option`` how the
    message names the option (default ``--<kind>``)."""
    if kind == "op":
        v = str(value).strip()
        op = ops.find(v)
        if op is None or v not in (op.id, op.function):
            raise SweepError(f"--op: unknown value {value!r}; allowed: {', '.join(ops.ids())}")
        return op.id
    allowed = []
    text = str(value).strip()
    spellings = [value] + ([int(text)] if re.fullmatch(r"-?\d+", text) else [])
    for axis in _answering(kind):
        for spelling in spellings:          # a command line's "1" may be a number
            try:
                return axis.parse(spelling)
            except ValueError:
                pass
        allowed += [str(env_value(v)) for v in axis.values if str(env_value(v)) not in allowed]
    raise SweepError(f"{option or '--' + kind}: unknown value {value!r}; allowed: "
                     f"{', '.join(allowed)}")


def parse_where(text: str) -> tuple[str, object]:
    """A ``--where`` value ``AXIS=VALUE``: the axis's name (of any registered operator) and the
    value read by that axis, or SweepError naming what is allowed."""
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or not name:
        raise SweepError(f"--where {text!r}: must be AXIS=VALUE, e.g. style=gptj")
    if not _answering(name):
        names = sorted({a.name for op in ops.OPERATORS.values() for a in op.sweep.axes})
        raise SweepError(f"--where {text!r}: no operator has an axis {name!r}; axes: "
                         + ", ".join(names))
    return name, normalize_filter(name, value.strip(), f"--where {name}=")


def _matches(case, kind: str, values) -> bool:
    axis = next((a for a in ops.get(case.op).sweep.axes if a.answers(kind)), None)
    return axis is not None and case.params.get(axis.name) in values


def filter_cases(cases, *, ops=(), where=(), **filters) -> list:
    """Cases matching every given filter: ``ops`` (record ids), ``filters`` by kind (``socs``,
    ``dtypes``, ``modes``, ``layouts``), each a collection of canonical values (empty = any),
    and ``where``, (axis, value) pairs of ``parse_where`` (values of one axis: any of them). A
    case whose operator has no axis answering a given filter does not match it (``--layout``
    keeps the cases of operators with a layout)."""
    given = {kind[:-1]: set(v) for kind, v in filters.items() if v}
    for kind, value in where:
        given.setdefault(kind, set()).add(value)
    return [c for c in cases if (not ops or c.op in ops)
            and all(_matches(c, kind, values) for kind, values in given.items())]


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise SweepError(f"--shard {text!r}: must be K/N with 1 <= K <= N, e.g. 2/8")
    return int(m.group(1)), int(m.group(2))


def shard(cases, k: int, n: int) -> list:
    """Shard K of N: the cases whose index (0-based, in the selected list) mod N == K-1."""
    return [c for i, c in enumerate(cases) if i % n == k - 1]


def match_ids(gf, selectors=None) -> list[str]:
    """Case ids of a golden file for ``--case`` values: exact ids, or shell patterns
    (``rope_grad/mode=half/*``); all cases when none are given. Unknown ids and patterns
    matching nothing are errors (UnknownCaseError)."""
    ids = gf.case_ids()
    if not selectors:
        return ids
    chosen, seen = [], set()
    for sel in selectors:
        if any(c in sel for c in "*?["):
            matched = [c for c in ids if fnmatch.fnmatchcase(c, sel)]
            if not matched:
                raise UnknownCaseError(f"no case of {gf.path} matches {sel!r}")
        elif sel in gf:
            matched = [sel]
        else:
            raise UnknownCaseError(f"case {sel!r} is not in {gf.path} ({len(ids)} cases; "
                                   f"`refspec show {gf.path} --ids` lists them)")
        for c in matched:
            if c not in seen:
                seen.add(c)
                chosen.append(c)
    return chosen


def operator_ids(operators) -> set | None:
    """The record ids of ``operators`` (ids, spec function or aclnn names); None for none.
    ValueError names an unknown one."""
    if not operators:
        return None
    if isinstance(operators, str):
        operators = [operators]
    found = set()
    for name in operators:
        record = ops.find(name)
        if record is None:
            raise ValueError(f"unknown operator {name!r}; allowed: {', '.join(ops.ids())}")
        found.add(record.id)
    return found


def select_ids(gf, selectors=None, operators=None, socs=None,
               options=("--case", "--op", "--soc")) -> list[str]:
    """The case ids of a golden file that ``selectors`` (ids or shell patterns), ``operators``
    and ``socs`` (chip profiles as ``normalize_filter("soc", ...)`` gives them, None for the
    math-only one; matched against each case's ``params["soc"]``) choose, in file order.
    Filters that together leave no case of a file that has some are an UnknownCaseError
    saying which filter (named as in ``options``) removed which cases (``narrow``)."""
    ids = match_ids(gf, selectors)
    op_of = {r.case_id: r.op for r in gf.summary()} if operators else {}
    return narrow(ids, selectors, op_of.get, lambda i: gf[i].params.get("soc"), operators, socs,
                  f"{gf.path} holds", options)


def narrow(ids, selectors, op_of, soc_of, operators=None, socs=None, whole: str = "",
           options=("--case", "--op", "--soc")) -> list[str]:
    """``ids`` (what ``selectors`` chose, or the whole set, ``whole`` saying so) without the
    cases whose operator (``op_of(id)``) is not among ``operators`` or whose chip profile
    (``soc_of(id)``) is not among ``socs``; UnknownCaseError when that leaves none of some,
    naming what each filter removed:
    ``no case selected: --case X chose 1 case; --soc 950 removed it (chip profile A2), leaving
    none``."""
    case_opt, op_opt, soc_opt = options
    chosen = (" ".join(f"{case_opt} {c}" for c in selectors) + " chose" if selectors
              else whole, len(ids), [] if list(ids) == list(selectors or ()) else ids[:1])
    steps = []
    wanted = operator_ids(operators)
    if wanted is not None:
        ids = _narrowed(ids, op_of, wanted, " ".join(f"{op_opt} {o}" for o in operators),
                        "operator", steps)
    if socs is not None:
        ids = _narrowed(ids, soc_of, set(socs),
                        " ".join(f"{soc_opt} {_profile_name(p)}" for p in socs), "chip profile",
                        steps)
    if not ids and chosen[1]:
        raise UnknownCaseError(_empty_selection(chosen, steps))
    return ids


def _narrowed(ids, value_of, wanted, option: str, what: str, steps: list) -> list[str]:
    """The ids whose ``value_of`` is in ``wanted``; what ``option`` removed (its values of
    ``what``) appended to ``steps``."""
    values = {i: value_of(i) for i in ids}
    kept = [i for i in ids if values[i] in wanted]
    removed = [values[i] for i in ids if values[i] not in wanted]
    if removed:
        steps.append((option, what, removed, [i for i in ids if values[i] not in wanted][:1],
                      len(kept)))
    return kept


def _profile_name(profile) -> str:
    return "none" if profile is None else str(profile)


def _cases_text(n: int, first: list) -> str:
    return (f"1 case ({first[0]})" if first else "1 case") if n == 1 else f"{n} cases"


def _empty_selection(chosen, steps) -> str:
    """``no case selected: --case rope_grad/* chose 60 cases; --op rope removed 60 cases
    (operator rope_grad), leaving none``: what chose the cases, then what each filter that
    removed some removed (its cases' values)."""
    head, n, first = chosen
    parts = [f"{head} {_cases_text(n, first)}"]
    for option, what, removed, first_removed, kept in steps:
        counts: dict = {}
        for v in removed:
            name = _profile_name(v) if what == "chip profile" else str(v)
            counts[name] = counts.get(name, 0) + 1
        values = ", ".join(f"{v} x{c}" if len(counts) > 1 else v for v, c in counts.items())
        plural = "s" if len(counts) > 1 else ""
        which = ("it" if len(removed) == 1 and n == 1 else
                 f"{_cases_text(len(removed), first_removed)}")
        parts.append(f"{option} removed {which} ({what}{plural} {values})"
                     + ("" if kept else ", leaving none"))
    return "no case selected: " + "; ".join(parts)


def profiles(values) -> set | None:
    """``--soc`` values (A2, A3, 950, none; any spelling the soc axis reads) as a set of
    profiles (None: the math-only one), or None when none is given; SweepError for an unknown
    value."""
    return {normalize_filter("soc", v) for v in values} if values else None
