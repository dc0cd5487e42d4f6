"""The one helper behind every ``sum(t, dims)`` of the spec (spec/rope.md §2, spec/README.md).

``dims`` of a broadcast input = every axis where that input has size 1 and the full tensor has
size greater than 1. Summing over them with kept dimensions gives back the input's shape.
"""

from __future__ import annotations

import numpy as np

__all__ = ["broadcast_dims", "sum_to_shape"]


def broadcast_dims(full_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """Axes where ``shape`` has size 1 and ``full_shape`` has size > 1 (same rank)."""
    return tuple(i for i, (f, s) in enumerate(zip(full_shape, shape)) if s == 1 and f != 1)


def sum_to_shape(t: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``sum(t, dims)`` keeping dims, so the result has exactly ``shape``."""
    dims = broadcast_dims(t.shape, tuple(shape))
    if not dims:
        return t
    return t.sum(axis=dims, keepdims=True)
