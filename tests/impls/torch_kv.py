"""KvRmsNormRopeCache(V2) in PyTorch, as vllm-ascend's MLA decode step uses it: the caches are
torch tensors the function updates in place (``index_put_`` at the tokens' slots) and returns,
with k_rope and c_kv, like ``torch_npu.npu_kv_rmsnorm_rope_cache``. For ``refspec run
--framework torch``, which judges the caches the function leaves behind.

A transcription of the documents' lines in float32 (docs/kv_rms_norm_rope_cache.md §1-§2):
RMSNorm (``x * rsqrt(mean(x*x) + eps) * gamma``), the interleaved rotation
(``cat(x1, x2)*cos + cat(-x2, x1)*sin``), ``x*scale + offset`` rounded half to even and clamped
into int8, or clamped to the float8 format's largest value and converted by torch; HiFloat8,
which torch lacks, by refspec's conversion of the float32 values. The slot of each token from
the documents' index tables; a fractal (NZ) cache written through its view as
(block_num, N*D/C0, block_size, C0). The front end (what a call accepts, the A2/A3 V1 offsets
ignored, whether k_rope/c_kv are produced) is the spec's validation, as in numpy_float32.py.

``NEIGHBOUR_SLOT``: the same with each token written one slot after its own.
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
