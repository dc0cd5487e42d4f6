"""Quantised codes (docs/compare.md, "Quantised codes"): the int8, float8_e4m3fn, float8_e5m2 and
HiFloat8 codes a kernel writes, judged against the exact value before quantisation.

The golden stores, per written element, the exact value x before the one rounding (``x*scale +
offset``, or ``x/scale + offset``) and S, the sum of the absolute terms of the arithmetic that
makes it. A float32 kernel computes x to within ``e = gamma(K + QUANT_ROUNDINGS) * S``
(``standards.QUANT_ROUNDINGS``; K the terms of a reduction, 0 for none), so any code that
rounds a value of ``[x - e, x + e]`` is one it may write: the exact value's code, or, where x lies
within e of a rounding boundary, the neighbouring code (counted as ``boundary``). Rounding is
monotonic, so those codes are exactly the ones between ``round(x - e)`` and ``round(x + e)``;
saturation is exact, since beyond the largest finite value both ends round to it.

Each element's badness is 0 for the exact value's code, else the distance of x from the boundary
between the two codes (their midpoint) over e: at most 1 for an allowed neighbour, above 1
otherwise. Its "ulps" are codes apart (positions in the format's ordered values).
"""

from __future__ import annotations

import numpy as np

from ...spec.quant_dtypes import decode, round_value
from .standards import QUANT_ROUNDINGS

__all__ = ["code_positions", "arithmetic_error", "judge_codes"]

#: float32's unit roundoff
U32 = 2.0 ** -24


def _ordered_values(dtype) -> np.ndarray:
    """The distinct values of the format's 256 codes, ascending (NaN left out, one zero)."""
    values = decode(np.arange(256, dtype=np.uint8).view(np.dtype(dtype)))
    return np.unique(values[~np.isnan(values)])


def code_positions(values: np.ndarray, dtype) -> np.ndarray:
    """The position of each value among the format's ordered values (float64; NaN for NaN), so
    that neighbouring codes are one apart."""
    table = _ordered_values(dtype)
    pos = np.searchsorted(table, np.where(np.isnan(values), 0.0, values)).astype(np.float64)
    return np.where(np.isnan(values), np.nan, pos)


def arithmetic_error(S, K: int | None, n: int) -> np.ndarray:
    """``gamma(K + QUANT_ROUNDINGS) * S`` per element (0 where no S is stored)."""
    if S is None:
        return np.zeros(n)
    k = (K or 0) + QUANT_ROUNDINGS
    return k * U32 / (1 - k * U32) * np.asarray(S, dtype=np.float64)


def judge_codes(acc, flat: np.ndarray, codes: np.ndarray, x: np.ndarray, S, K: int | None) -> int:
    """The codes ``codes`` (their own dtype) written at the flat offsets ``flat``, against the
    exact values ``x`` before quantisation with their sums of |terms| ``S`` (None: none), into
    the accumulator ``acc``; returns how many take the neighbouring code at a rounding boundary
    (the ``boundary`` count). A NaN or infinite code counts as a NaN or Inf mismatch."""
    dtype = codes.dtype
    a = decode(codes)
    x = np.asarray(x, dtype=np.float64)
    acc.count(a.size)
    e = arithmetic_error(S, K, a.size)
    c = round_value(x, dtype)                       # the exact value's code
    lo, hi = round_value(x - e, dtype), round_value(x + e, dtype)
    finite = np.isfinite(a)
    equal = a == c
    with np.errstate(divide="ignore", invalid="ignore"):
        allowed = equal | ((a >= lo) & (a <= hi))
        bad = np.abs(x - (a + c) / 2) / e
    bad = np.where(equal, 0.0, np.where(allowed, np.minimum(bad, 1.0),
                                        np.maximum(np.nan_to_num(bad, nan=np.inf),
                                                   np.nextafter(1.0, 2.0))))
    boundary = int(np.count_nonzero(allowed & ~equal & finite))
    _special(acc, flat, a, x, finite)
    keep = np.flatnonzero(finite)
    a, x, bad, c = a[keep], x[keep], bad[keep], c[keep]
    ulps = np.abs(code_positions(a, dtype) - code_positions(c, dtype))
    ad = np.abs(a - x)
    acc.add_numeric(0, flat[keep], a, x, ad, np.abs(x), ulps, bad)
    return boundary


def _special(acc, flat, a, x, finite) -> None:
    """NaN and infinite codes (HiFloat8's and float8_e5m2's infinities, the float formats' NaN):
    the golden is finite, so each is a NaN or Inf mismatch."""
    bad = np.flatnonzero(~finite)
    if bad.size:
        acc.add_special(0, flat[bad], a[bad], x[bad], np.zeros(bad.size, bool), np.isnan(a[bad]))
