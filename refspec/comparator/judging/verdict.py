"""Verdicts from metrics (docs/compare.md, "Judging" and "Standards"): ``verdict`` follows a
rule's aggregation (every element, or a pass fraction with special values all matched and a cap
on the max abs error); ``verdict_ratio`` the dual-benchmark ratios of the ``ratio`` standard.
Each sets the status, reason and message of an ``OutputResult``."""

from __future__ import annotations

import math

from .metrics import Metrics
from .outcomes import OutputResult
from .standards import RATIO_LEVELS, RATIO_SMALL_COUNT, Rule

__all__ = ["verdict", "verdict_ratio", "passes", "ratios"]


def worst_line(res: OutputResult, m: Metrics) -> str:
    """The message's line: the worst element, or the output and its context."""
    if m.worst:
        return res.element_line(m.worst[0])
    return f"{res.output} [{res.context}]"


def passes(m: Metrics, rule: Rule) -> bool:
    """Whether metrics ``m`` pass ``rule``: no element over it (``pass_fraction`` 1), or at
    most the allowed fraction with every special value matched; and the max abs error within
    the rule's cap."""
    if rule.pass_fraction >= 1:
        ok = m.failures == 0
    else:
        allowed = math.floor((1 - rule.pass_fraction) * m.n + 1e-9)
        ok = m.failures <= allowed and m.nan_mismatches + m.inf_mismatches == 0
    return ok and not _cap_hit(m, rule)


def _cap_hit(m: Metrics, rule: Rule) -> bool:
    return (rule.max_abs_cap is not None and m.max_abs is not None
            and m.max_abs.abs_err > rule.max_abs_cap)


def verdict(res: OutputResult, m: Metrics, rule: Rule) -> None:
    """The status (``passes``), the reason (how many elements are within the rule, or what
    fails) and the message (the worst element) of an output judged by ``rule``."""
    n = m.n
    special = m.nan_mismatches + m.inf_mismatches
    cap_hit = _cap_hit(m, rule)
    ok = passes(m, rule)
    res.status = "pass" if ok else "fail"
    what = "bit-identical" if rule.bitwise else "within tolerance"
    if ok:
        if m.failures:
            res.reason = (f"{n - m.failures} of {n} elements {what} "
                          f"({1 - m.mismatch_fraction:.2%} >= {rule.pass_fraction:.0%})")
        else:
            res.reason = f"all {n} elements {what}" + (
                f" ({m.n_special_matched} NaN/Inf matched)" if m.n_special_matched else "")
        res.message = ""
        return
    parts = []
    if m.failures:
        parts.append(f"{m.failures} of {n} elements ({m.mismatch_fraction:.3%}) not {what}")
    if special:
        parts.append(f"{m.nan_mismatches} NaN and {m.inf_mismatches} Inf mismatches")
    if cap_hit:
        parts.append(f"max abs error {m.max_abs.abs_err:.3g} > cap {rule.max_abs_cap:g}")
    res.reason = "; ".join(parts)
    res.message = worst_line(res, m)


def verdict_ratio(res: OutputResult, m: Metrics, b: Metrics, rule: Rule) -> None:
    """The ``ratio`` standard: the device's max relative error, mean relative error, RMSE and
    small-value errors over the benchmark's ``b`` within the level's thresholds, and no
    special-value mismatch."""
    r = ratios(m, b, rule.ratio_level)
    res.ratio = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v))
                 for k, v in r.items()}
    over = [f"{k} ratio {r[k]:.3g} > {r['thresholds'][k]:g}"
            for k in ("max_rel", "mean_rel", "rmse", "small_errors") if r[k] > r["thresholds"][k]]
    special = m.nan_mismatches + m.inf_mismatches
    if special:
        over.append(f"{m.nan_mismatches} NaN and {m.inf_mismatches} Inf mismatches")
    if not over:
        res.status = "pass"
        res.reason = (f"device/benchmark ratios within {rule.ratio_level}: max-rel "
                      f"{r['max_rel']:.3g}, mean-rel {r['mean_rel']:.3g}, RMSE {r['rmse']:.3g}")
        return
    res.status = "fail"
    res.reason = f"{rule.ratio_level}: " + "; ".join(over)
    res.message = f"{worst_line(res, m)}; {res.reason}"


def ratios(m: Metrics, b: Metrics, level: str) -> dict:
    """Device/benchmark ratios of each metric, the metrics themselves and the level's
    thresholds (the report's ``ratio``)."""
    t_max, t_mean, t_rmse = RATIO_LEVELS[level]
    return {"level": level,
            "max_rel": _ratio(m.max_rel, b.max_rel), "mean_rel": _ratio(m.mean_rel, b.mean_rel),
            "rmse": _ratio(m.rmse, b.rmse),
            "small_errors": _ratio(m.small_errors, b.small_errors),
            "device": {"max_rel": m.max_rel, "mean_rel": m.mean_rel, "rmse": m.rmse,
                       "small_errors": m.small_errors},
            "benchmark": {"max_rel": b.max_rel, "mean_rel": b.mean_rel, "rmse": b.rmse,
                          "small_errors": b.small_errors},
            "thresholds": {"max_rel": t_max, "mean_rel": t_mean, "rmse": t_rmse,
                           "small_errors": RATIO_SMALL_COUNT}}


def _ratio(dev, bench):
    dev = dev or 0.0
    bench = bench or 0.0
    if bench > 0:
        return dev / bench
    return 0.0 if dev == 0 else math.inf
