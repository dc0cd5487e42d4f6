"""Validation of KvRmsNormRopeCache(V2) (docs/kv_rms_norm_rope_cache.md §4).

Sources: the aclnnKvRmsNormRopeCache and aclnnKvRmsNormRopeCacheV2 documents, the operator's
README, the torch_npu page of ``npu_kv_rmsnorm_rope_cache``, and the host code of
``posembedding/kv_rms_norm_rope_cache/op_host`` (``kv_rms_norm_rope_cache_def.cpp``: the dtype
combinations of each chip; ``..._base_tiling.cpp``: ranks, N, the index's size, the cache
shapes; ``..._ds_tiling.cpp``: A2/A3's fixed sizes and scale shapes; ``..._regbase_*_tiling.cpp``:
950's rules). Dtype rules are 161002, shape and attribute rules 561002 (the tiling's status),
index values 161002; the rules only a document states keep its status (errata E30-E41).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import check_soc, require
from .dtypes import bfloat16, dtype_name, float16
from .errors import ParamInvalidError, TilingError
from .kv_cache import BLOCKED, CACHE_MODES, LAYOUT_OF, NZ_MODES, PAGED, nz_width, token_slots
from .kv_cache_checks import (array_of, check_block_size, check_flag, check_kind, check_rank,
                              check_real, check_slots, same_dtype)
from .quant_dtypes import float8_e4m3fn, float8_e5m2, hifloat8, int8, is_quant_dtype

__all__ = ["KvCacheArgs", "check_kv_cache_args", "A2_SIZES", "QUANT_CACHES"]

#: A2/A3's fixed sizes (ds tiling): (rms_size, rope size, kv's D or v's D) for V1 and V2
A2_SIZES = {"V1": (512, 64, 576), "V2": (192, 64, 128)}
#: the quantised cache dtypes of each profile (def.cpp)
QUANT_CACHES = {"A2": (int8,), "A3": (int8,), "950": (int8, hifloat8, float8_e5m2, float8_e4m3fn),
                None: (int8, hifloat8, float8_e5m2, float8_e4m3fn)}
_QUANT_NAMES = ("k_rope_scale", "c_kv_scale", "k_rope_offset", "c_kv_offset")


class KvCacheArgs(NamedTuple):
    """Validated arguments: the arrays as given, the sizes (B, N, S; ``rms``: RMSNorm's width;
    ``rope``: the rotated width; ``dk``/``dv``: the widths of the k and ckv caches), the cache
    mode, its layout and fractal widths, the quantisation of each cache (scale, offset or None),
    the token slots, whether k_rope/c_kv are produced."""

    kv: np.ndarray
    gamma: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    v: np.ndarray | None
    k_cache: np.ndarray
    ckv_cache: np.ndarray
    k_quant: tuple
    c_quant: tuple
    epsilon: float
    mode: str
    slots: np.ndarray
    outputs_kv: bool
    sizes: dict
    soc: str | None


def _sizes(kv, gamma, cos, v, soc, ctx) -> dict:
    """B, N, S, rms, rope, dk, dv from the shapes (V1: kv = [rms | rope]; V2: kv is the rms part,
    v the ckv part) and the profile's fixed sizes."""
    B, N, S, Dkv = kv.shape
    rms, rope = gamma.shape[0], cos.shape[-1]
    version = "V1" if v is None else "V2"
    if soc == "950" and v is not None:
        raise TilingError(f"v: not supported on 950 (V1 only; the host code ignores it) [{ctx}]")
    if version == "V1" and rms + rope != Dkv:
        raise TilingError(f"gamma: rms size {rms} + cos's rope size {rope} must be kv's last axis "
                          f"{Dkv} (Dv + Dk = D) [{ctx}]")
    if version == "V2" and (rms != Dkv or rope > Dkv):
        raise TilingError(f"gamma: length {rms} must be kv's last axis {Dkv} and cos's {rope} at "
                          f"most that (V2) [{ctx}]")
    if rope % 2 or rope == 0:
        raise TilingError(f"cos: rope size {rope} (last axis) must be even and > 0 [{ctx}]")
    if soc in ("A2", "A3"):
        got = (("gamma", "rms size", rms), ("cos", "rope size (last axis)", rope),
               ("kv", "D (last axis)", Dkv) if v is None else ("v", "D (last axis)", v.shape[-1]))
        for (name, what, g), w in zip(got, A2_SIZES[version]):
            if w != g:
                raise TilingError(f"{name}: {what} {g} is not supported on {soc} in {version}; "
                                  f"allowed: {w} [{ctx}]")
    if soc is not None:
        allowed = (1,) if v is None else (1, 2, 4, 8)
        if N not in allowed:
            raise TilingError(f"kv: N = {N} (axis 1) is not supported on {soc} in "
                              f"{version}; allowed: {', '.join(map(str, allowed))} [{ctx}]")
        if kv.size == 0 or cos.size == 0:
            raise TilingError(f"kv: shape {kv.shape} or cos {cos.shape} is empty; empty tensors are "
                              f"not supported [{ctx}]")
    dk, dv = (rope, rms) if v is None else (rms, v.shape[-1])
    return {"B": B, "N": N, "S": S, "rms_size": rms, "rope_size": rope, "dk": dk, "dv": dv,
            "version": version}


