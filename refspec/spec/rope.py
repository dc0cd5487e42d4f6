"""RotaryPositionEmbedding and RotaryPositionEmbeddingGrad (docs/rope.md §1-§3).

One function per documented formula block, one NumPy line per formula line, in the document's order.
Every function here takes float64 arrays already broadcast-compatible (cos/sin of shape
``dims``-reduced from the full tensor) and returns float64; the public functions at the bottom
validate, dispatch through the mode tables, apply the formula block to cache-sized blocks of
the widened inputs (``refspec.spec.blocks.by_blocks``: the same bits as the whole arrays)
and round once.
"""

from __future__ import annotations

import numpy as np

from .blocks import by_blocks
from .checks import check_out_dtype, output_dtype
from .dtypes import round_to
from .enums import RopeMode
from .reduce import sum_to_shape
from .rope_checks import check_rope_args

__all__ = [
    "chunk", "even", "odd", "cat", "stack_pairs",
    "rope_half", "rope_interleave", "rope_quarter", "rope_interleave_half",
    "rope_grad_half", "rope_grad_interleave", "rope_grad_quarter", "rope_grad_interleave_half",
    "ROPE_FORWARD", "ROPE_BACKWARD",
    "rotary_position_embedding", "rotary_position_embedding_grad",
]


# --- the notation (docs/rope.md §1) ---------------------------------------------------------

def chunk(t: np.ndarray, k: int) -> list[np.ndarray]:
    """chunk(t, k): k equal contiguous parts of the last axis (views, as ``np.split`` returns,
    taken by slicing: np.split's own bookkeeping costs more than a small block's arithmetic)."""
    n = t.shape[-1]
    if n % k:
        raise ValueError("array split does not result in an equal division")
    m = n // k
    return [t[..., i * m:(i + 1) * m] for i in range(k)]


def even(t: np.ndarray) -> np.ndarray:
    """t[..., ::2], the 0-based even positions."""
    return t[..., 0::2]


def odd(t: np.ndarray) -> np.ndarray:
    """t[..., 1::2], the 0-based odd positions."""
    return t[..., 1::2]


def cat(*parts: np.ndarray) -> np.ndarray:
    """cat((a, b, ...), dim=-1)."""
    return np.concatenate(parts, axis=-1)


def stack_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """stack((a, b), dim=-1).reshape(shape): re-interleave, out[2i] = a[i], out[2i+1] = b[i]."""
    return np.stack((a, b), axis=-1).reshape(a.shape[:-1] + (2 * a.shape[-1],))


# --- forward, per mode (docs/rope.md §2) ----------------------------------------------------

def rope_half(x, cos, sin):
    """mode 0, half: ``y = x*cos + cat(-x2, x1)*sin``."""
    x1, x2 = chunk(x, 2)                     # x1, x2 = chunk(x, 2)
    rot = cat(-x2, x1)                       # rot = cat(-x2, x1)
    return x * cos + rot * sin               # y = x*cos + rot*sin


def rope_interleave(x, cos, sin):
    """mode 1, interleave: ``rot[2i] = -x[2i+1]``, ``rot[2i+1] = x[2i]``; ``y = x*cos + rot*sin``."""
    x1, x2 = even(x), odd(x)                 # x1 = even(x), x2 = odd(x)
    rot = stack_pairs(-x2, x1)               # rot = stack(-x2, x1).reshape(x.shape)
    return x * cos + rot * sin               # y = x*cos + rot*sin


def rope_quarter(x, cos, sin):
    """mode 2, quarter: ``y = x*cos + cat(-x2, x1, -x4, x3)*sin``."""
    x1, x2, x3, x4 = chunk(x, 4)             # x1..x4 = chunk(x, 4)
    rot = cat(-x2, x1, -x4, x3)              # rot = cat(-x2, x1, -x4, x3)
    return x * cos + rot * sin               # y = x*cos + rot*sin


def rope_interleave_half(x, cos, sin):
    """mode 3, interleave-half: ``y = cat(x1, x2)*cos + cat(-x2, x1)*sin``, x1/x2 = even/odd(x)."""
    x1, x2 = even(x), odd(x)                 # x1 = even(x), x2 = odd(x)
    part1 = cat(x1, x2)                      # part1 = cat(x1, x2)
    part2 = cat(-x2, x1)                     # part2 = cat(-x2, x1)
    return part1 * cos + part2 * sin         # y = part1*cos + part2*sin


