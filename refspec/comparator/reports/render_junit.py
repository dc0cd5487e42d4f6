"""``--junit PATH``: JUnit XML with one test case per case and output, so CI systems list every
output with its verdict; failures carry the one-line message and the details. Judged failures
and rejected inputs are ``<failure>``, input problems ``<error>``; an output whose standard is
stricter than its dtype is ``<skipped>`` (not a kernel failure); a case not run is one
``<error>`` (``<skipped>`` with ``--only-present``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .detail import detail_lines

__all__ = ["render_junit"]


#: the text of a <failure> or <error> (its message attribute holds the row's message)
JUNIT_DETAIL = ("reason", "diagnosis", "hint", "source", "rule", "worst", "regenerate")


def render_junit(report) -> str:
    c = report.counts()
    not_run = len(report.not_run)
    empty = not report.judged            # a run that judged nothing fails (Report.passed)
    suite = ET.Element("testsuite", name=f"refspec compare ({report.standard})",
                       tests=str(c["outputs"] + not_run + empty),
                       failures=str(c["fail"] + c["rejected"]),
                       errors=str(c["problem"] + (0 if report.only_present else not_run) + empty),
                       skipped=str(c["too_strict"] + c["not_recorded"]
                                   + (not_run if report.only_present else 0)),
                       time=f"{report.elapsed:.3f}")
    props = ET.SubElement(suite, "properties")
    for k, v in (("golden", report.golden), *report.provenance().items(),
                 ("actual", report.actual),
                 ("standard", report.standard), ("saturation", str(report.saturation))):
        ET.SubElement(props, "property", name=k, value=str(v))
    for k, v in report.overrides.items():
        ET.SubElement(props, "property", name=f"override.{k}", value=repr(v))
    timed = set()
    for r in report.results:
        tc = ET.SubElement(suite, "testcase", classname=r.case_id, name=r.output)
        if r.case_id in report.timings and r.case_id not in timed:    # the case's time, once
            tc.set("time", f"{report.timings[r.case_id]:.6f}")
            timed.add(r.case_id)
        if r.status == "pass":
            continue
        if r.status in ("too_strict", "not_recorded"):
            ET.SubElement(tc, "skipped", message=r.reason)
            continue
        tag = "error" if r.is_problem else "failure"
        el = ET.SubElement(tc, tag, message=r.message or r.reason, type=r.status)
        el.text = "\n".join(detail_lines(r, JUNIT_DETAIL))
    for nr in report.not_run:
        tc = ET.SubElement(suite, "testcase", classname=nr.case_id, name="(not run)")
        if report.only_present:
            ET.SubElement(tc, "skipped", message=f"not run: {nr.reason}")
        else:
            ET.SubElement(tc, "error", message=f"not run: {nr.reason}", type="not_run")
    if empty:
        tc = ET.SubElement(suite, "testcase", classname="refspec", name="(nothing judged)")
        ET.SubElement(tc, "error", message="no output and no status of any case was found",
                      type="nothing_judged")
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
