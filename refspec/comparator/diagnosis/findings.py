"""A finding of the diagnosis and the failing output it is about (docs/compare.md,
"Diagnosis"); which of the failing elements a candidate explains: those where the kernel's value
agrees with the candidate by the case's own standard and the candidate is clearly not the
golden."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...spec.dtypes import resolve_dtype, round_to
from ..judging.agreement import agrees, badness_against
from ..judging.floatinfo import float_info, ulp_at
from ..judging.naming import axis_names

__all__ = ["Finding", "Subject", "KINDS", "SPEC_ELEMENTS", "EXPLAINS", "DISTINCT",
           "SPEC_BUDGET", "SPEC_VARIANTS", "PRECISION_FACTOR", "candidate", "explained", "complete", "share",
           "finite", "count"]

#: the diagnosis's vocabulary (docs/compare.md, "The vocabulary"), in the order that breaks a tie
#: between two findings that explain the same elements (``precision`` and ``unexplained`` are
#: never ranked so); a new kind is added here (``diagnose.CANDIDATES`` asks for its findings)
KINDS = ["zero", "nonfinite", "constant", "copy", "extent", "input", "alternative", "reduction",
         "sign", "index", "permuted", "scale", "rounding", "dtype", "precision", "unexplained"]
#: the kinds of a cache updated in place (``cache_outputs``: ``refspec.ops.cache_hypotheses``)
KINDS += ["slot", "layout", "outside", "quantisation"]
#: a case whose inputs hold more elements than this is not re-evaluated under hypotheses when
#: no slice of it is (``views``)
SPEC_ELEMENTS = 1 << 22
#: a finding that explains this fraction of the failing elements (of those left) explains them
EXPLAINS = 0.9
#: an element is explained by a candidate only where the candidate is at least this many times
#: what the standard allows away from the golden (so no rounding-sized difference explains it)
DISTINCT = 4.0
#: the spec hypotheses of one output evaluate at most this many input elements in all (each
#: variant counts the elements of the inputs it is evaluated on), and at most ``SPEC_VARIANTS``
#: variants: a bound on their cost that gives the same findings however loaded the machine is
SPEC_BUDGET, SPEC_VARIANTS = 1 << 22, 256
#: a precision error is within this multiple of the arithmetic bound: half an ulp of the result
#: plus K + 2 roundings of the sum of |terms| (products, sum, the K-term accumulation)
PRECISION_FACTOR = 1.5


@dataclass
class Finding:
    """One finding: its ``kind`` (``KINDS``), a one-line ``summary``, the fraction of the
    failing elements it explains, and the measurements behind it. While the diagnosis chooses,
    a candidate's finding also holds ``claims`` (the failing elements it explains: the kernel
    agrees with it there, and it is clearly not the golden), ``covers`` (the failing elements
    the kernel agrees with it at, which it takes once chosen), its ``values`` and ``part`` (its
    summary for a part of the output, ``{where}`` standing for the part); none of these is
    reported."""

    kind: str
    summary: str
    agreement: float
    detail: dict = field(default_factory=dict)
    claims: np.ndarray | None = field(default=None, repr=False, compare=False)
    covers: np.ndarray | None = field(default=None, repr=False, compare=False)
    values: np.ndarray | None = field(default=None, repr=False, compare=False)
    part: str | None = field(default=None, repr=False, compare=False)
    overall: int | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary,
                "agreement": round(float(self.agreement), 6), "detail": self.detail}

    def line(self) -> str:
        return f"{self.kind}: {self.summary}"


@dataclass
class Subject:
    """A failing output as the diagnosis sees it. ``a`` and ``g`` (float64) are the kernel's
    values and the exact golden on the elements read (``views``), whose flat indices are
    ``flat``; ``shape``/``axes`` the whole output's; ``S`` the sums of |terms| (or None); ``case``
    the golden case and ``record`` its operator (None: no spec hypotheses); ``others`` the
    inputs and other outputs of as many elements; ``inputs`` the inputs the spec hypotheses are
    evaluated on (the case's, or those of its slice the elements belong to; None: none),
    ``params`` the case's parameters; ``grid`` the shape of the elements read (the output's
    shape, or that of its slice); ``failing_total`` the failing elements of the whole output
    (as judged); ``spec_memo`` the spec's values of the calls evaluated for it (shared by the
    outputs of its case); ``spent`` the input elements its spec hypotheses have evaluated
    and ``tried`` how many variants (``SPEC_BUDGET``, ``SPEC_VARIANTS``)."""

    name: str
    dtype: str
    shape: tuple
    axes: str
    rule: object
    K: int | None
    a: np.ndarray
    g: np.ndarray
    flat: np.ndarray
    raw: np.ndarray
    S: np.ndarray | None = None
    cls: str | None = None
    case: object = None
    record: object = None
    others: dict = field(default_factory=dict)
    inputs: dict | None = None
    params: dict = field(default_factory=dict)
    grid: tuple | None = None
    failing_total: int | None = None
    spec_memo: dict = field(default_factory=dict, repr=False)
    spent: int = field(default=0, repr=False)
    tried: int = field(default=0, repr=False)

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The name of each axis (``refspec.comparator.judging.naming.axis_names``)."""
        return axis_names(self.axes, len(self.shape))

    @property
    def sampled(self) -> bool:
        return self.flat.size < int(np.prod(self.shape, dtype=np.int64))

    def agree(self, candidate: np.ndarray, at=None) -> np.ndarray:
        """Per element read (or per element of the indices ``at``): would it pass were
        ``candidate`` the golden?"""
        if at is None:
            return agrees(self.rule, self.dtype, self.K, self.a, self.raw, candidate, self.S)
        return agrees(self.rule, self.dtype, self.K, self.a[at], self.raw[at], candidate[at],
                      None if self.S is None else self.S[at])

    def distinct(self, candidate: np.ndarray, at) -> np.ndarray:
        """Per element of ``at``: is ``candidate`` more than ``DISTINCT`` times what the
        standard allows away from the golden there?"""
        c = candidate[at]
        with np.errstate(all="ignore"):
            raw = round_to(np.where(np.isfinite(c), c, c), resolve_dtype(self.dtype))
        bad = badness_against(self.rule, self.dtype, self.K, c, raw, self.g[at],
                              None if self.S is None else self.S[at])
        return bad > DISTINCT


