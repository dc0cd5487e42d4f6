"""RotaryPositionEmbeddingGrad in torch, every operation in the I/O dtype (float16 or
bfloat16 arithmetic, as a kernel without float32 intermediates computes it), for the modes
half and interleave (docs/rope.md, §2 and §3). Right, but less accurate than the goldens'
one rounding: its failures are floating-point accuracy, not logic errors.

    refspec run --impl tests/impls/torch_16bit.py --framework torch goldens.h5 --op rope_grad
"""

from __future__ import annotations

import torch


def _rotate(t, mode):
    """rotate_half (mode 0: (-t2, t1)) or the interleaved pairs (mode 1: (-t_odd, t_even))."""
    if mode == 0:
        a, b = t.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)
    pairs = t.unflatten(-1, (-1, 2))
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def _rotate_back(t, mode):
    """The transpose of ``_rotate``: (t2, -t1), or (t_odd, -t_even) pairwise."""
    return -_rotate(t, mode)


def _reduce_to(t, shape):
    dims = tuple(i for i, (n, m) in enumerate(zip(shape, t.shape)) if n == 1 and m > 1)
    return t.sum(dim=dims, keepdim=True) if dims else t


def rotary_position_embedding_grad(dy, cos, sin, x=None, mode=0):
    mode = int(mode)
    if mode not in (0, 1):
        raise NotImplementedError("this kernel has the modes half and interleave")
    dx = dy * cos + _rotate_back(dy * sin, mode)
    if x is None:
        return dx, None, None
    return dx, _reduce_to(dy * x, cos.shape), _reduce_to(dy * _rotate(x, mode), sin.shape)
