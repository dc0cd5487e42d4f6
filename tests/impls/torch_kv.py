"""The KV-cache operators in PyTorch: KvRmsNormRopeCache(V2) as vllm-ascend's MLA decode step
uses it, the caches torch tensors the function updates in place (indexed assignment at the
tokens' slots) and returns, with k_rope and c_kv, like ``torch_npu.npu_kv_rmsnorm_rope_cache``;
DequantRopeQuantKvcache and QkvRmsNormRopeCache likewise. For ``refspec run --framework
torch``, which judges the caches the function leaves behind.

A transcription of the documents' lines in float32 (docs/kv_rms_norm_rope_cache.md §1-§2):
RMSNorm (``x * rsqrt(mean(x*x) + eps) * gamma``), the interleaved rotation
(``cat(x1, x2)*cos + cat(-x2, x1)*sin``), ``x*scale + offset`` rounded half to even and clamped
into int8, or clamped to the float8 format's largest value and converted by torch; HiFloat8,
which torch lacks, by refspec's conversion of the float32 values. The slot of each token from
the documents' index tables; a fractal (NZ) cache written through its view as
(block_num, N*D/C0, block_size, C0). The front end (what a call accepts, the A2/A3 V1 offsets
ignored, whether k_rope/c_kv are produced) is the spec's validation, as in numpy_float32.py.

DequantRopeQuantKvcache: the int32 dequantisation, the split, the rotate-half rotation, x/scale
+ offset into int8 (docs/dequant_rope_quant_kvcache.md §1-§2); QkvRmsNormRopeCache: RMSNorm of
q and k per head, the rotate-half rotation, k and v into the fractal caches, quantised by
division when a scale is given (docs/qkv_rms_norm_rope_cache.md §1-§2).

``NEIGHBOUR_SLOT``: KvRmsNormRopeCache with each token written one slot after its own.
"""

from __future__ import annotations

import numpy as np
import torch

from refspec.spec.dtypes import bfloat16
from refspec.spec.kv_norm_rope_checks import check_kv_cache_args
from refspec.spec.quant_dtypes import HIF8_MAX, hifloat8, round_code

_FLOAT8 = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def _np(t):
    """A tensor's values as NumPy (bfloat16 and the float8 codes by their bits), for the
    front end's checks."""
    if t is None or not isinstance(t, torch.Tensor):
        return t
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(bfloat16)
    if t.dtype == torch.uint8:                          # a cache of HiFloat8 codes
        return t.numpy().view(hifloat8)
    if t.dtype in _FLOAT8:
        import ml_dtypes
        return t.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn if t.dtype ==
                                                torch.float8_e4m3fn else ml_dtypes.float8_e5m2)
    return t.numpy()


def _rms_norm(x, gamma, eps, ft):
    """Rows with huge values scaled by their largest magnitude first, so that the squares do
    not overflow float32 (the special distribution's values near the dtype's maximum)."""
    x = x.to(ft)
    top = x.abs().amax(-1, keepdim=True)
    m = torch.where(top > 2.0 ** 60, top, torch.ones_like(top))
    xs = x / m
    return x * (torch.rsqrt((xs * xs).mean(-1, keepdim=True) + eps / (m * m)) / m) * gamma.to(ft)


def _rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat((x1, x2), -1) * cos + torch.cat((-x2, x1), -1) * sin


def _codes(x, scale, offset, like: torch.Tensor):
    """x (float32) into the cache's dtype: quantised when a scale is given."""
    if scale is not None:
        x = x * scale.to(x.dtype)
        if offset is not None:
            x = x + offset.to(x.dtype)
        if like.dtype == torch.int8:
            return torch.clamp(torch.round(x), -128, 127).to(torch.int8)
        if like.dtype in _FLOAT8:
            top = _FLOAT8[like.dtype]
            return torch.clamp(x, -top, top).to(like.dtype)
        if like.dtype == torch.uint8:                   # HiFloat8
            codes = round_code(np.clip(x.numpy(), -HIF8_MAX, HIF8_MAX).astype(np.float64), hifloat8)
            return torch.from_numpy(codes.view(np.uint8).copy())
    return x.to(like.dtype)


def _heads(p):
    return p if p is None or p.dim() < 2 else p.reshape(p.shape[0], 1, -1)


