"""QkvRmsNormRopeCache (docs/qkv_rms_norm_rope_cache.md §1-§3).

qkv ``(B*S, N*D)`` is split into q (Nq heads), k (Nk) and v (Nv) of head size D; q and k are
normalised per head (``refspec.spec.rmsnorm.rms_norm`` with q_gamma and k_gamma) and rotated
half-and-half (RotaryPositionEmbedding's half block ``ROPE_FORWARD[RopeMode.HALF]``, the
document's cat(-y2, y1)); q_out is q's result; k and v are quantised when their cache is int8,
``kRoPE / kScale + kOffset`` rounded half to even and clamped (errata E28), and written into the
PA_NZ caches ``(BlockNum, heads*D/C0, BlockSize, C0)`` at ``index[t]`` (-1: skipped). Float64 on
the exact inputs, each output rounded once; the caches returned are new arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .dtypes import round_to, to_float64
from .enums import RopeMode
from .kv_cache import cache_output, element_offsets, nz_width, written
from .qkv_norm_rope_checks import check_qkv_args
from .quant import quant_sum_abs, quant_value
from .rmsnorm import rms_norm, rms_norm_sum_abs
from .rope import ROPE_FORWARD
from .terms import (CACHE, COPY, QUANTISED, ROW_REDUCTION, CacheTerms, OutputTerms,
                    rope_elementwise_sum_abs)

__all__ = ["QkvRmsNormRopeCacheOutputs", "qkv_rms_norm_rope_cache", "qkv_rms_norm_rope_cache_terms"]

ROTATE = ROPE_FORWARD[RopeMode.HALF]


class QkvRmsNormRopeCacheOutputs(NamedTuple):
    """q_out ``(B*S, Nq*D)``, the caches after the call (``CacheWrites`` with
    ``whole_caches=False``), and when is_output_qkv the values before quantisation and scatter
    (q's is q_out; k's ``(B*S, Nk*D)``, v's ``(B*S, Nv*D)``), else None."""

    q_out: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    q_out_before_quant: np.ndarray | None
    k_out_before_quant: np.ndarray | None
    v_out_before_quant: np.ndarray | None


def _tensors(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale,
             k_offset, v_offset) -> dict:
    return {"qkv": qkv, "q_gamma": q_gamma, "k_gamma": k_gamma, "cos": cos, "sin": sin,
            "index": index, "k_cache": k_cache, "v_cache": v_cache, "k_scale": k_scale,
            "v_scale": v_scale, "k_offset": k_offset, "v_offset": v_offset}


def _parts(a) -> tuple:
    """q, k, v = SplitVD(qkv) as (T, heads, D), and the tables (T, 1, D)."""
    z, t = a.sizes, a.t
    T, D = z["B"] * z["S"], z["D"]
    qkv = t["qkv"].reshape(T, z["N"], D)
    q, k, v = qkv[:, :z["Nq"]], qkv[:, z["Nq"]:z["Nq"] + z["Nk"]], qkv[:, z["Nq"] + z["Nk"]:]
    tables = []
    for name in ("cos", "sin"):
        c = t[name]
        c = np.repeat(c, z["S"], axis=0) if c.shape[0] != T else c       # one row per batch
        tables.append(c.reshape(T, 1, D))
    return q, k, v, tuple(tables)


def _embed(x, gamma, tables, epsilon, absolute=False):
    """y_embed of RmsNorm(x) (``absolute``: its S), block by block."""
    g = gamma.reshape(1, 1, -1)
    norm = rms_norm_sum_abs if absolute else rms_norm
    y, = by_blocks(lambda x64, g64: norm(x64, g64, epsilon), x, (g,))   # y = RmsNorm(x)
    if absolute:
        return by_blocks(lambda p, c, s: rope_elementwise_sum_abs(p, c, s, RopeMode.HALF, grad=False),
                         y, tables)[0]
    return by_blocks(ROTATE, y, tables)[0]                               # y_embed = y*cos + y_RoPE*sin


def _offsets(a, cache, heads):
    z = a.sizes
    return element_offsets(a.slots, "NZ", (z["block_num"], z["block_size"], heads, z["D"]),
                           nz_width(cache.dtype))


def qkv_rms_norm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache,
                            k_scale=None, v_scale=None, k_offset=None, v_offset=None,
                            qkv_size=None, head_nums=None, epsilon=1e-6, cache_mode="PA_NZ",
                            is_output_qkv=False, *, soc=None, out_dtype=None, whole_caches=True):
    """aclnnQkvRmsNormRopeCache: ``(q_out, k_cache, v_cache, q_out_before_quant,
    k_out_before_quant, v_out_before_quant)`` (docs/qkv_rms_norm_rope_cache.md, Parameters,
    §1-§2). ``qkv_size`` = [B, S, N, D] and ``head_nums`` = [Nq, Nk, Nv] are required; the
    API's q_out buffer is not an argument (every row of it is written). ``soc`` None checks
    what the math needs, "A2"/"A3" the profile's rules (§4); ``out_dtype`` None returns each
    output in its dtype rounded once, ``np.float64`` the exact values. ``whole_caches=False``
    returns each cache as ``refspec.spec.kv_cache.CacheWrites`` (the cache given, the offsets
    written and their exact values; its ``whole(out_dtype)`` is the cache returned otherwise)."""
    out_dtype = check_out_dtype(out_dtype, "qkv_rms_norm_rope_cache")
    a = check_qkv_args("qkv_rms_norm_rope_cache", _tensors(
        qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset,
        v_offset), qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, soc)
    q, k, v, tables = _parts(a)
    q_embed = _embed(q, a.t["q_gamma"], tables, a.epsilon)              # q: RmsNorm, RoPE -> q_out
    k_embed = _embed(k, a.t["k_gamma"], tables, a.epsilon)
    v64 = to_float64(v)
    caches = []
    for name, values, quant, heads in (("k_cache", k_embed, a.k_quant, a.sizes["Nk"]),
                                       ("v_cache", v64, a.v_quant, a.sizes["Nv"])):
        scale, offset = (None if p is None else to_float64(p) for p in quant)
        quantised = quant_value(values, scale, offset, divide=True)     # kQuant = kRoPE / kScale + kOffset
        offsets = _offsets(a, a.t[name], heads)
        caches.append(cache_output(a.t[name], quantised, offsets, out_dtype, whole_caches))
    dt = output_dtype(a.t["qkv"].dtype, out_dtype)
    T = q.shape[0]
    q_out = round_to(q_embed.reshape(T, -1), dt)
    before = (q_out, round_to(k_embed.reshape(T, -1), dt), round_to(v64.reshape(T, -1), dt)) \
        if a.outputs_qkv else (None, None, None)
    return QkvRmsNormRopeCacheOutputs(q_out, *caches, *before)


