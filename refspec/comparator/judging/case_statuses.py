"""The status a kernel returned for a case, judged (docs/compare.md, "Negative cases" and "The
math-only profile"): a negative case passes when the kernel returned the expected aclnn code; a
valid input the kernel rejected is ``rejected``; the math-only profile's statuses are not judged
unless asked for."""

from __future__ import annotations

from ..sources.base import UNKNOWN_CODE, ActualSource
from .naming import context_of
from .outcomes import STATUS_ROW, NotRun, OutputResult

__all__ = ["judge_status", "math_only_note"]


def _status_row(case, status, reason, message="", code=None) -> OutputResult:
    return OutputResult(case.case_id, case.op, STATUS_ROW, context_of(case.op, case.params),
                        regenerate=getattr(case, "regenerate", "") or "", status=status,
                        reason=reason, message=message, params=dict(case.params), rule=(
                            f"the kernel returns aclnn {case.expected_error}"
                            if case.expected_error is not None else "the kernel returns 0"))


def judge_status(case, code, why, report, source: ActualSource, unjudged=None) -> bool:
    """Judge the status a kernel returned for a case (docs/compare.md, "Negative cases"): a
    negative case passes when the code equals the expected one and is "not run" without a
    status; a positive case with a non-zero status is "rejected". ``UNKNOWN_CODE``: the kernel
    rejected the case without saying which aclnn code (the source tells what it said): a
    rejection whose code cannot be checked. A status that cannot be read is an input problem of
    its own, and a positive case's outputs are judged all the same. ``unjudged`` (a list):
    the math-only profile's statuses are not judged (docs/compare.md, "The math-only
    profile"): a math-only case the kernel rejected, and a negative one, are added to it
    instead. True when the case needs nothing more (its outputs are not judged)."""
    expected = getattr(case, "expected_error", None)
    context = context_of(case.op, case.params)
    said = source.rejection(case.case_id) if code else ""
    if why is not None:                   # and a positive case's outputs are judged still
        report.results.append(_status_row(case, "", "").problem("unreadable", why))
        return expected is not None
    if unjudged is not None and case.params.get("soc") is None and (expected is not None or code):
        unjudged.append((case.case_id, code, expected))
        return True
    if expected is None:
        if code is None or code == 0:
            return False
        report.results.append(_rejected(case, code, said, source.kind == "implementation",
                                        context))
        return True
    what = f"aclnn {expected}" + (f" {case.expected_error_status}"
                                  if getattr(case, "expected_error_status", None) else "")
    if code is None:
        rule = getattr(case, "expected_error_message", None)
        report.not_run.append(NotRun(case.case_id, case.op, source.not_run_reason(case.case_id)
                                     or f"negative case without a status (the spec rejects it "
                                        f"with {what}" + (f": {rule})" if rule else ")")))
        return True
    if code == expected:
        report.results.append(_status_row(case, "pass", f"rejected with {what} as expected"))
        return True
    if code == UNKNOWN_CODE:
        report.results.append(_status_row(case, "pass", f"rejected, without an aclnn code to "
                                                        f"check against {what}: {said}"))
        return True
    why_rejected = getattr(case, "expected_error_message", None) or ""
    if code == 0:
        reason = f"accepted an input it must reject (expected {what}: {why_rejected})"
    else:
        reason = f"returned {code}, expected {what} ({why_rejected})"
    report.results.append(_status_row(case, "fail", reason,
                                      f"{STATUS_ROW} = {code} but should be {expected} "
                                      f"[{context}]"))
    return True


def math_only_note(unjudged: list) -> str:
    """The report's note on the math-only cases whose status was not judged."""
    def what(code, expected):
        got = ("no status" if code is None else f"returned {code}" if code != UNKNOWN_CODE
               else "rejected without an aclnn code")
        return got + (f", the math rejects it with {expected}" if expected else "")

    shown = "; ".join(f"{cid}: {what(code, expected)}" for cid, code, expected in unjudged[:5])
    more = f"; and {len(unjudged) - 5} more" if len(unjudged) > 5 else ""
    return (f"{len(unjudged)} math-only cases (soc=none) not judged by their status: the "
            "math-only profile says what the mathematics needs, which no chip is bound to "
            f"accept or reject alike; --soc none judges their statuses ({shown}{more})")


def _rejected(case, code, said: str, called: bool, context: str) -> OutputResult:
    """The row of a valid input the kernel rejected. ``called``: the source called a Python
    function, and ``said`` is the exception it raised (its code, if any, read from it)."""
    if called:
        code_text = "" if code == UNKNOWN_CODE else f" (aclnn {code})"
        return _status_row(case, "rejected", f"{said}{code_text} for a valid input (expected it "
                                             "to return the outputs)",
                           f"{STATUS_ROW}: {said}{code_text} but should return the outputs "
                           f"[{context}]")
    got = "an error without an aclnn code" if code == UNKNOWN_CODE else str(code)
    reason = f"the kernel returned {got} for a valid input (expected 0)" + (
        f": {said}" if said else "")
    return _status_row(case, "rejected", reason, f"{STATUS_ROW} = {got} but should be 0: rejected "
                                                 f"a valid input [{context}]"
                                                 + (f" ({said})" if said else ""))
