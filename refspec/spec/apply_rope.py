"""ApplyRotaryPosEmb and ApplyRotaryPosEmbV2 (docs/apply_rotary_pos_emb.md §1-§3).

query and key rotated in place by the same cos/sin (torch_npu's ``npu_apply_rotary_pos_emb``).
The rotation is the RoPE formula block of the rotary mode, ``refspec.spec.rope.ROPE_FORWARD``
("half" -> rope_half, "interleave" -> rope_interleave, "quarter" -> rope_quarter), applied to
cache-sized float64 blocks of each tensor (``refspec.spec.blocks.by_blocks``), each block rounded
once to the output's dtype (its input's, or ``out_dtype``); cos/sin broadcast over the heads.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .apply_rope_checks import check_apply_rope_args
from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .rope import ROPE_FORWARD
from .terms import ELEMENTWISE, OutputTerms, rope_elementwise_sum_abs

__all__ = ["ApplyRotaryPosEmbOutputs", "apply_rotary_pos_emb", "apply_rotary_pos_emb_v2",
           "apply_rotary_pos_emb_terms"]


class ApplyRotaryPosEmbOutputs(NamedTuple):
    """The updated queryRef and keyRef (the API writes them in place)."""

    query: np.ndarray
    key: np.ndarray


def _apply(op, query, key, cos, sin, layout, rotary_mode, soc, out_dtype):
    out_dtype = check_out_dtype(out_dtype, op)
    args = check_apply_rope_args(op, query, key, cos, sin, layout, rotary_mode, soc)
    rotate, tables = ROPE_FORWARD[args.mode], (args.cos, args.sin)
    q_dtype = output_dtype(args.query.dtype, out_dtype)
    k_dtype = output_dtype(args.key.dtype, out_dtype)
    q_embed, = by_blocks(rotate, args.query, tables, dtypes=(q_dtype,))   # q_embed = query*cos + query_rotate*sin
    k_embed, = by_blocks(rotate, args.key, tables, dtypes=(k_dtype,))     # k_embed = key*cos + key_rotate*sin
    return ApplyRotaryPosEmbOutputs(q_embed, k_embed)


def apply_rotary_pos_emb(query, key, cos, sin, layout=1, *, soc=None, out_dtype=None):
    """aclnnApplyRotaryPosEmb: ``(query, key)`` rotated in half mode (docs/apply_rotary_pos_emb.md,
    Parameters, §1-§2); the host code calls V2's implementation with rotaryMode "half".

    ``layout`` is 1 (BSND), 2 (SBND), 3 (BNSD) or 4 (TND), or the layout's name; ``soc`` None
    checks only what the math needs, "A2"/"A3"/"950" adds the profile's rules (§4).
    ``out_dtype`` None returns each output in its input's dtype, rounded once (half to even).
    """
    return _apply("apply_rotary_pos_emb", query, key, cos, sin, layout, "half", soc, out_dtype)


def apply_rotary_pos_emb_v2(query, key, cos, sin, layout=1, rotary_mode="half", *, soc=None,
                            out_dtype=None):
    """aclnnApplyRotaryPosEmbV2: ``(query, key)`` rotated in ``rotary_mode`` "half",
    "interleave" or "quarter" (docs/apply_rotary_pos_emb.md, Parameters, §1-§2)."""
    return _apply("apply_rotary_pos_emb_v2", query, key, cos, sin, layout, rotary_mode, soc, out_dtype)


def apply_rotary_pos_emb_terms(query, key, cos, sin, layout=1, rotary_mode="half", *, soc=None,
                               out_dtype=None) -> dict[str, OutputTerms]:
    """Tolerance terms of both outputs (docs/apply_rotary_pos_emb.md §3): elementwise, each
    element one cos product plus or minus one sin product; ``S = |x*cos| + |rot*sin|`` from the
    mode's formula block on absolute values (``rope_elementwise_sum_abs``, block by block),
    given for float32/float64 outputs only (None for 16-bit ones)."""
    out_dtype = check_out_dtype(out_dtype, "apply_rotary_pos_emb_terms")
    args = check_apply_rope_args("apply_rotary_pos_emb_v2", query, key, cos, sin, layout,
                                 rotary_mode, soc)

    def sum_abs(x, c, s):
        return rope_elementwise_sum_abs(x, c, s, args.mode, grad=False)

    out = {}
    for name, x in (("query", args.query), ("key", args.key)):
        S = None
        if output_dtype(x.dtype, out_dtype) in (np.float32, np.float64):
            S, = by_blocks(sum_abs, x, (args.cos, args.sin))
        out[name] = OutputTerms(ELEMENTWISE, sum_abs=S)
    return out
