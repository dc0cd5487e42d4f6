"""The four RoPE modes against each other and against the prose of docs/rope.md §1-§3.

- quarter (mode 2) is half mode (mode 0) applied to each D/2 half with the matching cos/sin halves;
- interleave (mode 1) is half mode in the pair order z'[2i] = z[i], z'[2i+1] = z[i + D/2];
- interleave-half (mode 3) is half mode on the de-interleaved x = cat(even(x), odd(x)), and its dx
  is re-interleaved;
- the rotation of every mode, element by element as the prose states it (position-coded x);
- NormRopeConcat's ropeType 1 is mode 1 and ropeType 2 is mode 0 (docs/norm_rope_concat.md, Parameters).
Forward and backward (dx, dcos, dsin) are checked; all float64.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec

F64 = np.float64
D = 12
SHAPE = (2, 3, 4, D)
CSHAPE = (1, 1, 4, D)


def fwd(x, cos, sin, mode):
    return refspec.rotary_position_embedding(x, cos, sin, mode, out_dtype=F64)


def bwd(dy, cos, sin, x, mode):
    return refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=F64)


@pytest.fixture
def data(rng):
    return dict(x=rng.uniform(-2, 2, SHAPE), dy=rng.uniform(-2, 2, SHAPE),
                cos=rng.uniform(-3, 4, CSHAPE), sin=rng.uniform(-4, 5, CSHAPE))


def halves(t):
    return t[..., : D // 2], t[..., D // 2:]


def test_quarter_is_half_on_each_half(data):
    x, dy, cos, sin = data["x"], data["dy"], data["cos"], data["sin"]
    y = fwd(x, cos, sin, 2)
    grads = bwd(dy, cos, sin, x, 2)
    for k, part in enumerate(halves(y)):
        xs, cs, ss, dys = (halves(t)[k] for t in (x, cos, sin, dy))
        np.testing.assert_array_equal(part, fwd(xs, cs, ss, 0))
        for got, ref in zip(grads, bwd(dys, cs, ss, xs, 0)):
            np.testing.assert_array_equal(halves(got)[k], ref)


def pair_order(t):
    """z'[2i] = z[i], z'[2i+1] = z[i + D/2]."""
    a, b = halves(t)
    return np.stack((a, b), axis=-1).reshape(t.shape)


def test_interleave_is_half_in_pair_order(data):
    x, dy, cos, sin = data["x"], data["dy"], data["cos"], data["sin"]
    P = pair_order
    np.testing.assert_array_equal(fwd(P(x), P(cos), P(sin), 1), P(fwd(x, cos, sin, 0)))
    for got, ref in zip(bwd(P(dy), P(cos), P(sin), P(x), 1), bwd(dy, cos, sin, x, 0)):
        np.testing.assert_array_equal(got, P(ref))


def deinterleave(t):
    return np.concatenate((t[..., 0::2], t[..., 1::2]), axis=-1)


def reinterleave(t):
    a, b = halves(t)
    return np.stack((a, b), axis=-1).reshape(t.shape)


def test_interleave_half_is_half_on_deinterleaved_x(data):
    x, dy, cos, sin = data["x"], data["dy"], data["cos"], data["sin"]
    np.testing.assert_array_equal(fwd(x, cos, sin, 3), fwd(deinterleave(x), cos, sin, 0))
    dx3, dcos3, dsin3 = bwd(dy, cos, sin, x, 3)
    dx0, dcos0, dsin0 = bwd(dy, cos, sin, deinterleave(x), 0)
    np.testing.assert_array_equal(dx3, reinterleave(dx0))
    np.testing.assert_array_equal(dcos3, dcos0)
    np.testing.assert_array_equal(dsin3, dsin0)
    np.testing.assert_array_equal(reinterleave(deinterleave(x)), x)


def prose_rotation(x, mode):
    """rot of docs/rope.md §1-§3 written element by element (mode 3: part2)."""
    rot = np.empty_like(x)
    h, q = D // 2, D // 4
    for i in range(D):
        if mode == 0:
            rot[i] = -x[i + h] if i < h else x[i - h]
        elif mode == 1:
            rot[i] = -x[i + 1] if i % 2 == 0 else x[i - 1]
        elif mode == 2:
            block = i // q
            rot[i] = -x[i + q] if block % 2 == 0 else x[i - q]
        else:  # part2 = cat(-x2, x1), x1 = even, x2 = odd
            rot[i] = -x[2 * i + 1] if i < h else x[2 * (i - h)]
    return rot


@pytest.mark.parametrize("mode", (0, 1, 2, 3))
def test_rotation_matches_prose_on_position_coded_x(mode):
    x = np.arange(1.0, D + 1)                       # x[d] = d + 1: every element identifiable
    ones, zeros = np.ones(D), np.zeros(D)
    np.testing.assert_array_equal(fwd(x, zeros, ones, mode), prose_rotation(x, mode))
    part1 = deinterleave(x) if mode == 3 else x     # the cos term: x itself, or cat(x1, x2)
    np.testing.assert_array_equal(fwd(x, ones, zeros, mode), part1)


def test_quarter_needs_d_divisible_by_4(rng):
    x = rng.standard_normal((1, 1, 1, 6))
    c = rng.standard_normal((1, 1, 1, 6))
    with pytest.raises(refspec.TilingError):
        fwd(x, c, c, 2)
    fwd(x, c, c, 0)   # the same D is fine for half mode


@pytest.mark.parametrize("rope_type, mode", ((1, 1), (2, 0)))
def test_nrc_rope_type_is_rope_mode(rng, rope_type, mode):
    """ropeType 1 (interleave) is mode 1 and ropeType 2 (half) is mode 0, at p < Sr; positions
    p >= Sr pass through (no norm, so the rows are the concatenated inputs)."""
    b, n, d, sq, seq, sr = 2, 3, 8, 4, 2, 5
    q, eq = rng.standard_normal((b, sq, n, d)), rng.standard_normal((b, seq, n, d))
    k, v = rng.standard_normal((b, 6, n, d)), rng.standard_normal((b, 6, n, d))
    cos, sin = rng.standard_normal((sr, d)), rng.standard_normal((sr, d))
    out = refspec.norm_rope_concat(q, k, v, encoder_query=eq, rope_sin=sin, rope_cos=cos,
                                   rope_type=rope_type, out_dtype=F64).query_output
    h = np.concatenate((q, eq), axis=1).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(out[:, :, :sr], fwd(h[:, :, :sr], cos[None, None], sin[None, None], mode))
    np.testing.assert_array_equal(out[:, :, sr:], h[:, :, sr:])