def qkv_rms_norm_rope_cache_terms(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache,
                                  k_scale=None, v_scale=None, k_offset=None, v_offset=None,
                                  qkv_size=None, head_nums=None, epsilon=1e-6, cache_mode="PA_NZ",
                                  is_output_qkv=False, *, soc=None, out_dtype=None) -> dict:
    """Tolerance terms (docs/qkv_rms_norm_rope_cache.md §3): q_out and k's values are row
    reductions over D (RMSNorm), S the rotation's sum of |products| of |RmsNorm|; each cache is
    ``CACHE`` with its written offsets and values quantised (int8) or row reductions (k) and
    copies (v); the values before quantisation like q_out, k's and v's."""
    a = check_qkv_args("qkv_rms_norm_rope_cache_terms", _tensors(
        qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale, v_scale, k_offset,
        v_offset), qkv_size, head_nums, epsilon, cache_mode, is_output_qkv, soc)
    q, k, v, tables = _parts(a)
    D, T = a.sizes["D"], q.shape[0]
    S_q = _embed(q, a.t["q_gamma"], tables, a.epsilon, absolute=True)
    S_k = _embed(k, a.t["k_gamma"], tables, a.epsilon, absolute=True)
    S_v = np.abs(to_float64(v))
    out = {"q_out": OutputTerms(ROW_REDUCTION, D, S_q.reshape(T, -1))}
    for name, S, quant, heads, cls, K in (("k_cache", S_k, a.k_quant, a.sizes["Nk"], ROW_REDUCTION, D),
                                          ("v_cache", S_v, a.v_quant, a.sizes["Nv"], COPY, None)):
        if quant[0] is not None:
            S = quant_sum_abs(S, *(None if p is None else to_float64(p) for p in quant), divide=True)
            cls = QUANTISED
        flat, S_w = written(_offsets(a, a.t[name], heads), S)
        out[name] = CacheTerms(CACHE, K, S_w, flat, cls)
    if a.outputs_qkv:
        out["q_out_before_quant"] = out["q_out"]
        out["k_out_before_quant"] = OutputTerms(ROW_REDUCTION, D, S_k.reshape(T, -1))
        out["v_out_before_quant"] = OutputTerms(COPY)
    return out
