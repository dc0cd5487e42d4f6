"""Report objects: one ``OutputResult`` per case and output, gathered in a ``Report``
(docs/compare.md, "Statuses").

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

from .metrics import Element, Metrics, ulp_bin_labels
from .patterns import failure_patterns
from .naming import element_message, index_of, index_text

__all__ = ["OutputResult", "Report", "PROBLEM_STATUSES", "STATUSES", "STATUS_LABELS",
           "STATUS_ROW", "NOT_RECORDED", "NotRun"]

PROBLEM_STATUSES = ("missing", "size_mismatch", "dtype_mismatch", "shape_mismatch", "unreadable",
                    "error")
#: an output the source did not record (an msprobe dump's null entry): nothing to judge
NOT_RECORDED = "not_recorded"
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

    def diagnosis_lines(self, most: int = 5) -> list[str]:
        """``diagnosis: <kind>: <summary>``, one line per finding, best first (every report
        shows these under a failing output)."""
        return [f"diagnosis: {f.line()}" for f in self.diagnosis[:most]]

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
                "max_badness": _num(m.max_badness), "ulp_histogram": _trimmed(m.ulp_hist)}

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
            "rmse", "cosine", "max_badness", "ulp_histogram")


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


@dataclass
class Report:
    """Everything one comparison found. ``results`` in golden order; ``not_run`` lists the
    cases with nothing to judge (no output, no status); ``only_present`` says that such cases
    were left out on purpose (then they do not fail the run)."""

    golden: str
    actual: str
    standard: str
    overrides: dict = field(default_factory=dict)
    saturation: bool = False
    results: list[OutputResult] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)
    only_present: bool = False
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    #: seconds per case id, when the comparator ran the implementation itself (refspec run)
    timings: dict = field(default_factory=dict)

    @property
    def judged(self) -> bool:
        """Some output or status was judged (a ``not_recorded`` row is not judged)."""
        return any(r.status != NOT_RECORDED for r in self.results)

    @property
    def passed(self) -> bool:
        """Something was judged, everything judged passed, and no case was left unrun (unless
        ``only_present``): a comparison that judged nothing does not pass."""
        return (self.judged and all(r.passed for r in self.results)
                and (self.only_present or not self.not_run))

    @property
    def failures(self) -> list[OutputResult]:
        return [r for r in self.results if not r.passed]

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def counts(self) -> dict:
        c = {s: 0 for s in ("pass", "fail", "problem", "too_strict", NOT_RECORDED, "rejected")}
        for r in self.results:
            c["problem" if r.is_problem else r.status] += 1
        c["outputs"] = len(self.results)
        c["cases"] = len({r.case_id for r in self.results})
        c["negative_cases"] = sum(1 for r in self.results if r.output == STATUS_ROW
                                  and r.status != "rejected")
        c["not_run_cases"] = len(self.not_run)
        return c

    def not_run_by_op(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for nr in self.not_run:
            out[nr.op] = out.get(nr.op, 0) + 1
        return out

    def not_run_reason(self, op: str) -> str:
        """Why the cases of ``op`` were not run: their one reason, or a summary of several."""
        reasons = list(dict.fromkeys(nr.reason for nr in self.not_run if nr.op == op))
        if len(reasons) == 1:
            return reasons[0]
        return "cases with no output and no status.json"

    def not_run_effect(self) -> str:
        """What the not-run cases do to the verdict, in words (text and HTML reports)."""
        if not self.judged:
            return "nothing was judged, which fails the run"
        if self.only_present:
            return "they do not fail the run"
        judged_ops = list(dict.fromkeys(r.op for r in self.results))
        if not set(self.not_run_by_op()) & set(judged_ops):     # whole operators not run
            ops = " ".join(f"--op {op}" for op in judged_ops)
            return f"they fail the run: {ops} if only the operators that were run were meant"
        return "they fail the run: --only-present if only the others were meant"

    def ordered(self) -> list[OutputResult]:
        """Input problems, rejected inputs, judged failures, too strict, passes; golden order
        kept within each group."""
        return sorted(self.results, key=lambda r: r.rank)

    def summary_line(self) -> str:
        c = self.counts()
        over = ""
        if self.overrides:
            over = " (override " + ", ".join(f"{k}={v:g}" for k, v in self.overrides.items()) + ")"
        text = (f"{'PASS' if self.passed else 'FAIL'}: {c['pass']} passed, {c['fail']} failed, "
                f"{c['problem']} input problems")
        if c["rejected"]:
            text += f", {c['rejected']} valid inputs rejected"
        if c["too_strict"]:
            text += f", {c['too_strict']} where the standard is stricter than the dtype"
        if c[NOT_RECORDED]:
            text += f", {c[NOT_RECORDED]} not recorded"
        text += (f" of {c['outputs']} outputs in {c['cases']} cases "
                 f"[standard {self.standard}{over}{', saturation' if self.saturation else ''}]")
        if c["negative_cases"]:
            text += f"; {c['negative_cases']} negative cases judged by status"
        if self.not_run:
            text += (f"; {len(self.not_run)} cases not run"
                     + (", which do not fail the run" if self.only_present and self.judged else ""))
        if not self.judged:
            text += "; nothing was judged"
        return text

    def to_dict(self) -> dict:
        """Schema ``refspec-compare/3`` (docs/compare.md, "Reports"): every entry of
        ``results`` has one shape; a passing output's is a compact subset
        (``OutputResult.summary_dict``), everything else is in full (``OutputResult.to_dict``)."""
        from .._version import __version__
        return {"schema": "refspec-compare/3", "refspec_version": __version__,
                "golden": self.golden, "actual": self.actual, "standard": self.standard,
                "overrides": dict(self.overrides), "saturation": self.saturation,
                "only_present": self.only_present,
                "summary": {**self.counts(), "passed": self.passed, "line": self.summary_line(),
                            "elapsed_seconds": self.elapsed, "not_run_by_operator": self.not_run_by_op()},
                "ulp_histogram_bins": ulp_bin_labels(),
                "notes": list(self.notes),
                "timings": {"unit": "seconds", "median_of_calls": dict(self.timings)},
                "not_run": [{"case_id": n.case_id, "op": n.op, "reason": n.reason}
                            for n in self.not_run],
                "patterns": [p.to_dict() for p in failure_patterns(self.results)],
                "results": [r.summary_dict() if r.status == "pass" else r.to_dict()
                            for r in self.ordered()]}

    def pattern_lines(self) -> list[str]:
        """``pattern: <op> <output>: 9 of 9 mode=half cases fail, 0 of 15 others``: the
        failures across cases, one line per operator and output (``patterns``)."""
        return [f"pattern: {p.line()}" for p in failure_patterns(self.results)]

    def timing_line(self) -> str | None:
        """A line on the cases' timings (``refspec run``), None when nothing was timed."""
        if not self.timings:
            return None
        times = sorted(self.timings.items(), key=lambda kv: -kv[1])
        total = sum(t for _, t in times)
        slowest, t_max = times[0]
        return (f"time: {len(times)} cases timed, {total:.3g} s in all (the median of the timed "
                f"calls of each); slowest {t_max * 1e3:.3g} ms: {slowest}")

    def __str__(self) -> str:
        from .render_text import render_text
        return render_text(self)
