"""Validation of ApplyRotaryPosEmb and ApplyRotaryPosEmbV2 (docs/apply_rotary_pos_emb.md §4).

Sources: the vendor's aclnnApplyRotaryPosEmb(V2) documents and the ops-transformer host code of
``posembedding/apply_rotary_pos_emb`` (``op_host/apply_rotary_pos_emb_tiling.cpp`` for A2/A3,
``op_host/apply_rotary_pos_emb_tiling_*_arch35.cpp`` for 950). Where the document and the code
give different status codes, the code's is raised (it is what the API returns); rules only the
document states keep the document's code (docs/errata.md, E13-E17).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import as_tensor, check_attr, check_same_dtype, check_soc, require
from .dtypes import bfloat16
from .enums import RopeMode
from .errors import ParamInvalidError, TilingError

__all__ = ["LAYOUT_NAMES", "ROTARY_MODES", "ApplyRopeArgs", "ub_required", "check_apply_rope_args"]

#: ``layout`` numbers of the API
LAYOUT_NAMES = {1: "BSND", 2: "SBND", 3: "BNSD", 4: "TND"}
#: ``rotaryMode`` strings -> the RoPE formula block they select
ROTARY_MODES = {"half": RopeMode.HALF, "interleave": RopeMode.INTERLEAVE, "quarter": RopeMode.QUARTER}
#: per profile: the layouts its kernels take
PROFILE_LAYOUTS = {"A2": (1, 4), "A3": (1, 4), "950": (1, 2, 3)}

A2_HEAD_DIMS = (64, 128)      # D of every tensor on A2/A3
A2_MAX_HEADS = 255            # q_n + k_n: the kernel's repeat count is a uint8 (E15)
A2_UB_BYTES = 192 * 1024      # the Unified Buffer of an A2/A3 vector core
A950_MAX_D = 1024

#: per layout: the (B, S, N) axes of a query of that layout (TND has no B axis)
_AXES = {1: (0, 1, 2), 2: (1, 0, 2), 3: (0, 2, 1), 4: (None, 0, 1)}


class ApplyRopeArgs(NamedTuple):
    """Validated arguments: arrays in their given dtypes, the layout number, the formula block."""

    query: np.ndarray
    key: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    layout: int
    mode: RopeMode
    soc: str | None


def ub_required(q_n: int, k_n: int, D: int, dtype) -> int:
    """Bytes of Unified Buffer the A2/A3 kernel needs for one token (the document's formula):
    ``(q_n+k_n)*D*castSize*2 + D*DtypeSize*4 + (q_n+k_n)*D*castSize + (q_n+k_n)*D*castSize*2
    + cast*(D*4*2)``; bfloat16 is computed in float32 (cast = 1, castSize = 4)."""
    dtype_size = np.dtype(dtype).itemsize
    cast = int(np.dtype(dtype) == bfloat16)
    cast_size = 4 if cast else dtype_size
    n = q_n + k_n
    return (n * D * cast_size * 2 + D * dtype_size * 4 + n * D * cast_size
            + n * D * cast_size * 2 + cast * (D * 4 * 2))


def _layout_number(layout, ctx: str) -> int:
    """1..4, or the layout's name ("BSND", ...); anything else is 561002 (E13)."""
    names = {name: number for number, name in LAYOUT_NAMES.items()}
    if isinstance(layout, str) and layout.upper() in names:
        return names[layout.upper()]
    return check_attr(layout, "layout", tuple(LAYOUT_NAMES), ctx)


def _rotary_mode(rotary_mode, soc, ctx: str) -> RopeMode:
    """"half", "interleave" or "quarter": 161002 otherwise (the document), 561002 on 950 (its
    tiling's check); A2/A3 take "half" only (E14)."""
    if not isinstance(rotary_mode, str) or rotary_mode not in ROTARY_MODES:
        error = TilingError if soc == "950" else ParamInvalidError
        raise error(f"rotary_mode: {rotary_mode!r} is not a rotary mode; allowed: "
                    f"{', '.join(repr(m) for m in ROTARY_MODES)} [{ctx}]")
    if soc in ("A2", "A3") and rotary_mode != "half":
        raise ParamInvalidError(f"rotary_mode: {rotary_mode!r} is not supported on {soc}; "
                                f"allowed: 'half' [{ctx}]")
    return ROTARY_MODES[rotary_mode]


def _check_broadcast(t: np.ndarray, name: str, c: np.ndarray, ctx: str) -> None:
    """Math only: every axis of cos but D is 1 or the tensor's."""
    for axis, (ts, cs) in enumerate(zip(t.shape[:-1], c.shape[:-1])):
        if cs not in (1, ts):
            raise TilingError(f"cos: axis {axis} has size {cs}, must be 1 or {name}'s {ts} "
                              f"(shape {t.shape}) [{ctx}]")


def _check_a2(q, k, c, layout, ctx) -> None:
    """A2/A3 (apply_rotary_pos_emb_tiling.cpp): B, S (T) and D equal everywhere, cos N == 1,
    D 64 or 128, q_n + k_n <= 255, and the document's Unified Buffer bound."""
    b, s, n = _AXES[layout]
    for name, t in (("key", k), ("cos", c)):
        if b is not None and t.shape[b] != q.shape[b]:
            raise TilingError(f"{name}: B={t.shape[b]} must equal query's B={q.shape[b]} [{ctx}]")
        if t.shape[s] != q.shape[s]:
            what = "T" if layout == 4 else "S"
            raise TilingError(f"{name}: {what}={t.shape[s]} must equal query's {what}={q.shape[s]} [{ctx}]")
    D = q.shape[-1]
    if D not in A2_HEAD_DIMS:
        raise TilingError(f"query: D={D} is not supported; allowed: 64, 128 [{ctx}]")
    if c.shape[n] != 1:
        raise TilingError(f"cos: N={c.shape[n]} must be 1 [{ctx}]")
    q_n, k_n = q.shape[n], k.shape[n]
    if q_n + k_n > A2_MAX_HEADS:
        raise TilingError(f"query: q_n + k_n = {q_n} + {k_n} = {q_n + k_n} exceeds {A2_MAX_HEADS} [{ctx}]")
    need = ub_required(q_n, k_n, D, q.dtype)
    if need > A2_UB_BYTES:
        raise TilingError(f"query: q_n={q_n}, k_n={k_n}, D={D}, {q.dtype.name}: needs {need} bytes "
                          f"of Unified Buffer, more than the {A2_UB_BYTES} of the chip [{ctx}]")


def _check_950(q, k, c, layout, ctx) -> None:
    """950 (apply_rotary_pos_emb_tiling_base_arch35.cpp): cos N == 1, S and D equal, key's B
    equals query's, cos's B is 1 or query's, D <= 1024, no empty axis."""
    b, s, n = _AXES[layout]
    if c.shape[n] != 1:
        raise TilingError(f"cos: N={c.shape[n]} must be 1 [{ctx}]")
    for name, t in (("cos", c), ("key", k)):
        if t.shape[s] != q.shape[s]:
            raise TilingError(f"{name}: S={t.shape[s]} must equal query's S={q.shape[s]} [{ctx}]")
    if k.shape[b] != q.shape[b]:
        raise TilingError(f"key: B={k.shape[b]} must equal query's B={q.shape[b]} [{ctx}]")
    if c.shape[b] not in (1, q.shape[b]):
        raise TilingError(f"cos: B={c.shape[b]} must be 1 or query's B={q.shape[b]} [{ctx}]")
    if q.shape[-1] > A950_MAX_D:
        raise TilingError(f"query: D={q.shape[-1]} exceeds the maximum {A950_MAX_D} on 950 [{ctx}]")


def check_apply_rope_args(op: str, query, key, cos, sin, layout, rotary_mode, soc) -> ApplyRopeArgs:
    """Apply every rule of docs/apply_rotary_pos_emb.md §4 for the profile ``soc`` (None: what
    the math needs). ``op`` is the Python function name, for the messages."""
    ctx = f"{op} layout={layout!r} rotary_mode={rotary_mode!r}"
    soc = check_soc(soc, op)
    tensors = {"query": query, "key": key, "cos": cos, "sin": sin}
    for name, value in tensors.items():
        require(value, name, ctx)
    arrays = {name: as_tensor(value, name, ctx, soc) for name, value in tensors.items()}
    q, k, c, s = arrays.values()
    if soc is not None:
        for name in ("key", "cos", "sin"):
            check_same_dtype(arrays[name], name, q, "query", ctx)
    layout = _layout_number(layout, ctx)
    mode = _rotary_mode(rotary_mode, soc, ctx)
    ctx = f"{op} layout={layout} rotary_mode={mode.name.lower()}" + (f" soc={soc}" if soc else "")

    allowed = PROFILE_LAYOUTS.get(soc)
    if allowed and layout not in allowed:
        raise TilingError(f"layout: {layout} ({LAYOUT_NAMES[layout]}) is not supported on {soc}; "
                          f"allowed: {', '.join(f'{a} ({LAYOUT_NAMES[a]})' for a in allowed)} [{ctx}]")
    rank = 3 if layout == 4 else 4
    for name, arr in arrays.items():
        if arr.ndim != rank:
            raise TilingError(f"{name}: rank {arr.ndim} (shape {arr.shape}) does not fit layout "
                              f"{LAYOUT_NAMES[layout]}; allowed: {rank}-D [{ctx}]")
    if s.shape != c.shape:
        raise TilingError(f"sin: shape {s.shape} must equal cos's shape {c.shape} [{ctx}]")
    D = q.shape[-1]
    for name in ("key", "cos"):
        if arrays[name].shape[-1] != D:
            raise TilingError(f"{name}: D={arrays[name].shape[-1]} must equal query's D={D} [{ctx}]")
    if D % 2:
        raise TilingError(f"query: D={D} must be even [{ctx}]")
    if mode == RopeMode.QUARTER and D % 4:
        raise TilingError(f"query: D={D} must be divisible by 4 in quarter mode [{ctx}]")
    if soc is not None:
        for name, arr in arrays.items():
            if arr.size == 0:
                raise TilingError(f"{name}: shape {arr.shape} is empty; empty tensors are not "
                                  f"supported on {soc} [{ctx}]")
    if soc is None:
        _check_broadcast(q, "query", c, ctx)
        _check_broadcast(k, "key", c, ctx)
    elif soc == "950":
        _check_950(q, k, c, layout, ctx)
    else:
        _check_a2(q, k, c, layout, ctx)
    return ApplyRopeArgs(q, k, c, s, layout, mode, soc)
