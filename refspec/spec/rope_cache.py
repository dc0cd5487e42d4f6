"""RopeWithSinCosCache (docs/rope_with_sin_cos_cache.md §1-§3).

Positions pick rows of a cos/sin cache (each row: rotaryDim/2 cos values, then rotaryDim/2 sin
values); in mrope mode three position rows each feed one section of the angles (Qwen2-VL's
multimodal RoPE). The first rotaryDim values of every head are rotated, GPT-NeoX style (rotate
half) or GPT-J style (interleaved), the rest of the head passes through. The rotation is the
RoPE formula block ``refspec.spec.rope.ROPE_FORWARD[RopeMode.HALF]`` or ``[RopeMode.INTERLEAVE]``:
the document's ``o1 = x1*cos - x2*sin``, ``o2 = x2*cos + x1*sin`` is that block with each angle's
cos and sin placed at both positions of its pair. Everything else here is data movement: the
gather, the mrope section choice, the pair placement, the per-head split. Blocks of the widened
inputs are evaluated with ``refspec.spec.blocks.by_blocks`` and rounded once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .enums import RopeMode
from .rope import ROPE_FORWARD, cat, chunk, stack_pairs
from .rope_cache_checks import check_rope_cache_args
from .terms import ELEMENTWISE, OutputTerms, rope_elementwise_sum_abs

__all__ = ["RopeWithSinCosCacheOutputs", "mrope_sections", "cache_tables", "heads", "per_head",
           "rope_with_sin_cos_cache", "rope_with_sin_cos_cache_terms"]


class RopeWithSinCosCacheOutputs(NamedTuple):
    """queryOut and keyOut, of queryIn's and keyIn's shapes."""

    query: np.ndarray
    key: np.ndarray


def mrope_sections(t: np.ndarray, mrope_section) -> np.ndarray:
    """(3, T, rotaryDim/2) -> (T, rotaryDim/2): section j of the angles from position row j,
    ``cat(t[0, :, :s0], t[1, :, s0:s0+s1], t[2, :, s0+s1:s0+s1+s2])``."""
    s0, s1, s2 = mrope_section
    return cat(t[0, :, :s0], t[1, :, s0:s0 + s1], t[2, :, s0 + s1:s0 + s1 + s2])


def cache_tables(cos_sin_cache, positions, mrope_section, is_neox_style):
    """The cos and sin tables of the tokens, (T, 1, rotaryDim) (broadcast over the heads), in
    the cache's dtype: each angle's value at both positions the mode rotates together (the two
    halves for GPT-NeoX style, the pair 2i, 2i+1 for GPT-J style)."""
    cos_sin = cos_sin_cache[positions]               # cosSin[i] = cosSinCache[positions[i]]
    cos, sin = chunk(cos_sin, 2)                     # cos, sin = cosSin.chunk(2, dim=-1)
    if mrope_section is not None:
        cos = mrope_sections(cos, mrope_section)     # cos = cat(cos0, cos1, cos2)
        sin = mrope_sections(sin, mrope_section)     # sin = cat(sin0, sin1, sin2)
    pair = cat if is_neox_style else stack_pairs     # o1 and o2 take the same cos[i], sin[i]
    return pair(cos, cos)[:, None, :], pair(sin, sin)[:, None, :]


def heads(x: np.ndarray, head_size: int) -> np.ndarray:
    """(T, numHeads*headSize) seen as (T, numHeads, headSize)."""
    return x.reshape(x.shape[0], x.shape[1] // head_size, head_size)


def per_head(rotate, rotary_dim: int):
    """The step on a block of heads: ``rotate`` on the first rotary_dim values of each head, the
    rest passed through."""
    def step(x, cos, sin):
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]    # queryRot, queryPass
        return cat(rotate(x_rot, cos, sin), x_pass)                  # query = cat(queryRot, queryPass)
    return step


def rope_with_sin_cos_cache(positions, query, key, cos_sin_cache, head_size, mrope_section=None,
                            is_neox_style=True, *, soc=None, out_dtype=None):
    """aclnnRopeWithSinCosCache: ``(query, key)`` rotated at ``positions``
    (docs/rope_with_sin_cos_cache.md, Parameters, §1-§2).

    ``positions`` (T,) in rope mode, (3, T) in mrope mode (``mrope_section`` given); query
    ``(T, numQHeads*head_size)``, key ``(T, numKHeads*head_size)``; cos_sin_cache (maxSeqLen,
    rotaryDim). ``soc`` None checks only what the math needs, "A2"/"A3" adds the profile's rules
    (§4). ``out_dtype`` None returns each output in its input's dtype, rounded once.
    """
    out_dtype = check_out_dtype(out_dtype, "rope_with_sin_cos_cache")
    a = check_rope_cache_args("rope_with_sin_cos_cache", positions, query, key, cos_sin_cache,
                              head_size, mrope_section, is_neox_style, soc)
    tables = cache_tables(a.cos_sin_cache, a.positions, a.mrope_section, a.mode == RopeMode.HALF)
    step = per_head(ROPE_FORWARD[a.mode], a.rotary_dim)
    outs = []
    for x in (a.query, a.key):
        y, = by_blocks(step, heads(x, a.head_size), tables, dtypes=(output_dtype(x.dtype, out_dtype),))
        outs.append(y.reshape(x.shape))
    return RopeWithSinCosCacheOutputs(*outs)


def rope_with_sin_cos_cache_terms(positions, query, key, cos_sin_cache, head_size, mrope_section=None,
                                  is_neox_style=True, *, soc=None, out_dtype=None) -> dict[str, OutputTerms]:
    """Tolerance terms of both outputs (docs/rope_with_sin_cos_cache.md §3): elementwise; S is
    ``|x*cos| + |rot*sin|`` on the rotated part (the formula block on absolute values,
    ``rope_elementwise_sum_abs``) and ``|x|`` on the part passed through, given for float32/float64
    outputs only (None for 16-bit ones)."""
    out_dtype = check_out_dtype(out_dtype, "rope_with_sin_cos_cache_terms")
    a = check_rope_cache_args("rope_with_sin_cos_cache", positions, query, key, cos_sin_cache,
                              head_size, mrope_section, is_neox_style, soc)
    tables = cache_tables(a.cos_sin_cache, a.positions, a.mrope_section, a.mode == RopeMode.HALF)

    def sum_abs(x, c, s):
        return rope_elementwise_sum_abs(x, c, s, a.mode, grad=False)

    step = per_head(sum_abs, a.rotary_dim)
    out = {}
    for name, x in (("query", a.query), ("key", a.key)):
        S = None
        if output_dtype(x.dtype, out_dtype) in (np.float32, np.float64):
            S, = by_blocks(step, heads(x, a.head_size), tables)
            S = np.abs(S).reshape(x.shape)           # the part passed through: |x|
        out[name] = OutputTerms(ELEMENTWISE, sum_abs=S)
    return out
