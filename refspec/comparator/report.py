"""Report objects: one :class:`OutputResult` per case and output, gathered in a :class:`Report`.

Statuses: ``pass`` and ``fail`` (judged), and the input problems ``missing``,
``size_mismatch``, ``dtype_mismatch``, ``shape_mismatch``, ``unreadable``, plus ``error`` for
anything else that stopped one output from being judged. Every status but ``pass`` fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .metrics import Element, Metrics, ulp_bin_labels
from .naming import element_message, index_of, index_text

__all__ = ["OutputResult", "Report", "PROBLEM_STATUSES", "STATUSES"]

PROBLEM_STATUSES = ("missing", "size_mismatch", "dtype_mismatch", "shape_mismatch", "unreadable",
                    "error")
STATUSES = ("pass", "fail") + PROBLEM_STATUSES


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

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    @property
    def is_problem(self) -> bool:
        return self.status in PROBLEM_STATUSES

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

    def to_dict(self) -> dict:
        m = self.metrics
        d = {"case_id": self.case_id, "op": self.op, "output": self.output,
             "context": self.context, "verdict": self.verdict, "status": self.status,
             "reason": self.reason, "message": self.message, "comparison_class": self.comparison_class,
             "dtype": self.dtype, "shape": list(self.shape) if self.shape is not None else None,
             "axes": self.axes, "reduced_terms": self.reduced_terms, "rule": self.rule,
             "source": self.source, "regenerate": self.regenerate, "metrics": None, "worst": [],
             "ratio": self.ratio}
        if m is not None:
            d["metrics"] = {
                "elements": m.n, "numeric_elements": m.n_numeric,
                "special_matched": m.n_special_matched,
                "mismatches": m.failures, "mismatch_fraction": m.mismatch_fraction,
                "nan_mismatches": m.nan_mismatches, "inf_mismatches": m.inf_mismatches,
                "max_abs_error": self._element_dict(m.max_abs),
                "max_rel_error": _num(m.max_rel), "max_rel_error_at": self._element_dict(m.max_rel_at),
                "mean_rel_error": _num(m.mean_rel), "rmse": _num(m.rmse), "cosine": _num(m.cosine),
                "max_badness": _num(m.max_badness),
                "small_values": {"count": m.n_small, "errors": m.small_errors,
                                 "max_abs_error": _num(m.max_abs_small)},
                "ulp_histogram": {"bins": ulp_bin_labels(), "counts": list(m.ulp_hist)},
            }
            d["worst"] = [self._element_dict(e) for e in m.worst]
        return d


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
class Report:
    """Everything one comparison found. ``results`` in golden order; ``skipped`` lists
    (case id, why) for cases with nothing to judge (negative cases)."""

    golden: str
    actual: str
    standard: str
    overrides: dict = field(default_factory=dict)
    saturation: bool = False
    results: list[OutputResult] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[OutputResult]:
        return [r for r in self.results if not r.passed]

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def counts(self) -> dict:
        c = {s: 0 for s in ("pass", "fail", "problem")}
        for r in self.results:
            c["problem" if r.is_problem else r.status] += 1
        c["outputs"] = len(self.results)
        c["cases"] = len({r.case_id for r in self.results})
        c["skipped_cases"] = len(self.skipped)
        return c

    def ordered(self) -> list[OutputResult]:
        """Failures first (input problems, then judged failures), then passes; golden order kept
        within each group."""
        return sorted(self.results, key=lambda r: (0 if r.is_problem else (1 if not r.passed else 2)))

    def summary_line(self) -> str:
        c = self.counts()
        over = ""
        if self.overrides:
            over = " (override " + ", ".join(f"{k}={v:g}" for k, v in self.overrides.items()) + ")"
        text = (f"{'PASS' if self.passed else 'FAIL'}: {c['pass']} passed, {c['fail']} failed, "
                f"{c['problem']} input problems of {c['outputs']} outputs in {c['cases']} cases "
                f"[standard {self.standard}{over}{', saturation' if self.saturation else ''}]")
        if self.skipped:
            text += f"; {len(self.skipped)} negative cases skipped"
        return text

    def to_dict(self) -> dict:
        from .._version import __version__
        return {"schema": "refspec-compare/1", "refspec_version": __version__,
                "golden": self.golden, "actual": self.actual, "standard": self.standard,
                "overrides": dict(self.overrides), "saturation": self.saturation,
                "summary": {**self.counts(), "passed": self.passed, "line": self.summary_line(),
                            "elapsed_seconds": self.elapsed},
                "notes": list(self.notes),
                "skipped": [{"case_id": c, "reason": why} for c, why in self.skipped],
                "results": [r.to_dict() for r in self.ordered()]}

    def first_failure_message(self) -> str | None:
        for r in self.ordered():
            if not r.passed:
                return r.message
        return None

    def __str__(self) -> str:
        from .render_text import render_text
        return render_text(self)
