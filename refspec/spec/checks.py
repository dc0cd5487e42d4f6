"""Argument checks shared by both operators' validation (docs/rope.md §5,
docs/norm_rope_concat.md §3).

Each helper raises the aclnn error the spec names, with a message of the form
``<argument>: <what it got> <what is allowed> [<operator and attributes>]``.
"""

from __future__ import annotations

import numpy as np

from .dtypes import DEVICE_DTYPES, MATH_DTYPES, dtype_name, resolve_dtype
from .enums import SOCS
from .errors import ParamInvalidError, ParamNullptrError, TilingError

__all__ = ["as_tensor", "check_soc", "check_attr", "require", "check_out_dtype", "output_dtype"]


#: vendor SoC names of the profiles (docs/api.md, "Enums and constants")
VENDOR_SOC_NAMES = {"ASCEND910B": "A2", "ASCEND910_93": "A3", "ASCEND910_95": "950"}


def check_soc(soc, op: str, allowed=SOCS) -> str | None:
    """None (math only) or one of the chip profiles ``allowed`` ("A2", "A3", "950"; the vendor
    SoC names ascend910b, ascend910_93, ascend910_95 and an "Ascend" prefix are understood)."""
    if soc is None:
        return None
    name = str(soc).upper()
    name = VENDOR_SOC_NAMES.get(name, name)
    if name.startswith("ASCEND"):
        name = name[len("ASCEND"):]
    if name not in allowed:
        raise ParamInvalidError(f"soc: {soc!r} is not a profile of {op}; allowed: "
                                f"None, {', '.join(repr(s) for s in allowed)} [{op}]")
    return name


def require(value, name: str, ctx: str):
    """161001 when a required tensor is missing."""
    if value is None:
        raise ParamNullptrError(f"{name}: required tensor is missing (got None) [{ctx}]")
    return value


def as_tensor(value, name: str, ctx: str, soc: str | None) -> np.ndarray:
    """``np.asarray`` plus the dtype rule: float16/bfloat16/float32 on a chip profile, float64
    too (and integers, widened exactly) when math only; anything else is 161002."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise ParamInvalidError(f"{name}: cannot be read as an array ({exc}) [{ctx}]") from None
    allowed = DEVICE_DTYPES if soc is not None else MATH_DTYPES
    if arr.dtype in allowed:
        return arr
    if soc is None and arr.dtype.kind in "iub":
        return arr.astype(np.float64)
    names = ", ".join(dtype_name(d) for d in allowed)
    raise ParamInvalidError(f"{name}: dtype {dtype_name(arr.dtype)} is not allowed; allowed: {names} [{ctx}]")


def check_same_dtype(arr: np.ndarray, name: str, ref: np.ndarray, ref_name: str, ctx: str) -> None:
    """161002 when a tensor's dtype differs from the primary input's (chip profiles only)."""
    if arr.dtype != ref.dtype:
        raise ParamInvalidError(f"{name}: dtype {dtype_name(arr.dtype)} must equal {ref_name}'s "
                                f"{dtype_name(ref.dtype)} [{ctx}]")


def check_attr(value, name: str, allowed, ctx: str, error=TilingError) -> int:
    """An integer attribute in ``allowed`` (561002 by default); bools are not integers here."""
    if isinstance(value, (bool, np.bool_)):
        raise error(f"{name}: {value!r} is a bool, not an integer; allowed: "
                    f"{', '.join(str(a) for a in allowed)} [{ctx}]")
    try:
        as_int = int(value)
        ok = as_int == value and as_int in allowed
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise error(f"{name}: {value!r} is out of range; allowed: "
                    f"{', '.join(str(a) for a in allowed)} [{ctx}]")
    return as_int


def check_out_dtype(out_dtype, ctx: str):
    """None (the documented dtypes) or one of the four float dtypes."""
    if out_dtype is None:
        return None
    try:
        return resolve_dtype(out_dtype)
    except ParamInvalidError as exc:
        raise ParamInvalidError(f"out_dtype: {exc} [{ctx}]") from None


def output_dtype(documented, out_dtype) -> np.dtype:
    """The dtype an output is returned in: ``out_dtype`` if given, else the documented one."""
    return np.dtype(documented) if out_dtype is None else out_dtype