def _kv_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
              k_rope_offset, c_kv_offset, v, epsilon, cache_mode, is_output_kv, soc, shift=0):
    t = {"kv": kv, "gamma": gamma, "cos": cos, "sin": sin, "index": index, "k_cache": k_cache,
         "ckv_cache": ckv_cache, "k_rope_scale": k_rope_scale, "c_kv_scale": c_kv_scale,
         "k_rope_offset": k_rope_offset, "c_kv_offset": c_kv_offset, "v": v}
    name = "kv_rms_norm_rope_cache_v2" if v is not None else "kv_rms_norm_rope_cache"
    a = check_kv_cache_args(name, {k: _np(x) for k, x in t.items()}, epsilon, cache_mode,
                            is_output_kv, soc)
    rms = a.sizes["rms_size"]
    ft = torch.float64 if kv.dtype == torch.float64 else torch.float32   # math-only float64
    cos, sin = cos.to(ft), sin.to(ft)
    if v is None:                                                   # V1
        c = _rms_norm(kv[..., :rms], gamma, epsilon, ft)
        k = _rope(kv[..., rms:].to(ft), cos, sin)
    else:                                                           # V2
        y = _rms_norm(kv, gamma, epsilon, ft)
        R = cos.shape[-1]
        k = torch.cat((_rope(y[..., :R], cos, sin), y[..., R:]), -1)
        c = v.to(ft)
    for cache, values, (scale, offset) in ((k_cache, k, a.k_quant), (ckv_cache, c, a.c_quant)):
        scale = None if scale is None else _heads(torch.from_numpy(np.asarray(scale)))
        offset = None if offset is None else _heads(torch.from_numpy(np.asarray(offset)))
        _put(cache, _codes(values, scale, offset, cache), index, cache_mode, shift)
    if not a.outputs_kv:
        return k_cache, ckv_cache, None, None
    return k_cache, ckv_cache, k.to(kv.dtype), c.to(kv.dtype)


def _put(cache, codes, index, mode, shift):
    """codes (B, N, S, D) into the cache at the tokens' slots, in place."""
    B, N, S, D = codes.shape
    index = index.long()
    if mode == "Norm":                                  # cache (B, N, Scache, D)
        b, s = torch.nonzero(index.reshape(B, S) >= 0, as_tuple=True)
        pos = (index.reshape(B, S)[b, s] + shift) % cache.shape[2]
        cache[b, :, pos, :] = codes[b, :, s, :]
        return
    block_size = cache.shape[1]
    if mode in ("PA_BLK_BNSD", "PA_BLK_NZ"):            # a block's first slot per run of tokens
        s = torch.arange(S)
        start = index.reshape(B, -1)[:, s // block_size]
        slots = torch.where(start >= 0, start + s % block_size, -1).reshape(-1)
    else:
        slots = index.reshape(-1)
    tokens = codes.permute(0, 2, 1, 3).reshape(B * S, N * D)
    keep = slots >= 0
    slots = (slots[keep] + shift) % (cache.shape[0] * block_size)
    tokens = tokens[keep]
    block, row = slots // block_size, slots % block_size
    if mode in ("PA_NZ", "PA_BLK_NZ"):                  # the fractal view of each block
        c0 = 32 // cache.element_size()
        tiles = cache.view(cache.shape[0], N * D // c0, block_size, c0)
        tiles[block, :, row, :] = tokens.reshape(-1, N * D // c0, c0)
    else:
        cache.view(cache.shape[0], block_size, N * D)[block, row, :] = tokens


def _half_rope(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), -1) * sin


def _divided(x, scale, offset):
    """x/scale + offset rounded half to even and clamped into int8 (float32)."""
    x = x / scale.to(x.dtype)
    if offset is not None:
        x = x + offset.to(x.dtype)
    return torch.clamp(torch.round(x), -128, 127).to(torch.int8)


def _t(a):
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a))


def dequant_rope_quant_kvcache(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v,
                               offset_k=None, offset_v=None, weight_scale=None,
                               activation_scale=None, bias=None, size_splits=None,
                               quant_mode="static", layout="BSND", kv_output=False,
                               cache_mode="contiguous", *, soc=None):
    """DequantRopeQuantKvcache: x dequantised when int32, split into q, k, v, the rotate-half
    rotation of q and k, k and v quantised (scale divides) into the int8 caches, in place."""
    from refspec.spec.dequant_rope_checks import check_dequant_args
    t = dict(x=x, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, indices=indices,
             scale_k=scale_k, scale_v=scale_v, offset_k=offset_k, offset_v=offset_v,
             weight_scale=weight_scale, activation_scale=activation_scale, bias=bias)
    a = check_dequant_args("dequant_rope_quant_kvcache", {k: _np(v) for k, v in t.items()},
                           size_splits, quant_mode, layout, kv_output, cache_mode, soc)
    z, u = a.sizes, a.t
    B, S, D, Nq, Nkv = z["B"], z["S"], z["D"], z["Nq"], z["Nkv"]
    ft = torch.float64 if cos.dtype == torch.float64 else torch.float32
    X = x.reshape(B, S, -1)
    if z["dequant"]:                               # (x + int bias) * weight * activation + bias
        X = X.to(torch.float64)
        int_bias = u["bias"] is not None and not bias.is_floating_point()
        if int_bias:
            X = X + bias.to(torch.float64)
        X = X.to(ft) * weight_scale.to(ft)
        if u["activation_scale"] is not None:
            X = X * activation_scale.to(ft).reshape(B, S, 1)
        if u["bias"] is not None and not int_bias:
            X = X + bias.to(ft)
    X = X.to(ft)
    q = X[..., :Nq * D].reshape(B, S, Nq, D)
    k = X[..., Nq * D:(Nq + Nkv) * D].reshape(B, S, Nkv, D)
    v = X[..., (Nq + Nkv) * D:].reshape(B, S, Nkv, D)
    c, s_ = cos.to(ft).reshape(B, S, 1, D), sin.to(ft).reshape(B, S, 1, D)
    q_out, k_out = _half_rope(q, c, s_), _half_rope(k, c, s_)
    idx = indices.long()
    C2 = k_cache.shape[1]
    slots = idx.reshape(-1) if cache_mode == "page" else \
        (torch.arange(B)[:, None] * C2 + idx.reshape(B, 1) + torch.arange(S)).reshape(-1)
    for cache, values, name in ((k_cache, k_out, "k"), (v_cache, v, "v")):
        offset = u[f"offset_{name}"]
        codes = _divided(values, _t(u[f"scale_{name}"]).reshape(Nkv, D),
                         None if offset is None else _t(offset).reshape(Nkv, D))
        cache.view(-1, Nkv, D)[slots] = codes.reshape(B * S, Nkv, D)
    shaped = lambda y: (y.reshape(B, *y.shape[2:]) if x.dim() == 2 else y).to(cos.dtype)  # noqa
    kv = (shaped(k_out), shaped(v)) if a.kv_output else (None, None)
    return shaped(q_out), *kv, k_cache, v_cache


