"""DequantRopeQuantKvcache and RopeQuantKvcache (docs/dequant_rope_quant_kvcache.md §1-§3).

x (B, S, H) or (B, H), int32 dequantised first (``refspec.spec.quant.dequant``), is split along
H by sizeSplits into q, k and v of head size D; q and k are rotated with ApplyRotaryPosEmb's
rotate-half block ``ROPE_FORWARD[RopeMode.HALF]`` (cos and sin (B, S, 1, D), shared by the
heads); k and v are quantised, ``x / scale + offset`` rounded half to even into int8
(``refspec.spec.quant.quant_value`` with ``divide``, errata E29), and written into the caches
(contiguous: batch b's tokens at rows indices[b]..indices[b]+S-1 of its cache row; page: the
caches seen as ``(C1*C2, Nkv, D)``, token t at row indices[t]). Float64 on the exact inputs, every
output rounded once; the caches returned are new arrays. RopeQuantKvcache is the same
computation with a float16 x, contiguous caches and one scale and integer offset for k and v
(errata E48): ``rope_quant_kvcache`` says so in code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, check_soc, output_dtype
from .dequant_rope_checks import check_dequant_args
from .dtypes import float16, round_to, to_float64
from .enums import RopeMode
from .errors import ParamInvalidError, ParamNullptrError, TilingError
from .kv_cache import cache_output, element_offsets, written
from .kv_cache_checks import array_of, check_kind
from .quant import dequant, quant_sum_abs, quant_value
from .rope import ROPE_FORWARD
from .terms import CACHE, COPY, ELEMENTWISE, QUANTISED, CacheTerms, OutputTerms, rope_elementwise_sum_abs

__all__ = ["DequantRopeQuantKvcacheOutputs", "dequant_rope_quant_kvcache", "rope_quant_kvcache",
           "dequant_rope_quant_kvcache_terms"]

ROTATE = ROPE_FORWARD[RopeMode.HALF]


class DequantRopeQuantKvcacheOutputs(NamedTuple):
    """qOut (B, S, Nq, D) or (B, Nq, D); kOut and vOut likewise with Nkv heads (None unless
    kv_output); the caches after the call (``CacheWrites`` with ``whole_caches=False``)."""

    q_out: np.ndarray
    k_out: np.ndarray | None
    v_out: np.ndarray | None
    k_cache: np.ndarray
    v_cache: np.ndarray


def _tensors(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
             weight_scale, activation_scale, bias) -> dict:
    return {"x": x, "cos": cos, "sin": sin, "k_cache": k_cache, "v_cache": v_cache,
            "indices": indices, "scale_k": scale_k, "scale_v": scale_v, "offset_k": offset_k,
            "offset_v": offset_v, "weight_scale": weight_scale,
            "activation_scale": activation_scale, "bias": bias}


def _x(a, absolute=False) -> np.ndarray:
    """dequantX (B, S, H) float64 (``absolute``: its S, the sum of |terms| of the dequantisation)."""
    t, z = a.t, a.sizes
    x = to_float64(t["x"]).reshape(z["B"], z["S"], z["H"])
    if not z["dequant"]:
        return np.abs(x) if absolute else x
    f = np.abs if absolute else (lambda v: v)
    bias = t["bias"]
    act = None if t["activation_scale"] is None else f(to_float64(t["activation_scale"])).reshape(z["B"], z["S"])
    return dequant(f(x), f(to_float64(t["weight_scale"])), act,           # Dequant(x, ...)
                   None if bias is None else f(to_float64(bias)), bias is not None and bias.dtype.kind in "iu")


def _split(X, z) -> tuple:
    """q, k, v = SplitTensor(dequantX, dim=-1, sizeSplits), as (B, S, heads, D)."""
    D, q, k = z["D"], z["Nq"] * z["D"], z["Nkv"] * z["D"]
    heads = lambda p: p.reshape(z["B"], z["S"], -1, D)                    # noqa: E731
    return heads(X[..., :q]), heads(X[..., q:q + k]), heads(X[..., q + k:])


def _tables(a) -> tuple:
    z = a.sizes
    return tuple(a.t[n].reshape(z["B"], z["S"], 1, z["D"]) for n in ("cos", "sin"))


def _shaped(y, a):
    """(B, S, N, D) back to (B, N, D) for a 2-D x."""
    return y.reshape(y.shape[0], *y.shape[2:]) if a.t["x"].ndim == 2 else y


def _quant(a, name):
    z = a.sizes
    scale, offset = (None if a.t[p] is None else to_float64(a.t[p]).reshape(z["Nkv"], z["D"])
                     for p in (f"scale_{name}", f"offset_{name}"))
    return scale, offset


def _offsets(a, cache):
    return element_offsets(a.slots, "ND", cache.shape)


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                               offset_k=None, offset_v=None, weight_scale=None,
                               activation_scale=None, bias=None, size_splits=None,
                               quant_mode="static", layout="BSND", kv_output=False,
                               cache_mode="contiguous", *, soc=None, out_dtype=None,
                               whole_caches=True):
    """aclnnDequantRopeQuantKvcache: ``(q_out, k_out, v_out, k_cache, v_cache)``
    (docs/dequant_rope_quant_kvcache.md, Parameters, §1-§2).

    ``size_splits`` (required) = ``[Nq*D, Nkv*D, Nkv*D]``; the caches (C1, C2, Nkv, D) int8;
    indices int32, (B,) in contiguous mode, ``(B*S,)`` in page mode. ``soc`` None checks what the
    math needs, "A2"/"A3" the profile's rules (§4). ``out_dtype`` None returns q/k/v in cos's
    dtype and the caches as int8, each rounded once; ``np.float64`` the exact values (the
    caches: the values before rounding at the rows written). ``whole_caches=False`` returns
    each cache as ``refspec.spec.kv_cache.CacheWrites`` (the cache given, the offsets written
    and their exact values; its ``whole(out_dtype)`` is the cache returned otherwise).
    """
    out_dtype = check_out_dtype(out_dtype, "dequant_rope_quant_kvcache")
    a = check_dequant_args("dequant_rope_quant_kvcache", _tensors(
        x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
        weight_scale, activation_scale, bias), size_splits, quant_mode, layout, kv_output,
        cache_mode, soc)
    q, k, v = _split(_x(a), a.sizes)
    tables = _tables(a)
    q_out, = by_blocks(ROTATE, q, tables)                              # qOut = ApplyRotaryPosEmb(q)
    k_out, = by_blocks(ROTATE, k, tables)                              # kOut = ApplyRotaryPosEmb(k)
    caches = []
    for cache, values, name in ((a.t["k_cache"], k_out, "k"), (a.t["v_cache"], v, "v")):
        quantised = quant_value(values, *_quant(a, name), divide=True)  # Quant(kOut, scaleK, offsetK)
        T = a.sizes["B"] * a.sizes["S"]
        caches.append(cache_output(cache, quantised.reshape(T, a.sizes["Nkv"], a.sizes["D"]),
                                   _offsets(a, cache), out_dtype, whole_caches))  # kCacheRef[...] = quantK
    dt = output_dtype(a.t["cos"].dtype, out_dtype)
    kv = (_shaped(round_to(k_out, dt), a), _shaped(round_to(v, dt), a)) if a.kv_output else (None, None)
    return DequantRopeQuantKvcacheOutputs(_shaped(round_to(q_out, dt), a), *kv, *caches)


def dequant_rope_quant_kvcache_terms(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                                     offset_k=None, offset_v=None, weight_scale=None,
                                     activation_scale=None, bias=None, size_splits=None,
                                     quant_mode="static", layout="BSND", kv_output=False,
                                     cache_mode="contiguous", *, soc=None,
                                     out_dtype=None) -> dict:
    """Tolerance terms (docs/dequant_rope_quant_kvcache.md §3): q_out and k_out elementwise, S
    the rotation's sum of |products| of dequantX's S (``|x*ws*as| + |bias|``); v_out a copy, or
    elementwise when dequantised; each cache ``CACHE`` with quantised values, S = S/|scale| +
    |offset| at the offsets written."""
    a = check_dequant_args("dequant_rope_quant_kvcache_terms", _tensors(
        x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v,
        weight_scale, activation_scale, bias), size_splits, quant_mode, layout, kv_output,
        cache_mode, soc)

    def rope_abs(p, c, s):
        return rope_elementwise_sum_abs(p, c, s, RopeMode.HALF, grad=False)

    q, k, v = _split(_x(a, absolute=True), a.sizes)
    S_q, = by_blocks(rope_abs, q, _tables(a))
    S_k, = by_blocks(rope_abs, k, _tables(a))
    out = {"q_out": OutputTerms(ELEMENTWISE, None, _shaped(S_q, a))}
    if a.kv_output:
        out["k_out"] = OutputTerms(ELEMENTWISE, None, _shaped(S_k, a))
        out["v_out"] = OutputTerms(ELEMENTWISE, None, _shaped(v, a)) if a.sizes["dequant"] \
            else OutputTerms(COPY)
    T = a.sizes["B"] * a.sizes["S"]
    for name, S in (("k", S_k), ("v", v)):
        cache = a.t[f"{name}_cache"]
        S_quant = quant_sum_abs(S, *_quant(a, name), divide=True)
        flat, S_w = written(_offsets(a, cache), S_quant.reshape(T, a.sizes["Nkv"], a.sizes["D"]))
        out[f"{name}_cache"] = CacheTerms(CACHE, None, S_w, flat, QUANTISED)
    return out


def rope_quant_kvcache(qkv, cos, sin, quant_scale, quant_offset, k_cache, v_cache, indice,
                       size_splits=None, layout="BSND", kv_output=False, *, soc=None,
                       out_dtype=None):
    """RopeQuantKvcache (graph operator, A2 only): DequantRopeQuantKvcache with a float16 qkv
    (no dequantisation), contiguous caches, and one quant_scale (D,) float32 and one
    quant_offset (D,) int32 for both k and v, applied to every head
    (docs/dequant_rope_quant_kvcache.md §5, errata E48). Returns the same five outputs."""
    ctx = f"rope_quant_kvcache size_splits={size_splits!r}"
    soc = check_soc(soc, "rope_quant_kvcache", allowed=("A2",))
    scales = {}
    for name, value, kinds in (("quant_scale", quant_scale, (np.float32,) if soc else ("float",)),
                               ("quant_offset", quant_offset, (np.int32,) if soc else ("int",))):
        if value is None:
            raise ParamNullptrError(f"{name}: required tensor is missing (got None) [{ctx}]")
        arr = array_of(value, name, ctx)
        check_kind(arr, name, kinds, ctx)
        scales[name] = arr
    if soc is not None and qkv is not None and np.asarray(qkv).dtype != float16:
        raise ParamInvalidError(f"qkv: dtype {np.asarray(qkv).dtype} is not allowed; allowed: "
                                f"float16 [{ctx} soc={soc}]")
    heads = np.shape(k_cache)[2] if np.ndim(k_cache) == 4 else 1
    for name, arr in scales.items():
        if arr.ndim != 1 or (np.ndim(k_cache) == 4 and arr.shape[0] != np.shape(k_cache)[3]):
            raise TilingError(f"{name}: shape {arr.shape}; allowed: (D,), the caches' head size "
                              f"[{ctx}]")
    scale = np.tile(scales["quant_scale"], heads)                       # one scale for every head
    offset = np.tile(scales["quant_offset"].astype(np.float64), heads).astype(np.float32)
    return dequant_rope_quant_kvcache(qkv, cos, sin, k_cache, v_cache, indice, scale, scale,
                                      offset, offset, size_splits=size_splits, layout=layout,
                                      kv_output=kv_output, cache_mode="contiguous",
                                      soc=None if soc is None else "A2", out_dtype=out_dtype)
