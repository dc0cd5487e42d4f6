"""Validation helpers shared by the KV-cache operators (docs/kv_rms_norm_rope_cache.md §4,
docs/dequant_rope_quant_kvcache.md §4, docs/qkv_rms_norm_rope_cache.md §4).

Each raises the aclnn error the operator's rule names, with the message form of
``refspec.spec.checks``: ``<argument>: <what it got>; <what is allowed> [<operator>]``. Index
values are data the host code cannot see (the kernels' behaviour with a bad index is
undefined): the spec rejects them with 161002, like positions outside a cos/sin cache.
"""

from __future__ import annotations

import numpy as np

from .dtypes import dtype_name
from .errors import ParamInvalidError, TilingError
from .quant_dtypes import is_quant_dtype

__all__ = ["array_of", "check_kind", "check_rank", "check_slots", "check_block_size",
           "check_real", "check_flag", "same_dtype"]


def array_of(value, name: str, ctx: str) -> np.ndarray:
    """``np.asarray`` with a 161002 naming the argument when it cannot be read as an array."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise ParamInvalidError(f"{name}: cannot be read as an array ({exc}) [{ctx}]") from None
    if arr.dtype.kind in "OUSM" or (arr.dtype.kind == "V" and arr.dtype.names is not None
                                   and not is_quant_dtype(arr.dtype)):
        raise ParamInvalidError(f"{name}: dtype {arr.dtype} is not a numeric dtype [{ctx}]")
    return arr


def check_kind(arr: np.ndarray, name: str, allowed, ctx: str, error=ParamInvalidError) -> None:
    """``error`` (161002 by default) when ``arr``'s dtype is not one of ``allowed`` (dtypes, or
    the strings ``"int"`` for any integer dtype and ``"float"`` for any float dtype of the
    math-only profile)."""
    dt = arr.dtype
    for a in allowed:
        if (a == "int" and dt.kind in "iu") or (a == "float" and dt.kind == "f") \
                or (not isinstance(a, str) and dt == np.dtype(a)):
            return
        if a == "float" and dtype_name(dt) == "bfloat16":
            return
    names = ", ".join(a if isinstance(a, str) else dtype_name(a) for a in allowed)
    raise error(f"{name}: dtype {dtype_name(dt)} is not allowed; allowed: {names} [{ctx}]")


def same_dtype(arr: np.ndarray, name: str, ref: np.ndarray, ref_name: str, ctx: str) -> None:
    """161002 when a tensor's dtype differs from ``ref``'s."""
    if arr.dtype != ref.dtype:
        raise ParamInvalidError(f"{name}: dtype {dtype_name(arr.dtype)} must equal {ref_name}'s "
                                f"{dtype_name(ref.dtype)} [{ctx}]")


def check_rank(arr: np.ndarray, name: str, ranks, ctx: str, error=TilingError) -> None:
    """``error`` (561002 by default) when ``arr`` has none of the ranks ``ranks``."""
    if arr.ndim not in ranks:
        allowed = " or ".join(f"{r}-D" for r in ranks)
        raise error(f"{name}: rank {arr.ndim} (shape {arr.shape}) not supported; allowed: "
                    f"{allowed} [{ctx}]")


def check_slots(slots: np.ndarray, limit: int, name: str, ctx: str, rows=None) -> None:
    """161002 unless every slot is -1 or in [0, limit) and the slots written are distinct
    (``rows``: an array of slots' shape saying which group each belongs to; distinct within a
    group only, for KvRmsNormRopeCache's Norm mode where batches repeat positions)."""
    s = np.asarray(slots).reshape(-1)
    bad = (s < -1) | (s >= limit)
    if bad.any():
        raise ParamInvalidError(f"{name}: value {int(s[bad][0])} is out of range; allowed: -1 "
                                f"(skip) or 0..{limit - 1} [{ctx}]")
    key = s if rows is None else np.asarray(rows).reshape(-1) * limit + s
    key = key[s >= 0]
    uniq, counts = np.unique(key, return_counts=True)
    if (counts > 1).any():
        first = int(uniq[counts > 1][0] % limit)
        raise ParamInvalidError(f"{name}: the slot {first} is written twice; the slots written "
                                f"must be distinct [{ctx}]")


def check_block_size(block_size: int, caches: dict, soc, ctx: str) -> None:
    """A block holds at least 2 slots; on a chip profile block_size is a multiple of 32 bytes
    of each cache's dtype (16 for float16/bfloat16, 32 for the 8-bit dtypes): 561002."""
    if block_size < 2:
        raise TilingError(f"block_size: {block_size} (axis 1 of the caches); allowed: > 1 [{ctx}]")
    if soc is None:
        return
    for name, cache in caches.items():
        m = 32 // cache.dtype.itemsize
        if block_size % m:
            raise TilingError(f"{name}: block_size {block_size} (axis 1) is not a multiple of {m} "
                              f"for {dtype_name(cache.dtype)} (32 bytes) [{ctx}]")


def check_real(value, name: str, ctx: str) -> float:
    """A finite real attribute (161002 otherwise)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise ParamInvalidError(f"{name}: {value!r} is not a finite real number [{ctx}]")
    return float(value)


def check_flag(value, name: str, ctx: str) -> bool:
    """A bool attribute (161002 otherwise)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParamInvalidError(f"{name}: {value!r} must be a bool [{ctx}]")
    return bool(value)
