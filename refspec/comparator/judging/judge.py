"""The verdict of one output (docs/compare.md, "Judging"): every element of the actual output
against the exact float64 golden, in blocks.

``judge`` is one pipeline: the inputs' problems (an unusable actual, another dtype or shape),
``refspec.comparator.measure.measure`` (one pass over the blocks: the typed ``Metrics``), the
verdict (``refspec.comparator.verdict``: the rule's aggregation, or the ratio standard's
dual-benchmark ratios), then ``further_passes`` on an output that did not pass: too strict
(docs/compare.md, "Too strict"), the float16/bfloat16 hint and the 2-D error map of the HTML
report, each a small function that measures once more what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ...spec.dtypes import dtype_name, resolve_dtype
from ..sources.arrays import Problem
from .floatinfo import TWINS, float_info
from .golden_output import GoldenOutput, golden_output
from .measure import Benchmark, MeasureProblem, block_plan, heat_axes, measure
from .options import CompareOptions
from .outcomes import OutputResult
from .standards import Rule
from .verdict import passes, verdict, verdict_ratio

__all__ = ["JudgeOptions", "JudgedOutput", "judge_output", "judge", "further_passes",
           "too_strict", "dtype_hint", "heatmap", "admits_rounding"]

#: the options of one comparison (the name the judge's callers knew them by)
JudgeOptions = CompareOptions


@dataclass(frozen=True, eq=False)
class JudgedOutput:
    """One output being judged: its ``case`` and ``golden`` output, the ``actual`` (an
    ActualArray or a Problem), its ``rule``, the ``options``; ``benchmark`` the ratio standard's
    same-precision result (in memory); ``sum_abs`` the sums of |terms| when the case has none;
    ``diagnose(case, golden, actual, rule)`` the findings of a failing output (None: no
    diagnosis)."""

    case: object
    golden: GoldenOutput
    actual: object
    rule: Rule
    options: CompareOptions
    benchmark: np.ndarray | None = None
    sum_abs: object = None
    diagnose: Callable | None = None


def judge_output(case, name: str, actual, rule: Rule, opts: CompareOptions, context: str,
                 benchmark: np.ndarray | None = None, sum_abs=None) -> OutputResult:
    """The verdict of output ``name`` of a golden case against ``actual`` (an ActualArray or a
    Problem); ``context`` names the case in messages."""
    golden = golden_output(case, name)
    return judge(JudgedOutput(case, golden, actual, rule, opts, benchmark, sum_abs), context)


def judge(job: JudgedOutput, context: str) -> OutputResult:
    """Problems of the inputs, the metrics, the verdict, then the further passes of an output
    that did not pass."""
    res = _result(job, context)
    problem = _input_problem(res, job)
    if problem is not None:
        return problem
    rule = job.rule
    try:
        m = measure(job.case, job.golden, job.actual, None if rule.ratio_level else rule,
                    job.options, job.sum_abs)
        if rule.ratio_level:
            bench = measure(job.case, job.golden, Benchmark(job.benchmark), None,
                            replace(job.options, top=0))
    except MeasureProblem as p:
        return res.problem(p.status, p.detail)
    res.metrics = m
    if rule.ratio_level:
        verdict_ratio(res, m, bench, rule)
    else:
        verdict(res, m, rule)
    if res.status != "pass":
        further_passes(res, job)
    return res


def further_passes(res: OutputResult, job: JudgedOutput) -> None:
    """The passes of an output that did not pass, in this order; each decides whether it
    applies. One more pass is one more line here."""
    too_strict(res, job)
    dtype_hint(res, job)
    diagnosis(res, job)
    heatmap(res, job)


def diagnosis(res: OutputResult, job: JudgedOutput) -> None:
    """The findings of a failing output, best first (``job.diagnose``: the comparison passes
    ``refspec.comparator.diagnosis.diagnose.diagnose_output``, docs/compare.md "Diagnosis")."""
    if job.diagnose is not None and res.status == "fail" and res.metrics is not None:
        res.diagnosis = job.diagnose(job.case, job.golden, job.actual, job.rule)


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


def heatmap(res: OutputResult, job: JudgedOutput) -> None:
    """With ``options.heatmaps``, the 2-D max-badness map of an output that did not pass (one
    more pass that keeps it, over the axes ``options.heatmap_axes`` or the last two)."""
    golden, opts = job.golden, job.options
    if not opts.heatmaps or res.status == "pass":
        return
    ax = heat_axes(golden.shape, golden.axes, opts.heatmap_axes)
    if ax is None:                        # a scalar: no map
        return
    rule = None if job.rule.ratio_level else job.rule
    try:
        m = measure(job.case, golden, job.actual, rule, replace(opts, top=0, heatmaps=False),
                    job.sum_abs, heat=(golden.shape, ax[0], ax[1]))
    except MeasureProblem:
        return
    letters = golden.axis_letters

    def axis(i):
        return letters[i] if letters else f"axis {i}"
    res.metrics.heatmap = m.heatmap
    res.heat_axes = (axis(ax[0]), axis(ax[1])) if ax[1] is not None else ("", axis(ax[0]))


def admits_rounding(rule: Rule, dtype) -> bool:
    """True when the rule accepts every correctly rounded value by construction, so it cannot
    be stricter than the dtype (no second pass needed): bit-identity with the rounded golden,
    a limit that includes half an ulp (rounding gate, hard bound), or rtol >= 2^-(m+1) (half an
    ulp relative to |g| in any binade) with atol >= half the subnormal spacing, on every
    element and without a cap."""
    if rule.bitwise or rule.rounding_gate or rule.hard_bound:
        return True
    if rule.rtol is None or rule.pass_fraction < 1 or rule.max_abs_cap is not None:
        return False
    info = float_info(dtype)
    return rule.rtol >= 2.0 ** -(info.mant + 1) and (rule.atol or 0.0) >= info.tiny_ulp / 2


def too_strict(res: OutputResult, job: JudgedOutput) -> None:
    """A failing output judged again with the elements that equal the golden rounded to the
    output dtype exempt (``Rule.exempt_rounded``): when that passes, every failing element
    is the correctly rounded value, so the standard asks for more than the dtype can hold and
    the status is ``too_strict`` (docs/compare.md, "Too strict"). Not for a rule that admits
    every rounded value (``admits_rounding``) nor the ratio standard."""
    rule = job.rule
    if (res.status != "fail" or rule.ratio_level or rule.exempt_rounded
            or admits_rounding(rule, job.golden.dtype)):
        return
    quiet = replace(job.options, top=0, heatmaps=False)
    exempt = replace(rule, exempt_rounded=True, max_abs_cap=None)
    try:
        again = measure(job.case, job.golden, job.actual, exempt, quiet, job.sum_abs)
    except MeasureProblem:
        return
    m = res.metrics
    rounded = m.failures - again.failures
    ok = passes(again, exempt)
    cap = rule.max_abs_cap
    if ok and cap is not None and m.max_abs is not None and m.max_abs.abs_err > cap:
        # the cap on the max abs error, as an element check on the elements not exempt
        capped = Rule(rule.standard, rtol=0.0, atol=cap, exempt_rounded=True)
        try:
            ok = passes(measure(job.case, job.golden, job.actual, capped, quiet), capped)
        except MeasureProblem:
            ok = False
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


_HINT_SAMPLE = 1 << 16


def dtype_hint(res: OutputResult, job: JudgedOutput) -> None:
    """When a failing float16 output is much closer to the golden with its bits read as
    bfloat16 (or the reverse), say so in ``res.hint``: both are 2 bytes, so a raw file cannot
    tell them apart. Judged on the first elements (at most 2^16), within the twin dtype's
    Ascend numbers. Not for the ratio standard."""
    if res.status != "fail" or job.rule.ratio_level:
        return
    res.hint = _twin_hint(job.actual, job.golden,
                          block_plan(job.golden, job.options.read_elements))


def _twin_hint(actual, golden: GoldenOutput, plan) -> str:
    twin = TWINS.get(golden.dtype_name)
    if twin is None or not plan:
        return ""
    key, flat0, count = plan[0]
    try:
        a = np.ascontiguousarray(actual.read(key, flat0, count)).reshape(-1)[:_HINT_SAMPLE]
        g = np.asarray(golden.exact[key], dtype=np.float64).reshape(-1)[:a.size]
    except Exception:
        return ""

    def close(values, dtype_name):
        tol = 2.0 ** -7 if dtype_name == "bfloat16" else 2.0 ** -10
        with np.errstate(all="ignore"):
            ok = np.abs(values - g) <= tol + tol * np.abs(g)
        return float(np.mean(ok | (np.isnan(values) & np.isnan(g))))

    as_is = close(a.astype(np.float64), golden.dtype_name)
    other = a.view(np.uint16).view(resolve_dtype(twin)).astype(np.float64)
    as_twin = close(other, twin)
    if as_twin >= 0.99 and as_twin > as_is + 0.5:
        return (f"read as {twin}, {as_twin:.0%} of the first {a.size} elements are within "
                f"{twin}'s tolerance (as {golden.dtype_name}: {as_is:.0%}): was {twin} written "
                f"where {golden.dtype_name} is expected?")
    return ""
