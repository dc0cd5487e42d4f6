"""The 8-bit dtypes of quantised KV caches: int8 codes, float8_e4m3fn and float8_e5m2
(``ml_dtypes``), and HiFloat8, which no library here provides (docs/kv_rms_norm_rope_cache.md §5).

Each is reached from an exact float64 value by one rounding followed by saturation at the
format's largest finite value (errata E33): int8 ``clamp(rint(x), -128, 127)`` (half to even,
errata E28); the float8 formats to nearest, ties to even, at their own precision; HiFloat8 to
nearest, ties away from zero (the format's conversion rule). ``round_code`` does the rounding,
``decode`` gives the float64 value of a code.

HiFloat8 (Luo et al., "Ascend HiFloat8 Format for Deep Learning", 2024) is a tapered format.
After the sign bit a prefix-coded *dot* field says how wide the exponent field is: ``11`` 4
bits, ``10`` 3, ``01`` 2, ``001`` 1, ``0001`` none (exponent 0), ``0000`` the denormal mode.
An exponent field of d >= 1 bits is sign-magnitude with an implicit leading magnitude bit: its
first bit is the exponent's sign, the other d-1 bits follow the implicit 1, so d bits give the
exponents +-2^(d-1) .. +-(2^d - 1). The bits left are the mantissa: 3 for |E| <= 3, 2 for
4 <= |E| <= 7, 1 for 8 <= |E| <= 15. The denormal mode's 3 bits m give 2^(m-23) (m = 1..7);
0x00 is zero, 0x80 NaN (there is no negative zero) and 0x6F/0xEF are +-infinity (the code of
1.5 * 2^15), so the largest finite value is 2^15. NumPy holds HiFloat8 as the one-field
structured dtype ``hifloat8`` whose field is the code byte (``codes.view(np.uint8)``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["int8", "float8_e4m3fn", "float8_e5m2", "hifloat8", "QUANT_DTYPES", "QUANT_NAMES",
           "HIF8_MAX", "is_quant_dtype", "hifloat8_values", "decode", "round_value", "round_code"]

int8 = np.dtype(np.int8)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
#: HiFloat8 codes: a structured dtype of one uint8 field, so that it cannot pass for integers
hifloat8 = np.dtype([("hifloat8", np.uint8)])

#: the quantised cache dtypes, by the names the documents use
QUANT_NAMES = {int8: "int8", float8_e4m3fn: "float8_e4m3fn", float8_e5m2: "float8_e5m2",
               hifloat8: "hifloat8"}
QUANT_DTYPES = tuple(QUANT_NAMES)
HIF8_MAX = 2.0 ** 15

#: (mantissa bits as a function of the exponent, smallest exponent of the grid, largest finite
#: value, ties away from zero) of each float format
_FLOAT8 = {float8_e4m3fn: (lambda e: np.full_like(e, 3), -6, 448.0, False),
           float8_e5m2: (lambda e: np.full_like(e, 2), -14, 57344.0, False),
           hifloat8: (lambda e: np.select([e <= -16, np.abs(e) <= 3, np.abs(e) <= 7], [0, 3, 2], 1),
                      -22, HIF8_MAX, True)}


def is_quant_dtype(dtype) -> bool:
    """Whether ``dtype`` is one of the four quantised cache dtypes."""
    try:
        return np.dtype(dtype) in QUANT_NAMES
    except TypeError:
        return False


def _hifloat8_table() -> np.ndarray:
    """The float64 value of each of the 256 codes, from the bit fields (module docstring)."""
    values = np.empty(256)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        bits = code & 0x7F
        if bits >> 5 == 0b11:
            width, rest = 4, 5
        elif bits >> 5 == 0b10:
            width, rest = 3, 5
        elif bits >> 5 == 0b01:
            width, rest = 2, 5
        elif bits >> 4 == 0b001:
            width, rest = 1, 4
        elif bits >> 3 == 0b0001:
            width, rest = 0, 3
        else:                                        # 0000: denormal mode
            m = bits & 0b111
            values[code] = (np.nan if code == 0x80 else 0.0) if m == 0 else sign * 2.0 ** (m - 23)
            continue
        mbits = rest - width
        field = (bits >> mbits) & ((1 << width) - 1)
        exponent = 0
        if width:
            magnitude = (1 << (width - 1)) | (field & ((1 << (width - 1)) - 1))
            exponent = -magnitude if field >> (width - 1) else magnitude
        mantissa = bits & ((1 << mbits) - 1)
        values[code] = sign * (1 + mantissa / (1 << mbits)) * 2.0 ** exponent
    values[[0x6F, 0xEF]] = np.inf, -np.inf
    return values


_HIF8 = _hifloat8_table()
#: the finite non-negative values of codes 0x00-0x7F, ascending, and their codes
_HIF8_ORDER = np.argsort(np.where(np.isfinite(_HIF8[:128]), _HIF8[:128], np.inf), kind="stable")[:127]
_HIF8_SORTED = _HIF8[_HIF8_ORDER]


def hifloat8_values() -> np.ndarray:
    """The float64 values of the 256 HiFloat8 codes (a copy; NaN at 0x80, +-inf at 0x6F/0xEF)."""
    return _HIF8.copy()


def decode(codes) -> np.ndarray:
    """float64 values of an array of one of the quantised dtypes (exact)."""
    a = np.asarray(codes)
    if a.dtype == hifloat8:
        return _HIF8[a.view(np.uint8)]
    return a.astype(np.float64)


def round_value(x, dtype, rounding: str = "nearest", saturate: bool = True) -> np.ndarray:
    """The float64 value ``x`` rounds to in ``dtype`` (saturated; NaN stays NaN, int8 takes 0
    for NaN): the one rounding of the module docstring. The diagnosis asks for the roundings a
    mistaken kernel does instead (docs/compare.md, "Diagnosis"): ``rounding="toward_zero"``
    truncates (int8 ``trunc``, the float formats' quantum dropped); ``saturate=False`` lets a
    value beyond the format wrap or overflow: int8 codes wrap modulo 256 (two's complement),
    a float format's value becomes its infinity (NaN in float8_e4m3fn, which has none)."""
    if rounding not in ("nearest", "toward_zero"):
        raise ValueError(f"rounding {rounding!r}: allowed are 'nearest', 'toward_zero'")
    x = np.asarray(x, dtype=np.float64)
    dt = np.dtype(dtype)
    if dt == int8:
        if rounding != "nearest" or not saturate:
            return _int8_otherwise(x, rounding, saturate)
        return np.clip(np.nan_to_num(np.rint(x), nan=0.0), -128.0, 127.0)
    mant, emin, top, away = _FLOAT8[dt]
    a = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        _, e = np.frexp(a)
        e = np.maximum(e - 1, emin)                  # the binade of a, at least the grid's lowest
        quantum = np.ldexp(1.0, e - mant(e))
        n = a / quantum                              # exact: a power-of-two scaling
        if rounding == "toward_zero":
            n = np.trunc(n)
        else:
            n = np.floor(n + 0.5) if away else np.rint(n)
        r = np.minimum(n * quantum, top)             # saturation at the largest finite value
        if not saturate:                             # (an overflow instead)
            r = np.where(n * quantum > top, np.nan if dt == float8_e4m3fn else np.inf, r)
    r = np.where(np.isnan(x), np.nan, np.copysign(r, x))
    if dt == hifloat8:
        r = r + 0.0                                  # HiFloat8 has no negative zero
    return r


def _int8_otherwise(x: np.ndarray, rounding: str, saturate: bool) -> np.ndarray:
    """int8 codes truncated (``rounding="toward_zero"``) and wrapped modulo 256 (two's
    complement, ``saturate=False``) or saturated."""
    r = np.nan_to_num(np.trunc(x) if rounding == "toward_zero" else np.rint(x), nan=0.0)
    if saturate:
        return np.clip(r, -128.0, 127.0)
    with np.errstate(invalid="ignore"):
        return np.mod(np.clip(r, -2.0 ** 62, 2.0 ** 62) + 128.0, 256.0) - 128.0


def round_code(x, dtype, rounding: str = "nearest", saturate: bool = True) -> np.ndarray:
    """``x`` (float64) rounded once into ``dtype`` (``round_value``'s ``rounding`` and
    ``saturate``): the array of codes."""
    dt = np.dtype(dtype)
    r = round_value(x, dt, rounding, saturate)
    if dt != hifloat8:
        return r.astype(dt)                          # exact: r is a value of the format
    mag = np.abs(r)
    pos = np.searchsorted(_HIF8_SORTED, np.where(np.isnan(mag), 0.0, mag))
    codes = _HIF8_ORDER[np.minimum(pos, len(_HIF8_ORDER) - 1)].astype(np.uint8)
    codes[np.isinf(mag)] = 0x6F                      # (an overflow, saturate=False)
    codes |= np.where(r < 0, 0x80, 0).astype(np.uint8)
    codes[np.isnan(r)] = 0x80
    return codes.view(hifloat8)