# --- backward, per mode (docs/rope.md §3: the vendor document's formulas) -------------------

def rope_grad_half(dy, cos, sin, x=None, sum_dtype=None):
    """mode 0: ``dx = cat(cos1*dy1 + sin2*dy2, cos2*dy2 - sin1*dy1)``; ``dcos = sum(dy*x, dims)``;
    ``dsin = sum(dy*cat(-x2, x1), dims)``."""
    dy1, dy2 = chunk(dy, 2)                                  # dy1, dy2 = chunk(dy, 2)
    cos1, cos2 = chunk(cos, 2)                               # cos1, cos2 = chunk(cos, 2)
    sin1, sin2 = chunk(sin, 2)                               # sin1, sin2 = chunk(sin, 2)
    dx = cat(cos1 * dy1 + sin2 * dy2, cos2 * dy2 - sin1 * dy1)   # dx, mode 0
    if x is None:
        return dx, None, None
    x1, x2 = chunk(x, 2)                                     # x1, x2 = chunk(x, 2)
    dcos = sum_to_shape(dy * x, cos.shape, sum_dtype)        # dcos = sum(dy*x, dims)
    dsin = sum_to_shape(dy * cat(-x2, x1), cos.shape, sum_dtype)  # dsin = sum(dy*cat(-x2, x1), dims)
    return dx, dcos, dsin


def rope_grad_interleave(dy, cos, sin, x=None, sum_dtype=None):
    """mode 1: ``dx = stack(cos1*dy1 + sin2*dy2, cos2*dy2 - sin1*dy1).reshape(dy.shape)`` with
    even/odd splits; ``dcos = sum(dy*x, dims)``; ``dsin = sum(dy*stack(-x2, x1).reshape, dims)``."""
    dy1, dy2 = even(dy), odd(dy)                             # dy1, dy2 = dy[..., ::2], dy[..., 1::2]
    cos1, cos2 = even(cos), odd(cos)                         # cos1, cos2 = cos[..., ::2], cos[..., 1::2]
    sin1, sin2 = even(sin), odd(sin)                         # sin1, sin2 = sin[..., ::2], sin[..., 1::2]
    dx = stack_pairs(cos1 * dy1 + sin2 * dy2, cos2 * dy2 - sin1 * dy1)   # dx, mode 1
    if x is None:
        return dx, None, None
    x1, x2 = even(x), odd(x)                                 # x1, x2 = x[..., ::2], x[..., 1::2]
    dcos = sum_to_shape(dy * x, cos.shape, sum_dtype)        # dcos = sum(dy*x, dims)
    dsin = sum_to_shape(dy * stack_pairs(-x2, x1), cos.shape, sum_dtype)  # dsin = sum(dy*stack(-x2, x1), dims)
    return dx, dcos, dsin


def rope_grad_quarter(dy, cos, sin, x=None, sum_dtype=None):
    """mode 2: ``dx = cat(cos1*dy1 + sin2*dy2, cos2*dy2 - sin1*dy1, cos3*dy3 + sin4*dy4,
    cos4*dy4 - sin3*dy3)``; ``dcos = sum(dy*x, dims)``; ``dsin = sum(dy*cat(-x2, x1, -x4, x3), dims)``."""
    dy1, dy2, dy3, dy4 = chunk(dy, 4)                        # dy1..dy4 = chunk(dy, 4)
    cos1, cos2, cos3, cos4 = chunk(cos, 4)                   # cos1..cos4 = chunk(cos, 4)
    sin1, sin2, sin3, sin4 = chunk(sin, 4)                   # sin1..sin4 = chunk(sin, 4)
    dx = cat(cos1 * dy1 + sin2 * dy2, cos2 * dy2 - sin1 * dy1,
             cos3 * dy3 + sin4 * dy4, cos4 * dy4 - sin3 * dy3)   # dx, mode 2
    if x is None:
        return dx, None, None
    x1, x2, x3, x4 = chunk(x, 4)                             # x1..x4 = chunk(x, 4)
    dcos = sum_to_shape(dy * x, cos.shape, sum_dtype)        # dcos = sum(dy*x, dims)
    dsin = sum_to_shape(dy * cat(-x2, x1, -x4, x3), cos.shape, sum_dtype)  # dsin = sum(dy*cat(-x2, x1, -x4, x3), dims)
    return dx, dcos, dsin


