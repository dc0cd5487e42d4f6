"""Validation of DequantRopeQuantKvcache and RopeQuantKvcache
(docs/dequant_rope_quant_kvcache.md §4).

Sources: the aclnnDequantRopeQuantKvcache document and README and the host code of
``posembedding/dequant_rope_quant_kvcache/op_host`` (``..._def.cpp``: the dtypes;
``..._tiling.cpp``: sizeSplits, x's and the caches' ranks, the head size, the shapes of cos,
sin, indices and the scales, the cache's first axis; no op_api source). Dtype rules and a
missing tensor keep the document's 161002/161001, the tiling's shape rules are 561002, index
values 161002 (errata E41-E47). RopeQuantKvcache's README gives no formula and its host code
checks nothing: it is DequantRopeQuantKvcache with a float16 x, contiguous caches and one scale
and integer offset for k and v (errata E48).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import check_soc, require
from .dtypes import bfloat16, dtype_name, float16
from .errors import ParamInvalidError, ParamNullptrError, TilingError
from .kv_cache_checks import (array_of, check_flag, check_kind, check_rank, check_slots,
                              same_dtype)

__all__ = ["DequantArgs", "check_dequant_args", "DEQUANT_SOCS", "CACHE_MODES"]

DEQUANT_SOCS = ("A2", "A3")
CACHE_MODES = ("contiguous", "page")
_FLOATS = ("scale_k", "scale_v", "offset_k", "offset_v", "weight_scale", "activation_scale")


class DequantArgs(NamedTuple):
    """Validated arguments: the tensors (None when absent or without effect), the sizes (B, S,
    Nq, Nkv, D, H), the slot of each token (T,), the cache mode."""

    t: dict
    sizes: dict
    slots: np.ndarray
    cache_mode: str
    kv_output: bool
    soc: str | None


def _splits(size_splits, ctx) -> tuple:
    if size_splits is None:
        raise ParamNullptrError(f"size_splits: required (got None) [{ctx}]")
    try:
        q, k, v = (int(s) for s in size_splits)
        ok = all(float(a) == int(a) for a in size_splits)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise TilingError(f"size_splits: {size_splits!r} is not three integers [Nq*D, Nkv*D, "
                          f"Nkv*D] [{ctx}]")
    if k != v or q < 0 or k <= 0:
        raise TilingError(f"size_splits: {[q, k, v]}: k's and v's must be equal and > 0, q's >= 0 "
                          f"[{ctx}]")
    return q, k, v


def _dtypes(t: dict, soc, ctx) -> bool:
    """161002 rules; returns whether x is dequantised (int32)."""
    x = t["x"]
    check_kind(x, "x", (float16, bfloat16, np.int32) if soc else ("float", "int"), ctx)
    check_kind(t["cos"], "cos", (float16, bfloat16) if soc else ("float",), ctx)
    same_dtype(t["sin"], "sin", t["cos"], "cos", ctx)
    int_x = x.dtype.kind in "iu"
    if soc is not None and not int_x:
        same_dtype(x, "x", t["cos"], "cos", ctx)
    for name in ("k_cache", "v_cache"):
        check_kind(t[name], name, (np.int8,), ctx)
    check_kind(t["indices"], "indices", (np.int32,) if soc else ("int",), ctx)
    for name in _FLOATS:
        if t[name] is not None:
            check_kind(t[name], name, (np.float32,) if soc else ("float",), ctx)
    if t["bias"] is not None:
        check_kind(t["bias"], "bias", (np.float32, float16, bfloat16, np.int32) if soc
                   else ("float", "int"), ctx)
    if int_x and t["weight_scale"] is None:
        raise ParamNullptrError(f"weight_scale: required when x is int32 (got None) [{ctx}]")
    return int_x


def _shapes(t: dict, splits, cache_mode, soc, ctx) -> dict:
    """The tiling's shape rules and the document's (561002)."""
    x, cache = t["x"], t["k_cache"]
    check_rank(x, "x", (2, 3), ctx)
    check_rank(cache, "k_cache", (4,), ctx)
    H = sum(splits)
    if x.shape[-1] != H:
        raise TilingError(f"x: last axis {x.shape[-1]} must be the sum of size_splits {H} [{ctx}]")
    if soc is not None and (H > 4096 or H % 64):
        raise TilingError(f"x: last axis {H} must be at most 4096 and a multiple of 64 [{ctx}]")
    Nkv, D = cache.shape[2], cache.shape[3]
    if Nkv * D != splits[1] or D == 0 or D % 2 or (soc is not None and D % 16):
        raise TilingError(f"k_cache: Nkv*D = {Nkv}*{D} must be size_splits' k part {splits[1]}, D "
                          f"even{' and a multiple of 16' if soc else ''} [{ctx}]")
    if splits[0] % D or splits[2] % D:
        raise TilingError(f"size_splits: {list(splits)}: q's and v's must be multiples of the head "
                          f"size {D} [{ctx}]")
    if t["v_cache"].shape != cache.shape:
        raise TilingError(f"v_cache: shape {t['v_cache'].shape} must equal k_cache's {cache.shape} "
                          f"[{ctx}]")
    B, S = x.shape[0], (1 if x.ndim == 2 else x.shape[1])
    table = (B, D) if x.ndim == 2 else (B, S, 1, D)
    for name in ("cos", "sin"):
        if t[name].shape != table:
            raise TilingError(f"{name}: shape {t[name].shape} must be {table} [{ctx}]")
    tokens = B * S if cache_mode == "page" else B
    if t["indices"].shape != (tokens,):
        raise TilingError(f"indices: shape {t['indices'].shape} must be ({tokens},) in "
                          f"{cache_mode} mode [{ctx}]")
    if cache_mode == "contiguous" and cache.shape[0] < B:
        raise TilingError(f"k_cache: axis 0 {cache.shape[0]} must be at least x's batch {B} in "
                          f"contiguous mode [{ctx}]")
    return {"B": B, "S": S, "Nq": splits[0] // D, "Nkv": Nkv, "D": D, "H": H}


def _quant_params(t: dict, z: dict, soc, ctx) -> None:
    """The scales and offsets have Nkv*D values; one offset without the other is rejected on a
    chip (the host code drops it silently); the dequantisation's weight_scale and bias have H
    values, activation_scale one per token."""
    for name in ("scale_k", "scale_v", "offset_k", "offset_v"):
        if t[name] is not None and t[name].size != z["Nkv"] * z["D"]:
            raise TilingError(f"{name}: {t[name].size} values (shape {t[name].shape}); allowed: "
                              f"Nkv*D = {z['Nkv'] * z['D']} [{ctx}]")
    if soc is not None and (t["offset_k"] is None) != (t["offset_v"] is None):
        given, missing = ("offset_k", "offset_v") if t["offset_v"] is None else ("offset_v", "offset_k")
        raise TilingError(f"{given}: given without {missing}; the offsets come together [{ctx}]")
    want = {"weight_scale": (z["H"],), "bias": (z["H"],),
            "activation_scale": (z["B"] * z["S"],)}
    for name, shape in want.items():
        if t[name] is not None and t[name].shape != shape:
            raise TilingError(f"{name}: shape {t[name].shape}; allowed: {shape} [{ctx}]")


def _slots(indices, cache_shape, z: dict, cache_mode: str, ctx) -> np.ndarray:
    """The slot of each token (T = B*S), numbering the cache's (C1*C2) rows: contiguous,
    ``b*C2 + indices[b] + s`` with 0 <= indices[b] <= C2 - S; page, ``indices[t]``, distinct,
    in [0, C1*C2) (161002)."""
    C1, C2 = cache_shape[:2]
    idx = indices.astype(np.int64)
    B, S = z["B"], z["S"]
    if cache_mode == "page":
        check_slots(idx, C1 * C2, "indices", ctx)
        if (idx < 0).any():
            raise ParamInvalidError(f"indices: value {int(idx[idx < 0][0])} is negative; allowed: "
                                    f"0..{C1 * C2 - 1} [{ctx}]")
        return idx
    bad = (idx < 0) | (idx > C2 - S)
    if bad.any():
        raise ParamInvalidError(f"indices: value {int(idx[bad][0])} is out of range; allowed: "
                                f"0..{C2 - S} (the cache's axis 1 {C2} less S {S}) [{ctx}]")
    return (np.arange(B)[:, None] * C2 + idx[:, None] + np.arange(S)).reshape(-1)


def check_dequant_args(op: str, tensors: dict, size_splits, quant_mode, layout, kv_output,
                       cache_mode, soc, values: bool = True) -> DequantArgs:
    """Every rule of docs/dequant_rope_quant_kvcache.md §4 for the profile ``soc`` (None: what
    the math needs). ``tensors`` by the spec's names (absent ones None); ``values`` False leaves
    out the rules on the indices' values."""
    ctx = f"{op} size_splits={size_splits!r} cache_mode={cache_mode!r}"
    soc = check_soc(soc, op, allowed=DEQUANT_SOCS)
    for name in ("x", "cos", "sin", "k_cache", "v_cache", "indices", "scale_k", "scale_v"):
        require(tensors[name], name, ctx)
    t = {n: None if v is None else array_of(v, n, ctx) for n, v in tensors.items()}
    ctx += f" soc={soc}" if soc else ""
    splits = _splits(size_splits, ctx)
    int_x = _dtypes(t, soc, ctx)
    flag = check_flag(kv_output, "kv_output", ctx)
    for name, value, allowed in (("quant_mode", quant_mode, ("static",)), ("layout", layout, ("BSND",)),
                                 ("cache_mode", cache_mode, CACHE_MODES)):
        if not isinstance(value, str) or value not in allowed:
            raise TilingError(f"{name}: {value!r} is not supported; allowed: "
                              f"{', '.join(allowed)} [{ctx}]")
    z = _shapes(t, splits, cache_mode, soc, ctx)
    if not int_x:                              # without effect unless x is int32
        t.update(weight_scale=None, activation_scale=None, bias=None)
    _quant_params(t, z, soc, ctx)
    if soc is not None and any(x.size == 0 for x in (t["x"], t["k_cache"])):
        raise TilingError(f"x: shape {t['x'].shape} or a cache is empty; empty tensors are not "
                          f"supported [{ctx}]")
    slots = _slots(t["indices"], t["k_cache"].shape, z, cache_mode, ctx) if values else None
    z["dequant"] = int_x
    return DequantArgs(t, z, slots, cache_mode, flag, soc)
