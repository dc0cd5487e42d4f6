"""Dtypes: what the operators accept, exact widening, and correct rounding (docs/rope.md §6).

The spec computes in float64 on the exact input values and rounds each output once,
round-half-to-even (errata E12), to the dtype the operator documents. The 8-bit dtypes of
quantised caches (int8, float8_e4m3fn, float8_e5m2, HiFloat8) are reached by their own one
rounding with saturation (``refspec.spec.quant_dtypes``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import quant_dtypes
from .errors import ParamInvalidError

__all__ = [
    "bfloat16",
    "DEVICE_DTYPES",
    "MATH_DTYPES",
    "dtype_name",
    "widen",
    "resolve_dtype",
    "to_float64",
    "round_to",
    "round_to_odd_float32",
]

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

#: dtypes a device accepts for the operators' floating tensors.
DEVICE_DTYPES = (float16, bfloat16, float32)
#: dtypes the math-only profile (``soc=None``) accepts as well.
MATH_DTYPES = DEVICE_DTYPES + (float64,)

_NAMES = {float16: "float16", bfloat16: "bfloat16", float32: "float32", float64: "float64",
          **quant_dtypes.QUANT_NAMES}


def dtype_name(dtype) -> str:
    """'float16', 'bfloat16', 'float32', 'float64' (or NumPy's own name for anything else)."""
    dt = np.dtype(dtype)
    name = _NAMES.get(dt)
    return dt.name if name is None else name      # (dt.name alone costs ~10 us)


def resolve_dtype(dtype) -> np.dtype:
    """Turn a name ('bfloat16', 'bf16', 'fp32', ...) or a dtype-like into a NumPy dtype."""
    aliases = {"bf16": bfloat16, "bfloat16": bfloat16, "fp16": float16, "half": float16,
               "float16": float16, "fp32": float32, "float": float32, "float32": float32,
               "fp64": float64, "double": float64, "float64": float64}
    if isinstance(dtype, str) and dtype.lower() in aliases:
        return aliases[dtype.lower()]
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ParamInvalidError(f"dtype {dtype!r} is not a dtype; allowed: "
                                f"{', '.join(_NAMES[d] for d in MATH_DTYPES)}") from exc
    if dt not in MATH_DTYPES:
        raise ParamInvalidError(f"dtype {dtype_name(dt)} is not allowed; allowed: "
                                f"{', '.join(_NAMES[d] for d in MATH_DTYPES)}")
    return dt


def to_float64(a: np.ndarray) -> np.ndarray:
    """Widen exactly to float64 (every value of the float dtypes and of the quantised cache
    dtypes is a float64 value; HiFloat8 codes are decoded)."""
    a = np.asarray(a)
    if a.dtype == quant_dtypes.hifloat8:
        return quant_dtypes.decode(a)
    return a.astype(np.float64, copy=False)


def widen(arrays: dict, dtype=np.float64) -> dict:
    """Each array of ``arrays`` converted to the wider ``dtype`` (exact; None stays None)."""
    return {k: None if v is None else np.asarray(v).astype(dtype, copy=False)
            for k, v in arrays.items()}


def round_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd: truncate toward zero, set the last bit if inexact.

    Rounding to odd keeps enough information that a second rounding to a format with at least
    two fewer significand bits (bfloat16 has 8 against float32's 24) is correctly rounded.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        near = x.astype(np.float32)                   # round to nearest (infinity on overflow)
    back = near.astype(np.float64)
    inexact = back != x
    inexact &= x == x                                 # NaN stays as converted
    # rounded away from zero: above x where x is positive, below it where negative
    overshoot = np.greater(back, x)
    overshoot ^= np.signbit(x)
    overshoot &= inexact
    bits = near.view(np.uint32)
    # toward zero: the neighbour of smaller magnitude, whose sign-magnitude pattern is one less
    # (infinity -> the largest finite value; an overshoot is never a zero)
    bits -= overshoot
    bits |= inexact                                   # odd if inexact
    return near


def round_to(x: np.ndarray, dtype) -> np.ndarray:
    """Round float64 values once, to nearest with ties to even, to ``dtype``.

    float32 and float16 conversions of NumPy are single correct roundings. Going float64 ->
    float32 -> bfloat16 rounds twice (1 + 2^-8 + 2^-30 would become 1, not 1 + 2^-7), and older
    ml_dtypes releases convert float64 that way, so bfloat16 is reached through float32 rounded
    to odd, which is correct whatever the ml_dtypes version. The quantised cache dtypes (int8,
    float8_e4m3fn, float8_e5m2, hifloat8) get their own rounding with saturation
    (``refspec.spec.quant_dtypes.round_code``).
    """
    if quant_dtypes.is_quant_dtype(dtype):
        return quant_dtypes.round_code(x, dtype)
    dt = resolve_dtype(dtype)
    x = np.asarray(x, dtype=np.float64)
    if dt == bfloat16:
        return round_to_odd_float32(x).astype(bfloat16)
    with np.errstate(over="ignore"):
        return x.astype(dt, copy=False)
