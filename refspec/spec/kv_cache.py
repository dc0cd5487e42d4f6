"""Caches updated in place: where each token's values go (docs/kv_rms_norm_rope_cache.md §2).

A cache is a set of *slots*, each holding one token's (N, D) values. An index names the slot of
each token (-1: the token is skipped); the layout says where a slot's elements lie in the
cache's memory:

- ``BNSD`` (KvRmsNormRopeCache's ``Norm`` mode): a cache (B, N, Scache, D); the slot (b, s)
  holds its head n at ``cache[b, n, s, :]``; a slot is numbered ``b*Scache + s``;
- ``ND`` (``PA``/``PA_BNSD``, ``PA_BLK_BNSD``, DequantRopeQuantKvcache's ``page`` and
  ``contiguous``): a cache (..., N, D) whose leading axes number the slots in C order;
- ``NZ`` (``PA_NZ``, ``PA_BLK_NZ``, QkvRmsNormRopeCache): the fractal layout. A block of
  block_size slots is a ``(block_size, N*D)`` matrix stored as ``N*D/C0`` tiles of
  (block_size, C0), tile after tile, each tile row by row: the element (slot, n, d) of block k
  is at ``[k, (n*D + d) // C0, slot % block_size, (n*D + d) % C0]`` of a
  ``(block_num, N*D/C0, block_size, C0)`` array. C0 is 32 bytes of the cache's dtype: 16
  elements of float16/bfloat16, 32 of the 8-bit dtypes (errata E31).

``token_slots`` turns an index into a slot per token, ``element_offsets`` a slot into the flat
offsets of its elements, ``scatter`` writes values into a copy of the cache (the input is
never changed): the golden is the whole cache after the call, and the flat offsets written are
what a comparator needs to tell the written elements from the ones that must stay as given.
``cache_output`` is what a spec function returns for a cache: the whole cache, or (asked with
``whole_caches=False``) ``CacheWrites``, the cache as given with the offsets written and their
exact values beside it: the same result, without a copy of the whole cache in float64.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .dtypes import round_to, to_float64

__all__ = ["CACHE_MODES", "PAGED", "BLOCKED", "NZ_MODES", "LAYOUT_OF", "CACHE_AXES", "nz_width",
           "token_slots", "element_offsets", "scatter", "written", "CacheWrites", "cache_output"]

#: KvRmsNormRopeCache's cache modes (the document's names; PA and PA_BNSD are the same mode)
CACHE_MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")
#: the paged modes (caches of blocks)
PAGED = ("PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")
#: the modes with one index per block of tokens
BLOCKED = ("PA_BLK_BNSD", "PA_BLK_NZ")
#: the modes whose caches are in the fractal layout
NZ_MODES = ("PA_NZ", "PA_BLK_NZ")
#: the layout of each mode's caches
LAYOUT_OF = {"Norm": "BNSD", "PA": "ND", "PA_BNSD": "ND", "PA_NZ": "NZ", "PA_BLK_BNSD": "ND",
             "PA_BLK_NZ": "NZ"}
#: the letters of a cache's axes in each layout: B batch, N head, S slot (of a batch, or of a
#: block), D, K block, F the fractal's column tile, C a column of the tile (messages name a
#: cache's elements by them, and a slot by its B or K and S)
CACHE_AXES = {"BNSD": "BNSD", "ND": "KSND", "NZ": "KFSC"}


def nz_width(dtype) -> int:
    """C0, the fractal's width: 32 bytes of the cache's dtype."""
    return 32 // np.dtype(dtype).itemsize


def token_slots(index, mode: str, B: int, S: int, block_size: int | None = None) -> np.ndarray:
    """(B, S) slot numbers of the tokens (-1: skipped). ``Norm``: index (B, S) is the position
    in batch b's cache, the slot ``b*Scache + index`` is formed by ``element_offsets``; paged
    modes: index ``(B*S,)`` is the slot itself; ``PA_BLK_*``: index ``(B*ceil(S/block_size),)``
    is the first slot of each run of block_size tokens of a batch, token s of batch b goes to
    ``index[b, s // block_size] + s % block_size``."""
    index = np.asarray(index, dtype=np.int64)
    if mode not in BLOCKED:
        return index.reshape(B, S)
    runs = index.reshape(B, -1)
    s = np.arange(S)
    start = runs[:, s // block_size]                      # index[b, s // block_size]
    return np.where(start >= 0, start + s % block_size, -1)


def element_offsets(slots: np.ndarray, layout: str, shape: tuple, c0: int | None = None) -> np.ndarray:
    """Flat offsets (T, N, D) of the elements of the T slots ``slots`` (rows of -1 for a slot -1)
    in a cache of ``shape`` and ``layout`` (module docstring; ``BNSD``: slot ``b*Scache + s``, and
    ``NZ``: shape is the logical (block_num, block_size, N, D))."""
    slots = np.asarray(slots, dtype=np.int64).reshape(-1, 1, 1)
    N, D = shape[1] if layout == "BNSD" else shape[-2], shape[-1]
    if layout == "BNSD":
        Scache = shape[2]
        n, d = np.arange(N)[:, None], np.arange(D)
        b, s = slots // Scache, slots % Scache
        off = ((b * N + n) * Scache + s) * D + d                 # cache[b, n, s, d]
    elif layout == "ND":
        off = slots * (N * D) + np.arange(N * D).reshape(N, D)   # cache[slot, n, d]
    else:
        block_size = shape[1]
        col = np.arange(N * D).reshape(N, D)                     # n*D + d
        k, row = slots // block_size, slots % block_size
        off = ((k * (N * D // c0) + col // c0) * block_size + row) * c0 + col % c0
    return np.where(slots >= 0, off, -1)


def scatter(cache: np.ndarray, values: np.ndarray, offsets: np.ndarray, out_dtype=None) -> np.ndarray:
    """A copy of ``cache`` with ``values`` (float64, offsets' shape) written at ``offsets``
    (-1: not written): in the cache's dtype, each value rounded once (``out_dtype`` None), or in
    ``out_dtype`` (``np.float64``: the exact values, the rest of the cache widened exactly); a
    new C-ordered array whatever the cache's memory order."""
    keep = offsets >= 0
    if out_dtype is None:
        out = np.array(cache, copy=True)
        new = round_to(values[keep], cache.dtype)
    else:
        out = to_float64(cache)
        out = out.copy() if out is cache else out                 # never the caller's array
        if out_dtype != np.float64:
            out = round_to(out, out_dtype)
        new = round_to(values[keep], out_dtype)
    out = np.ascontiguousarray(out)       # offsets count in C order (a copy for any other order)
    out.reshape(-1)[offsets[keep]] = new                         # cache[scatter_idx] = value
    return out


def written(offsets: np.ndarray, per_value=None) -> tuple:
    """The flat offsets the call writes, ascending, and ``per_value`` (an array of offsets'
    shape, e.g. S of the values) in the same order (None stays None)."""
    keep = offsets >= 0
    flat = offsets[keep]
    order = np.argsort(flat, kind="stable")
    return flat[order], None if per_value is None else np.asarray(per_value)[keep][order]


class CacheWrites(NamedTuple):
    """A cache after the call, held as the cache given and what the call writes into it:
    ``cache`` the input (unchanged; every element not written keeps its value, exact in the
    cache's own dtype), ``offsets`` the flat offsets written, ascending (``written``), and
    ``values`` the exact (float64) values written there, in the same order."""

    cache: np.ndarray
    offsets: np.ndarray
    values: np.ndarray

    def whole(self, out_dtype=None) -> np.ndarray:
        """The whole cache after the call, as the spec function returns it with
        ``whole_caches=True`` and this ``out_dtype`` (``scatter``)."""
        return scatter(self.cache, self.values, self.offsets, out_dtype)


def cache_output(cache: np.ndarray, values: np.ndarray, offsets: np.ndarray, out_dtype=None,
                 whole_caches: bool = True):
    """A spec function's cache output: ``scatter``'s whole cache (``whole_caches``), else the
    cache given and what is written into it (``CacheWrites``, the values exact whatever
    ``out_dtype``)."""
    if whole_caches:
        return scatter(cache, values, offsets, out_dtype)
    return CacheWrites(cache, *written(offsets, values))
