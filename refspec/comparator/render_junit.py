"""``--junit PATH``: JUnit XML with one test case per case and output, so CI systems list every
output with its verdict; failures carry the one-line message and the details."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..goldens.atomic import write_text_atomic

__all__ = ["render_junit", "write_junit"]


def _details(r) -> str:
    lines = [r.reason]
    if r.source:
        lines.append(f"actual: {r.source}")
    if r.rule:
        lines.append(f"rule: {r.rule}")
    m = r.metrics
    if m is not None:
        for e in m.worst:
            lines.append("  " + r.element_line(e))
    if r.regenerate:
        lines.append(f"regenerate: {r.regenerate}")
    return "\n".join(lines)


def render_junit(report) -> str:
    c = report.counts()
    suite = ET.Element("testsuite", name=f"refspec compare ({report.standard})",
                       tests=str(c["outputs"]), failures=str(c["fail"]), errors=str(c["problem"]),
                       skipped=str(len(report.skipped)), time=f"{report.elapsed:.3f}")
    props = ET.SubElement(suite, "properties")
    for k, v in (("golden", report.golden), ("actual", report.actual),
                 ("standard", report.standard), ("saturation", str(report.saturation))):
        ET.SubElement(props, "property", name=k, value=str(v))
    for k, v in report.overrides.items():
        ET.SubElement(props, "property", name=f"override.{k}", value=repr(v))
    for r in report.results:
        tc = ET.SubElement(suite, "testcase", classname=r.case_id, name=r.output)
        if r.passed:
            continue
        tag = "error" if r.is_problem else "failure"
        el = ET.SubElement(tc, tag, message=r.message or r.reason, type=r.status)
        el.text = _details(r)
    for case_id, why in report.skipped:
        tc = ET.SubElement(suite, "testcase", classname=case_id, name="(negative case)")
        ET.SubElement(tc, "skipped", message=why)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def write_junit(report, path) -> None:
    write_text_atomic(path, render_junit(report))
