"""Where a set of elements of an output lies (docs/compare.md, "Diagnosis"): along each named
axis, the indices that hold them when they are a part of those read (a half of D, odd or even
positions, a tail, some heads or batches), or the run of flat indices they fill. Each finding
names the part of the output it explains so, and ``unexplained`` where its elements lie."""

from __future__ import annotations

import numpy as np

from .findings import Subject

__all__ = ["where", "inside", "pow2"]


def where(s: Subject, mask: np.ndarray) -> tuple[str, dict]:
    """(text, detail) of where the elements of ``mask`` (over the elements read) lie: the axes
    along which they hold only some of the indices read (``d = 0..31``, ``odd d``,
    ``b = 1, d = 32..63``), or the run of flat indices they fill when every element before it
    is outside (``flat indices 64..191``) and the axes' part holds elements outside ``mask``,
    else "" (spread over the output)."""
    if not s.shape or not mask.any():
        return "", {}
    idx = np.unravel_index(s.flat[mask], s.shape)
    seen_idx = np.unravel_index(s.flat, s.shape)
    names = s.axis_names
    texts, ranges = [], {}
    for ax, size in enumerate(s.shape):
        if size < 2:
            continue
        seen, hit = np.unique(seen_idx[ax]), np.unique(idx[ax])
        if hit.size == seen.size:
            continue
        texts.append(_axis_text(names[ax].lower(), hit, seen))
        ranges[names[ax]] = _runs(hit)[:64]
    flat = s.flat[mask]
    first, last = int(flat[0]), int(flat[-1])
    if not s.sampled and first > 0 and mask[first:].all() and \
            not (texts and inside(s, {"axes": ranges}).sum() == mask.sum()):
        return (f"flat indices {first}..{last} (from {first}{pow2(first)} on)",
                {"flat": [first, last + 1]})
    if texts:
        return ", ".join(texts), {"axes": ranges}
    return "", {}


def _axis_text(name: str, hit: np.ndarray, seen: np.ndarray) -> str:
    """``d = 0..31``, ``s = 1, 3..5``, ``odd d``: the indices along one axis."""
    parity = hit[0] % 2
    if hit.size > 2 and (hit % 2 == parity).all() and \
            np.array_equal(hit, seen[seen % 2 == parity]) and (seen % 2 != parity).any():
        return f"{'odd' if parity else 'even'} {name}"
    ranges = _runs(hit)
    shown = ", ".join(f"{lo}" if hi == lo + 1 else f"{lo}..{hi - 1}" for lo, hi in ranges[:6])
    more = f" and {len(ranges) - 6} more ranges" if len(ranges) > 6 else ""
    return f"{name} = {shown}{more}"


def _runs(sorted_idx: np.ndarray) -> list[list[int]]:
    """Contiguous runs of sorted indices as [start, stop) pairs."""
    if sorted_idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_idx) != 1)
    starts = np.concatenate([[sorted_idx[0]], sorted_idx[breaks + 1]])
    stops = np.concatenate([sorted_idx[breaks], [sorted_idx[-1]]]) + 1
    return [[int(a), int(b)] for a, b in zip(starts, stops)]


def pow2(n: int) -> str:
    """`` (= 3 x 2^9)`` when n is a multiple of 2^k for k >= 4 (block boundaries show so)."""
    if n <= 0:
        return ""
    k = (n & -n).bit_length() - 1
    return f" (= {n >> k} x 2^{k})" if k >= 4 else ""


def inside(s: Subject, detail: dict) -> np.ndarray:
    """The elements read that lie in the part ``detail`` (of ``where``) describes."""
    if "flat" in detail:
        lo, hi = detail["flat"]
        return (s.flat >= lo) & (s.flat < hi)
    out = np.ones(s.flat.shape, bool)
    if not detail.get("axes"):
        return out
    idx = np.unravel_index(s.flat, s.shape)
    names = list(s.axis_names)
    for name, ranges in detail["axes"].items():
        ax = names.index(name)
        hit = np.zeros(s.shape[ax], bool)
        for lo, hi in ranges:
            hit[lo:hi] = True
        out &= hit[idx[ax]]
    return out


