"""Static quantisation of the values written into a cache (docs/kv_rms_norm_rope_cache.md §1,
docs/dequant_rope_quant_kvcache.md §1, docs/qkv_rms_norm_rope_cache.md §1).

The value before rounding, in float64: KvRmsNormRopeCache multiplies by its scale,
``x = x * scale; x = x + offset``; DequantRopeQuantKvcache and QkvRmsNormRopeCache divide,
``kQuant = kRoPE / kScale + kOffset``. The one rounding into the cache's dtype (int8 half to
even and clamped to [-128, 127], the float8 formats with saturation) is
``refspec.spec.dtypes.round_to``, applied once by the caller. The dequantisation of
DequantRopeQuantKvcache's int32 input is here too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["quant_value", "quant_sum_abs", "dequant"]


def quant_value(x: np.ndarray, scale=None, offset=None, divide: bool = False) -> np.ndarray:
    """``x * scale + offset`` (``divide``: ``x / scale + offset``); a missing scale or offset is
    left out (float64; scale and offset broadcast along the last axes)."""
    if scale is not None:
        x = x / scale if divide else x * scale           # x = x * scale  |  kQuant = kRoPE / kScale
    if offset is not None:
        x = x + offset                                   # x = x + offset  |  + kOffset
    return x


def quant_sum_abs(S: np.ndarray, scale=None, offset=None, divide: bool = False) -> np.ndarray:
    """S of the value before rounding from S of x: ``|scale|*S`` (or ``S/|scale|``) ``+ |offset|``."""
    return quant_value(S, None if scale is None else np.abs(scale),
                       None if offset is None else np.abs(offset), divide)


def dequant(x: np.ndarray, weight_scale, activation_scale=None, bias=None,
            bias_is_int: bool = False) -> np.ndarray:
    """DequantRopeQuantKvcache's dequantisation of an int32 x (float64): an int32 bias is added to
    x before scaling, a float one after, ``(x + bias) * weightScale * activationScale`` or
    ``x * weightScale * activationScale + bias`` (errata E29); activationScale is one value per
    token (its leading axes), weightScale and bias one per column."""
    if bias is not None and bias_is_int:
        x = x + bias                                     # x + bias (int32 bias)
    x = x * weight_scale                                 # * weightScale
    if activation_scale is not None:
        x = x * activation_scale[..., None]              # * activationScale (per token)
    if bias is not None and not bias_is_int:
        x = x + bias                                     # + bias (float bias)
    return x
