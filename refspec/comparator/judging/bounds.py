"""What a rule allows each element of an output (docs/compare.md, "Judging" and "Standards"):
``ElementBounds``, the rule's numbers for one output dtype and K, computed once and read by the
NumPy pass, the compiled pass and the diagnosis alike; ``badness``, |a - g| over what the rule
allows at each numeric element (> 1 fails), in NumPy.

The checks of a ``refspec.comparator.judging.standards.Rule``, with u = ``U_ACC`` (float32
accumulation) and S the sum of |terms| of the element:

- rtol/atol: ``|a - g| <= atol_i + rtol*|g|``, ``atol_i = max(atol, C*sqrt(K)*u*S)`` with
  ``data_atol``;
- the hard bound: ``|a - g| <= gamma(K + TERM_ROUNDINGS)*S + ulp/2
  + (K + TERM_ROUNDINGS)*UNDERFLOW``;
- the rounding gate: ``|a - g| <= ROUNDING_SLACK_U32*u*|g| + ulp/2``;
- the evaluation bound: an element within ``gamma(ELEMENT_ROUNDINGS)*S + ulp/2 +
  ELEMENT_ROUNDINGS*UNDERFLOW`` passes whatever else holds;

the badness of an element is the largest of its ratios to the first three (those that apply),
then the smaller of that and its ratio to the evaluation bound; bit-identity (``bitwise``) and
the exemption of the rounded golden (``exempt_rounded``) compare bits instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .floatinfo import U_ACC, FloatInfo, bits_of, float_info
from .standards import C_REDUCTION, ELEMENT_ROUNDINGS, ROUNDING_SLACK_U32, TERM_ROUNDINGS, \
    UNDERFLOW, Rule

__all__ = ["ElementBounds", "element_bounds", "badness", "admits_rounding",
           "rounding_may_fail", "rounded_counts"]


@dataclass(frozen=True)
class ElementBounds:
    """A rule's numbers for one output: ``rule`` (None: metrics only, every badness 0, as for
    the ratio standard), the output ``dtype`` and its ``info``, ``K`` (reduced terms, at least
    0), ``saturation`` (special values: max-finite accepted where the golden is an infinity),
    and the terms of the bounds (see the module docstring): ``gamma`` = gamma(K +
    TERM_ROUNDINGS), ``underflow`` = (K + TERM_ROUNDINGS) * UNDERFLOW, ``gamma_e`` =
    gamma(ELEMENT_ROUNDINGS), ``c_sqrt_k`` = C*sqrt(K)*u, ``gate_slack`` and
    ``eval_underflow``."""

    rule: Rule | None
    dtype: np.dtype
    info: FloatInfo
    K: int
    saturation: bool
    gamma: float
    underflow: float
    gamma_e: float
    c_sqrt_k: float
    gate_slack: float = ROUNDING_SLACK_U32 * U_ACC
    eval_underflow: float = ELEMENT_ROUNDINGS * UNDERFLOW

    @property
    def counts_rounded(self) -> bool:
        """The pass counts what the too-strict question needs (``Metrics.rounded_failures``):
        the rule may fail a correctly rounded value (``rounding_may_fail``)."""
        return self.rule is not None and rounding_may_fail(self.rule, self.dtype)

    @property
    def needs_expected(self) -> bool:
        """The pass reads the golden rounded to the output dtype."""
        r = self.rule
        return bool(r and (r.bitwise or r.exempt_rounded)) or self.counts_rounded

    @property
    def uses_sum_abs(self) -> bool:
        """The checks read the sums of |terms|."""
        r = self.rule
        return bool(r and (r.data_atol or r.hard_bound or r.eval_bound))


def element_bounds(rule: Rule | None, dtype, K: int | None,
                   saturation: bool = False) -> ElementBounds:
    """The ``ElementBounds`` of ``rule`` for an output of ``dtype`` with ``K`` reduced terms."""
    k0 = max(int(K or 0), 0)
    k = k0 + TERM_ROUNDINGS
    return ElementBounds(
        rule=rule, dtype=np.dtype(dtype), info=float_info(dtype), K=k0, saturation=saturation,
        gamma=k * U_ACC / (1 - k * U_ACC) if k * U_ACC < 1 else math.inf,
        underflow=k * UNDERFLOW,
        gamma_e=ELEMENT_ROUNDINGS * U_ACC / (1 - ELEMENT_ROUNDINGS * U_ACC),
        c_sqrt_k=C_REDUCTION * math.sqrt(k0) * U_ACC)


def admits_rounding(rule: Rule, dtype) -> bool:
    """True when the rule accepts every correctly rounded value by construction, so it cannot
    be stricter than the dtype: bit-identity with the rounded golden, a limit that includes half
    an ulp (rounding gate, hard bound), or rtol >= 2^-(m+1) (half an ulp relative to |g| in any
    binade) with atol >= half the subnormal spacing, on every element and without a cap."""
    if rule.bitwise or rule.rounding_gate or rule.hard_bound:
        return True
    if rule.rtol is None or rule.pass_fraction < 1 or rule.max_abs_cap is not None:
        return False
    info = float_info(dtype)
    return rule.rtol >= 2.0 ** -(info.mant + 1) and (rule.atol or 0.0) >= info.tiny_ulp / 2


def rounding_may_fail(rule: Rule, dtype) -> bool:
    """Whether the too-strict question applies to ``rule`` (docs/compare.md, "Too strict"): it
    may fail a correctly rounded value (``admits_rounding`` False), it is not the ratio
    standard's, and it does not already exempt the rounded golden."""
    return not rule.ratio_level and not rule.exempt_rounded and not admits_rounding(rule, dtype)


