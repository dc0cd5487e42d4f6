"""Device-like kernels of the KV-cache operators, and deliberately broken variants of them.

Written from the documents' lines (docs/kv_rms_norm_rope_cache.md §1-§2,
docs/dequant_rope_quant_kvcache.md §1-§2, docs/qkv_rms_norm_rope_cache.md §1-§2), independent of
refspec's arithmetic: float32 RMSNorm (squareX, the mean as NumPy's float32 sum, sqrt, divide,
gamma), the rotation by its partner halves in float32, the quantisation ``x*scale + offset`` (or
``/scale``) in float32 rounded once (int8 ``rint`` and clamp; float8 clamped to the format's
largest value, then ml_dtypes' conversion; HiFloat8 by refspec's conversion of the float32 value,
the one format no library here has), and the scatter written token by token into the cache it
is given, **in place**, from the documents' index tables (Norm: the token's position in its
batch's cache; paged: the slot; PA_BLK_*: a block's first slot; the fractal NZ layout through
an explicit view of the block's tiles).

The front end (what a call accepts, and the operator's decisions the spec's validation records:
A2/A3 V1 ignoring offsets, whether k_rope/c_kv are produced) is the spec's validation, standing
in for the aclnn front end as in ``numpy_float32.py``.

``BUGS``: ``neighbour_slot`` (each token into the slot after its own), ``block_slot_swapped``
(a paged slot's block and offset in the block exchanged: page and contiguous numbering confused),
``nz_as_nd`` (a fractal cache written as if row-major), ``block_cleared`` (each written slot's
whole block zeroed first: slots outside the index changed), ``scale_divided`` (the scale
divides where it multiplies, or the reverse), ``offset_sign`` (the offset subtracted),
``truncation`` (codes rounded toward zero), ``wrap`` (int8 codes wrapped instead of saturated).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from refspec.spec.dequant_rope_checks import check_dequant_args
from refspec.spec.kv_norm_rope_checks import check_kv_cache_args
from refspec.spec.qkv_norm_rope_checks import check_qkv_args
from refspec.spec.quant_dtypes import HIF8_MAX, hifloat8, round_code

F32 = np.float32
BUGS = ("neighbour_slot", "block_slot_swapped", "nz_as_nd", "block_cleared", "scale_divided",
        "offset_sign", "truncation", "wrap")
_FLOAT8_MAX = {np.dtype(ml_dtypes.float8_e4m3fn): 448.0, np.dtype(ml_dtypes.float8_e5m2): 57344.0}


# --- the arithmetic -------------------------------------------------------------------------

def rms_norm(x, gamma, eps):
    """RMSNorm in float32; rows with huge values are scaled by their largest magnitude first so
    that the squares do not overflow (a valid float32 order, as implementations.py's LayerNorm)."""
    x = x.astype(F32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        top = np.max(np.abs(x), axis=-1, keepdims=True)
        m = np.where(top > F32(2.0 ** 60), top, F32(1))
        xs = x / m
        mean = np.add.reduce(xs * xs, axis=-1, dtype=F32, keepdims=True) / F32(x.shape[-1])
        rms = m * np.sqrt(mean + F32(eps) / (m * m))
    return x / rms * gamma.astype(F32)


def interleave_rope(x, cos, sin):
    """cat(x1, x2)*cos + cat(-x2, x1)*sin with x1, x2 the even and odd columns."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return np.concatenate((x1, x2), -1) * cos + np.concatenate((-x2, x1), -1) * sin


def half_rope(x, cos, sin):
    """x*cos + cat(-x2, x1)*sin with x1, x2 the halves."""
    h = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[..., h:], x[..., :h]), -1) * sin


def quantise(x, scale, offset, divide, bug):
    """x*scale + offset (``divide``: x/scale + offset) in float32."""
    if scale is None:
        return x
    scale = scale.astype(F32)
    with np.errstate(over="ignore"):
        return _quantised(x, scale, offset, divide, bug)


def _quantised(x, scale, offset, divide, bug):
    if divide != (bug == "scale_divided"):
        x = x / scale
    else:
        x = x * scale
    if offset is not None:
        x = x - offset.astype(F32) if bug == "offset_sign" else x + offset.astype(F32)
    return x


def to_cache_dtype(x32, dtype, bug):
    """float32 values rounded once into the cache's dtype."""
    dt = np.dtype(dtype)
    if dt == np.int8:
        r = np.trunc(x32) if bug == "truncation" else np.rint(x32)
        if bug == "wrap":
            with np.errstate(invalid="ignore"):
                return (np.nan_to_num(r).astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)
        return np.clip(r, -128, 127).astype(np.int8)
    if dt in _FLOAT8_MAX:
        top = F32(_FLOAT8_MAX[dt])
        return (x32 if bug == "wrap" else np.clip(x32, -top, top)).astype(dt)
    if dt == hifloat8:
        return round_code(np.clip(x32, -HIF8_MAX, HIF8_MAX).astype(np.float64), hifloat8)
    if bug == "truncation":
        from implementations import round_toward_zero
        return round_toward_zero(x32, dt)
    return x32.astype(dt)


# --- the scatter, from the index tables -----------------------------------------------------

def paged_slots(index, mode, B, S, block_size):
    """(B*S,) slots of the tokens (-1: skipped) of a paged mode."""
    index = np.asarray(index, np.int64).reshape(-1)
    if mode not in ("PA_BLK_BNSD", "PA_BLK_NZ"):
        return index
    runs = index.reshape(B, -1)
    s = np.arange(S)
    start = runs[:, s // block_size]
    return np.where(start >= 0, start + s % block_size, -1).reshape(-1)


def write_tokens(cache, values, slots, nz: bool, bug):
    """values (T, N, D) into the paged ``cache`` (block_num, block_size, N, D) or its fractal
    form (block_num, N*D/C0, block_size, C0), at the slots (T,), in place."""
    T, N, D = values.shape
    block_num = cache.shape[0]
    block_size = cache.shape[2] if nz else cache.shape[1]
    keep = slots >= 0
    slots, values = slots[keep], values[keep]
    if bug == "neighbour_slot":
        slots = (slots + 1) % (block_num * block_size)
    block, row = slots // block_size, slots % block_size
    if bug == "block_slot_swapped":
        block, row = row % block_num, block % block_size
    if bug == "block_cleared":
        cache[block] = 0
    if nz and bug != "nz_as_nd":
        c0 = cache.shape[3]
        cache[block, :, row, :] = values.reshape(-1, N * D // c0, c0)   # the block's tiles
    else:
        flat = cache.reshape(block_num, block_size, N * D)
        flat[block, row, :] = values.reshape(-1, N * D)


# --- the operators ------------------------------------------------------------------------------

def _arithmetic(fn):
    """``fn`` in float32, or in float64 for a case in float64 (the math-only profile; no device
    has it), as implementations.run does."""
    def run(t, *args, **kwargs):
        global F32
        wide = any(np.asarray(v).dtype == np.float64 for v in t.values() if v is not None)
        saved, F32 = F32, (np.float64 if wide else np.float32)
        try:
            return fn(t, *args, **kwargs)
        finally:
            F32 = saved
    run.__doc__ = fn.__doc__
    return run


@_arithmetic
def kv_rms_norm_rope_cache(t: dict, epsilon, cache_mode, is_output_kv, soc, bug=None, v2=False):
    """KvRmsNormRopeCache(V2); updates t["k_cache"] and t["ckv_cache"] in place."""
    a = check_kv_cache_args("kv_rms_norm_rope_cache_v2" if v2 else "kv_rms_norm_rope_cache",
                            t, epsilon, cache_mode, is_output_kv, soc)
    z = a.sizes
    kv = np.asarray(t["kv"])
    dt = kv.dtype
    cos, sin = np.asarray(t["cos"]).astype(F32), np.asarray(t["sin"]).astype(F32)
    if t.get("v") is None:
        c = rms_norm(kv[..., :z["rms_size"]], np.asarray(t["gamma"]), epsilon)
        k = interleave_rope(kv[..., z["rms_size"]:].astype(F32), cos, sin)
    else:
        y = rms_norm(kv, np.asarray(t["gamma"]), epsilon)
        R = cos.shape[-1]
        k = np.concatenate((interleave_rope(y[..., :R], cos, sin), y[..., R:]), -1)
        c = np.asarray(t["v"]).astype(F32)
    B, N, S, _ = kv.shape
    for name, values, (scale, offset) in (("k_cache", k, a.k_quant), ("ckv_cache", c, a.c_quant)):
        cache = t[name]
        heads = lambda p: p if p is None or p.ndim < 2 else p.reshape(p.shape[0], 1, -1)  # noqa
        q = quantise(values, heads(scale), heads(offset), False, bug)
        codes = to_cache_dtype(q, cache.dtype, bug if scale is not None or bug == "truncation" else None)
        tokens = codes.transpose(0, 2, 1, 3).reshape(B * S, N, -1)     # token by token
        if cache_mode == "Norm":
            idx = np.asarray(t["index"], np.int64).reshape(B, S)
            b, s = np.nonzero(idx >= 0)
            pos = idx[b, s] + (bug == "neighbour_slot")
            cache[b, :, pos % cache.shape[2], :] = codes[b, :, s, :]
        else:
            nz = cache_mode in ("PA_NZ", "PA_BLK_NZ")
            block_size = cache.shape[1]
            if nz:                              # (block_num, block_size, N, D) as its tiles
                c0 = 32 // cache.dtype.itemsize
                tiles = cache.reshape(cache.shape[0], N * cache.shape[-1] // c0, block_size, c0)
                write_tokens(tiles, tokens, paged_slots(t["index"], cache_mode, B, S, block_size),
                             True, bug)
            else:
                write_tokens(cache, tokens, paged_slots(t["index"], cache_mode, B, S, block_size),
                             False, bug)
    extra = (k.astype(dt), c.astype(dt)) if a.outputs_kv else (None, None)
    return (t["k_cache"], t["ckv_cache"], *extra)


@_arithmetic
def dequant_rope_quant_kvcache(t: dict, attrs: dict, soc, bug=None):
    """DequantRopeQuantKvcache; updates t["k_cache"] and t["v_cache"] in place."""
    a = check_dequant_args("dequant_rope_quant_kvcache", t, attrs.get("size_splits"),
                           attrs.get("quant_mode", "static"), attrs.get("layout", "BSND"),
                           attrs.get("kv_output", False), attrs.get("cache_mode", "contiguous"), soc)
    z, u = a.sizes, a.t
    x = np.asarray(t["x"])
    B, S, D, Nq, Nkv = z["B"], z["S"], z["D"], z["Nq"], z["Nkv"]
    X = x.reshape(B, S, -1).astype(F32 if x.dtype != np.int32 else np.float64)
    if z["dequant"]:
        bias = u["bias"]
        if bias is not None and bias.dtype.kind in "iu":
            X = X + bias.astype(np.float64)
        X = (X * u["weight_scale"].astype(F32))
        if u["activation_scale"] is not None:
            X = X * u["activation_scale"].astype(F32).reshape(B, S, 1)
        if bias is not None and bias.dtype.kind not in "iu":
            X = X + bias.astype(F32)
    X = X.astype(F32)
    q = X[..., :Nq * D].reshape(B, S, Nq, D)
    k = X[..., Nq * D:(Nq + Nkv) * D].reshape(B, S, Nkv, D)
    v = X[..., (Nq + Nkv) * D:].reshape(B, S, Nkv, D)
    cos = np.asarray(t["cos"]).astype(F32).reshape(B, S, 1, D)
    sin = np.asarray(t["sin"]).astype(F32).reshape(B, S, 1, D)
    q_out, k_out = half_rope(q, cos, sin), half_rope(k, cos, sin)
    idx = np.asarray(t["indices"], np.int64)
    for name, values, s_name in (("k_cache", k_out, "k"), ("v_cache", v, "v")):
        cache = t[name]
        scale = u[f"scale_{s_name}"].reshape(Nkv, D)
        offset = None if u[f"offset_{s_name}"] is None else u[f"offset_{s_name}"].reshape(Nkv, D)
        codes = to_cache_dtype(quantise(values, scale, offset, True, bug), cache.dtype, bug)
        tokens = codes.reshape(B * S, Nkv, D)
        C2 = cache.shape[1]
        if attrs.get("cache_mode", "contiguous") == "page":
            slots = idx.reshape(-1)
        else:                                          # row b, from indices[b] on
            slots = (np.arange(B)[:, None] * C2 + idx.reshape(B, 1) + np.arange(S)).reshape(-1)
        if bug == "block_slot_swapped":                # page numbering read as contiguous
            slots = (slots % C2) * cache.shape[0] + slots // C2
        if bug == "neighbour_slot":
            slots = (slots + 1) % (cache.shape[0] * C2)
        cache.reshape(-1, Nkv, D)[slots] = tokens
    dt = np.asarray(t["cos"]).dtype
    shaped = lambda y: (y.reshape(B, *y.shape[2:]) if x.ndim == 2 else y).astype(dt)  # noqa: E731
    kv = (shaped(k_out), shaped(v)) if a.kv_output else (None, None)
    return (shaped(q_out), *kv, t["k_cache"], t["v_cache"])


@_arithmetic
def qkv_rms_norm_rope_cache(t: dict, attrs: dict, soc, bug=None):
    """QkvRmsNormRopeCache; updates t["k_cache"] and t["v_cache"] (PA_NZ) in place."""
    a = check_qkv_args("qkv_rms_norm_rope_cache", t, attrs.get("qkv_size"),
                       attrs.get("head_nums"), attrs.get("epsilon", 1e-6),
                       attrs.get("cache_mode", "PA_NZ"), attrs.get("is_output_qkv", False), soc)
    z = a.sizes
    B, S, D, Nq, Nk, Nv = z["B"], z["S"], z["D"], z["Nq"], z["Nk"], z["Nv"]
    T = B * S
    qkv = np.asarray(t["qkv"])
    dt = qkv.dtype
    h = qkv.reshape(T, -1, D)
    tables = []
    for name in ("cos", "sin"):
        c = np.asarray(t[name]).astype(F32)
        c = np.repeat(c, S, axis=0) if c.shape[0] != T else c
        tables.append(c.reshape(T, 1, D))
    q = half_rope(rms_norm(h[:, :Nq], np.asarray(t["q_gamma"]), a.epsilon), *tables)
    k = half_rope(rms_norm(h[:, Nq:Nq + Nk], np.asarray(t["k_gamma"]), a.epsilon), *tables)
    v = h[:, Nq + Nk:].astype(F32)
    slots = np.asarray(t["index"], np.int64).reshape(-1)
    for name, values, (scale, offset), heads in (("k_cache", k, a.k_quant, Nk),
                                                 ("v_cache", v, a.v_quant, Nv)):
        cache = t[name]
        shape = lambda p: None if p is None else p.reshape(heads, D) if p.size == heads * D else p  # noqa
        codes = to_cache_dtype(quantise(values, shape(scale), shape(offset), True, bug),
                               cache.dtype, bug if scale is not None or bug == "truncation" else None)
        write_tokens(cache, codes, slots, True, bug)
    q_out = q.reshape(T, -1).astype(dt)
    before = (q_out, k.reshape(T, -1).astype(dt), v.reshape(T, -1).astype(dt)) \
        if a.outputs_qkv else (None, None, None)
    return (q_out, t["k_cache"], t["v_cache"], *before)
