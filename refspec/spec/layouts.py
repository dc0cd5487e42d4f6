"""Layouts and cos/sin broadcast patterns (docs/rope.md §4).

Layout never enters the math: the formulas act on the last axis and reduce over the broadcast
axes. This module only names things: it lays one logical (B, N, S, D) problem out as BNSD, BSND,
SBND or TND, and says which layout and cos pattern the vendor's A2/A3 rules infer from dy's and
cos's shapes, or why they reject the combination.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import TilingError
from .reduce import broadcast_dims

__all__ = [
    "LAYOUTS",
    "LayoutInference",
    "to_layout",
    "from_layout",
    "layout_shape",
    "cos_pattern",
    "infer_layout",
]

LAYOUTS = ("BNSD", "BSND", "SBND", "TND")

# Axis order of each 4-D layout in terms of the logical BNSD axes.
_PERM = {"BNSD": (0, 1, 2, 3), "BSND": (0, 2, 1, 3), "SBND": (2, 0, 1, 3)}


class LayoutInference(NamedTuple):
    """What the vendor rules make of a (dy, cos) shape pair.

    ``layout`` and ``cos_pattern`` are None when the profile accepts the pair without naming it
    (950 and the math-only profile accept any broadcastable pair); ``reduce_dims`` are the axes
    dcos/dsin sum over.
    """

    layout: str | None
    cos_pattern: str | None
    reduce_dims: tuple[int, ...]


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout


def layout_shape(layout: str, B: int, N: int, S: int, D: int) -> tuple[int, ...]:
    """The shape of a logical (B, N, S, D) tensor in ``layout`` (TND packs ``B*S`` into T)."""
    if _check_layout(layout) == "TND":
        return (B * S, N, D)
    return tuple((B, N, S, D)[i] for i in _PERM[layout])


def to_layout(a: np.ndarray, layout: str, batch: int | None = None) -> np.ndarray:
    """Lay a logical BNSD array out as ``layout``.

    For TND, a tensor whose batch axis is 1 (a cos/sin shared by the batch) is first repeated
    to ``batch`` rows, since TND has no separate batch axis: T1D holds one row per token.
    """
    a = np.asarray(a)
    if a.ndim != 4:
        raise ValueError(f"expected a logical (B, N, S, D) array, got shape {a.shape}")
    if _check_layout(layout) != "TND":
        return np.ascontiguousarray(a.transpose(_PERM[layout]))
    if batch is not None and a.shape[0] == 1 and batch != 1:
        a = np.broadcast_to(a, (batch,) + a.shape[1:])
    if a.shape[2] == 1 and a.shape[0] > 1:
        raise ValueError("TND needs a sequence axis per token: cannot pack a cos shared over S")
    b, n, s, d = a.shape
    return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(b * s, n, d)


def from_layout(a: np.ndarray, layout: str, batch: int = 1) -> np.ndarray:
    """Inverse of ``to_layout``: back to logical BNSD (TND needs the batch size)."""
    a = np.asarray(a)
    if _check_layout(layout) == "TND":
        t, n, d = a.shape
        if t % batch:
            raise ValueError(f"T={t} is not a multiple of batch={batch}")
        return a.reshape(batch, t // batch, n, d).transpose(0, 2, 1, 3)
    inverse = np.argsort(_PERM[layout])
    return a.transpose(inverse)


def cos_pattern(cos_shape: tuple[int, ...], layout: str) -> str:
    """Name of a cos/sin shape in a layout: each axis letter, or 1 where cos has size 1."""
    letters = _check_layout(layout)
    if len(cos_shape) != len(letters):
        raise ValueError(f"cos shape {tuple(cos_shape)} has rank {len(cos_shape)}, layout {layout} has {len(letters)}")
    return "".join("1" if size == 1 and letter != "D" else letter
                   for size, letter in zip(cos_shape, letters))


def _a2_half_rule(x: tuple[int, ...], c: tuple[int, ...]) -> tuple[str, str] | None:
    """First matching rule of the A2/A3 half-mode layout inference (docs/rope.md §4 rules 1-7)."""
    x0, x1, x2 = x[:3]
    c0, c1, c2 = c[:3]
    if tuple(c) == tuple(x):
        return "BSND", "BSND"
    if x0 != 1 and c0 == 1 and x1 == c1 and c2 == 1:
        return "BSND", "1S1D"
    if x0 == c0 and x1 == c1 and c2 == 1 and x0 < x1:
        return "BSND", "BS1D"
    if x0 != 1 and c0 == 1 and c1 == 1 and x2 == c2:
        return "BNSD", "11SD"
    if x0 == c0 and c1 == 1 and x2 == c2 and x0 < x2:
        return "BNSD", "B1SD"
    if x0 == c0 and x1 != 1 and c1 == 1 and c2 == 1:
        return "SBND", "S11D"
    if x0 == c0 and x1 == c1 and c2 == 1:
        return "SBND", "SB1D"
    return None


def _a2_interleave_rule(x: tuple[int, ...], c: tuple[int, ...]) -> tuple[str, str] | None:
    """The three shape pairs the A2/A3 interleave kernel accepts (docs/rope.md §4)."""
    x0, x1, x2 = x[:3]
    c0, c1, c2 = c[:3]
    if c0 == 1 and c2 == 1 and x1 == c1:
        return "BSND", "1S1D"
    if c0 == 1 and c1 == 1 and x2 == c2:
        return "BNSD", "11SD"
    if c1 == 1 and c2 == 1 and x0 == c0:
        return "SBND", "S11D"
    return None


def infer_layout(dy_shape, cos_shape, mode: int = 0, soc: str | None = "A2") -> LayoutInference:
    """Layout and cos pattern the vendor rules infer for (dy, cos), or TilingError (561002).

    ``soc`` "A2"/"A3": the first-match rules of docs/rope.md §4 (TND is looked at as (1, T, N, D));
    modes other than 0 and 1 have no A2/A3 backward kernel. "950": any 4-D pair whose leading
    cos axes are 1 or equal to dy's. None: any same-rank pair broadcastable that way.
    """
    x = tuple(int(v) for v in dy_shape)
    c = tuple(int(v) for v in cos_shape)
    where = f"[dy shape {x}, cos shape {c}, mode={int(mode)}, soc={soc}]"
    if len(c) != len(x):
        raise TilingError(f"cos: rank {len(c)} must equal dy's rank {len(x)} {where}")
    if not x or c[-1] != x[-1]:
        raise TilingError(f"cos: D={c[-1] if c else None} must equal dy's D={x[-1] if x else None} {where}")
    for axis, (xs, cs) in enumerate(zip(x[:-1], c[:-1])):
        if cs not in (1, xs):
            raise TilingError(f"cos: axis {axis} has size {cs}, must be 1 or dy's {xs} {where}")
    dims = broadcast_dims(x, c)
    if soc is None or soc == "950":
        if soc == "950" and len(x) != 4:
            raise TilingError(f"dy: rank {len(x)} not supported on 950, which takes 4-D tensors only {where}")
        named = _a2_half_rule(x, c) if len(x) == 4 else None
        return LayoutInference(named[0] if named else None, named[1] if named else None, dims)
    if len(x) not in (3, 4):
        raise TilingError(f"dy: rank {len(x)} must be 4 (BNSD, BSND, SBND) or 3 (TND) {where}")
    tnd = len(x) == 3
    x4, c4 = ((1,) + x, (1,) + c) if tnd else (x, c)
    if int(mode) == 0:
        named = _a2_half_rule(x4, c4)
        allowed = "BNSD: 11SD, B1SD (B < S), BNSD; BSND: 1S1D, BS1D (B < S), BSND; SBND: S11D, SB1D, SBND; TND: T1D, TND"
    elif int(mode) == 1:
        named = _a2_interleave_rule(x4, c4)
        allowed = "BNSD: 11SD; BSND: 1S1D; SBND: S11D; TND: T1D"
    else:
        raise TilingError(f"mode: {int(mode)} has no kernel on {soc}; allowed: 0 (half), 1 (interleave) {where}")
    if named is None:
        raise TilingError(f"cos: broadcast pattern not supported for mode={int(mode)} on {soc}; "
                          f"supported: {allowed} {where}")
    if tnd:
        return LayoutInference("TND", cos_pattern(c, "TND"), dims)
    return LayoutInference(named[0], named[1], dims)