def rounded_counts(a, e, ad, bad) -> tuple[int, float]:
    """(elements over the rule whose bits equal the rounded golden, the largest |a - g| of those
    whose bits do not) of numeric elements: ``a`` in the output dtype, ``e`` the rounded golden,
    ``ad`` = |a - g|, ``bad`` their badness."""
    same = bits_of(a) == bits_of(e)
    rest = ad[~same]
    return int(np.count_nonzero(same & (bad > 1.0))), float(rest.max()) if rest.size else 0.0


def badness(bounds: ElementBounds, aeS, ad, ag, ulp, ulps) -> np.ndarray:
    """|a - g| over what ``bounds.rule`` allows, per numeric element (``aeS``: the actual in its
    dtype, the rounded golden, the sums of |terms|; ``ad`` = |a - g|, ``ag`` = |g|, ``ulp`` the
    dtype's spacing at |g|, ``ulps`` = ad / ulp); zeros without a rule."""
    r = bounds.rule
    a, e, S = aeS
    if r is None:
        return np.zeros_like(ad)
    if r.bitwise:
        differ = bits_of(a) != bits_of(e)
        bad = np.zeros_like(ad)
        if differ.any():
            bad[differ] = 1.0 + ulps[differ] + 2.0 ** -10
        return bad
    bad = _tolerance_badness(bounds, r, ad, ag, ulp, S)
    if bad is None:
        return np.zeros_like(ad)
    if r.exempt_rounded:
        bad[bits_of(a) == bits_of(e)] = 0.0
    return bad


def _tolerance_badness(b: ElementBounds, r: Rule, ad, ag, ulp, S):
    """The rule's checks: rtol/atol (atol at least c sqrt(K) u S with ``data_atol``), the hard
    bound, the rounding gate (the largest ratio of those), the evaluation bound (the smaller);
    None when no check applies."""
    bad = None
    with np.errstate(divide="ignore", invalid="ignore"):
        if r.rtol is not None:
            atol = r.atol or 0.0
            if r.data_atol and S is not None:
                atol = np.maximum(atol, b.c_sqrt_k * S)
            tol = ag * r.rtol
            tol += atol
            bad = _ratio(ad, tol)
        if r.hard_bound and S is not None:
            hb = S * b.gamma
            hb += 0.5 * ulp
            hb += b.underflow
            bad = _ratio(ad, hb) if bad is None else np.maximum(bad, _ratio(ad, hb))
        if r.rounding_gate:
            lim = ag * b.gate_slack
            lim += 0.5 * ulp
            rg = _ratio(ad, lim)
            bad = rg if bad is None else np.maximum(bad, rg)
        if r.eval_bound and S is not None and bad is not None:
            eb = S * b.gamma_e
            eb += 0.5 * ulp
            eb += b.eval_underflow
            bad = np.minimum(bad, _ratio(ad, eb))
    return bad


def _ratio(ad, tol):
    out = ad / tol
    out[(ad == 0)] = 0.0
    return out