def complete(f: Finding) -> bool:
    """A finding that explains every failing element and agrees with the whole output."""
    return f.agreement >= 1 and f.detail.get("elements", 0) >= 1


def explained(s: Subject, fail: np.ndarray, candidate: np.ndarray,
              after_rounding: np.ndarray | None = None) -> tuple[float, float, float]:
    """(fraction of the failing elements that agree with ``candidate`` (or with
    ``after_rounding``), fraction of all the elements read that do, worst ulps of the
    kernel's values from it)."""
    ok = s.agree(candidate)
    if after_rounding is not None:
        ok |= s.a == after_rounding
    info = float_info(resolve_dtype(s.dtype))
    with np.errstate(all="ignore"):
        ulps = np.abs(s.a - candidate) / ulp_at(np.abs(candidate), info)
    finite_ = ulps[np.isfinite(ulps)]
    worst = float(finite_.max()) if finite_.size else float("inf")
    return float(ok[fail].mean()), float(ok.mean()), worst


def candidate(s, fail, golden_agrees, values, kind, summary, detail,
              after_rounding=None) -> list[Finding]:
    """A finding of ``kind`` for the candidate ``values`` (float64, the elements read) when it
    explains at least one failing element: ``claims`` the failing elements where the kernel's
    value agrees with it (or with ``after_rounding``, the same mistake made after the result
    was rounded to the output dtype) and it is ``Subject.distinct`` from the golden;
    ``agreement`` their share of the failing elements. ``summary`` says what the kernel
    computed (the diagnosis adds the part it explains: summary + " on {where}").
    ``golden_agrees`` is kept for candidate functions written before the cover (unused)."""
    if values is None or values.shape != s.g.shape:
        return []
    at = np.flatnonzero(fail)
    constant = _constant(values)
    ok = s.a[at] == constant if constant is not None else s.agree(values, at)
    if after_rounding is not None:
        ok |= s.a[at] == after_rounding[at]
    if not ok.any():
        return []
    mine = ok & s.distinct(values, at)
    if not mine.any():
        return []
    claims, covers = np.zeros(s.g.shape, bool), np.zeros(s.g.shape, bool)
    claims[at[mine]] = True
    covers[at[ok]] = True
    return [Finding(kind, summary, float(mine.mean()), dict(detail), claims=claims,
                    covers=covers, values=values, part=f"{summary} on {{where}}")]


def _constant(values: np.ndarray) -> float | None:
    """The value of a candidate that holds one value everywhere (a kernel computing it writes
    exactly that: compared exactly), else None."""
    first = values.flat[0] if values.size else None
    if first is None or not np.isfinite(first) or not (values == first).all():
        return None
    return float(first)


def share(x: float) -> str:
    return "all" if x >= 1 else f"{x:.1%}"


def count(n: int) -> str:
    """An element count with thousands separators (1,536)."""
    return f"{int(n):,}"


def finite(x: float):
    return x if np.isfinite(x) else str(x)
