"""The errata (docs/errata.md E1-E12), each demonstrated where the spec can show it.

E1/E2 are statements about the math (the seed's negMask notation against the true gradient);
E3-E9 and E11 about what the spec accepts or rejects, following the documents where the vendor
code differs; E10 about determinism; E12 about the rounding of the outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from refspec import Half, Interleave, ParamNullptrError, TilingError, negMask
from refspec.spec.negmask import seed_rope_grad_half, seed_rope_grad_interleave
from refspec.spec.terms import norm_rope_concat_backward_terms
from spec_helpers import assert_aclnn

F64 = np.float64


def rope_dx(dy, cos, sin, mode):
    return refspec.rotary_position_embedding_grad(dy, cos, sin, None, mode, out_dtype=F64)[0]


def pair_order(t):
    """z'[2i] = z[i], z'[2i+1] = z[i + D/2]."""
    h = t.shape[-1] // 2
    return np.stack((t[..., :h], t[..., h:]), axis=-1).reshape(t.shape)


# --- E1, E2: the seed's second notation ------------------------------------------------------

def test_negmask_notation():
    assert Interleave(np.arange(8)).tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    assert Half(np.arange(8)).tolist() == [4, 0, 5, 1, 6, 2, 7, 3]
    assert negMask(8).tolist() == [1, -1, 1, -1, 1, -1, 1, -1]


def test_E1_literal_half_form_is_not_the_gradient(rng):
    """dx = dy*cos + Half(dy*sin) ⊙ negMask is right only at d = 0 and d = D-1 (D = 8); on random
    data its error is of order 1 (about 2 for the vendor's input ranges)."""
    D = 8
    dy = rng.uniform(-2, 2, (200, D))
    cos, sin = rng.uniform(-3, 4, (200, D)), rng.uniform(-4, 5, (200, D))
    literal = dy * cos + Half(dy * sin) * negMask(D)
    np.testing.assert_array_equal(literal, seed_rope_grad_half(dy, cos, sin))
    true = rope_dx(dy, cos, sin, 0)
    right = np.isclose(literal, true, rtol=1e-12, atol=1e-12).all(axis=0)
    assert right.tolist() == [True] + [False] * (D - 2) + [True]
    err = np.abs(literal - true).max(axis=0)
    assert err[1:-1].min() > 1.0


def test_E1_literal_half_form_is_right_only_in_pair_order_with_interleave(rng):
    """It would be right if dy, cos, sin and dx were in the order z'[2i] = z[i],
    z'[2i+1] = z[i + D/2] and the Interleave permutation were used."""
    D = 10
    dy, cos, sin = (rng.standard_normal((7, D)) for _ in range(3))
    P = pair_order
    np.testing.assert_allclose(P(dy) * P(cos) + Interleave(P(dy) * P(sin)) * negMask(D),
                               P(rope_dx(dy, cos, sin, 0)), rtol=0, atol=1e-14)


def test_E2_interleave_form_equals_mode_1_dx(rng):
    D = 10
    dy, cos, sin = (rng.uniform(-3, 3, (7, D)) for _ in range(3))
    literal = dy * cos + Interleave(dy * sin) * negMask(D)
    np.testing.assert_array_equal(literal, seed_rope_grad_interleave(dy, cos, sin))
    np.testing.assert_allclose(literal, rope_dx(dy, cos, sin, 1), rtol=0, atol=1e-14)


@pytest.mark.parametrize("rope_type, seed_form, correct", ((1, seed_rope_grad_interleave, True),
                                                            (2, seed_rope_grad_half, False)))
def test_E1_E2_in_norm_rope_concat_backward(rng, rope_type, seed_form, correct):
    """NormRopeConcatBackward (no norm, Sr = whole sequence) computes the true gradient: it
    equals the interleave negMask form and differs from the half one."""
    b, n, s, d = 2, 3, 4, 8
    q, k = rng.standard_normal((b, s, n, d)), rng.standard_normal((b, s, n, d))
    gq, gk, gv = (rng.standard_normal((b, n, s, d)) for _ in range(3))
    cos, sin = rng.standard_normal((s, d)), rng.standard_normal((s, d))
    grads = refspec.norm_rope_concat_backward(gq, gk, gv, q, k, rope_sin=sin, rope_cos=cos,
                                              rope_type=rope_type, out_dtype=F64)
    true = rope_dx(gq, cos[None, None], sin[None, None], {1: 1, 2: 0}[rope_type])
    np.testing.assert_allclose(grads.grad_query.transpose(0, 2, 1, 3), true, rtol=0, atol=1e-14)
    seed = seed_form(gq, cos[None, None], sin[None, None])
    assert np.allclose(seed, true, rtol=0, atol=1e-12) == correct


# --- E3-E5: RotaryPositionEmbedding(+Grad) profile rules ------------------------------------

@pytest.mark.parametrize("mode", (2, 3))
def test_E3_a2_forward_rejects_modes_2_3_math_computes_them(rng, mode):
    x = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    cos, sin = (rng.standard_normal((1, 1, 4, 8)).astype(np.float32) for _ in range(2))
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.rotary_position_embedding(x, cos, sin, mode, soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "mode")
    y = refspec.rotary_position_embedding(x, cos, sin, mode, out_dtype=F64)
    y_half = refspec.rotary_position_embedding(x, cos, sin, 0, out_dtype=F64)
    assert not np.allclose(y, y_half)        # the spec does not copy the silent half-mode fallback
    assert refspec.rotary_position_embedding(x, cos, sin, mode, soc="950").shape == x.shape


def test_E4_d_896_rejected_on_a2_894_accepted():
    def grad(D, soc):
        t = np.zeros((1, 1, 2, D), np.float32)
        return refspec.rotary_position_embedding_grad(t, t, t, t, 0, soc=soc)
    for soc in ("A2", "A3"):
        with pytest.raises(refspec.AclnnError) as excinfo:
            grad(896, soc)
        assert_aclnn(excinfo, TilingError, 561002, "dy")
        assert grad(894, soc)[0].shape == (1, 1, 2, 894)
    assert grad(896, "950")[0].shape == (1, 1, 2, 896)


def test_E5_half_mode_b_times_n_1025_with_x_rejected_on_a2():
    dy = np.zeros((25, 41, 2, 2), np.float32)                 # BNSD, B*N = 1025
    cos = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.rotary_position_embedding_grad(dy, cos, cos, dy, 0, soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "dy")
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, cos, None, 0, soc="A2")
    assert dx.shape == dy.shape and dcos is None
    ok = np.zeros((32, 32, 2, 2), np.float32)                 # B*N = 1024
    assert refspec.rotary_position_embedding_grad(ok, cos, cos, ok, 0, soc="A2")[1].shape == cos.shape


