"""pytest-friendly asserts on top of the comparator (docs/compare.md, "In your own tests").

    from refspec.testing import assert_matches_golden, assert_allclose_to_spec

    assert_matches_golden("smoke.h5", "kernel_out/")                 # every case
    assert_matches_golden("smoke.h5", {"dx": dx, "dcos": dcos, "dsin": dsin}, case=case_id)
    assert_allclose_to_spec(dx, "rotary_position_embedding_grad", "dx",
                            dy=dy, cos=cos, sin=sin, x=x, mode=0)

A failure raises ``AssertionError`` whose first line is the message of the failing row of
``refspec compare``::

    dx[b=1,n=3,s=17,d=5] = 0.1234 but should be 0.1241 (3.2 ulp) [rotary_position_embedding_grad mode=half layout=BNSD cos=11SD dtype=bfloat16]
"""

from __future__ import annotations

from .comparator import compare
from .comparator.reports.detail import detail_lines
from .comparator.reports.report import Report
from .comparator.sources.memory_case import spec_case

__all__ = ["assert_matches_golden", "assert_allclose_to_spec"]


def _raise_if_failed(report: Report) -> Report:
    __tracebackhide__ = True            # pytest: the failure points at the caller's line
    if report.passed:
        return report
    failed = report.failures
    if not failed:
        ids = [n.case_id for n in report.not_run]
        raise AssertionError(f"{len(ids)} cases not run (no output, no status): "
                             + ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
                             + f"\n{report.summary_line()}")
    first = failed[0]
    lines = detail_lines(first, ("message", "reason_and_rule", "diagnosis", "hint", "more_worst",
                                 "regenerate"))
    if len(failed) > 1:
        lines.append(f"{len(failed) - 1} more failing outputs: " +
                     ", ".join(f"{r.case_id}:{r.output}" for r in failed[1:6]) +
                     (" ..." if len(failed) > 6 else ""))
    lines += report.pattern_lines()
    lines.append(report.summary_line())
    raise AssertionError("\n".join(lines))


def assert_matches_golden(golden_path_or_case, actual, *, case=None, standard: str = "default",
                          rtol: float | None = None, atol: float | None = None,
                          saturation: bool = False, mapping=None, **kwargs) -> Report:
    """Assert that ``actual`` matches the golden: a golden file path (all cases, or ``case``:
    ids or patterns), an open GoldenFile, or one case object. ``actual`` as for
    ``refspec.compare``: a path, ``{output: array}`` for one case, or
    ``{case_id: {output: array}}`` (``{output: array}`` for several cases asks for ``case``);
    ``status``: the status the kernel returned (see ``refspec.compare``). Returns the
    report when everything passes."""
    __tracebackhide__ = True            # pytest: the failure points at the caller's line
    report = compare(golden_path_or_case, actual, cases=case, standard=standard, rtol=rtol,
                     atol=atol, saturation=saturation, mapping=mapping, **kwargs)
    if not report.results and not report.not_run:
        raise AssertionError(f"nothing was compared ({report.summary_line()})")
    return _raise_if_failed(report)


def assert_allclose_to_spec(actual_array, op: str, output_name: str, *, standard: str = "default",
                            rtol: float | None = None, atol: float | None = None,
                            saturation: bool = False, layout: str | None = None,
                            **spec_kwargs) -> Report:
    """Assert that one output array matches the spec's exact result for ``op`` (a refspec
    function name) called with ``spec_kwargs`` (its tensors and attributes, and ``soc``).
    ``layout`` names the axes when the shapes alone do not (see ``spec_case``)."""
    __tracebackhide__ = True
    case = spec_case(op, layout=layout, **spec_kwargs)
    if output_name not in case.output_names:
        raise ValueError(f"{op} produces no output {output_name!r} for these arguments; "
                         f"it produces: {', '.join(case.output_names)}")
    only = _OneOutput(case, output_name)
    report = compare(only, {output_name: actual_array}, standard=standard, rtol=rtol, atol=atol,
                     saturation=saturation)
    return _raise_if_failed(report)


class _OneOutput:
    """A case object restricted to one output."""

    def __init__(self, case, name):
        self._case, self._name = case, name

    def __getattr__(self, attr):
        return getattr(self._case, attr)

    @property
    def output_names(self):
        return [self._name]