def _tensor_shapes(kv, gamma, cos, sin, v, ctx) -> None:
    check_rank(kv, "kv", (4,), ctx)
    check_rank(gamma, "gamma", (1,), ctx)
    for name, t in (("cos", cos), ("sin", sin)):
        check_rank(t, name, (4,), ctx)
    B, N, S, _ = kv.shape
    if cos.shape != sin.shape:
        raise TilingError(f"sin: shape {sin.shape} must equal cos's {cos.shape} [{ctx}]")
    if cos.shape[:2] != (B, N) or cos.shape[2] not in (S, 1):
        raise TilingError(f"cos: shape {cos.shape} must be (B, N, S or 1, Dk) = ({B}, {N}, {S} or "
                          f"1, Dk) [{ctx}]")
    if v is not None:
        check_rank(v, "v", (4,), ctx)
        if v.shape[:3] != (B, N, S):
            raise TilingError(f"v: shape {v.shape} must be (B, N, S, Dv) with kv's B, N, S "
                              f"({B}, {N}, {S}) [{ctx}]")


def _dtypes(t: dict, soc, ctx) -> None:
    """Dtypes of kv, gamma, cos, sin, v and the index (161002)."""
    kv = t["kv"]
    check_kind(kv, "kv", (float16, bfloat16) if soc else ("float",), ctx)
    for name in ("gamma", "cos", "sin", "v"):
        if t[name] is not None:
            check_kind(t[name], name, ("float",), ctx)
            if soc is not None:
                same_dtype(t[name], name, kv, "kv", ctx)
    check_kind(t["index"], "index", (np.int64,) if soc else ("int",), ctx)


def _cache_dtypes(kv, caches: dict, scales: dict, soc, ctx) -> None:
    """A cache is kv's dtype (its scale None) or quantised (its scale given): 161002; on a chip
    the quantised dtypes of def.cpp, the two caches not mixing int8 and float8 or two float8."""
    for name, cache in caches.items():
        scale = scales[name]
        if is_quant_dtype(cache.dtype):
            allowed = QUANT_CACHES[soc]
            if cache.dtype not in allowed:
                raise ParamInvalidError(f"{name}: dtype {dtype_name(cache.dtype)} is not supported "
                                        f"on {soc}; allowed: {dtype_name(kv.dtype)} or "
                                        f"{', '.join(dtype_name(d) for d in allowed)} [{ctx}]")
            if scale is None:
                raise ParamInvalidError(f"{name}: a quantised cache ({dtype_name(cache.dtype)}) "
                                        f"needs its scale ({_scale_name(name)}) [{ctx}]")
        else:
            check_kind(cache, name, ("float",), ctx)
            if soc is not None and cache.dtype != kv.dtype:
                raise ParamInvalidError(f"{name}: dtype {dtype_name(cache.dtype)} must be kv's "
                                        f"{dtype_name(kv.dtype)} or a quantised dtype [{ctx}]")
            if scale is not None:
                raise ParamInvalidError(f"{_scale_name(name)}: given for a cache of "
                                        f"{dtype_name(cache.dtype)}; a scale needs a quantised "
                                        f"cache [{ctx}]")
    quant = [c.dtype for c in caches.values() if is_quant_dtype(c.dtype)]
    if soc == "950" and len(quant) == 2 and quant[0] != quant[1]:
        raise ParamInvalidError(f"ckv_cache: dtype {dtype_name(quant[1])} with k_cache's "
                                f"{dtype_name(quant[0])}; two quantised caches share one dtype "
                                f"on 950 [{ctx}]")


def _scale_name(cache: str) -> str:
    return "k_rope_scale" if cache == "k_cache" else "c_kv_scale"


