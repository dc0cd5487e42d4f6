"""Where the failing elements lie (docs/compare.md, "Diagnosis", ``region``): along each
named axis, and from the first wrong element in memory order."""

from __future__ import annotations

import numpy as np

from .findings import Finding, Subject

__all__ = ["regions"]


def regions(s: Subject, fail: np.ndarray) -> list[Finding]:
    """Where the failing elements lie: along each axis, the indices that hold them when they
    are part of it (a tail, a first part, a half of D, odd or even positions); the first wrong
    element in memory order when every element before it is right."""
    out = []
    if not s.shape:
        return out
    idx = np.unravel_index(s.flat[fail], s.shape)
    names = s.axis_names
    sample_idx = np.unravel_index(s.flat, s.shape)
    for ax, size in enumerate(s.shape):
        if size < 2:
            continue
        seen = np.unique(sample_idx[ax])
        hit = np.unique(idx[ax])
        if hit.size == seen.size:
            continue
        out.append(_axis_region(names[ax], size, hit, seen))
    first = int(s.flat[fail][0])
    if not s.sampled and first >= 16 and fail[first:].mean() >= 0.5:
        out.append(Finding("region", f"every element before flat index {first}{pow2(first)} is "
                           "right; from it on most are wrong", 1.0,
                           {"axis": "flat", "ranges": [[first, int(s.flat[-1]) + 1]]}))
    return out


def _axis_region(letter: str, size: int, hit: np.ndarray, seen: np.ndarray) -> Finding:
    ranges = _runs(hit)
    name = letter.lower()
    parity = ""
    if hit.size > 1 and (hit % 2 == hit[0] % 2).all() and (seen % 2 != hit[0] % 2).any():
        parity = "odd" if hit[0] % 2 else "even"
    if parity:
        text = f"only at {parity} {name}"
    elif len(ranges) == 1 and size % 2 == 0 and ranges[0] == [size // 2, size]:
        text = f"only in the second half of {name} ({name} = {size // 2}..{size - 1})"
    elif len(ranges) == 1 and size % 2 == 0 and ranges[0] == [0, size // 2]:
        text = f"only in the first half of {name} ({name} = 0..{size // 2 - 1})"
    else:
        shown = ", ".join(f"{lo}" if hi == lo + 1 else f"{lo}..{hi - 1}" for lo, hi in ranges[:6])
        more = f" and {len(ranges) - 6} more ranges" if len(ranges) > 6 else ""
        tail = ""
        if len(ranges) == 1 and ranges[0][1] == size and ranges[0][0] > 0:
            tail = f" (the tail from {ranges[0][0]}{pow2(ranges[0][0])})"
        text = f"only at {name} = {shown}{more}{tail}"
    detail = {"axis": letter, "ranges": ranges[:64], "indices": int(hit.size), "of": int(size)}
    if parity:
        detail["parity"] = parity
    return Finding("region", f"the failing elements lie {text}: {hit.size} of {size} indices",
                   1.0, detail)


def _runs(sorted_idx: np.ndarray) -> list[list[int]]:
    """Contiguous runs of sorted indices as [start, stop) pairs."""
    if sorted_idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_idx) != 1)
    starts = np.concatenate([[sorted_idx[0]], sorted_idx[breaks + 1]])
    stops = np.concatenate([sorted_idx[breaks], [sorted_idx[-1]]]) + 1
    return [[int(a), int(b)] for a, b in zip(starts, stops)]


def pow2(n: int) -> str:
    """`` (= 3 x 2^9)`` when n is a multiple of 2^k for k >= 4."""
    if n <= 0:
        return ""
    k = (n & -n).bit_length() - 1
    return f" (= {n >> k} x 2^{k})" if k >= 4 else ""
