"""Accuracy findings (docs/compare.md, "Diagnosis"): every failing element within what
rounding in the output's dtype can do (``precision``); the exact value rounded another way
(``rounding``); the bits of the other 16-bit dtype (``dtype``)."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import resolve_dtype, round_to
from ..judging.floatinfo import bits_of, float_info, ulp_at
from ..judging.twins import read_as_twin
from .findings import EXPLAINS, PRECISION_FACTOR, Finding, Subject, share

__all__ = ["precision", "roundings", "twin_dtype"]


def precision(s: Subject, fail: np.ndarray) -> Finding | None:
    """Every failing element within ``PRECISION_FACTOR`` times what rounding in the output's
    dtype allows: half an ulp of the result plus (K + 2) roundings of the sum of |terms| (S; |g|
    when none is known)."""
    a, g = s.a[fail], s.g[fail]
    if not (np.isfinite(a).all() and np.isfinite(g).all()):
        return None
    info = float_info(resolve_dtype(s.dtype))
    u = 2.0 ** -(info.mant + 1)
    scale = np.abs(g) if s.S is None else np.maximum(s.S[fail], np.abs(g))
    bound = PRECISION_FACTOR * (ulp_at(np.abs(g), info) / 2 + ((s.K or 0) + 2) * u * scale)
    err = np.abs(a - g)
    if not (err <= bound).all():
        return None
    ulps = err / ulp_at(np.abs(g), info)
    worst = float(ulps.max())
    of_bound = float((err / bound).max()) * PRECISION_FACTOR
    n = int(fail.sum())
    return Finding("precision", f"floating-point accuracy, not a logic error: the {n} failing "
                   f"elements are at most {worst:.3g} ulps of {s.dtype} off, within "
                   f"{of_bound:.2g}x the rounding error of {s.dtype} arithmetic on their terms",
                   1.0, {"worst_ulps": worst, "of_arithmetic_bound": of_bound,
                         "failing": n, "terms": "sum_abs" if s.S is not None else "golden"})


def roundings(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The kernel's bits equal the exact golden rounded another way: toward zero, half away
    from zero, or twice (through float32 first) instead of once to nearest-even."""
    dt = resolve_dtype(s.dtype)
    if dt == np.float64:
        return []
    nearest = bits_of(round_to(s.g, dt))
    ways = {"toward_zero": _rounded_toward_zero(s.g, dt), "half_away": _rounded_half_away(s.g, dt)}
    if dt.itemsize < 4:
        ways["double"] = round_to(round_to(s.g, np.float32).astype(np.float64), dt)
    mine = bits_of(s.raw)
    out = []
    for mode, values in ways.items():
        bits = bits_of(values)
        differs = bits != nearest
        if differs.sum() < 2:
            continue
        matches = float((mine[differs] == bits[differs]).mean())
        explains = float((mine[fail] == bits[fail]).mean())
        if matches >= EXPLAINS and explains >= EXPLAINS:
            words = {"toward_zero": "truncated (rounded toward zero)",
                     "half_away": "rounded half away from zero",
                     "double": "rounded twice (to float32, then to " + s.dtype + ")"}[mode]
            out.append(Finding("rounding", f"the values are the exact result {words} instead of "
                               f"to nearest-even: {share(matches)} of the {int(differs.sum())} "
                               "elements where the two differ", explains,
                               {"mode": mode, "elements": int(differs.sum())}))
    return out


def _rounded_toward_zero(g: np.ndarray, dt) -> np.ndarray:
    """g rounded toward zero to ``dt``: the nearest value, stepped back one place where it lies
    farther from zero than g."""
    r = round_to(g, dt)
    with np.errstate(all="ignore"):
        r64 = r.astype(np.float64)
        over = np.isfinite(r64) & (np.abs(r64) > np.abs(g))
    step = _step_in(r)
    r = r.copy()
    r[over] = step[over]
    return r


def _rounded_half_away(g: np.ndarray, dt) -> np.ndarray:
    """g rounded to nearest with ties away from zero."""
    r = round_to(g, dt)
    r64 = r.astype(np.float64)
    away = _step_out(r)
    with np.errstate(all="ignore"):
        tie = (np.abs(np.abs(away.astype(np.float64) - g) - np.abs(r64 - g)) == 0) & \
              (np.abs(away.astype(np.float64)) > np.abs(r64))
    r = r.copy()
    r[tie] = away[tie]
    return r


def _step_in(r: np.ndarray) -> np.ndarray:
    """One place toward zero (any float dtype, by its bits)."""
    b = bits_of(r).copy()
    nz = (b & ~_sign_mask(b.dtype)) != 0
    b[nz] -= 1
    return b.view(r.dtype)


def _step_out(r: np.ndarray) -> np.ndarray:
    """One place away from zero (any float dtype, by its bits)."""
    b = bits_of(r).copy() + 1
    return b.view(r.dtype)


def _sign_mask(dt) -> int:
    return dt.type(1 << (dt.itemsize * 8 - 1))


def twin_dtype(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The other 16-bit dtype: the kernel's bits are its (``refspec.comparator.judging.twins``,
    the test of the judge's hint), and read as it they explain the failing elements."""
    reading = read_as_twin(s.raw, s.g, s.dtype)
    if reading is None or not reading.holds:
        return []
    twin, overall = reading.twin, reading.share
    explains = float(reading.agree[fail].mean())
    if explains < EXPLAINS:
        return []
    return [Finding("dtype", f"the bits are {twin}: read as {twin}, {share(overall)} of the "
                    f"elements agree with the golden (was {twin} written where {s.dtype} is "
                    "expected?)", explains, {"as": twin, "elements": round(overall, 6)})]
