"""Validation of InterleaveRope (docs/interleave_rope.md §4).

Sources: the vendor's InterleaveRope README and the ops-transformer host code of
``posembedding/interleave_rope`` (``op_host/interleave_rope_tiling.cpp`` for A2/A3;
``op_host/op_api/aclnn_interleave_rope.cpp``, which on 950 calls RotaryPositionEmbedding in mode 3
instead, so the 950 profile is that operator's: ``refspec.spec.rope_checks.check_rope_args``,
docs/errata.md E27). The tiling's failures are 561002, the dtypes 161002.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import as_tensor, check_same_dtype, check_soc, require
from .dtypes import bfloat16, dtype_name
from .enums import RopeMode
from .errors import ParamInvalidError, TilingError
from .rope_checks import check_rope_args

__all__ = ["InterleaveRopeArgs", "check_interleave_rope_args"]

A2_DTYPES = (np.dtype(np.float16), bfloat16)
A2_HEAD_DIM = 64


class InterleaveRopeArgs(NamedTuple):
    """Validated arguments: arrays in their given dtypes."""

    x: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    soc: str | None


def _check_a2(op: str, x, cos, sin, soc) -> InterleaveRopeArgs:
    """A2/A3 (interleave_rope_tiling.cpp and the README): float16/bfloat16, x (B, N, S, D) with
    every dim > 0 and D = 64, cos/sin (B, 1, S or 1, D) of one shape."""
    ctx = f"{op} soc={soc}"
    for value, name in ((x, "x"), (cos, "cos"), (sin, "sin")):
        require(value, name, ctx)
    x, c, s = (as_tensor(v, n, ctx, soc) for v, n in ((x, "x"), (cos, "cos"), (sin, "sin")))
    if x.dtype not in A2_DTYPES:
        raise ParamInvalidError(f"x: dtype {dtype_name(x.dtype)} is not allowed on {soc}; allowed: "
                                f"float16, bfloat16 [{ctx}]")
    for arr, name in ((c, "cos"), (s, "sin")):
        check_same_dtype(arr, name, x, "x", ctx)
    for arr, name in ((x, "x"), (c, "cos"), (s, "sin")):
        if arr.ndim != 4:
            raise TilingError(f"{name}: rank {arr.ndim} (shape {arr.shape}) not supported; "
                              f"allowed: 4-D (B, N, S, D) [{ctx}]")
    B, N, S, D = x.shape
    if min(x.shape) <= 0:
        raise TilingError(f"x: shape {x.shape} has an empty axis; every dim must be > 0 [{ctx}]")
    if D != A2_HEAD_DIM:
        raise TilingError(f"x: D={D} is not supported; allowed: {A2_HEAD_DIM} [{ctx}]")
    if s.shape != c.shape:
        raise TilingError(f"sin: shape {s.shape} must equal cos's shape {c.shape} [{ctx}]")
    cB, cN, cS, cD = c.shape
    if cB != B:
        raise TilingError(f"cos: B={cB} must equal x's B={B} [{ctx}]")
    if cN != 1:
        raise TilingError(f"cos: N={cN} must be 1 [{ctx}]")
    if cS not in (1, S):
        raise TilingError(f"cos: S={cS} must be 1 or x's S={S} [{ctx}]")
    if cD != D:
        raise TilingError(f"cos: D={cD} must equal x's D={D} [{ctx}]")
    return InterleaveRopeArgs(x, c, s, soc)


def check_interleave_rope_args(op: str, x, cos, sin, soc) -> InterleaveRopeArgs:
    """Apply every rule of docs/interleave_rope.md §4 for the profile ``soc``: A2/A3 the
    operator's own; None (what the math needs) and 950 those of RotaryPositionEmbedding in
    interleave-half mode (mode 3)."""
    soc = check_soc(soc, op)
    if soc in ("A2", "A3"):
        return _check_a2(op, x, cos, sin, soc)
    args = check_rope_args(op, "x", x, cos, sin, None, RopeMode.INTERLEAVE_HALF, soc)
    return InterleaveRopeArgs(args.primary, args.cos, args.sin, soc)
