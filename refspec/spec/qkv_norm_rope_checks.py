"""Validation of QkvRmsNormRopeCache (docs/qkv_rms_norm_rope_cache.md §4).

Sources: the aclnnQkvRmsNormRopeCache document and README and the host code of
``posembedding/qkv_rms_norm_rope_cache/op_host`` (``op_api/aclnn_qkv_rms_norm_rope_cache.cpp``
checks only that the tensors are given, 161001; ``qkv_rms_norm_rope_cache_tiling.cpp`` checks the
rest, which the API reports as 561002 where the document lists 161002: errata E49). Rules only
the documents state keep their status (the offsets' shapes 561002, scale values and index values
161002).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import check_soc, require
from .dtypes import bfloat16, dtype_name, float16
from .errors import ParamInvalidError, TilingError
from .kv_cache import nz_width
from .kv_cache_checks import array_of, check_flag, check_kind, check_rank, check_real, check_slots

__all__ = ["QkvArgs", "check_qkv_args", "QKV_SOCS", "QKV_D"]

QKV_SOCS = ("A2", "A3")
#: the one head size of the A2/A3 tiling
QKV_D = 128


class QkvArgs(NamedTuple):
    """Validated arguments: the tensors, the sizes (B, S, N, D, Nq, Nk, Nv, block_num,
    block_size), the quantisation of each cache (scale, offset or None), the tokens' slots."""

    t: dict
    sizes: dict
    k_quant: tuple
    v_quant: tuple
    slots: np.ndarray
    epsilon: float
    outputs_qkv: bool
    soc: str | None


def _ints(value, name: str, n: int, ctx) -> tuple:
    """``n`` integers > 0 (561002)."""
    try:
        vals = tuple(int(v) for v in value)
        ok = len(vals) == n and all(float(a) == int(a) and not isinstance(a, bool) for a in value)
    except (TypeError, ValueError):
        ok, vals = False, ()
    if not ok or min(vals) <= 0:
        raise TilingError(f"{name}: {value!r} is not {n} integers > 0 [{ctx}]")
    return vals


def _sizes(qkv_size, head_nums, soc, ctx) -> dict:
    B, S, N, D = _ints(qkv_size, "qkv_size", 4, ctx)
    Nq, Nk, Nv = _ints(head_nums, "head_nums", 3, ctx)
    if soc is not None and D != QKV_D:
        raise TilingError(f"qkv_size: D = {D} is not supported on {soc}; allowed: {QKV_D} [{ctx}]")
    if N != Nq + Nk + Nv or Nk != Nv:
        raise TilingError(f"head_nums: {[Nq, Nk, Nv]} must have Nk = Nv and sum to qkv_size's N = "
                          f"{N} [{ctx}]")
    if soc is not None and Nq % Nk:
        raise TilingError(f"head_nums: Nq = {Nq} must be a multiple of Nk = {Nk} on {soc} [{ctx}]")
    if D % 2:
        raise TilingError(f"qkv_size: D = {D} must be even (the rotation) [{ctx}]")
    return {"B": B, "S": S, "N": N, "D": D, "Nq": Nq, "Nk": Nk, "Nv": Nv}


def _inputs(t: dict, z: dict, soc, ctx) -> None:
    """qkv, the gammas, cos, sin and index: dtypes and shapes (561002)."""
    qkv = t["qkv"]
    check_kind(qkv, "qkv", (float16, bfloat16) if soc else ("float",), ctx, TilingError)
    T = z["B"] * z["S"]
    want = {"qkv": (T, z["N"] * z["D"]), "q_gamma": (z["D"],), "k_gamma": (z["D"],)}
    for name, shape in want.items():
        if t[name].shape != shape:
            raise TilingError(f"{name}: shape {t[name].shape}; allowed: {shape} [{ctx}]")
    rows = (T, z["B"])
    for name in ("q_gamma", "k_gamma", "cos", "sin"):
        if soc is not None and t[name].dtype != qkv.dtype:
            raise TilingError(f"{name}: dtype {dtype_name(t[name].dtype)} must be qkv's "
                              f"{dtype_name(qkv.dtype)} [{ctx}]")
        check_kind(t[name], name, ("float",), ctx, TilingError)
    for name in ("cos", "sin"):
        check_rank(t[name], name, (2,), ctx)
        if t[name].shape[0] not in rows or t[name].shape[1] != z["D"] or t[name].shape != t["cos"].shape:
            raise TilingError(f"{name}: shape {t[name].shape}; allowed: (B*S, D) = ({T}, {z['D']}) "
                              f"or (B, D) = ({z['B']}, {z['D']}), sin as cos [{ctx}]")
    check_kind(t["index"], "index", (np.int64,) if soc else ("int",), ctx, TilingError)
    if t["index"].shape != (T,):
        raise TilingError(f"index: shape {t['index'].shape}; allowed: (B*S,) = ({T},) [{ctx}]")