def rope_grad_interleave_half(dy, cos, sin, x=None, sum_dtype=None):
    """mode 3: halves of dy/cos/sin, even/odd of x; ``dx = stack(cos1*dy1 + sin2*dy2,
    cos2*dy2 - sin1*dy1).reshape(dy.shape)``; ``dcos = sum(dy*cat(x1, x2), dims)``;
    ``dsin = sum(dy*cat(-x2, x1), dims)``."""
    dy1, dy2 = chunk(dy, 2)                                  # dy1, dy2 = chunk(dy, 2)
    cos1, cos2 = chunk(cos, 2)                               # cos1, cos2 = chunk(cos, 2)
    sin1, sin2 = chunk(sin, 2)                               # sin1, sin2 = chunk(sin, 2)
    dx = stack_pairs(cos1 * dy1 + sin2 * dy2, cos2 * dy2 - sin1 * dy1)   # dx, mode 3 (re-interleaved)
    if x is None:
        return dx, None, None
    x1, x2 = even(x), odd(x)                                 # x1, x2 = x[..., ::2], x[..., 1::2]
    dcos = sum_to_shape(dy * cat(x1, x2), cos.shape, sum_dtype)  # dcos = sum(dy*cat(x1, x2), dims)
    dsin = sum_to_shape(dy * cat(-x2, x1), cos.shape, sum_dtype)  # dsin = sum(dy*cat(-x2, x1), dims)
    return dx, dcos, dsin


#: mode number -> forward formula block
ROPE_FORWARD = {
    RopeMode.HALF: rope_half,
    RopeMode.INTERLEAVE: rope_interleave,
    RopeMode.QUARTER: rope_quarter,
    RopeMode.INTERLEAVE_HALF: rope_interleave_half,
}

#: mode number -> backward formula block
ROPE_BACKWARD = {
    RopeMode.HALF: rope_grad_half,
    RopeMode.INTERLEAVE: rope_grad_interleave,
    RopeMode.QUARTER: rope_grad_quarter,
    RopeMode.INTERLEAVE_HALF: rope_grad_interleave_half,
}


# --- public operators -----------------------------------------------------------------------

def rotary_position_embedding(x, cos, sin, mode=0, *, soc=None, out_dtype=None):
    """RotaryPositionEmbedding forward: ``y`` of x's shape (docs/rope.md, Parameters, §2-§3).

    ``soc`` None checks only what the math needs; "A2", "A3" or "950" adds the profile's
    constraints (docs/rope.md §5). ``out_dtype`` None returns x's dtype rounded once
    (round half to even); ``np.float64`` returns the exact values.
    """
    out_dtype = check_out_dtype(out_dtype, "rotary_position_embedding")
    args = check_rope_args("rotary_position_embedding", "x", x, cos, sin, None, mode, soc)
    y, = by_blocks(ROPE_FORWARD[RopeMode(args.mode)], args.primary, (args.cos, args.sin))
    return round_to(y, output_dtype(args.primary.dtype, out_dtype))


def rotary_position_embedding_grad(dy, cos, sin, x=None, mode=0, *, soc=None, out_dtype=None,
                                   sum_dtype=None):
    """RotaryPositionEmbeddingGrad: ``(dx, dcos, dsin)`` (docs/rope.md, Parameters, §2-§3).

    ``dx`` has dy's shape; ``dcos``/``dsin`` have cos's shape and are None when ``x`` (the
    optional xOptional) is absent. Outputs are in dy's dtype unless ``out_dtype`` says otherwise.
    ``sum_dtype`` (None: exact) rounds every partial sum of dcos and dsin to that dtype in the
    stated order (``refspec.spec.reduce``): what a kernel accumulating in it computes.
    """
    out_dtype = check_out_dtype(out_dtype, "rotary_position_embedding_grad")
    args = check_rope_args("rotary_position_embedding_grad", "dy", dy, cos, sin, x, mode, soc)
    outs = by_blocks(ROPE_BACKWARD[RopeMode(args.mode)], args.primary, (args.cos, args.sin),
                     args.x, reduced=(False, True, True), sum_dtype=sum_dtype)
    dtype = output_dtype(args.primary.dtype, out_dtype)
    return tuple(None if o is None else round_to(o, dtype) for o in outs)
