"""Special values, matched in one place (docs/compare.md, "Judging"): an element is special when
the actual is NaN or an infinity, or the golden rounds to an infinity in the output dtype; it is
judged by position, not by its error. NaN matches NaN whatever its sign or payload, +Inf only
+Inf; with ``saturation`` a max-finite value is accepted where the golden is an infinity of the
same sign (both sides clipped to the finite range)."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import round_to
from .floatinfo import FloatInfo

__all__ = ["numeric", "match_special", "add_special"]


def numeric(a64: np.ndarray, ag: np.ndarray, info: FloatInfo) -> np.ndarray:
    """Per element: not special (``a64`` the actual as float64, ``ag`` = |golden|)."""
    out = np.isfinite(a64)
    out &= ag < info.overflow
    return out


def match_special(a: np.ndarray, g: np.ndarray, info: FloatInfo, saturation: bool = False,
                  dtype=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(matched, NaN mismatch, the golden as the dtype stores it) of special elements: ``a``
    the actual and ``g`` the exact golden (float64); ``dtype`` the output dtype (for
    ``saturation``). An element that is neither matched nor a NaN mismatch is an Inf
    mismatch."""
    gs = g.copy()
    big = np.abs(gs) >= info.overflow
    gs[big] = np.copysign(np.inf, gs[big])
    a_nan, g_nan = np.isnan(a), np.isnan(gs)
    matched = (a_nan & g_nan) | (a == gs)
    if saturation:
        e = round_to(gs, dtype).astype(np.float64)
        ac = np.clip(a, -info.max, info.max)
        ec = np.clip(e, -info.max, info.max)
        matched |= (ac == ec) & (np.abs(ac) == info.max)
    return matched, a_nan ^ g_nan, gs


def add_special(bounds, acc, flat0: int, where: np.ndarray, a: np.ndarray, g: np.ndarray) -> None:
    """The special elements at positions ``where`` of a block (``a`` and ``g`` their values)
    matched under ``bounds`` (an ``ElementBounds``) and added to the accumulator ``acc``."""
    matched, nan_mismatch, gs = match_special(a, g, bounds.info, bounds.saturation, bounds.dtype)
    acc.add_special(flat0, where, a, gs, matched, nan_mismatch)
