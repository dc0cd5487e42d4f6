"""The plain-NumPy oracle of the fused pass (docs/compare.md, "Judging"): the tests hold
``refspec.comparator.fused.fused_block`` to it (tests/comparator/test_compare_fast.py), and
``refspec.compare(..., fast=False)`` judges every block by it.

Each block goes in cache-sized steps of ``COMPUTE_ELEMENTS``: the special values (NaN or an
infinity in the actual, a golden that rounds to an infinity) to ``BlockJudge.special``, the
numeric ones to the badness of the rule's checks in whole-array NumPy operations and
``Accumulator.add_numeric``. The product uses it for one more thing: a block with more special
values than the fused pass lists (``FusedBlock.SPECIAL_CAP``) is judged here.
"""

from __future__ import annotations

import numpy as np

from .floatinfo import U_ACC, bits_of, ulp_at
from .standards import ELEMENT_ROUNDINGS, ROUNDING_SLACK_U32, UNDERFLOW
from .streaming import COMPUTE_ELEMENTS

__all__ = ["block_reference", "badness"]


def block_reference(bj, flat0, a, g, e, S) -> None:
    """One block under the ``BlockJudge`` ``bj`` (flattened, C order from ``flat0``: a in the
    output dtype, g exact float64, e the golden rounded to the output dtype, S sum of
    |terms|), in cache-sized steps."""
    bj.acc.count(a.size)
    for lo in range(0, a.size, COMPUTE_ELEMENTS):
        hi = min(lo + COMPUTE_ELEMENTS, a.size)
        _step(bj, flat0 + lo, a[lo:hi], g[lo:hi], None if e is None else e[lo:hi],
              None if S is None else S[lo:hi])


def _step(bj, flat0, a, g, e, S) -> None:
    info = bj.info
    a64 = a.astype(np.float64)
    ag = np.abs(g)
    numeric = np.isfinite(a64)
    numeric &= ag < info.overflow
    if numeric.all():
        where = None
    else:
        where = np.flatnonzero(numeric)
        special = np.flatnonzero(~numeric)
        bj.special(flat0, special, a64[special], g[special])
        a64, g, ag = a64[where], g[where], ag[where]
        a = a[where]
        e = None if e is None else e[where]
        S = None if S is None else S[where]
    ad = np.abs(a64 - g)
    ulp = ulp_at(ag, info)
    ulps = ad / ulp
    bad = badness(bj, (a, e, S), ad, ag, ulp, ulps)
    bj.acc.add_numeric(flat0, where, a64, g, ad, ag, ulps, bad)


def badness(bj, aeS, ad, ag, ulp, ulps) -> np.ndarray:
    """|a - g| over what ``bj.rule`` allows, per numeric element (``aeS``: the actual in its
    dtype, the rounded golden, the sums of |terms|); zeros without a rule."""
    r = bj.rule
    a, e, S = aeS
    if r is None:
        return np.zeros_like(ad)
    if r.bitwise:
        differ = bits_of(a) != bits_of(e)
        bad = np.zeros_like(ad)
        if differ.any():
            bad[differ] = 1.0 + ulps[differ] + 2.0 ** -10
        return bad
    bad = _tolerance_badness(bj, r, ad, ag, ulp, S)
    if bad is None:
        return np.zeros_like(ad)
    if r.exempt_rounded:
        bad[bits_of(a) == bits_of(e)] = 0.0
    return bad


def _tolerance_badness(bj, r, ad, ag, ulp, S):
    """The rule's checks: rtol/atol (atol at least c sqrt(K) u S with ``data_atol``), the hard
    bound, the rounding gate (the largest ratio of those), the evaluation bound (the smaller);
    None when no check applies."""
    bad = None
    with np.errstate(divide="ignore", invalid="ignore"):
        if r.rtol is not None:
            atol = r.atol or 0.0
            if r.data_atol and S is not None:
                atol = np.maximum(atol, bj.c_sqrt_k * S)
            tol = ag * r.rtol
            tol += atol
            bad = _ratio(ad, tol)
        if r.hard_bound and S is not None:
            hb = S * bj.gamma
            hb += 0.5 * ulp
            hb += bj.underflow
            bad = _ratio(ad, hb) if bad is None else np.maximum(bad, _ratio(ad, hb))
        if r.rounding_gate:
            lim = ag * (ROUNDING_SLACK_U32 * U_ACC)
            lim += 0.5 * ulp
            rg = _ratio(ad, lim)
            bad = rg if bad is None else np.maximum(bad, rg)
        if r.eval_bound and S is not None and bad is not None:
            eb = S * bj.gamma_e
            eb += 0.5 * ulp
            eb += ELEMENT_ROUNDINGS * UNDERFLOW
            bad = np.minimum(bad, _ratio(ad, eb))
    return bad


def _ratio(ad, tol):
    out = ad / tol
    out[(ad == 0)] = 0.0
    return out
