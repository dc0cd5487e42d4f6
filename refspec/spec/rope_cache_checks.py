"""Validation of RopeWithSinCosCache (docs/rope_with_sin_cos_cache.md §4).

Sources: the vendor's aclnnRopeWithSinCosCache document and README, and the ops-transformer host
code of ``posembedding/rope_with_sin_cos_cache`` (``op_host/op_api/aclnn_rope_with_sin_cos_cache.cpp``
checks nulls, dtypes, ranks, empty tensors, the token counts, mropeSection and headSize, all as
161001/161002; the tiling checks nothing). Rules only the document states keep the document's
status, 561002 for shapes and attributes that do not fit the tensors (docs/errata.md, E18-E23).
The operator exists on A2/A3 only: the host code has no dtype list for any other chip.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import as_tensor, check_same_dtype, check_soc, require
from .dtypes import dtype_name
from .enums import RopeMode
from .errors import ParamInvalidError, TilingError

__all__ = ["MROPE_SECTIONS", "RopeCacheArgs", "check_rope_cache_args"]

#: the one mropeSection the A2/A3 host code supports
MROPE_SECTIONS = ((16, 24, 24),)


class RopeCacheArgs(NamedTuple):
    """Validated arguments: arrays in their given dtypes (positions as integers), the head size,
    the rotary dim (cosSinCache's last axis), the mrope sections (None: rope mode), the formula
    block (half for GPT-NeoX style, interleave for GPT-J style)."""

    positions: np.ndarray
    query: np.ndarray
    key: np.ndarray
    cos_sin_cache: np.ndarray
    head_size: int
    rotary_dim: int
    mrope_section: tuple[int, int, int] | None
    mode: RopeMode
    soc: str | None


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _positions(value, soc, ctx) -> np.ndarray:
    """Integer indices: int64 on A2/A3 (errata E19: the README also lists int32), any integer
    dtype when math only."""
    try:
        p = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise ParamInvalidError(f"positions: cannot be read as an array ({exc}) [{ctx}]") from None
    ok = p.dtype == np.int64 if soc is not None else p.dtype.kind in "iu"
    if not ok:
        allowed = "int64" if soc is not None else "an integer dtype"
        raise ParamInvalidError(f"positions: dtype {dtype_name(p.dtype)} is not allowed; allowed: "
                                f"{allowed} [{ctx}]")
    return p


def _mrope_section(value, rotary_dim, soc, ctx):
    """None (rope mode) or three sections summing to rotary_dim/2 (errata E18); on A2/A3 exactly
    (16, 24, 24) (E22: the host code takes a first section <= 0 as rope mode)."""
    if value is None:
        return None
    try:
        section = tuple(value)
    except TypeError:
        section = None
    if section is None or len(section) != 3 or not all(_is_int(v) and v >= 0 for v in section):
        raise ParamInvalidError(f"mrope_section: {value!r} is not three integers >= 0 [{ctx}]")
    section = tuple(int(v) for v in section)
    if sum(section) * 2 != rotary_dim:
        raise ParamInvalidError(f"mrope_section: {section} sums to {sum(section)}, must be rotary_dim/2 "
                                f"= {rotary_dim / 2:g} (rotary_dim is cos_sin_cache's last axis) [{ctx}]")
    if soc is not None and section not in MROPE_SECTIONS:
        raise ParamInvalidError(f"mrope_section: {section} is not supported on {soc}; allowed: "
                                f"{', '.join(map(str, MROPE_SECTIONS))} [{ctx}]")
    return section


def check_rope_cache_args(op: str, positions, query, key, cos_sin_cache, head_size, mrope_section,
                          is_neox_style, soc) -> RopeCacheArgs:
    """Apply every rule of docs/rope_with_sin_cos_cache.md §4 for the profile ``soc`` (None:
    what the math needs). ``op`` is the Python function name, for the messages."""
    ctx = f"{op} head_size={head_size!r} mrope_section={mrope_section!r} is_neox_style={is_neox_style!r}"
    soc = check_soc(soc, op, allowed=("A2", "A3"))
    tensors = {"positions": positions, "query": query, "key": key, "cos_sin_cache": cos_sin_cache}
    for name, value in tensors.items():
        require(value, name, ctx)
    p = _positions(positions, soc, ctx)
    q, k, cache = (as_tensor(tensors[n], n, ctx, soc) for n in ("query", "key", "cos_sin_cache"))
    if soc is not None:
        check_same_dtype(k, "key", q, "query", ctx)
        check_same_dtype(cache, "cos_sin_cache", q, "query", ctx)
    for name, arr in (("query", q), ("key", k), ("cos_sin_cache", cache)):
        if arr.ndim != 2:
            raise ParamInvalidError(f"{name}: rank {arr.ndim} (shape {arr.shape}) not supported; "
                                    f"allowed: 2-D [{ctx}]")
    if soc is not None:
        for name, arr in (("positions", p), ("query", q), ("key", k), ("cos_sin_cache", cache)):
            if arr.size == 0:
                raise ParamInvalidError(f"{name}: shape {arr.shape} is empty; empty tensors are "
                                        f"not supported [{ctx}]")
    T = q.shape[0]
    if k.shape[0] != T:
        raise ParamInvalidError(f"key: {k.shape[0]} tokens must equal query's {T} [{ctx}]")
    rotary_dim = cache.shape[1]
    section = _mrope_section(mrope_section, rotary_dim, soc, ctx)
    if not _is_int(head_size) or head_size <= 0:
        raise ParamInvalidError(f"head_size: {head_size!r} must be an integer > 0 [{ctx}]")
    if not isinstance(is_neox_style, (bool, np.bool_)):
        raise ParamInvalidError(f"is_neox_style: {is_neox_style!r} must be a bool [{ctx}]")
    head_size, neox = int(head_size), bool(is_neox_style)
    ctx = (f"{op} head_size={head_size} mrope_section={section} is_neox_style={neox}"
           + (f" soc={soc}" if soc else ""))

    # the document's rules, which the host code does not check (errata E21)
    for name, arr in (("query", q), ("key", k)):
        if arr.shape[1] % head_size:
            raise TilingError(f"{name}: width {arr.shape[1]} is not a multiple of head_size "
                              f"{head_size} (numHeads*headSize) [{ctx}]")
    if rotary_dim <= 0 or rotary_dim % 2:
        raise TilingError(f"cos_sin_cache: rotary_dim {rotary_dim} (its last axis) must be even "
                          f"and > 0 [{ctx}]")
    if rotary_dim > head_size:
        raise TilingError(f"cos_sin_cache: rotary_dim {rotary_dim} exceeds head_size {head_size} [{ctx}]")
    if soc is not None:
        multiple = 16 if q.dtype == np.float32 else 32
        for name, value in (("head_size", head_size), ("cos_sin_cache", rotary_dim)):
            if value % multiple:
                what = "head_size" if name == "head_size" else "rotary_dim (its last axis)"
                raise TilingError(f"{name}: {what} {value} is not a multiple of {multiple} for "
                                  f"{dtype_name(q.dtype)} [{ctx}]")
    want = (T,) if section is None else (3, T)
    if p.shape != want:
        mode = "rope mode" if section is None else "mrope mode"
        raise TilingError(f"positions: shape {p.shape} must be {want} in {mode} [{ctx}]")
    if p.size and (p.min() < 0 or p.max() >= cache.shape[0]):
        raise ParamInvalidError(f"positions: values {p.min()}..{p.max()} must be in [0, "
                                f"{cache.shape[0]}) (cos_sin_cache's rows) [{ctx}]")
    mode = RopeMode.HALF if neox else RopeMode.INTERLEAVE
    return RopeCacheArgs(p, q, k, cache, head_size, rotary_dim, section, mode, soc)
