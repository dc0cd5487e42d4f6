"""Adjoint identity for RotaryPositionEmbeddingGrad (docs/rope.md §1-§3; design note 9).

RoPE is linear in x, in cos and in sin separately, so with J_x, J_cos, J_sin the Jacobians of the
forward ``y = rotary_position_embedding(x, cos, sin, mode)``:

    <dy, J_x v>   = <dx, v>       J_x v   = forward(v, cos, sin)
    <dy, J_cos w> = <dcos, w>     J_cos w = forward(x, w, 0)
    <dy, J_sin w> = <dsin, w>     J_sin w = forward(x, 0, w)

for random v (dy's shape) and w (cos's shape, broadcast by the forward and reduced over ``dims``
by the backward). Both sides are float64 sums of the same products, so they agree to a few ulp of
the sum of the absolute products; any wrong partner, sign, half or reduction axis breaks it.
Checked for every mode, every layout and every cos/sin broadcast pattern.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from spec_helpers import abs_inner, inner, rope_case_params

F64 = np.float64
D = 12          # divisible by 4, and the quarters have odd length 3: index bugs cannot hide
MODES = (0, 1, 2, 3)
EPS = 2.0 ** -52


def forward(x, cos, sin, mode):
    return refspec.rotary_position_embedding(x, cos, sin, mode, out_dtype=F64)


def abs_forward(x, cos, sin, mode):
    """|x-part| + |sin-part|: elementwise bound of the forward's two products."""
    zero = np.zeros_like(cos)
    return np.abs(forward(x, cos, zero, mode)) + np.abs(forward(x, zero, sin, mode))


def draw(rng, shape_x, shape_c):
    """The vendor generator's ranges: x, dy ~ U(-2, 2), cos ~ U(-3, 4), sin ~ U(-4, 5)."""
    return (rng.uniform(-2, 2, shape_x), rng.uniform(-2, 2, shape_x),
            rng.uniform(-3, 4, shape_c), rng.uniform(-4, 5, shape_c))


def assert_adjoint(lhs, rhs, scale):
    assert abs(lhs - rhs) <= 64 * EPS * scale, (lhs, rhs, scale)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout, shape, cshape", rope_case_params(D))
def test_adjoint_dx_dcos_dsin(rng, mode, layout, shape, cshape):
    dy, x, cos, sin = draw(rng, shape, cshape)
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=F64)
    assert dx.shape == shape and dcos.shape == cshape and dsin.shape == cshape
    zero = np.zeros(cshape)
    for _ in range(2):
        v = rng.standard_normal(shape)
        assert_adjoint(inner(dy, forward(v, cos, sin, mode)), inner(dx, v),
                       abs_inner(dy, abs_forward(v, cos, sin, mode)))
        w = rng.standard_normal(cshape)
        assert_adjoint(inner(dy, forward(x, w, zero, mode)), inner(dcos, w),
                       abs_inner(dy, abs_forward(x, w, zero, mode)))
        assert_adjoint(inner(dy, forward(x, zero, w, mode)), inner(dsin, w),
                       abs_inner(dy, abs_forward(x, zero, w, mode)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout, shape, cshape", rope_case_params(D))
def test_dcos_dsin_absent_without_x(rng, mode, layout, shape, cshape):
    """x absent (xOptional null): same dx, and dcos, dsin are None (docs/rope.md, Parameters)."""
    dy, x, cos, sin = draw(rng, shape, cshape)
    with_x = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=F64)
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, sin, None, mode, out_dtype=F64)
    assert dcos is None and dsin is None
    np.testing.assert_array_equal(dx, with_x[0])


@pytest.mark.parametrize("mode", MODES)
def test_adjoint_is_exact_basis_by_basis(rng, mode):
    """The whole Jacobian on one row: dx = J^T dy column by column, with J built from the
    forward applied to the D basis vectors (cos/sin one row, no broadcasting)."""
    dy, _x, cos, sin = draw(rng, (1, 1, 1, D), (1, 1, 1, D))
    J = np.stack([forward(np.eye(D)[j].reshape(1, 1, 1, D), cos, sin, mode).ravel()
                  for j in range(D)], axis=1)                      # J[i, j] = dy_i / dx_j
    dx, _, _ = refspec.rotary_position_embedding_grad(dy, cos, sin, None, mode, out_dtype=F64)
    np.testing.assert_allclose(dx.ravel(), J.T @ dy.ravel(), rtol=0, atol=1e-13)


def test_adjoint_check_rejects_peer_formula(rng):
    """The check has teeth: the peers' dx (forward with sin negated, docs/rope.md §3 note) violates
    the identity when the halves of cos/sin differ, and satisfies it when they are duplicates."""
    shape, cshape = (2, 3, 5, 8), (1, 1, 5, 8)
    dy, _x, cos, sin = draw(rng, shape, cshape)
    v = rng.standard_normal(shape)
    lhs = inner(dy, forward(v, cos, sin, 0))
    peer_dx = forward(dy, cos, -sin, 0)
    assert abs(lhs - inner(peer_dx, v)) > 1e-3 * abs_inner(dy, abs_forward(v, cos, sin, 0))
    cos_dup = np.concatenate([cos[..., :4]] * 2, axis=-1)
    sin_dup = np.concatenate([sin[..., :4]] * 2, axis=-1)
    lhs_dup = inner(dy, forward(v, cos_dup, sin_dup, 0))
    assert_adjoint(lhs_dup, inner(forward(dy, cos_dup, -sin_dup, 0), v),
                   abs_inner(dy, abs_forward(v, cos_dup, sin_dup, 0)))
