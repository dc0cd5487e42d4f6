"""The verdict of one output (docs/compare.md, "Judging"): every element of the actual output
against the exact float64 golden, in blocks.

``judge`` is one pipeline: the inputs' problems (an unusable actual, another dtype or shape),
``measure.measure`` (one pass over the blocks: the typed ``Metrics``, with what the later steps
need: the counts of the too-strict question and, for the HTML report, the 2-D error map), the
verdict (``verdict``: the rule's aggregation, or the ratio standard's dual-benchmark ratios),
then ``further_steps`` on an output that did not pass: too strict (one step for both of its
reasons, docs/compare.md "Too strict"), the float16/bfloat16 hint, the diagnosis, the error
map's axes. No output is measured twice (the ratio standard measures its benchmark once too).
A cache updated in place is judged by ``caches.judge_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ...spec.dtypes import dtype_name
from ...spec.terms import CACHE
from ..sources.arrays import Problem
from .benchmark import Attainable
from .bounds import rounding_may_fail
from .caches import judge_cache
from .golden_output import GoldenOutput
from .measure import Benchmark, MeasureProblem, block_plan, heat_axes, measure
from .options import CompareOptions
from .outcomes import OutputResult
from .standards import Rule
from .twins import TWINS, read_as_twin
from .verdict import passes, verdict, verdict_ratio

__all__ = ["JudgedOutput", "judge", "further_steps", "too_strict", "dtype_hint", "ROUNDED",
           "BEYOND"]

#: why an output is too strict: the golden rounded to the output dtype fails the standard too,
#: or the case is beyond what a kernel's own arithmetic can attain
ROUNDED, BEYOND = "rounded", "beyond"


@dataclass(frozen=True, eq=False)
class JudgedOutput:
    """One output being judged: its ``case`` and ``golden`` output, the ``actual`` (an
    ActualArray or a Problem), its ``rule``, the ``options``; ``benchmark`` the ratio standard's
    same-precision result (in memory); ``sum_abs`` the sums of |terms| when the case has none;
    ``diagnose(case, golden, actual, rule)`` the findings of a failing output (None: no
    diagnosis); ``attainable`` whether a kernel's arithmetic can attain the case's goldens,
    asked once per case (None: not asked)."""

    case: object
    golden: GoldenOutput
    actual: object
    rule: Rule
    options: CompareOptions
    benchmark: np.ndarray | None = None
    sum_abs: object = None
    diagnose: Callable | None = None
    attainable: Attainable | None = None


def judge(job: JudgedOutput, context: str) -> OutputResult:
    """Problems of the inputs, the metrics, the verdict, then the further steps of an output
    that did not pass."""
    res = _result(job, context)
    problem = _input_problem(res, job)
    if problem is not None:
        return problem
    rule, golden = job.rule, job.golden
    if golden.comparison_class == CACHE:
        res = judge_cache(res, job)
        if res.status == "fail":
            diagnosis(res, job)
        return res
    heat = _heat(golden, job.options)
    try:
        m = measure(job.case, golden, job.actual, None if rule.ratio_level else rule,
                    job.options, job.sum_abs, heat)
        if rule.ratio_level:
            bench = measure(job.case, golden, Benchmark(job.benchmark), None,
                            replace(job.options, top=0))
    except MeasureProblem as p:
        return res.problem(p.status, p.detail)
    res.metrics = m
    if rule.ratio_level:
        verdict_ratio(res, m, bench, rule)
    else:
        verdict(res, m, rule)
    if res.status == "pass":
        m.heatmap = None                 # a map only for an output that did not pass
    else:
        further_steps(res, job, heat)
    return res


def further_steps(res: OutputResult, job: JudgedOutput, heat=None) -> None:
    """The steps of an output that did not pass, in this order, each on what the one pass
    measured; each decides whether it applies. One more step is one more line here."""
    why = too_strict(res, job)
    dtype_hint(res, job)
    diagnosis(res, job, why)
    heat_map_axes(res, job, heat)


def diagnosis(res: OutputResult, job: JudgedOutput, strict: str | None = None) -> None:
    """The findings of a failing output, best first (``job.diagnose``: the comparison passes
    ``refspec.comparator.diagnosis.diagnose.diagnose_output``, docs/compare.md "Diagnosis"),
    also when it is too strict only because its case is beyond a kernel's arithmetic."""
    if job.diagnose is not None and (res.status == "fail" or strict == BEYOND):
        res.diagnosis = job.diagnose(job.case, job.golden, job.actual, job.rule, res.metrics)


def _result(job: JudgedOutput, context: str) -> OutputResult:
    """The output's row before its verdict."""
    case, golden = job.case, job.golden
    return OutputResult(case_id=case.case_id, op=case.op, output=golden.name, context=context,
                        regenerate=getattr(case, "regenerate", "") or "",
                        comparison_class=golden.comparison_class, dtype=golden.dtype_name,
                        shape=golden.shape, axes=golden.axes, reduced_terms=golden.K,
                        rule=job.rule.describe(), params=dict(case.params))


def _input_problem(res: OutputResult, job: JudgedOutput) -> OutputResult | None:
    """The row of an actual that cannot be judged (a Problem, another dtype or shape)."""
    actual, golden = job.actual, job.golden
    res.source = actual.source
    if isinstance(actual, Problem):
        return res.problem(actual.status, actual.detail)
    if actual.dtype != golden.dtype:
        return res.problem("dtype_mismatch", f"{actual.source}: dtype {dtype_name(actual.dtype)} "
                                             f"but the golden output is {golden.dtype_name}")
    if tuple(actual.shape) != golden.shape:
        return res.problem("shape_mismatch", f"{actual.source}: shape {tuple(actual.shape)} but "
                                             f"the golden output has shape {golden.shape}")
    return None


