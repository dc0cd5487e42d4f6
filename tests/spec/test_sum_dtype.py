"""``sum_dtype``: the documented sums accumulated in a narrower dtype, every partial sum of the
stated order rounded to it (refspec.spec.reduce), against the order transcribed here with
scalar arithmetic of that dtype; the operators that take it, against products and one rounding
written out by hand."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from refspec.spec import norm_rope_concat_backward, rotary_position_embedding_grad
from refspec.spec.reduce import sum_rows, sum_to_shape, tree_sum
from spec_helpers import bits

BF16 = np.dtype(ml_dtypes.bfloat16)


#: significant bits of each dtype
DIGITS = {BF16: 8, np.dtype(np.float16): 11, np.dtype(np.float32): 24}


def rounded(value: float, dtype) -> float:
    """``value`` rounded to nearest-even with the dtype's significant bits (normal numbers)."""
    if value == 0:
        return value
    m, e = math.frexp(value)
    return math.ldexp(round(math.ldexp(m, DIGITS[np.dtype(dtype)])), e - DIGITS[np.dtype(dtype)])


def pairwise_in(terms: list, dtype):
    """The documented order, each addition done in Python floats (exact for two values of a
    16- or 32-bit dtype) and rounded once to ``dtype``."""
    while len(terms) > 1:
        pairs = [rounded(float(terms[i]) + float(terms[i + 1]), dtype)
                 for i in range(0, len(terms) - 1, 2)]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return terms[0]


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16), np.dtype(np.float32)])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_every_partial_sum_is_rounded_to_the_dtype_in_the_stated_order(rng, dtype, n):
    # terms of one dtype so that each float64 addition of two of them is exact
    t = rng.standard_normal((n, 4)).astype(dtype).astype(np.float64)
    got = tree_sum(t, 0, dtype)
    assert got.dtype == np.float64 and got.shape == (1, 4)
    want = [pairwise_in([t[i, j] for i in range(n)], dtype) for j in range(4)]
    assert got[0].tolist() == want
    assert np.array_equal(bits(tree_sum(t, 0, None)), bits(tree_sum(t, 0)))


def test_sum_to_shape_and_sum_rows_pass_it_on(rng):
    t = rng.standard_normal((2, 3, 4, 5)).astype(BF16).astype(np.float64)
    narrow = sum_to_shape(t, (1, 3, 1, 5), "bfloat16")
    assert np.array_equal(narrow, tree_sum(tree_sum(t, 2, BF16), 0, BF16))
    assert not np.array_equal(narrow, sum_to_shape(t, (1, 3, 1, 5)))
    assert np.array_equal(sum_rows(t, BF16),
                          tree_sum(tree_sum(tree_sum(t, 2, BF16), 1, BF16), 0, BF16)[0, 0, 0])


def test_rope_grad_sums_dcos_and_dsin_in_it_and_leaves_dx_alone(rng):
    """cos broadcast over B (size 2): dcos = dy[0]*x[0] + dy[1]*x[1], one sum, rounded once to
    bfloat16 by the accumulation and once more (no change) to the float32 output."""
    dy, x = (rng.standard_normal((2, 3, 2, 8)).astype(np.float32) for _ in range(2))
    cos, sin = (rng.standard_normal((1, 3, 2, 8)).astype(np.float32) for _ in range(2))
    exact = rotary_position_embedding_grad(dy, cos, sin, x, mode=1)
    narrow = rotary_position_embedding_grad(dy, cos, sin, x, mode=1, sum_dtype="bfloat16")
    assert np.array_equal(bits(narrow[0]), bits(exact[0]))
    products = dy.astype(np.float64) * x.astype(np.float64)           # exact in float64
    want = np.vectorize(lambda v: rounded(v, BF16))(products[0] + products[1]).astype(np.float32)
    assert np.array_equal(narrow[1][0], want)
    assert not np.array_equal(narrow[1], exact[1])


def test_nrc_backward_accumulates_its_weight_and_bias_gradients_in_it(rng):
    B, S, N, D = 2, 3, 2, 8
    q = rng.standard_normal((B, S, N, D)).astype(np.float32)
    k = rng.standard_normal((B, S, N, D)).astype(np.float32)
    g = [rng.standard_normal((B, N, S, D)).astype(np.float32) for _ in range(3)]
    mean = q.astype(np.float64).mean(-1, keepdims=True).astype(np.float32)
    rstd = (1 / q.astype(np.float64).std(-1, keepdims=True)).astype(np.float32)
    kmean = k.astype(np.float64).mean(-1, keepdims=True).astype(np.float32)
    krstd = (1 / k.astype(np.float64).std(-1, keepdims=True)).astype(np.float32)
    w = rng.standard_normal(D).astype(np.float32)
    kwargs = dict(norm_query_weight=w, norm_query_mean=mean, norm_query_rstd=rstd,
                  norm_key_weight=w, norm_key_mean=kmean, norm_key_rstd=krstd, norm_type=2)
    exact = norm_rope_concat_backward(*g, q, k, **kwargs)
    narrow = norm_rope_concat_backward(*g, q, k, **kwargs, sum_dtype=BF16)
    # the bias gradient is the sum of the upstream gradient's rows (no RoPE here), over N, then
    # S, then B, each in the stated order
    rows = g[0].transpose(0, 2, 1, 3).astype(np.float64)             # B, S, N, D
    want = [pairwise_in([pairwise_in([pairwise_in(list(rows[b, s, :, j]), BF16)
                                      for s in range(S)], BF16) for b in range(B)], BF16)
            for j in range(D)]
    assert np.array_equal(narrow.grad_norm_query_bias, np.array(want, np.float32))
    assert np.array_equal(bits(narrow.grad_query), bits(exact.grad_query))
    assert not np.array_equal(narrow.grad_norm_query_weight, exact.grad_norm_query_weight)
