"""RMSNorm, the normalisation of the KV-cache operators (docs/kv_rms_norm_rope_cache.md §1,
docs/qkv_rms_norm_rope_cache.md §1).

Over the last axis of n values: ``y = (x / sqrt(mean(x*x) + epsilon)) * gamma``, in float64 on
the exact inputs. The mean's sum is ``refspec.spec.reduce.tree_sum`` (pairwise halving, the
stated order of every sum of the spec); the result is rounded once by the caller. Both vendor
documents write the same lines (squareX, meanSquareX, rms, y).
"""

from __future__ import annotations

import numpy as np

from .reduce import tree_sum

__all__ = ["rms_norm", "rms_norm_sum_abs"]


def rms_norm(x: np.ndarray, gamma: np.ndarray, epsilon: float) -> np.ndarray:
    """RMSNorm of each row of ``x`` (float64, last axis) scaled by ``gamma`` (its last axis)."""
    square = x * x                                       # squareX = x * x
    mean_square = tree_sum(square, -1) / x.shape[-1]     # meanSquareX = squareX.mean(dim=-1, keepdim=True)
    rms = np.sqrt(mean_square + epsilon)                 # rms = sqrt(meanSquareX + epsilon)
    return x / rms * gamma                               # y = (x / rms) * gamma


def rms_norm_sum_abs(x: np.ndarray, gamma: np.ndarray, epsilon: float) -> np.ndarray:
    """S of an RMSNorm output: |y| (every term of the mean of squares is non-negative, so the
    sum's float32 error is relative to the sum itself and y's error is relative to |y|; with
    K = n the comparator's row-reduction bound scales with it)."""
    return np.abs(rms_norm(np.abs(x), np.abs(gamma), epsilon))
