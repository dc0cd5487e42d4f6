"""The executable specification: NumPy and ml_dtypes only (docs/architecture.md, "Layers").

The operators, the notation and reductions their formulas use, dtypes and the one rounding,
the attribute enums, the aclnn errors, validation per chip profile, layouts, and the tolerance
terms of every output. Nothing here reads or writes files.
"""

from .apply_rope import ApplyRotaryPosEmbOutputs, apply_rotary_pos_emb, apply_rotary_pos_emb_v2
from .dequant_rope import (DequantRopeQuantKvcacheOutputs, dequant_rope_quant_kvcache,
                           rope_quant_kvcache)
from .dtypes import bfloat16, round_to
from .enums import SOCS, ConcatOrder, NormType, RopeMode, RopeType
from .errors import (AclnnError, InferShapeError, InnerNullptrError, ParamInvalidError,
                     ParamNullptrError, TilingError)
from .irope import interleave_rope
from .kv_norm_rope import (KvRmsNormRopeCacheOutputs, kv_rms_norm_rope_cache,
                           kv_rms_norm_rope_cache_v2)
from .layouts import LAYOUTS, LayoutInference, cos_pattern, from_layout, infer_layout, to_layout
from .negmask import Half, Interleave, negMask
from .nrc import (NormRopeConcatGrads, NormRopeConcatOutputs, norm_rope_concat,
                  norm_rope_concat_backward)
from .qkv_norm_rope import QkvRmsNormRopeCacheOutputs, qkv_rms_norm_rope_cache
from .quant_dtypes import hifloat8
from .reduce import sum_to_shape, tree_sum
from .rope import rotary_position_embedding, rotary_position_embedding_grad
from .rope_cache import RopeWithSinCosCacheOutputs, rope_with_sin_cos_cache

__all__ = [
    "rotary_position_embedding", "rotary_position_embedding_grad",
    "norm_rope_concat", "norm_rope_concat_backward",
    "NormRopeConcatOutputs", "NormRopeConcatGrads",
    "apply_rotary_pos_emb", "apply_rotary_pos_emb_v2", "ApplyRotaryPosEmbOutputs",
    "rope_with_sin_cos_cache", "RopeWithSinCosCacheOutputs",
    "interleave_rope",
    "kv_rms_norm_rope_cache", "kv_rms_norm_rope_cache_v2", "KvRmsNormRopeCacheOutputs",
    "dequant_rope_quant_kvcache", "rope_quant_kvcache", "DequantRopeQuantKvcacheOutputs",
    "qkv_rms_norm_rope_cache", "QkvRmsNormRopeCacheOutputs",
    "AclnnError", "ParamNullptrError", "ParamInvalidError", "InferShapeError", "TilingError",
    "InnerNullptrError",
    "RopeMode", "NormType", "RopeType", "ConcatOrder", "SOCS",
    "LAYOUTS", "LayoutInference", "infer_layout", "to_layout", "from_layout", "cos_pattern",
    "Interleave", "Half", "negMask",
    "bfloat16", "hifloat8", "round_to", "sum_to_shape", "tree_sum",
]