def _cache(t: dict, name: str, heads: int, z: dict, soc, ctx) -> bool:
    """A cache (BlockNum, heads*D/C0, BlockSize, C0), qkv's dtype or int8 (quantised)."""
    cache = t[name]
    if cache.dtype != np.int8:
        if soc is not None and cache.dtype != t["qkv"].dtype:
            raise TilingError(f"{name}: dtype {dtype_name(cache.dtype)} must be qkv's "
                              f"{dtype_name(t['qkv'].dtype)} or int8 [{ctx}]")
        check_kind(cache, name, ("float",), ctx, TilingError)
    check_rank(cache, name, (4,), ctx)
    c0 = nz_width(cache.dtype)
    cols = heads * z["D"]
    if cols % c0 or cache.shape[1] != cols // c0 or cache.shape[3] != c0:
        raise TilingError(f"{name}: shape {cache.shape}; allowed: (BlockNum, {cols}/{c0}, BlockSize, "
                          f"{c0}) for {dtype_name(cache.dtype)} [{ctx}]")
    return cache.dtype == np.int8


def _blocks(t: dict, z: dict, soc, ctx) -> tuple:
    k, v = t["k_cache"].shape, t["v_cache"].shape
    block_num, block_size = k[0], k[2]
    if (v[0], v[2]) != (block_num, block_size):
        raise TilingError(f"v_cache: BlockNum {v[0]} and BlockSize {v[2]} must be k_cache's "
                          f"{block_num}, {block_size} [{ctx}]")
    if soc is not None and block_size % 32:
        raise TilingError(f"k_cache: BlockSize {block_size} (axis 2) is not a multiple of 32 on "
                          f"{soc} [{ctx}]")
    need = -(-z["S"] // max(block_size, 1)) * z["B"]
    if block_size < 1 or block_num < need:
        raise TilingError(f"k_cache: BlockNum {block_num} must be at least ceil(S/BlockSize)*B = "
                          f"{need} [{ctx}]")
    return block_num, block_size


def _quant(t: dict, cache: str, quantised: bool, heads: int, z: dict, soc, ctx,
           values: bool = True) -> tuple:
    """(scale, offset): a scale exactly when the cache is int8, (heads, D) float32, not 0; an
    offset only with it."""
    s_name, o_name = cache[0] + "_scale", cache[0] + "_offset"
    scale, offset = t[s_name], t[o_name]
    if quantised and scale is None:
        raise TilingError(f"{s_name}: required when {cache} is int8 (got None) [{ctx}]")
    for name, p in ((s_name, scale), (o_name, offset)):
        if p is None:
            continue
        if not quantised:
            raise TilingError(f"{name}: given for a {dtype_name(t[cache].dtype)} {cache}; only an int8 "
                              f"cache is quantised [{ctx}]")
        check_kind(p, name, (np.float32,) if soc else ("float",), ctx, TilingError)
        if p.shape != (heads, z["D"]):
            raise TilingError(f"{name}: shape {p.shape}; allowed: ({heads}, {z['D']}) [{ctx}]")
    if values and scale is not None and (np.asarray(scale) == 0).any():
        raise ParamInvalidError(f"{s_name}: a scale of 0; the scales divide [{ctx}]")
    return scale, offset


def check_qkv_args(op: str, tensors: dict, qkv_size, head_nums, epsilon, cache_mode,
                   is_output_qkv, soc, values: bool = True) -> QkvArgs:
    """Every rule of docs/qkv_rms_norm_rope_cache.md §4 for the profile ``soc`` (None: what the
    math needs); ``values`` False leaves out the rules on the index's and the scales' values."""
    ctx = f"{op} qkv_size={qkv_size!r} head_nums={head_nums!r}"
    soc = check_soc(soc, op, allowed=QKV_SOCS)
    for name in ("qkv", "q_gamma", "k_gamma", "cos", "sin", "index", "k_cache", "v_cache"):
        require(tensors[name], name, ctx)
    require(qkv_size, "qkv_size", ctx)
    require(head_nums, "head_nums", ctx)
    t = {n: None if v is None else array_of(v, n, ctx) for n, v in tensors.items()}
    ctx += f" soc={soc}" if soc else ""
    z = _sizes(qkv_size, head_nums, soc, ctx)
    eps = check_real(epsilon, "epsilon", ctx)
    flag = check_flag(is_output_qkv, "is_output_qkv", ctx)
    if cache_mode != "PA_NZ":
        raise TilingError(f"cache_mode: {cache_mode!r} is not supported; allowed: PA_NZ [{ctx}]")
    _inputs(t, z, soc, ctx)
    kq = _cache(t, "k_cache", z["Nk"], z, soc, ctx)
    vq = _cache(t, "v_cache", z["Nv"], z, soc, ctx)
    z["block_num"], z["block_size"] = _blocks(t, z, soc, ctx)
    k_quant = _quant(t, "k_cache", kq, z["Nk"], z, soc, ctx, values)
    v_quant = _quant(t, "v_cache", vq, z["Nv"], z, soc, ctx, values)
    slots = t["index"].astype(np.int64)
    if values:
        check_slots(slots, z["block_num"] * z["block_size"], "index", ctx)
    return QkvArgs(t, z, k_quant, v_quant, slots, eps, flag, soc)
