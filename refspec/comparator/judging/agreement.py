"""Element by element: would each element of a kernel's output pass its standard were a
candidate the golden? (docs/compare.md, "Diagnosis"). The checks are the judge's own
(``Rule``'s badness as ``refspec.comparator.oracle.badness`` computes it), applied to a candidate instead of
the golden; special values agree when they are the same (NaN with NaN, an infinity with the same
infinity)."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import resolve_dtype, round_to
from .floatinfo import float_info, ulp_at
from .compiled_blocks import BlockJudge
from .metrics import Accumulator
from .numpy_pass import badness as oracle_badness
from .standards import SMALL_VALUES, STANDARDS, Rule

__all__ = ["agrees", "badness"]


def _element_rule(rule: Rule, dtype: str, K) -> Rule:
    """The ratio standard judges whole outputs, not elements: its elements are held to the
    default standard's checks."""
    if rule.ratio_level:
        return STANDARDS["default"].rule(dtype, "elementwise" if not K else "reduction", K)
    return rule


def badness(rule: Rule, dtype: str, K, a: np.ndarray, raw: np.ndarray, g: np.ndarray,
            S: np.ndarray | None) -> np.ndarray:
    """|a - g| over what ``rule`` allows at each numeric element (> 1 fails); ``a`` float64,
    ``raw`` the same values in the output dtype, ``g`` the candidate golden (float64)."""
    dt = resolve_dtype(dtype)
    judge = BlockJudge(_element_rule(rule, dtype, K), dt, K,
                       Accumulator(SMALL_VALUES.get(dtype, SMALL_VALUES["float32"]), 0))
    info = float_info(dt)
    ag = np.abs(g)
    ad = np.abs(a - g)
    ulp = ulp_at(ag, info)
    with np.errstate(all="ignore"):
        ulps = ad / ulp
    e = round_to(g, dt) if judge.needs_expected else None
    return oracle_badness(judge, (raw, e, S if judge.uses_sum_abs else None), ad, ag, ulp, ulps)


def agrees(rule: Rule, dtype: str, K, a: np.ndarray, raw: np.ndarray, g: np.ndarray,
           S: np.ndarray | None) -> np.ndarray:
    """Per element: True where ``a`` would pass with ``g`` as the golden."""
    info = float_info(resolve_dtype(dtype))
    with np.errstate(all="ignore"):
        numeric = np.isfinite(a) & (np.abs(g) < info.overflow)
        out = np.zeros(a.shape, bool)
        special = ~numeric
        gs = np.where(np.abs(g) >= info.overflow, np.copysign(np.inf, g), g)
        out[special] = (np.isnan(a[special]) & np.isnan(gs[special])) | (a[special] == gs[special])
        if numeric.any():
            w = np.flatnonzero(numeric)
            bad = badness(rule, dtype, K, a[w], np.asarray(raw).reshape(-1)[w], g[w],
                          None if S is None else S[w])
            out[w] = bad <= 1.0
    return out
