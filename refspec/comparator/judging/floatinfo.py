"""Facts about the output dtypes the comparator measures in (docs/compare.md).

Everything here works on float64 arrays: an output dtype is described by its significand bits
and exponent range, so the spacing ("ulp") of that dtype at any float64 value can be computed
without converting to the dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...spec.dtypes import bfloat16, dtype_name

__all__ = ["FloatInfo", "float_info", "ulp_at", "bits_of", "U_ACC"]

#: unit roundoff of float32 accumulation (docs/compare.md, "Judging": u_acc = 2^-24)
U_ACC = 2.0 ** -24


class FloatInfo(NamedTuple):
    """``mant``: explicit significand bits; ``emin``: exponent of the smallest normal;
    ``max``: largest finite value; ``overflow``: the smallest |x| that rounds to infinity
    (round to nearest)."""

    name: str
    mant: int
    emin: int
    max: float
    overflow: float

    @property
    def eps(self) -> float:
        """Spacing at 1.0."""
        return 2.0 ** -self.mant

    @property
    def tiny_ulp(self) -> float:
        """Spacing of the subnormals."""
        return 2.0 ** (self.emin - self.mant)


def _info(name, mant, emin, emax):
    top = (2.0 - 2.0 ** -mant) * 2.0 ** emax
    return FloatInfo(name, mant, emin, top, top + 2.0 ** (emax - mant - 1))


_INFO = {
    np.dtype(np.float16): _info("float16", 10, -14, 15),
    bfloat16: _info("bfloat16", 7, -126, 127),
    np.dtype(np.float32): _info("float32", 23, -126, 127),
    np.dtype(np.float64): FloatInfo("float64", 52, -1022, float(np.finfo(np.float64).max), np.inf),
}


def float_info(dtype) -> FloatInfo:
    """FloatInfo of float16, bfloat16, float32 or float64 (ValueError for anything else)."""
    dt = np.dtype(dtype)
    if dt not in _INFO:
        raise ValueError(f"dtype {dtype_name(dt)} is not a floating dtype the comparator knows "
                         "(float16, bfloat16, float32, float64)")
    return _INFO[dt]


def ulp_at(abs_g: np.ndarray, info: FloatInfo) -> np.ndarray:
    """Spacing of the dtype in the binade of each |g| (float64, non-negative, finite): for
    |g| in [2^e, 2^(e+1)) it is 2^(e - mant), and the subnormal spacing below the normal range.
    Round to nearest puts the dtype value within half of this of g."""
    if info.mant == 52:
        m, e = np.frexp(abs_g)
        e = np.where(abs_g == 0, info.emin + 1, e)
        return np.ldexp(1.0, np.maximum(e - 1, info.emin) - info.mant)
    biased = (np.ascontiguousarray(abs_g, dtype=np.float64).view(np.int64) >> 52) & 0x7FF
    lowest = info.emin + 1023
    np.maximum(biased, lowest, out=biased)
    biased -= info.mant
    return (biased << 52).view(np.float64)


def bits_of(a: np.ndarray) -> np.ndarray:
    """The raw bit patterns of a float array as unsigned integers of the same width."""
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])