def _heat(golden: GoldenOutput, options: CompareOptions):
    """What ``measure`` keeps a 2-D max-badness map by (shape, axis i, axis j or None): with
    ``options.heatmaps``, over the axes ``options.heatmap_axes`` or the last two; None for a
    scalar or without ``heatmaps``."""
    if not options.heatmaps:
        return None
    ax = heat_axes(golden.shape, golden.axes, options.heatmap_axes)
    return None if ax is None else (golden.shape, ax[0], ax[1])


def heat_map_axes(res: OutputResult, job: JudgedOutput, heat) -> None:
    """The names of the error map's rows and columns (the map itself is the one pass's)."""
    if heat is None:
        return
    _, i, j = heat
    names = job.golden.axis_names
    res.heat_axes = (names[i], names[j]) if j is not None else ("", names[i])


def too_strict(res: OutputResult, job: JudgedOutput) -> str | None:
    """Whether a failing output is ``too_strict`` (docs/compare.md, "Too strict"), and why:
    ``ROUNDED`` when every element over the standard equals the golden rounded to the output
    dtype (the standard asks for more than the dtype can hold), ``BEYOND`` when the case is
    beyond what a kernel's own arithmetic can attain (the operator record's
    ``comparison.unattainable``); None when it is a kernel failure (or passed)."""
    if res.status != "fail":
        return None
    if _rounded_golden_fails(res, job):
        return ROUNDED
    if job.attainable is not None and _beyond_arithmetic(res, job.attainable):
        return BEYOND
    return None


def _rounded_golden_fails(res: OutputResult, job: JudgedOutput) -> bool:
    """The output judged with the elements that equal the golden rounded to the output dtype
    exempt (``Rule.exempt_rounded``), from the counts the one pass kept
    (``Metrics.rounded_failures``, ``Metrics.max_abs_unrounded``): when that passes, the
    standard is stricter than the dtype. Not for a rule that admits every rounded value nor the
    ratio standard (``bounds.rounding_may_fail``)."""
    rule, m = job.rule, res.metrics
    if not rounding_may_fail(rule, job.golden.dtype):
        return False
    rounded = m.rounded_failures
    exempt = replace(rule, exempt_rounded=True, max_abs_cap=None)
    ok = passes(replace(m, failures=m.failures - rounded), exempt)
    cap = rule.max_abs_cap
    if ok and cap is not None and m.max_abs is not None and m.max_abs.abs_err > cap:
        # the cap on the max abs error, checked on the elements not exempt: |a - g| / cap <= 1
        worst = m.max_abs_unrounded
        ok = worst == 0 or (cap > 0 and worst / cap <= 1.0)
        rounded = max(rounded, 1)
    res.golden_failures = rounded
    if ok:
        res.status = "too_strict"
        res.reason = (f"{res.reason}; every element over the standard equals the golden "
                      f"rounded to {res.dtype}: the standard is stricter than {res.dtype} can "
                      "represent there (not a kernel failure)")
        res.message = f"{res.message} [standard stricter than {res.dtype}]"
    elif rounded:
        res.reason += (f" ({rounded} of them equal the golden rounded to {res.dtype}: the "
                       "standard is stricter than the dtype there)")
    return ok


def _beyond_arithmetic(res: OutputResult, attainable: Attainable) -> bool:
    """A failing output of a case whose goldens a kernel computing in its own arithmetic cannot
    attain is ``too_strict``, not a kernel failure; when that cannot be told, the hint says so."""
    why, unknown = attainable.answer()
    if unknown:
        res.hint = f"whether a kernel's arithmetic can attain this case is unknown: {unknown}"
        return False
    if not why:
        return False
    res.status = "too_strict"
    res.reason += (f"; the case is beyond a kernel's own arithmetic: {why}, where the golden "
                   "is finite (not a kernel failure)")
    res.message += " [golden beyond the kernel's arithmetic]"
    res.hint = f"{why}: the inputs, not the kernel, are out of range"
    return True


#: the judge's hint reads at most this many of an output's first elements
HINT_ELEMENTS = 1 << 16


def dtype_hint(res: OutputResult, job: JudgedOutput) -> None:
    """When a failing float16 output's bits are bfloat16's (or the reverse), say so in
    ``res.hint`` (``twins.read_as_twin``: the test the diagnosis's ``dtype`` finding asks too),
    judged on the first elements (at most ``HINT_ELEMENTS``). Not for the ratio standard."""
    if res.status != "fail" or job.rule.ratio_level or res.hint:
        return
    res.hint = _twin_hint(job, block_plan(job.golden, job.options.read_elements))


def _twin_hint(job: JudgedOutput, plan) -> str:
    golden = job.golden
    if golden.dtype_name not in TWINS or not plan:
        return ""
    key, flat0, count = plan[0]
    try:
        a = np.ascontiguousarray(job.actual.read(key, flat0, count)).reshape(-1)[:HINT_ELEMENTS]
        g = np.asarray(golden.exact[key], dtype=np.float64).reshape(-1)[:a.size]
    except Exception:
        return ""
    reading = read_as_twin(a, g, golden.dtype_name)
    if not reading.holds:
        return ""
    twin = reading.twin
    return (f"read as {twin}, {reading.share:.0%} of the first {a.size} elements are within "
            f"{twin}'s tolerance (as {golden.dtype_name}: {reading.share_as_is:.0%}): was {twin} "
            f"written where {golden.dtype_name} is expected?")