# --- E6: interleave-half puts 0-based even positions first -----------------------------------

def test_E6_interleave_half_even_positions_first():
    D = 8
    x = np.arange(D, dtype=F64)                                # x[d] = d
    ones, zeros = np.ones(D), np.zeros(D)
    y = refspec.rotary_position_embedding(x, ones, zeros, 3, out_dtype=F64)
    assert y.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]              # not [1, 3, 5, 7, 0, 2, 4, 6]
    dx = rope_dx(np.arange(D, dtype=F64), ones, zeros, 3)
    assert dx.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]             # re-interleaved: dx[2i] = dy[i]


# --- E7-E9, E11: NormRopeConcat(+Backward) ---------------------------------------------------

def nrc_backward(b=1, n=2, d=4, sq=2, seq=3, sk=4, sek=3, sr=None, **override):
    z = np.zeros
    kw = dict(grad_query_output=z((b, n, sq + seq, d)), grad_key_output=z((b, n, sk + sek, d)),
              grad_value_output=z((b, n, sk + sek, d)), query=z((b, sq, n, d)), key=z((b, sk, n, d)),
              encoder_query=z((b, seq, n, d)), encoder_key=z((b, sek, n, d)))
    if sr is not None:
        kw.update(rope_sin=z((sr, d)), rope_cos=z((sr, d)), rope_type=2)
    kw.update(override)
    return refspec.norm_rope_concat_backward(**kw)


