"""The vendor document's second notation for the RoPE part of NormRopeConcatBackward (errata E1, E2).

The NormRopeConcatBackward document writes::

    interleave:  dx = dy*cos + Interleave(dy*sin) ⊙ negMask
    half:        dx = dy*cos + Half(dy*sin) ⊙ negMask

with Interleave([0..7]) = [1,0,3,2,5,4,7,6], Half([0..7]) = [4,0,5,1,6,2,7,3] and
negMask = (1, -1, 1, -1, ...). These functions transcribe that literally so the errata can be
demonstrated: the interleave form equals RotaryPositionEmbeddingGrad's mode 1 dx (E2); the half
form is not the gradient of the half-mode forward (E1). The spec itself never uses them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Interleave", "Half", "negMask", "seed_rope_grad_interleave", "seed_rope_grad_half"]


def Interleave(t: np.ndarray) -> np.ndarray:
    """Swap each even/odd pair of the last axis: out[2i] = t[2i+1], out[2i+1] = t[2i]."""
    out = np.empty_like(t)
    out[..., 0::2] = t[..., 1::2]
    out[..., 1::2] = t[..., 0::2]
    return out


def Half(t: np.ndarray) -> np.ndarray:
    """Alternate second and first half: out[2i] = t[i + D/2], out[2i+1] = t[i]."""
    h = t.shape[-1] // 2
    out = np.empty_like(t)
    out[..., 0::2] = t[..., h:]
    out[..., 1::2] = t[..., :h]
    return out


def negMask(D: int) -> np.ndarray:
    """(1, -1, 1, -1, ...) of length D: even positions 1, odd positions -1."""
    return np.where(np.arange(D) % 2 == 0, 1.0, -1.0)


def seed_rope_grad_interleave(dy, cos, sin):
    """``dx = dy*cos + Interleave(dy*sin) ⊙ negMask`` (correct: equals mode 1 dx, errata E2)."""
    return dy * cos + Interleave(dy * sin) * negMask(dy.shape[-1])


def seed_rope_grad_half(dy, cos, sin):
    """``dx = dy*cos + Half(dy*sin) ⊙ negMask``, as the document writes it (wrong: errata E1)."""
    return dy * cos + Half(dy * sin) * negMask(dy.shape[-1])
