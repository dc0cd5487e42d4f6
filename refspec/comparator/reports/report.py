"""``Report``: everything one comparison found, the ``OutputResult`` of every judged output and
status and the cases not run, with its counts, its total line and its JSON form (docs/compare.md,
"Statuses" and "Reports")."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnosis.patterns import failure_patterns
from ..judging.metrics import ulp_bin_labels
from ..judging.outcomes import NOT_RECORDED, STATUS_ROW, NotRun, OutputResult

__all__ = ["Report"]


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
    #: what the outputs were judged against and when (``provenance``): the golden file's
    #: ``GoldenFile.digest`` and ``created`` time ("" for cases in memory), whether it is
    #: marked complete, and the UTC time the comparison ended
    golden_digest: str = ""
    golden_created: str = ""
    golden_complete: bool = True
    judged_at: str = ""
    #: actual files last written before the golden file was made (``sources.ages``), and the
    #: time that is (seconds since the epoch; None: not asked, as for cases in memory)
    older_files: list[str] = field(default_factory=list)
    stale_before: float | None = None

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
        from ..._version import __version__
        return {"schema": "refspec-compare/3", "refspec_version": __version__,
                "golden": self.golden, **self.provenance(),
                "actual": self.actual, "standard": self.standard,
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

    def provenance(self) -> dict:
        """What every report format states of the goldens judged against and of itself (the
        header of each, from here only): the golden file's digest and the time it was made,
        whether it is complete, and when the comparison ended."""
        return {"golden_digest": self.golden_digest, "golden_created": self.golden_created,
                "golden_complete": self.golden_complete, "judged_at": self.judged_at}

    def provenance_line(self) -> str:
        """``golden sha256:1f2e... made 2026-12-01T21:42:19Z; judged 2026-12-02T08:00:05Z``."""
        made = f" made {self.golden_created}" if self.golden_created else ""
        golden = (f"golden {self.golden_digest}{made}" if self.golden_digest
                  else "golden cases in memory")
        if not self.golden_complete:
            golden += " (NOT COMPLETE: the cases an interrupted run wrote)"
        return f"{golden}; judged {self.judged_at or 'at an unknown time'}"

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