def _cache_shapes(caches: dict, z: dict, mode: str, soc, ctx) -> int:
    """The caches' shapes for the mode: Norm (B, N, Scache, D) with Scache >= S; paged
    (block_num, block_size, N, D), both caches the same blocks; NZ widths (561002). Returns the
    slot count the index addresses (Scache or block_num*block_size)."""
    widths = {"k_cache": z["dk"], "ckv_cache": z["dv"]}
    for name, cache in caches.items():
        check_rank(cache, name, (4,), ctx)
        if cache.shape[-1] != widths[name]:
            raise TilingError(f"{name}: D = {cache.shape[-1]} (axis 3); allowed: {widths[name]} "
                              f"[{ctx}]")
    k, c = caches["k_cache"].shape, caches["ckv_cache"].shape
    if mode == "Norm":
        if k[:2] != (z["B"], z["N"]) or c[:2] != (z["B"], z["N"]):
            raise TilingError(f"k_cache: shapes {k}, {c} must start with kv's B, N = {z['B']}, "
                              f"{z['N']} in Norm mode [{ctx}]")
        if c[2] != k[2] or k[2] < z["S"]:
            raise TilingError(f"ckv_cache: Scache {c[2]} must be k_cache's {k[2]} and at least S "
                              f"= {z['S']} [{ctx}]")
        return k[2]
    if k[2] != z["N"] or c[2] != z["N"] or k[:2] != c[:2]:
        raise TilingError(f"ckv_cache: shapes {k}, {c} must be (block_num, block_size, N = "
                          f"{z['N']}, D), both the same blocks [{ctx}]")
    check_block_size(k[1], caches, soc, ctx)
    if mode in NZ_MODES:
        for name, cache in caches.items():
            c0 = nz_width(cache.dtype)
            width = cache.shape[-1] if soc is not None else cache.shape[-1] * z["N"]
            if width % c0:
                raise TilingError(f"{name}: D = {cache.shape[-1]} is not a multiple of {c0} for the "
                                  f"fractal layout of {dtype_name(cache.dtype)} (32 bytes) [{ctx}]")
    return k[0] * k[1]


def _quant_shape(arr, name: str, z: dict, soc, ctx) -> None:
    """Scale/offset shapes: V1 (D,) or (1, D), on 950 and math-only also (1,); V2 (N, D) on
    A2/A3 (the document: no broadcast), broadcastable to (N, D) math only (561002)."""
    D = z["dk"] if name.startswith("k_") else z["dv"]
    N = z["N"]
    if soc in ("A2", "A3"):
        allowed = [(D,), (1, D)] if z["version"] == "V1" else [(N, D)]
    elif soc == "950":
        allowed = [(D,), (1, D), (1,)]
    else:
        allowed = [(D,), (1, D), (N, D), (1,)]
    if arr.shape not in allowed:
        raise TilingError(f"{name}: shape {arr.shape} not supported; allowed: "
                          f"{', '.join(map(str, allowed))} [{ctx}]")


def _quant(t: dict, caches: dict, z: dict, mode: str, cos_s: int, soc, ctx) -> tuple:
    """(scale, offset) of each cache; the offset without its scale is 161002, the shapes and
    A2/A3's combinations 561002. A2/A3 V1 ignore the offsets (symmetric quantisation)."""
    arrays = {}
    for name in _QUANT_NAMES:
        if t[name] is not None:
            arrays[name] = array_of(t[name], name, ctx)
            check_kind(arrays[name], name, (np.float32,) if soc else ("float",), ctx)
            _quant_shape(arrays[name], name, z, soc, ctx)
    for off, scale in (("k_rope_offset", "k_rope_scale"), ("c_kv_offset", "c_kv_scale")):
        if off in arrays and scale not in arrays:
            raise ParamInvalidError(f"{off}: given without {scale}; an offset needs its scale "
                                    f"[{ctx}]")
    if len({a.ndim for a in arrays.values()}) > 1:
        raise TilingError(f"{next(iter(arrays))}: the quantisation parameters must all have one "
                          f"rank; got {', '.join(f'{n} {a.shape}' for n, a in arrays.items())} "
                          f"[{ctx}]")
    quantised = any(is_quant_dtype(c.dtype) for c in caches.values())
    if soc in ("A2", "A3") and quantised and z["version"] == "V1" and mode == "Norm":
        raise TilingError(f"cache_mode: 'Norm' does not support quantisation in V1 on {soc} [{ctx}]")
    if soc in ("A2", "A3") and quantised and mode == "PA" and cos_s != z["S"]:
        raise TilingError(f"cos: S = 1 broadcast with quantisation is not supported in PA mode on "
                          f"{soc} [{ctx}]")
    symmetric = soc in ("A2", "A3") and z["version"] == "V1"
    k = (arrays.get("k_rope_scale"), None if symmetric else arrays.get("k_rope_offset"))
    c = (arrays.get("c_kv_scale"), None if symmetric else arrays.get("c_kv_offset"))
    return k, c