def qkv_rms_norm_rope_cache(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache,
                            k_scale=None, v_scale=None, k_offset=None, v_offset=None,
                            qkv_size=None, head_nums=None, epsilon=1e-6, cache_mode="PA_NZ",
                            is_output_qkv=False, *, soc=None):
    """QkvRmsNormRopeCache: RMSNorm of q and k per head, the rotate-half rotation, k and v
    (quantised, scale dividing, when a scale is given) into the fractal caches, in place."""
    from refspec.spec.qkv_norm_rope_checks import check_qkv_args
    t = dict(qkv=qkv, q_gamma=q_gamma, k_gamma=k_gamma, cos=cos, sin=sin, index=index,
             k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale,
             k_offset=k_offset, v_offset=v_offset)
    a = check_qkv_args("qkv_rms_norm_rope_cache", {k: _np(v) for k, v in t.items()}, qkv_size,
                       head_nums, epsilon, cache_mode, is_output_qkv, soc)
    z = a.sizes
    B, S, D, Nq, Nk = z["B"], z["S"], z["D"], z["Nq"], z["Nk"]
    T = B * S
    ft = torch.float64 if qkv.dtype == torch.float64 else torch.float32
    h = qkv.reshape(T, -1, D)
    tables = [(c if c.shape[0] == T else c.repeat_interleave(S, 0)).to(ft).reshape(T, 1, D)
              for c in (cos, sin)]
    q = _half_rope(_rms_norm(h[:, :Nq], q_gamma, a.epsilon, ft), *tables)
    k = _half_rope(_rms_norm(h[:, Nq:Nq + Nk], k_gamma, a.epsilon, ft), *tables)
    v = h[:, Nq + Nk:].to(ft)
    slots = index.long().reshape(-1)
    keep = slots >= 0
    for cache, values, (scale, offset) in ((k_cache, k, a.k_quant), (v_cache, v, a.v_quant)):
        heads = values.shape[1]
        if scale is not None:
            shape = lambda p: _t(p).reshape(heads, D) if p.size == heads * D else _t(p)  # noqa
            codes = _divided(values, shape(scale), None if offset is None else shape(offset))
        else:
            codes = values.to(cache.dtype)
        block_size, c0 = cache.shape[2], cache.shape[3]
        rows = codes.reshape(T, heads * D // c0, c0)[keep]
        cache[slots[keep] // block_size, :, slots[keep] % block_size, :] = rows
    q_out = q.reshape(T, -1).to(qkv.dtype)
    before = (q_out, k.reshape(T, -1).to(qkv.dtype), v.reshape(T, -1).to(qkv.dtype)) \
        if a.outputs_qkv else (None, None, None)
    return q_out, k_cache, v_cache, *before


class TorchKv:
    def __init__(self, shift: int = 0):
        self.shift = shift

    def kv_rms_norm_rope_cache(self, kv, gamma, cos, sin, index, k_cache, ckv_cache,
                               k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                               c_kv_offset=None, epsilon=1e-5, cache_mode="Norm",
                               is_output_kv=False, *, soc=None):
        return _kv_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale,
                         c_kv_scale, k_rope_offset, c_kv_offset, None, epsilon, cache_mode,
                         is_output_kv, soc, self.shift)

    def kv_rms_norm_rope_cache_v2(self, kv, gamma, cos, sin, index, k_cache, ckv_cache,
                                  k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                                  c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                                  is_output_kv=False, *, soc=None):
        return _kv_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale,
                         c_kv_scale, k_rope_offset, c_kv_offset, v, epsilon, cache_mode,
                         is_output_kv, soc, self.shift)


EVERY = TorchKv()
kv_rms_norm_rope_cache = EVERY.kv_rms_norm_rope_cache
kv_rms_norm_rope_cache_v2 = EVERY.kv_rms_norm_rope_cache_v2
NEIGHBOUR_SLOT = TorchKv(shift=1)
