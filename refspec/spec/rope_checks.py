"""Validation of RotaryPositionEmbedding and RotaryPositionEmbeddingGrad (docs/rope.md §5)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import as_tensor, check_attr, check_same_dtype, check_soc, require
from .errors import TilingError
from .layouts import LayoutInference, infer_layout

__all__ = ["RopeArgs", "check_rope_args"]

A2_MAX_D = 896          # D < 896 on A2/A3 (errata E4: the code lets 896 through)
A950_MAX_D = 1024       # D <= 1024 on 950


class RopeArgs(NamedTuple):
    """Validated arguments: arrays in their given dtypes, the mode, and the inferred layout."""

    primary: np.ndarray
    cos: np.ndarray
    sin: np.ndarray
    x: np.ndarray | None
    mode: int
    soc: str | None
    layout: LayoutInference


def _batch_heads(layout: str | None, shape: tuple[int, ...]) -> tuple[int, int]:
    """(B, N) of dy in the inferred layout (TND has no batch axis: B counts as 1)."""
    if layout == "TND":
        return 1, shape[1]
    if layout == "BNSD":
        return shape[0], shape[1]
    if layout == "BSND":
        return shape[0], shape[2]
    return shape[1], shape[2]  # SBND


def check_rope_args(op: str, primary_name: str, primary, cos, sin, x, mode, soc) -> RopeArgs:
    """Apply every rule of docs/rope.md §5 for the profile ``soc`` (None: what the math needs).

    ``op`` is the Python function name, ``primary_name`` "x" (forward) or "dy" (backward); for
    the backward ``x`` is xOptional.
    """
    ctx = f"{op} mode={mode!r}"
    soc = check_soc(soc, op)
    require(primary, primary_name, ctx)
    require(cos, "cos", ctx)
    require(sin, "sin", ctx)
    p = as_tensor(primary, primary_name, ctx, soc)
    c = as_tensor(cos, "cos", ctx, soc)
    s = as_tensor(sin, "sin", ctx, soc)
    xo = None if x is None else as_tensor(x, "x", ctx, soc)
    if soc is not None:
        for arr, name in ((c, "cos"), (s, "sin"), (xo, "x")):
            if arr is not None:
                check_same_dtype(arr, name, p, primary_name, ctx)
    mode = check_attr(mode, "mode", (0, 1, 2, 3), ctx)
    ctx = f"{op} mode={mode}" + (f" soc={soc}" if soc else "")

    ranks = {"A2": (3, 4), "A3": (3, 4), "950": (4,)}.get(soc)
    if p.ndim == 0 or (ranks and p.ndim not in ranks):
        allowed = " or ".join(f"{r}-D" for r in ranks) if ranks else "at least 1-D"
        raise TilingError(f"{primary_name}: rank {p.ndim} (shape {p.shape}) not supported; allowed: {allowed} [{ctx}]")
    if c.ndim != p.ndim:
        raise TilingError(f"cos: rank {c.ndim} (shape {c.shape}) must equal {primary_name}'s rank {p.ndim} [{ctx}]")
    if s.shape != c.shape:
        raise TilingError(f"sin: shape {s.shape} must equal cos's shape {c.shape} [{ctx}]")
    D = p.shape[-1]
    if c.shape[-1] != D:
        raise TilingError(f"cos: D={c.shape[-1]} must equal {primary_name}'s D={D} [{ctx}]")
    if xo is not None and xo.shape != p.shape:
        raise TilingError(f"x: shape {xo.shape} must equal dy's shape {p.shape} [{ctx}]")
    if D % 2:
        raise TilingError(f"{primary_name}: D={D} must be even [{ctx}]")
    if mode == 2 and D % 4:
        raise TilingError(f"{primary_name}: D={D} must be divisible by 4 in quarter mode [{ctx}]")
    if soc == "950":
        if min(p.shape) <= 0:
            raise TilingError(f"{primary_name}: shape {p.shape} has an empty axis; every dim must be > 0 on 950 [{ctx}]")
        if D > A950_MAX_D:
            raise TilingError(f"{primary_name}: D={D} exceeds the maximum {A950_MAX_D} on 950 [{ctx}]")
    if soc in ("A2", "A3"):
        if mode not in (0, 1):
            raise TilingError(f"mode: {mode} is not supported on {soc}; allowed: 0 (half), 1 (interleave) [{ctx}]")
        if D >= A2_MAX_D:
            raise TilingError(f"{primary_name}: D={D} must be < {A2_MAX_D} on {soc} [{ctx}]")

    layout = infer_layout(p.shape, c.shape, mode, soc)

    if soc in ("A2", "A3"):
        B, N = _batch_heads(layout.layout, p.shape)
        named = f"layout {layout.layout}: B={B}, N={N}"
        if mode == 0:
            if B >= 1000 or N >= 1000:
                raise TilingError(f"{primary_name}: {named}; half mode needs B < 1000 and N < 1000 [{ctx}]")
            if xo is not None and B * N > 1024:
                raise TilingError(f"{primary_name}: {named}, B*N={B * N}; with x given (dcos/dsin) "
                                  f"half mode needs B*N <= 1024 [{ctx}]")
        elif (N if layout.layout == "TND" else B * N) >= 1000:
            what = "N" if layout.layout == "TND" else "B*N"
            raise TilingError(f"{primary_name}: {named}; interleave mode needs {what} < 1000 [{ctx}]")
    return RopeArgs(p, c, s, xo, mode, soc, layout)