def _index(index, mode: str, z: dict, limit: int, block_size, ctx, values=True):
    """The index's size for the mode (561002) and its values (161002): the token slots (None
    when ``values`` is False: the size alone)."""
    B, S = z["B"], z["S"]
    runs = -(-S // block_size) if mode in BLOCKED else S
    if index.size != B * runs:
        shape = "(B, S)" if mode == "Norm" else ("(B*ceil(S/block_size),)" if mode in BLOCKED
                                                  else "(B*S,)")
        raise TilingError(f"index: {index.size} values (shape {index.shape}); the {mode} mode "
                          f"needs {shape} = {B * runs} [{ctx}]")
    if not values:
        return None
    if mode in BLOCKED:
        starts = index.reshape(-1)
        bad = (starts >= 0) & (starts % block_size != 0)
        if bad.any():
            raise ParamInvalidError(f"index: value {int(starts[bad][0])} is not the first slot of "
                                    f"a block (a multiple of block_size {block_size}) [{ctx}]")
        check_slots(starts, limit, "index", ctx)
    slots = token_slots(index, mode, B, S, block_size)
    rows = np.repeat(np.arange(B), S).reshape(B, S) if mode == "Norm" else None
    check_slots(slots, limit, "index", ctx, rows=rows)
    if mode == "Norm":
        slots = np.where(slots >= 0, slots + np.arange(B)[:, None] * limit, -1)
    return slots


def check_kv_cache_args(op: str, tensors: dict, epsilon, cache_mode, is_output_kv, soc,
                        values: bool = True) -> KvCacheArgs:
    """Every rule of docs/kv_rms_norm_rope_cache.md §4 for the profile ``soc`` (None: what the
    math needs). ``tensors``: kv, gamma, cos, sin, index, k_cache, ckv_cache, the four
    quantisation parameters and v (None when absent). ``values`` False leaves out the rules on
    the index's values (probing a case's arguments without them)."""
    ctx = f"{op} cache_mode={cache_mode!r} is_output_kv={is_output_kv!r}"
    soc = check_soc(soc, op)
    for name in ("kv", "gamma", "cos", "sin", "index", "k_cache", "ckv_cache"):
        require(tensors[name], name, ctx)
    t = {n: None if v is None else array_of(v, n, ctx) for n, v in tensors.items()}
    ctx += f" soc={soc}" if soc else ""
    _dtypes(t, soc, ctx)
    eps = check_real(epsilon, "epsilon", ctx)
    outputs_kv = check_flag(is_output_kv, "is_output_kv", ctx)
    if not isinstance(cache_mode, str) or cache_mode not in CACHE_MODES:
        raise TilingError(f"cache_mode: {cache_mode!r} is not a cache mode; allowed: "
                          f"{', '.join(CACHE_MODES)} [{ctx}]")
    caches = {"k_cache": t["k_cache"], "ckv_cache": t["ckv_cache"]}
    scales = {"k_cache": t["k_rope_scale"], "ckv_cache": t["c_kv_scale"]}
    _cache_dtypes(t["kv"], caches, scales, soc, ctx)
    _tensor_shapes(t["kv"], t["gamma"], t["cos"], t["sin"], t["v"], ctx)
    z = _sizes(t["kv"], t["gamma"], t["cos"], t["v"], soc, ctx)
    if soc is not None and cache_mode in ("PA_BNSD", "PA_NZ") + BLOCKED and t["cos"].shape[2] != z["S"]:
        raise TilingError(f"cos: S = 1 broadcast is not supported in {cache_mode} mode on {soc} "
                          f"[{ctx}]")
    limit = _cache_shapes(caches, z, cache_mode, soc, ctx)
    k_quant, c_quant = _quant(t, caches, z, cache_mode, t["cos"].shape[2], soc, ctx)
    block_size = t["k_cache"].shape[1] if cache_mode in PAGED else None
    slots = _index(t["index"], cache_mode, z, limit, block_size, ctx, values)
    quantised = k_quant[0] is not None or c_quant[0] is not None
    outputs_kv = outputs_kv and (cache_mode in PAGED or (t["v"] is not None and quantised))
    z["layout"] = LAYOUT_OF[cache_mode]
    return KvCacheArgs(t["kv"], t["gamma"], t["cos"], t["sin"], t["v"], t["k_cache"],
                       t["ckv_cache"], k_quant, c_quant, eps, cache_mode, slots, outputs_kv, z, soc)
