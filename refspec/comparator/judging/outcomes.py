"""The verdict of one output or of a case's status: ``OutputResult``, and ``NotRun`` for a case
with nothing to judge (docs/compare.md, "Statuses").

Statuses of an output: ``pass`` and ``fail`` (judged); ``too_strict`` (the kernel's output
fails the standard, and so does the golden rounded to the output dtype: the standard asks for
more than the dtype can hold, so it cannot judge this output; not a kernel failure);
``not_recorded`` (the source says the output was not recorded: an msprobe dump's null entry,
e.g. no dcos where cos needs no gradient; nothing to judge, not a failure);
``rejected`` (the kernel returned a non-zero status for a valid input; one row per case, output
``(status)``); and the input problems ``missing``, ``size_mismatch``, ``dtype_mismatch``,
``shape_mismatch``, ``unreadable``, plus ``error`` for anything else that stopped one output
from being judged. A negative case is one row, output ``(status)``: ``pass`` when the kernel
returned the expected code, else ``fail``. Cases with no output and no status at all are
``not run``: listed in ``Report.not_run``, they fail the run unless the subset is intended
(``only_present``). ``pass``, ``too_strict`` and ``not_recorded`` pass; every other status
fails; a report in which nothing was judged (no row, or only ``not_recorded`` ones) fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..sources.arrays import NOT_RECORDED
from .metrics import Element, Metrics
from .naming import element_message, index_of, index_text

__all__ = ["OutputResult", "NotRun", "PROBLEM_STATUSES", "STATUSES", "STATUS_LABELS",
           "STATUS_ROW", "NOT_RECORDED"]

PROBLEM_STATUSES = ("missing", "size_mismatch", "dtype_mismatch", "shape_mismatch", "unreadable",
                    "error")
STATUSES = ("pass", "fail", "too_strict", NOT_RECORDED, "rejected") + PROBLEM_STATUSES
#: what the reports call each status (terminal, HTML)
STATUS_LABELS = {"pass": "PASS", "fail": "FAIL", "too_strict": "TOO STRICT", "rejected": "REJECTED",
                 NOT_RECORDED: "NOT RECORDED", **{p: p.upper() for p in PROBLEM_STATUSES}}
#: output name of the row that judges a case's returned status
STATUS_ROW = "(status)"


@dataclass
class OutputResult:
    case_id: str
    op: str
    output: str
    context: str
    regenerate: str = ""
    comparison_class: str | None = None
    dtype: str | None = None
    shape: tuple | None = None
    axes: str = ""
    reduced_terms: int | None = None
    status: str = "error"
    reason: str = ""
    message: str = ""
    source: str | None = None
    rule: str = ""
    metrics: Metrics | None = None
    ratio: dict | None = None
    heat_axes: tuple | None = None         # (row axis, column axis) of the error map
    golden_failures: int | None = None     # elements of the rounded golden failing the rule
    hint: str = ""                          # a likely cause (e.g. a dtype written for another)
    diagnosis: list = field(default_factory=list)   # Findings of a failing output, best first
    params: dict = field(default_factory=dict)      # the case's parameters (for the patterns)

    def problem(self, status: str, reason: str) -> "OutputResult":
        """This result as the problem ``status`` (the output could not be judged), its reason
        and the one-line message ``<output>: <status>: <reason> [<context>]``; returns self."""
        self.status, self.reason = status, reason
        self.message = f"{self.output}: {status.replace('_', ' ')}: {reason} [{self.context}]"
        return self

    @property
    def passed(self) -> bool:
        return self.status in ("pass", "too_strict", NOT_RECORDED)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    @property
    def is_problem(self) -> bool:
        return self.status in PROBLEM_STATUSES

    @property
    def label(self) -> str:
        return STATUS_LABELS.get(self.status, self.status.upper())

    @property
    def rank(self) -> int:
        """Report order: input problems, rejected inputs, judged failures, too strict, not
        recorded, passes."""
        if self.is_problem:
            return 0
        return {"rejected": 1, "fail": 2, "too_strict": 3, NOT_RECORDED: 4}.get(self.status, 5)

    def index(self, element: Element) -> dict[str, int]:
        return index_of(element.flat, self.shape or (), self.axes)

    def element_line(self, element: Element) -> str:
        """The one-line message naming one element."""
        return element_message(self.output, self.index(element), element.actual,
                               element.golden, element.ulps, self.dtype or "float32",
                               self.context, element.kind)

    def _element_dict(self, e: Element | None) -> dict | None:
        if e is None:
            return None
        idx = self.index(e)
        return {"flat_index": e.flat, "index": idx, "index_text": index_text(idx, ", "),
                "actual": _num(e.actual), "golden": _num(e.golden), "abs_error": _num(e.abs_err),
                "ulps": _num(e.ulps), "badness": _num(e.badness), "kind": e.kind}

    def summary_dict(self) -> dict:
        """A passing output in a few hundred bytes: the fields of ``to_dict`` that say what it
        is and how close it came, under the same names and of the same types."""
        m = self.metrics
        d = {"case_id": self.case_id, "op": self.op, "output": self.output,
             "verdict": self.verdict, "status": self.status, "dtype": self.dtype, "metrics": None}
        if m is not None:
            d["metrics"] = {k: v for k, v in self._metrics_numbers(m).items() if k in _COMPACT}
        return d

    @staticmethod
    def _metrics_numbers(m: Metrics) -> dict:
        mx = m.max_abs
        return {"elements": m.n, "numeric_elements": m.n_numeric,
                "special_matched": m.n_special_matched,
                "mismatches": m.failures, "mismatch_fraction": m.mismatch_fraction,
                "nan_mismatches": m.nan_mismatches, "inf_mismatches": m.inf_mismatches,
                "max_abs_error": _num(mx.abs_err) if mx is not None else None,
                "max_rel_error": _num(m.max_rel), "mean_rel_error": _num(m.mean_rel),
                "rmse": _num(m.rmse), "cosine": _num(m.cosine),
                "max_badness": _num(m.max_badness), "ulp_histogram": _trimmed(m.ulp_hist),
                **({} if m.boundary is None else {"boundary": m.boundary}),
                **({} if m.outside is None else {"outside_index": m.outside})}

    def to_dict(self) -> dict:
        m = self.metrics
        d = {"case_id": self.case_id, "op": self.op, "output": self.output,
             "context": self.context, "verdict": self.verdict, "status": self.status,
             "reason": self.reason, "message": self.message, "comparison_class": self.comparison_class,
             "dtype": self.dtype, "shape": list(self.shape) if self.shape is not None else None,
             "axes": self.axes, "reduced_terms": self.reduced_terms, "rule": self.rule,
             "source": self.source, "regenerate": self.regenerate, "metrics": None, "worst": [],
             "ratio": self.ratio, "golden_failures": self.golden_failures, "hint": self.hint,
             "diagnosis": [f.to_dict() for f in self.diagnosis]}
        if m is not None:
            d["metrics"] = {
                **self._metrics_numbers(m),
                "max_abs_error_at": self._element_dict(m.max_abs),
                "max_rel_error_at": self._element_dict(m.max_rel_at),
                "small_values": {"count": m.n_small, "errors": m.small_errors,
                                 "max_abs_error": _num(m.max_abs_small)},
            }
            d["worst"] = [self._element_dict(e) for e in m.worst]
        return d


#: the metrics of a passing output's compact entry (``OutputResult.summary_dict``)
_COMPACT = ("elements", "mismatches", "mismatch_fraction", "max_abs_error", "max_rel_error",
            "rmse", "cosine", "max_badness", "ulp_histogram", "boundary", "outside_index")


def _trimmed(hist) -> list[int]:
    """Histogram counts without the empty bins at the end (the bins are the report's
    ``ulp_histogram_bins``)."""
    counts = list(hist)
    while counts and counts[-1] == 0:
        counts.pop()
    return counts


def _num(x):
    """JSON-safe number: NaN and infinities as the strings "nan", "inf", "-inf"."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


@dataclass
class NotRun:
    """A case with no output and no status: what it is and why it counts as not run."""

    case_id: str
    op: str
    reason: str
