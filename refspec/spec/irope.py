"""InterleaveRope (docs/interleave_rope.md §1-§3).

One input: the pairs of each head de-interleaved (even positions first, odd ones second), then
rotated half: ``q = cat(even(x), odd(x))``, ``y = q*cos + RotateHalf(q)*sin``. That is
RotaryPositionEmbedding's interleave-half formula block ``ROPE_FORWARD[RopeMode.INTERLEAVE_HALF]``
(``refspec.spec.rope.rope_interleave_half``), which the vendor's 950 path calls as well; it is
applied to cache-sized float64 blocks (``refspec.spec.blocks.by_blocks``), each rounded once.
"""

from __future__ import annotations

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .enums import RopeMode
from .irope_checks import check_interleave_rope_args
from .rope import ROPE_FORWARD
from .terms import ELEMENTWISE, OutputTerms, rope_elementwise_sum_abs

__all__ = ["interleave_rope", "interleave_rope_terms"]


def interleave_rope(x, cos, sin, *, soc=None, out_dtype=None):
    """InterleaveRope: ``y`` of x's shape (docs/interleave_rope.md, Parameters, §1-§2).

    ``soc`` None checks only what the math needs; "A2"/"A3" adds the operator's rules, "950"
    those of the RotaryPositionEmbedding call it makes there (§4). ``out_dtype`` None returns
    x's dtype rounded once (half to even); ``np.float64`` returns the exact values.
    """
    out_dtype = check_out_dtype(out_dtype, "interleave_rope")
    args = check_interleave_rope_args("interleave_rope", x, cos, sin, soc)
    y, = by_blocks(ROPE_FORWARD[RopeMode.INTERLEAVE_HALF], args.x, (args.cos, args.sin),
                   dtypes=(output_dtype(args.x.dtype, out_dtype),))   # q_embed = q*cos + RotateHalf(q)*sin
    return y


def interleave_rope_terms(x, cos, sin, *, soc=None, out_dtype=None) -> dict[str, OutputTerms]:
    """Tolerance terms of y (docs/interleave_rope.md §3): elementwise,
    ``S = |q*cos| + |RotateHalf(q)*sin|`` from the formula block on absolute values
    (``rope_elementwise_sum_abs``, block by block), given for float32/float64 outputs only (None
    for 16-bit ones)."""
    out_dtype = check_out_dtype(out_dtype, "interleave_rope_terms")
    args = check_interleave_rope_args("interleave_rope", x, cos, sin, soc)

    def sum_abs(x64, c, s):
        return rope_elementwise_sum_abs(x64, c, s, RopeMode.INTERLEAVE_HALF, grad=False)

    S = None
    if output_dtype(args.x.dtype, out_dtype) in (np.float32, np.float64):
        S, = by_blocks(sum_abs, args.x, (args.cos, args.sin))
    return {"y": OutputTerms(ELEMENTWISE, sum_abs=S)}
