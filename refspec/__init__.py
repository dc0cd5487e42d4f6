"""refspec: the executable specification of Ascend RoPE and NormRopeConcat backward operators.

Pure NumPy functions that mirror the documented formulas line by line (see ``docs/``):

    y = refspec.rotary_position_embedding(x, cos, sin, mode=0)
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, sin, x=None, mode=0)
    fwd = refspec.norm_rope_concat(query, key, value, ...)
    bwd = refspec.norm_rope_concat_backward(grad_query_output, grad_key_output, ...)

All arithmetic is float64 on the exact inputs; outputs are rounded once (half to even) to the
documented dtype, or returned exact with ``out_dtype=np.float64``. ``soc="A2"|"A3"|"950"`` adds a
chip profile's validation; rejected arguments raise :class:`AclnnError` subclasses.
"""

from ._version import __version__
from .dtypes import bfloat16, round_to
from .enums import ConcatOrder, NormType, RopeMode, RopeType, SOCS
from .errors import (AclnnError, InferShapeError, InnerNullptrError, ParamInvalidError,
                     ParamNullptrError, TilingError)
from .layouts import LAYOUTS, LayoutInference, cos_pattern, from_layout, infer_layout, to_layout
from .negmask import Half, Interleave, negMask
from .norm_rope_concat import (NormRopeConcatGrads, NormRopeConcatOutputs, norm_rope_concat,
                               norm_rope_concat_backward)
from .reduce import sum_to_shape
from .rope import rotary_position_embedding, rotary_position_embedding_grad
from .compare import compare  # noqa: E402  (the function; the subpackage stays importable by name)

__all__ = [
    "__version__",
    "rotary_position_embedding", "rotary_position_embedding_grad",
    "norm_rope_concat", "norm_rope_concat_backward", "compare",
    "NormRopeConcatOutputs", "NormRopeConcatGrads",
    "AclnnError", "ParamNullptrError", "ParamInvalidError", "InferShapeError", "TilingError",
    "InnerNullptrError",
    "RopeMode", "NormType", "RopeType", "ConcatOrder", "SOCS",
    "LAYOUTS", "LayoutInference", "infer_layout", "to_layout", "from_layout", "cos_pattern",
    "Interleave", "Half", "negMask",
    "bfloat16", "round_to", "sum_to_shape",
]
