"""KvRmsNormRopeCache and KvRmsNormRopeCacheV2 (docs/kv_rms_norm_rope_cache.md §1-§3).

MLA's key prologue: RMSNorm, RoPE, static quantisation and a scatter into two caches, in place.
V1 (kv merged, DeepSeek-V3): kv's last axis is [rms part Dv | rope part Dk]; RMSNorm of the
first part goes to ckv_cache, the interleaved RoPE of the second to k_cache. V2 (kv and v
separate): RMSNorm of all of kv, RoPE of its first rope-size values, the rest passed through, to
k_cache; v itself to ckv_cache. The rotation is RotaryPositionEmbedding's interleave-half
formula block ``ROPE_FORWARD[RopeMode.INTERLEAVE_HALF]`` (the document's ``x1 = x[..., ::2]``,
``x2 = x[..., 1::2]``, ``cat(x1, x2)*cos + cat(-x2, x1)*sin``), the normalisation
``refspec.spec.rmsnorm.rms_norm``, the quantisation ``refspec.spec.quant.quant_value``
(``x * scale + offset``), the scatter ``refspec.spec.kv_cache``. Everything is float64 on the
exact inputs; each output is rounded once. The caches returned are new arrays: the inputs are
never changed.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .dtypes import round_to
from .enums import RopeMode
from .kv_cache import cache_output, element_offsets, nz_width, written
from .kv_norm_rope_checks import check_kv_cache_args
from .quant import quant_sum_abs, quant_value
from .rmsnorm import rms_norm, rms_norm_sum_abs
from .rope import ROPE_FORWARD, cat
from .terms import (CACHE, COPY, ELEMENTWISE, QUANTISED, ROW_REDUCTION, CacheTerms, OutputTerms,
                    needs_elementwise_sum_abs, rope_elementwise_sum_abs)

__all__ = ["KvRmsNormRopeCacheOutputs", "kv_rms_norm_rope_cache", "kv_rms_norm_rope_cache_v2",
           "kv_rms_norm_rope_cache_terms"]

ROTATE = ROPE_FORWARD[RopeMode.INTERLEAVE_HALF]


class KvRmsNormRopeCacheOutputs(NamedTuple):
    """The caches after the call (whole, in their dtypes; ``CacheWrites`` when asked with
    ``whole_caches=False``) and, when is_output_kv is set and takes effect, k_rope (the
    rotated k part) and c_kv (the normalised part, V2: v), else None."""

    k_cache: np.ndarray
    ckv_cache: np.ndarray
    k_rope: np.ndarray | None
    c_kv: np.ndarray | None


def _tensors(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
             k_rope_offset, c_kv_offset, v) -> dict:
    return {"kv": kv, "gamma": gamma, "cos": cos, "sin": sin, "index": index, "k_cache": k_cache,
            "ckv_cache": ckv_cache, "k_rope_scale": k_rope_scale, "c_kv_scale": c_kv_scale,
            "k_rope_offset": k_rope_offset, "c_kv_offset": c_kv_offset, "v": v}


def _norm(x, gamma, epsilon, formula=rms_norm):
    """RMSNorm (or its S) of the rows of x, block by block."""
    def step(x64, g):
        return formula(x64, g, epsilon)
    return by_blocks(step, x, (gamma.reshape(1, 1, 1, -1),))[0]


def _values(a) -> tuple:
    """The exact (float64) values of the k part (rope_out) and of the ckv part, (B, N, S, D)."""
    rms, rope = a.sizes["rms_size"], a.sizes["rope_size"]
    if a.v is None:                                                    # V1
        c = _norm(a.kv[..., :rms], a.gamma, a.epsilon)                 # y = RmsNorm(kv[..., :Dv])
        k, = by_blocks(ROTATE, a.kv[..., rms:], (a.cos, a.sin))        # y_rope of x = kv[..., Dv:]
        return k, c
    y = _norm(a.kv, a.gamma, a.epsilon)                                # y = RmsNorm(kv)
    head, = by_blocks(ROTATE, y[..., :rope], (a.cos, a.sin))           # y_rope of RmsNorm(x)[..., :rope_size]
    return cat(head, y[..., rope:]), a.v.astype(np.float64)           # rope_out, vOptional


def _per_head(p):
    """A scale/offset of shape (N, D) seen as (N, 1, D) against (B, N, S, D) values."""
    return p if p is None or p.ndim < 2 else p.astype(np.float64).reshape(p.shape[0], 1, -1)


def _quantised(values, quant):
    scale, offset = (_per_head(p) for p in quant)
    return quant_value(values, scale, offset)                          # Quant(x, scale, offset)


def _tokens(values):
    """(B, N, S, D) -> (B*S, N, D): the values of each token, in the order of the slots."""
    B, N, S, D = values.shape
    return values.transpose(0, 2, 1, 3).reshape(B * S, N, D)


def _offsets(a, cache):
    return element_offsets(a.slots.reshape(-1), a.sizes["layout"], cache.shape, nz_width(cache.dtype))


def _kv_rms_norm_rope_cache(op, tensors, epsilon, cache_mode, is_output_kv, soc, out_dtype,
                            whole_caches):
    out_dtype = check_out_dtype(out_dtype, op)
    a = check_kv_cache_args(op, tensors, epsilon, cache_mode, is_output_kv, soc)
    k, c = _values(a)
    caches = []
    for cache, values, quant in ((a.k_cache, k, a.k_quant), (a.ckv_cache, c, a.c_quant)):
        q = _tokens(_quantised(values, quant))
        offsets = _offsets(a, cache)
        caches.append(cache_output(cache, q, offsets, out_dtype, whole_caches))  # cache[scatter_idx] = Quant(x)
    dt = output_dtype(a.kv.dtype, out_dtype)
    extra = (round_to(k, dt), round_to(c, dt)) if a.outputs_kv else (None, None)   # k_rope, c_kv
    return KvRmsNormRopeCacheOutputs(*caches, *extra)


def kv_rms_norm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=None,
                           c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, epsilon=1e-5,
                           cache_mode="Norm", is_output_kv=False, *, soc=None, out_dtype=None,
                           whole_caches=True):
    """aclnnKvRmsNormRopeCache (V1, kv merged): ``(k_cache, ckv_cache, k_rope, c_kv)``
    (docs/kv_rms_norm_rope_cache.md, Parameters, §1-§2).

    kv (B, 1, S, Dv + Dk); gamma (Dv,); cos, sin (B, 1, S or 1, Dk); index by ``cache_mode``
    (Norm (B, S), PA/PA_BNSD/PA_NZ ``(B*S,)``, PA_BLK_BNSD/PA_BLK_NZ
    ``(B*ceil(S/block_size),)``; -1 skips); k_cache, ckv_cache the caches (Norm
    (B, 1, Scache, D), paged (block_num, block_size, 1, D)), returned as new arrays with the
    tokens written. A scale makes its cache quantised (int8; on 950 also the float8 formats).
    ``soc`` None checks what the math needs, "A2"/"A3"/"950" the profile's rules (§4).
    ``out_dtype`` None returns each output in its dtype, rounded once; ``np.float64`` the exact
    values (a quantised cache: the value before rounding at the slots written).
    ``whole_caches=False`` returns each cache as ``refspec.spec.kv_cache.CacheWrites``: the
    cache given, the flat offsets written and their exact values (its ``whole(out_dtype)`` is
    the cache returned otherwise), as a golden stores them, without a float64 copy of the cache.
    """
    tensors = _tensors(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
                       k_rope_offset, c_kv_offset, None)
    return _kv_rms_norm_rope_cache("kv_rms_norm_rope_cache", tensors, epsilon, cache_mode,
                                   is_output_kv, soc, out_dtype, whole_caches)


def kv_rms_norm_rope_cache_v2(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=None,
                              c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None,
                              epsilon=1e-5, cache_mode="Norm", is_output_kv=False, *, soc=None,
                              out_dtype=None, whole_caches=True):
    """aclnnKvRmsNormRopeCacheV2: V1 when ``v`` is None (the API's backward compatibility),
    else kv and v separate (V2): kv (B, N, S, Dk) is normalised whole and its first cos-width
    values rotated (to k_cache, D = Dk), v (B, N, S, Dv) goes to ckv_cache as it is (quantised
    when c_kv_scale is given); c_kv is then v (docs/kv_rms_norm_rope_cache.md, §1-§2).
    ``soc``, ``out_dtype`` and ``whole_caches`` as in ``kv_rms_norm_rope_cache``."""
    tensors = _tensors(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
                       k_rope_offset, c_kv_offset, v)
    return _kv_rms_norm_rope_cache("kv_rms_norm_rope_cache_v2", tensors, epsilon, cache_mode,
                                   is_output_kv, soc, out_dtype, whole_caches)


def _sums(a) -> tuple:
    """S of the k and ckv values, their classes and K (docs/kv_rms_norm_rope_cache.md §3)."""
    rms, rope = a.sizes["rms_size"], a.sizes["rope_size"]
    if a.v is None:
        S_c = _norm(a.kv[..., :rms], a.gamma, a.epsilon, rms_norm_sum_abs)
        S_k, = by_blocks(lambda x, c, s: rope_elementwise_sum_abs(x, c, s, RopeMode.INTERLEAVE_HALF,
                                                                  grad=False),
                         a.kv[..., rms:], (a.cos, a.sin))
        return (S_k, ELEMENTWISE, None), (S_c, ROW_REDUCTION, rms)
    S_y = _norm(a.kv, a.gamma, a.epsilon, rms_norm_sum_abs)
    head, = by_blocks(lambda x, c, s: rope_elementwise_sum_abs(x, c, s, RopeMode.INTERLEAVE_HALF,
                                                               grad=False),
                      S_y[..., :rope], (a.cos, a.sin))
    return (cat(head, S_y[..., rope:]), ROW_REDUCTION, rms), (np.abs(a.v.astype(np.float64)), COPY, None)


def _cache_terms(a, cache, S, cls, K, quant) -> CacheTerms:
    """A cache: the flat offsets written, the class of the written values (quantised when the
    cache is) and their S in the order of the offsets."""
    if quant[0] is not None:
        S = quant_sum_abs(S, *(_per_head(p) for p in quant))
        cls = QUANTISED
    offsets = _offsets(a, cache)
    S_tokens = None if cls == COPY else _tokens(S)
    flat, S_written = written(offsets, S_tokens)
    return CacheTerms(CACHE, K, S_written, flat, cls)


def kv_rms_norm_rope_cache_terms(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale=None,
                                 c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, v=None,
                                 epsilon=1e-5, cache_mode="Norm", is_output_kv=False, *, soc=None,
                                 out_dtype=None) -> dict[str, OutputTerms]:
    """Tolerance terms of every output (docs/kv_rms_norm_rope_cache.md §3), by output name:
    each cache is ``CACHE`` (its written offsets, the class of the values written, their S);
    k_rope is elementwise (V1) or a row reduction over Dk (V2), c_kv a row reduction over Dv
    (V1) or a copy of v (V2)."""
    tensors = _tensors(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
                       k_rope_offset, c_kv_offset, v)
    a = check_kv_cache_args("kv_rms_norm_rope_cache_terms", tensors, epsilon, cache_mode,
                            is_output_kv, soc)
    (S_k, cls_k, K_k), (S_c, cls_c, K_c) = _sums(a)
    out = {"k_cache": _cache_terms(a, a.k_cache, S_k, cls_k, K_k, a.k_quant),
           "ckv_cache": _cache_terms(a, a.ckv_cache, S_c, cls_c, K_c, a.c_quant)}
    if a.outputs_kv:
        dt = output_dtype(a.kv.dtype, check_out_dtype(out_dtype, "kv_rms_norm_rope_cache_terms"))
        keep = cls_k != ELEMENTWISE or needs_elementwise_sum_abs(dt)
        out["k_rope"] = OutputTerms(cls_k, K_k, S_k if keep else None)
        out["c_kv"] = OutputTerms(cls_c, K_c, S_c)
    return out
