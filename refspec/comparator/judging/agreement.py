"""Element by element: would each element of a kernel's output pass its standard were a candidate
the golden? (docs/compare.md, "Diagnosis"). The checks are the judge's own: a rule's
``bounds.ElementBounds`` and ``bounds.badness`` on the numeric elements, ``special_values`` on the
others (a NaN agrees with NaN, an infinity with the same infinity), applied to a candidate
instead of the golden."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import resolve_dtype, round_to
from .bounds import element_bounds, badness
from .floatinfo import ulp_at
from .special_values import match_special, numeric
from .standards import Rule, element_rule

__all__ = ["agrees", "badness_against"]


def agrees(rule: Rule, dtype: str, K, a: np.ndarray, raw: np.ndarray, g: np.ndarray,
           S: np.ndarray | None) -> np.ndarray:
    """Per element: True where ``a`` (float64; ``raw`` the same values in the output dtype)
    would pass with ``g`` (float64) as the golden, by ``rule`` (the ratio standard's elements by
    the default standard's checks: ``standards.element_rule``); ``S`` the sums of |terms| or
    None."""
    return badness_against(rule, dtype, K, a, raw, g, S) <= 1.0


def badness_against(rule: Rule, dtype: str, K, a: np.ndarray, raw: np.ndarray, g: np.ndarray,
                    S: np.ndarray | None) -> np.ndarray:
    """Per element: |a - g| over what ``rule`` allows were ``g`` the golden (as ``agrees``);
    special values 0 where matched, infinite where not."""
    b = element_bounds(element_rule(rule, dtype, K), resolve_dtype(dtype), K)
    with np.errstate(all="ignore"):
        ag = np.abs(g)
        ok = numeric(a, ag, b.info)
        out = np.zeros(a.shape, np.float64)
        special = ~ok
        matched, _, _ = match_special(a[special], g[special], b.info)
        out[special] = np.where(matched, 0.0, np.inf)
        if ok.any():
            w = np.flatnonzero(ok)
            ad = np.abs(a[w] - g[w])
            ulp = ulp_at(ag[w], b.info)
            ulps = ad / ulp
            e = round_to(g[w], b.dtype) if b.needs_expected else None
            s = S[w] if S is not None and b.uses_sum_abs else None
            out[w] = badness(b, (np.asarray(raw).reshape(-1)[w], e, s), ad, ag[w], ulp, ulps)
    return out
