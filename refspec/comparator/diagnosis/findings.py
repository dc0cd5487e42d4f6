"""A finding of the diagnosis and the failing output it is about (docs/compare.md,
"Diagnosis"); whether a candidate explains the failure: it agrees, by the case's own standard,
with the failing elements and with more of the output than the golden does."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...spec.dtypes import resolve_dtype
from ..judging.agreement import agrees
from ..judging.floatinfo import float_info, ulp_at
from ..judging.naming import axis_names

__all__ = ["Finding", "Subject", "KINDS", "SAMPLE_ELEMENTS", "SPEC_ELEMENTS", "EXPLAINS",
           "BUDGET_SECONDS", "PRECISION_FACTOR", "candidate", "explained", "complete", "share",
           "finite"]

#: the diagnosis's vocabulary (docs/compare.md, "The vocabulary"), in the order that breaks a tie
#: in agreement between two findings (``precision`` and ``region`` are never ranked so); a new
#: kind is added here (``diagnose.CANDIDATES`` asks for its findings)
KINDS = ["zero", "nonfinite", "constant", "copy", "alternative", "reduction", "sign", "permuted",
         "scale", "rounding", "dtype", "precision", "region"]
#: at most this many elements of an output are diagnosed (whole rows of its leading axes)
SAMPLE_ELEMENTS = 1 << 20
#: a case whose inputs hold more elements than this is not re-evaluated under hypotheses
SPEC_ELEMENTS = 1 << 22
#: a candidate must explain this fraction of the failing elements
EXPLAINS = 0.9
#: wall-clock seconds the spec hypotheses of one output may take
BUDGET_SECONDS = 2.0
#: a precision error is within this multiple of the arithmetic bound: half an ulp of the result
#: plus K + 2 roundings of the sum of |terms| (products, sum, the K-term accumulation)
PRECISION_FACTOR = 1.5


@dataclass
class Finding:
    """One finding: its ``kind`` (``KINDS``), a one-line ``summary``, the fraction of the
    failing elements it explains, and the measurements behind it."""

    kind: str
    summary: str
    agreement: float
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary,
                "agreement": round(float(self.agreement), 6), "detail": self.detail}

    def line(self) -> str:
        return f"{self.kind}: {self.summary}"


@dataclass
class Subject:
    """A failing output as the diagnosis sees it. ``a`` and ``g`` (float64) are the kernel's
    values and the exact golden on the sampled elements, whose flat indices are ``flat``;
    ``shape``/``axes`` the whole output's; ``S`` the sums of |terms| (or None); ``case`` the
    golden case and ``record`` its operator (None: no spec hypotheses)."""

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

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The name of each axis (``refspec.comparator.judging.naming.axis_names``)."""
        return axis_names(self.axes, len(self.shape))

    @property
    def sampled(self) -> bool:
        return self.flat.size < int(np.prod(self.shape, dtype=np.int64))

    def agree(self, candidate: np.ndarray) -> np.ndarray:
        """Per sampled element: would it pass were ``candidate`` the golden?"""
        return agrees(self.rule, self.dtype, self.K, self.a, self.raw, candidate, self.S)


def complete(f: Finding) -> bool:
    """A finding that explains every failing element and agrees with the whole output."""
    return f.agreement >= 1 and f.detail.get("elements", 0) >= 1


def explained(s: Subject, fail: np.ndarray, candidate: np.ndarray,
               after_rounding: np.ndarray | None = None) -> tuple[float, float, float]:
    """(fraction of the failing elements that agree with ``candidate`` (or with
    ``after_rounding``), fraction of all the sampled elements that do, worst ulps of the
    kernel's values from it)."""
    ok = s.agree(candidate)
    if after_rounding is not None:
        ok |= s.a == after_rounding
    info = float_info(resolve_dtype(s.dtype))
    with np.errstate(all="ignore"):
        ulps = np.abs(s.a - candidate) / ulp_at(np.abs(candidate), info)
    finite = ulps[np.isfinite(ulps)]
    worst = float(finite.max()) if finite.size else float("inf")
    return float(ok[fail].mean()), float(ok.mean()), worst


def candidate(s, fail, golden_agrees, values, kind, summary, detail,
              after_rounding=None) -> list[Finding]:
    """A finding of ``kind`` for the candidate ``values`` (float64, the sampled elements)
    when it explains enough failing elements and agrees with more of the output than the golden
    does. ``after_rounding``: the same mistake made after the result was rounded to the output
    dtype (a scale applied to the rounded value); an element agrees with either."""
    if values is None or values.shape != s.g.shape:
        return []
    explains, overall, worst = explained(s, fail, values, after_rounding)
    if explains < EXPLAINS or overall <= golden_agrees:
        return []
    detail = {**detail, "elements": round(overall, 6), "worst_ulps": finite(worst)}
    n = int(fail.sum())
    how = (f"all {s.a.size} elements agree with it" if overall >= 1 else
           f"{share(overall)} of the elements agree with it"
           + ("" if explains >= 1 else f", {share(explains)} of the {n} failing ones"))
    return [Finding(kind, f"{summary}: {how}", explains, detail)]


def share(x: float) -> str:
    return "all" if x >= 1 else f"{x:.1%}"


def finite(x: float):
    return x if np.isfinite(x) else str(x)
