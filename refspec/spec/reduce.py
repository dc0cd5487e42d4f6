"""The one reduction of the spec, ``sum(t, dims)``, and the order of its additions.

``dims`` of a broadcast input is every axis where that input has size 1 and the full tensor has
size greater than 1 (docs/rope.md, "Notation"). Summing over them with kept dimensions gives
back the input's shape. Floating-point addition is not associative, so the spec states the
order (docs/rope.md, "The order of a sum"):

- the axes of ``dims`` are summed one at a time, the innermost (last) first;
- along one axis the terms are added by pairwise halving: terms 2i and 2i+1 are added, an odd
  last term is carried unchanged, and this repeats until one term is left, so five terms give
  ((t0 + t1) + (t2 + t3)) + t4.

The order depends on nothing but the number of terms, so a sum taken over aligned blocks of
2^k terms and then over the blocks' results adds in exactly the same order as the sum over
all terms at once (``refspec.spec.blocks`` relies on this).

``sum_dtype`` (None: the terms' own dtype, float64 in the spec) rounds every partial sum, in
this order, once to nearest-even in that dtype (float32, float16, bfloat16): the sum a kernel
accumulating in that dtype computes, which the comparator's diagnosis evaluates to say whether
a kernel's errors have the size of such an accumulation (docs/compare.md, "Diagnosis").
"""

from __future__ import annotations

from math import prod

import numpy as np

from .dtypes import resolve_dtype, round_to

__all__ = ["broadcast_dims", "reduced_terms", "tree_sum", "sum_to_shape", "sum_rows"]


def broadcast_dims(full_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """Axes where ``shape`` has size 1 and ``full_shape`` has size > 1 (same rank)."""
    return tuple(i for i, (f, s) in enumerate(zip(full_shape, shape)) if s == 1 and f != 1)


def reduced_terms(full_shape: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """K: how many terms each element of a sum of ``full_shape`` down to ``shape`` adds up
    (the product of the ``broadcast_dims`` sizes; 1 when nothing is reduced)."""
    return prod(full_shape[i] for i in broadcast_dims(full_shape, shape))


def tree_sum(t: np.ndarray, axis: int, sum_dtype=None) -> np.ndarray:
    """Sum over ``axis`` by pairwise halving, keeping the axis with size 1 (+0 for no terms);
    ``sum_dtype``: each partial sum rounded to that dtype (module docstring)."""
    t = np.asarray(t)
    narrow = None if sum_dtype is None else resolve_dtype(sum_dtype)
    n = t.shape[axis]
    if n == 0:
        shape = list(t.shape)
        shape[axis] = 1
        return np.zeros(shape, dtype=t.dtype)
    lead = (slice(None),) * (axis % t.ndim)
    while n > 1:
        h = n // 2
        pairs = t[lead + (slice(0, 2 * h, 2),)] + t[lead + (slice(1, 2 * h, 2),)]
        if narrow is not None:
            pairs = round_to(pairs, narrow).astype(t.dtype)
        if n % 2:                                        # the odd last term is carried
            pairs = np.concatenate((pairs, t[lead + (slice(n - 1, n),)]), axis=axis)
        t, n = pairs, h + n % 2
    return t


def sum_to_shape(t: np.ndarray, shape: tuple[int, ...], sum_dtype=None) -> np.ndarray:
    """``sum(t, dims)`` keeping dims, so the result has exactly ``shape``; the axes of dims are
    summed innermost first, each by ``tree_sum`` (``sum_dtype``: see the module docstring)."""
    for axis in reversed(broadcast_dims(t.shape, tuple(shape))):
        t = tree_sum(t, axis, sum_dtype)
    return t


def sum_rows(t: np.ndarray, sum_dtype=None) -> np.ndarray:
    """The sum over every axis but the last (``sum over B, S, N`` of the LayerNorm weight and
    bias gradients), in the order of ``sum_to_shape``; shape ``(D,)``."""
    t = np.asarray(t)
    return sum_to_shape(t, (1,) * (t.ndim - 1) + t.shape[-1:], sum_dtype).reshape(t.shape[-1:])
