"""The detail of an output that did not pass, in one order for every report (docs/compare.md,
"Reports"): its message, why it failed, the diagnosis, the hint, where the actual came from, the
rule, the worst elements, the command that regenerates the case.

Every renderer asks ``detail`` (or ``detail_lines``) for the parts it shows, and gets them in
the order of ``PARTS``, each only when the output has it: the terminal, JUnit, HTML, the pytest
plugin and ``refspec.testing`` differ in which parts they show (the terminal's row already holds
the reason; the HTML report draws the worst elements as a table of their own), never in what a
part says or where it stands.
"""

from __future__ import annotations

__all__ = ["PARTS", "detail", "detail_lines", "MOST_FINDINGS"]

#: findings shown in text (the HTML report lists every one)
MOST_FINDINGS = 5


#: the parts, in the order every report shows them: "reason" is the reason alone, "new_reason"
#: the reason where the message does not already say it, "reason_and_rule" both on one line
#: named by the output; "worst" every worst element, "more_worst" those after the message's
PARTS = ("message", "reason", "new_reason", "reason_and_rule", "diagnosis", "hint", "source",
         "rule", "worst", "more_worst", "regenerate")
#: the label of a part's line of text
_LABELS = {"hint": "hint: ", "source": "actual: ", "rule": "rule: ", "regenerate": "regenerate: "}


def detail(r, parts, most_findings: int | None = MOST_FINDINGS) -> list[tuple[str, object]]:
    """(part, value) of each of ``parts`` (names in ``PARTS``) the output ``r`` (an
    ``OutputResult``) has, in the order of ``PARTS``: a string, or the list of findings
    (``diagnosis``: at most ``most_findings``, None for all) or of worst elements."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"no detail part {sorted(unknown)}; the parts: {', '.join(PARTS)}")
    worst = list(r.metrics.worst) if r.metrics is not None else []
    found = {
        "message": r.message or f"{r.output}: {r.status}: {r.reason}",
        "reason": r.reason,
        "new_reason": r.reason if r.message and r.reason and r.reason not in r.message else None,
        "reason_and_rule": f"{r.output}: {r.reason}" + (f"; rule: {r.rule}" if r.rule else ""),
        "diagnosis": list(r.diagnosis)[:most_findings] or None,
        "hint": r.hint or None, "source": r.source or None, "rule": r.rule or None,
        "worst": worst or None, "more_worst": worst[1:5] or None,
        "regenerate": r.regenerate or None}
    return [(name, found[name]) for name in PARTS if name in parts and found[name] is not None]


def detail_lines(r, parts, most_findings: int | None = MOST_FINDINGS) -> list[str]:
    """The parts as lines of text: one line a finding (``diagnosis: <kind>: <summary>``) and a
    worst element (indented by two spaces; ``more_worst`` under a line "worst elements:")."""
    lines = []
    for name, value in detail(r, parts, most_findings):
        if name == "diagnosis":
            lines += [f"diagnosis: {f.line()}" for f in value]
        elif name in ("worst", "more_worst"):
            lines += (["worst elements:"] if name == "more_worst" else []) + [
                "  " + r.element_line(e) for e in value]
        else:
            lines.append(_LABELS.get(name, "") + value)
    return lines