def test_E7_sr_above_min_rejected_even_below_max():
    """min(Sq+Seq, Sk+Sek) = 5, max = 7: Sr = 6 passes the vendor's max check, not the document's."""
    assert nrc_backward(sr=5).grad_query.shape == (1, 2, 2, 4)
    for sr in (6, 7):
        with pytest.raises(refspec.AclnnError) as excinfo:
            nrc_backward(sr=sr)
        assert_aclnn(excinfo, TilingError, 561002, "rope_sin")
    z = np.zeros
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.norm_rope_concat(z((1, 2, 2, 4)), z((1, 4, 2, 4)), z((1, 4, 2, 4)), z((1, 3, 2, 4)),
                                 z((1, 3, 2, 4)), z((1, 3, 2, 4)), rope_sin=z((6, 4)), rope_cos=z((6, 4)),
                                 rope_type=1)
    assert_aclnn(excinfo, TilingError, 561002, "rope_sin")


@pytest.mark.parametrize("name, shape", (("grad_query_output", (1, 2, 6, 4)),
                                         ("grad_key_output", (1, 2, 6, 4)),
                                         ("grad_value_output", (1, 2, 8, 4))))
def test_E8_grad_output_sequence_mismatch_rejected(name, shape):
    with pytest.raises(refspec.AclnnError) as excinfo:
        nrc_backward(**{name: np.zeros(shape)})
    assert_aclnn(excinfo, TilingError, 561002, name)


def test_E9_rope_type_0_needs_no_tables(rng):
    b, n, d = 2, 3, 4
    q, eq = rng.standard_normal((b, 2, n, d)), rng.standard_normal((b, 3, n, d))
    k, v = rng.standard_normal((b, 4, n, d)), rng.standard_normal((b, 4, n, d))
    out = refspec.norm_rope_concat(q, k, v, encoder_query=eq, concat_order=1)
    np.testing.assert_array_equal(out.query_output, np.concatenate((eq, q), axis=1).transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(out.key_output, k.transpose(0, 2, 1, 3))
    gq, gk, gv = (rng.standard_normal((b, n, s, d)) for s in (5, 4, 4))
    grads = refspec.norm_rope_concat_backward(gq, gk, gv, q, k, encoder_query=eq, concat_order=1)
    np.testing.assert_array_equal(grads.grad_query, gq[:, :, 3:].transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(grads.grad_encoder_query, gq[:, :, :3].transpose(0, 2, 1, 3))


def test_E10_deterministic(rng):
    """Repeated calls give bit-identical outputs; reductions carry their term count K for the
    comparator (errata E10: the kernel's order is fixed per core count, not the spec's)."""
    b, n, s, d = 2, 3, 4, 8
    q, k = rng.standard_normal((b, s, n, d)), rng.standard_normal((b, s, n, d))
    mean, rstd = q.mean(-1, keepdims=True), np.ones((b, s, n, 1))
    kw = dict(grad_query_output=rng.standard_normal((b, n, s, d)),
              grad_key_output=rng.standard_normal((b, n, s, d)),
              grad_value_output=rng.standard_normal((b, n, s, d)), query=q, key=k,
              norm_query_weight=rng.standard_normal(d), norm_query_mean=mean, norm_query_rstd=rstd,
              norm_key_weight=rng.standard_normal(d), norm_key_mean=mean, norm_key_rstd=rstd,
              norm_type=2)
    first = refspec.norm_rope_concat_backward(**kw)
    for _ in range(3):
        for a, b_ in zip(first, refspec.norm_rope_concat_backward(**kw)):
            assert (a is None and b_ is None) or a.tobytes() == b_.tobytes()
    terms = norm_rope_concat_backward_terms(
        {k_: v for k_, v in kw.items() if not k_.endswith("type")}, dict(norm_type=2, norm_added_type=0,
                                                                          rope_type=0, concat_order=0))
    assert terms["grad_norm_query_weight"].reduced_terms == b * s * n


@pytest.mark.parametrize("missing, attrs", (
    ("norm_query_mean", dict(norm_type=1)), ("norm_query_rstd", dict(norm_type=2)),
    ("norm_key_weight", dict(norm_type=2)), ("norm_added_key_rstd", dict(norm_added_type=1)),
    ("norm_added_query_weight", dict(norm_added_type=2))))
def test_E11_missing_statistics_or_weight_rejected(missing, attrs):
    kw = {}
    for prefix, s in (("norm_query", 2), ("norm_key", 4), ("norm_added_query", 3), ("norm_added_key", 3)):
        kw.update({f"{prefix}_weight": np.ones(4), f"{prefix}_mean": np.zeros((1, s, 2, 1)),
                   f"{prefix}_rstd": np.ones((1, s, 2, 1))})
    kw[missing] = None
    with pytest.raises(refspec.AclnnError) as excinfo:
        nrc_backward(**kw, **attrs)
    assert_aclnn(excinfo, ParamNullptrError, 161001, missing)


# --- E12: round half to even -----------------------------------------------------------------

F16_TIES = dict(
    # exact value: (round half to even, round half away from zero)
    down=(1 + 2.0 ** -11, 1.0, 1 + 2.0 ** -10),
    up=(1 + 2.0 ** -10 + 2.0 ** -11, 1 + 2.0 ** -9, 1 + 2.0 ** -9),
)


def test_E12_rope_grad_rounds_ties_to_even():
    """float16 dx whose exact values lie halfway between two float16 numbers:
    dx[0] = cos1*dy1 + sin2*dy2 = 1 + 2^-11 and dx[1] = cos2*dy2 - sin1*dy1 = 1 + 2^-10 + 2^-11."""
    h = np.float16
    dy = np.array([[1, 1], [-1, -1]], h)
    cos = np.array([[1, 1 + 2.0 ** -10]], h)
    sin = np.array([[-(2.0 ** -11), 2.0 ** -11]], h)
    exact = rope_dx(dy, cos, sin, 0)
    assert exact.tolist() == [[F16_TIES["down"][0], F16_TIES["up"][0]],
                              [-F16_TIES["down"][0], -F16_TIES["up"][0]]]
    dx = refspec.rotary_position_embedding_grad(dy, cos, sin, None, 0)[0]
    assert dx.dtype == h
    assert dx.astype(F64).tolist() == [[1.0, 1 + 2.0 ** -9], [-1.0, -(1 + 2.0 ** -9)]]
    assert F16_TIES["down"][2] != 1.0        # half away from zero would differ here


def test_E12_norm_rope_concat_backward_golden_rounds_ties_to_even():
    """The vendor kernel rounds half away from zero; the golden is round-half-to-even
    (the comparator allows the 1-ulp tie difference)."""
    h = np.float16
    g = np.array([1, 1], h).reshape(1, 1, 1, 2)
    q = np.zeros((1, 1, 1, 2), h)
    cos = np.array([[1, 1 + 2.0 ** -10]], h)
    sin = np.array([[-(2.0 ** -11), 2.0 ** -11]], h)
    grads = refspec.norm_rope_concat_backward(g, g, g, q, q, rope_sin=sin, rope_cos=cos, rope_type=2)
    exact = refspec.norm_rope_concat_backward(g, g, g, q, q, rope_sin=sin, rope_cos=cos, rope_type=2,
                                              out_dtype=F64)
    assert exact.grad_query.ravel().tolist() == [1 + 2.0 ** -11, 1 + 2.0 ** -10 + 2.0 ** -11]
    assert grads.grad_query.dtype == h
    assert grads.grad_query.astype(F64).ravel().tolist() == [1.0, 1 + 2.0 ** -9]


# --- the errata page ---------------------------------------------------------------------------
