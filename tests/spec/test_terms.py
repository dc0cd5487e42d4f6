"""Tolerance metadata (refspec.spec.terms; docs/compare.md, "Judging"): classes, K and sum of |terms|.

For every reduction output: K equals the number of reduced terms (counted here from the shapes),
the per-element S = sum |terms| bounds the exact value (S >= |exact|), and S equals the exact value
when the data make every term non-negative (so S really is the sum of the terms' magnitudes, not
just some bound). Classes are as documented, and a "copy" output is bit-identical to its source.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from refspec.spec.terms import (COPY, ELEMENTWISE, REDUCTION, ROW_REDUCTION, norm_rope_concat_backward_terms,
                           norm_rope_concat_terms, rope_grad_terms, rope_terms)
from spec_helpers import NRC_ATTRS, NRC_STREAMS, attrs_dict, nrc_backward_kwargs, nrc_forward_inputs, \
    rope_case_params

F64 = np.float64
D = 8


def rot_sign(mode):
    """Sign of the rotation term at each position for x > 0 (docs/rope.md §1-§3: the -x2, -x4 parts)."""
    pos = np.arange(D)
    neg = {0: pos < D // 2, 1: pos % 2 == 0, 2: (pos // (D // 4)) % 2 == 0, 3: pos < D // 2}[mode]
    return np.where(neg, -1.0, 1.0)


def assert_bounds(S, exact):
    assert S.shape == exact.shape
    assert np.all(S >= np.abs(exact) * (1 - 1e-12))


@pytest.mark.parametrize("mode", (0, 1, 2, 3))
@pytest.mark.parametrize("layout, shape, cshape", rope_case_params(D))
def test_rope_grad_terms(rng, mode, layout, shape, cshape):
    dy, x = rng.uniform(-2, 2, shape), rng.uniform(-2, 2, shape)
    cos, sin = rng.uniform(-3, 4, cshape), rng.uniform(-4, 5, cshape)
    terms = rope_grad_terms(dy, cos, sin, x, mode)
    assert set(terms) == {"dx", "dcos", "dsin"}
    assert terms["dx"].comparison_class == ELEMENTWISE and terms["dx"].reduced_terms is None
    _, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=F64)
    K = dy.size // cos.size                         # each cos element collects this many products
    for name, exact in (("dcos", dcos), ("dsin", dsin)):
        t = terms[name]
        assert t.comparison_class == REDUCTION and t.reduced_terms == K
        assert_bounds(t.sum_abs, exact)
    # all terms non-negative: S is the exact sum
    ax = np.abs(x)
    pos = refspec.rotary_position_embedding_grad(np.abs(dy), cos, sin, ax, mode, out_dtype=F64)
    np.testing.assert_allclose(rope_grad_terms(np.abs(dy), cos, sin, ax, mode)["dcos"].sum_abs, pos[1],
                               rtol=1e-14)
    signed_dy = np.abs(dy) * rot_sign(mode)
    pos = refspec.rotary_position_embedding_grad(signed_dy, cos, sin, ax, mode, out_dtype=F64)
    np.testing.assert_allclose(rope_grad_terms(signed_dy, cos, sin, ax, mode)["dsin"].sum_abs, pos[2],
                               rtol=1e-14)


def test_rope_terms_without_x_and_forward(rng):
    dy = rng.standard_normal((2, 3, 4, D))
    cos = rng.standard_normal((1, 1, 4, D))
    assert set(rope_grad_terms(dy, cos, cos, None, 1)) == {"dx"}
    (y_terms,) = rope_terms(dy, cos, cos, 3).values()
    assert y_terms[:2] == (ELEMENTWISE, None)            # float64: S for the evaluation bound
    y = refspec.rotary_position_embedding(dy, cos, cos, 3, out_dtype=F64)
    assert y_terms.sum_abs.shape == dy.shape and np.all(np.abs(y) <= y_terms.sum_abs)
    (half,) = rope_terms(dy.astype(np.float16), cos.astype(np.float16), cos.astype(np.float16),
                         3).values()
    assert half == (ELEMENTWISE, None, None)             # 16-bit: the rounding gate needs none


def nrc_case(rng, attrs_tuple, dtype=F64, positive=False):
    a = attrs_dict(*attrs_tuple)
    inputs = nrc_forward_inputs(rng, d=D, rope_type=a["rope_type"], dtype=dtype)
    fwd = refspec.norm_rope_concat(**inputs, **a, is_training=True, out_dtype=F64)
    draw = (lambda s: rng.uniform(0.1, 2, s)) if positive else (lambda s: rng.uniform(-2, 2, s))
    grads = {f"grad_{n}_output": draw(getattr(fwd, f"{n}_output").shape).astype(dtype)
             for n in ("query", "key", "value")}
    kw = nrc_backward_kwargs(inputs, fwd, grads, a)
    tensors = {k: v for k, v in kw.items() if k not in a}
    return a, inputs, kw, tensors


@pytest.mark.parametrize("attrs", NRC_ATTRS, ids=lambda a: "nt{}-nat{}-rt{}-co{}".format(*a))
def test_norm_rope_concat_backward_terms(rng, attrs):
    a, inputs, kw, tensors = nrc_case(rng, attrs)
    exact = refspec.norm_rope_concat_backward(**kw, out_dtype=F64)
    terms = norm_rope_concat_backward_terms(tensors, a)
    assert set(terms) == {n for n in exact._fields if getattr(exact, n) is not None}
    assert terms["grad_value"].comparison_class == COPY
    assert terms["grad_encoder_value"].comparison_class == COPY
    for stream, (attr, weight, bias, _m, _r) in NRC_STREAMS.items():
        t, x = terms[f"grad_{stream}"], inputs[stream]
        if a[attr] == 0:
            assert t.comparison_class == (ELEMENTWISE if a["rope_type"] else COPY)
            continue
        assert t.comparison_class == ROW_REDUCTION and t.reduced_terms == D
        assert_bounds(t.sum_abs, getattr(exact, f"grad_{stream}"))
        if a[attr] == 2:
            for name in (weight, bias):
                r = terms[f"grad_{name}"]
                assert r.comparison_class == REDUCTION and r.reduced_terms == x.size // D
                assert_bounds(r.sum_abs, getattr(exact, f"grad_{name}"))


@pytest.mark.parametrize("rope_type", (0, 2))
def test_bias_sum_abs_is_the_sum_when_terms_are_positive(rng, rope_type):
    """No rope: g' is the (positive) output gradient, so every dbias term is positive and S equals
    dbias. With rope the upstream gradient mixes signs and S stays a strict bound."""
    a, _inputs, kw, tensors = nrc_case(rng, (2, 2, rope_type, 0), positive=True)
    exact = refspec.norm_rope_concat_backward(**kw, out_dtype=F64)
    terms = norm_rope_concat_backward_terms(tensors, a)
    for name in ("grad_norm_query_bias", "grad_norm_added_key_bias"):
        S, value = terms[name].sum_abs, getattr(exact, name)
        if rope_type == 0:
            np.testing.assert_allclose(S, value, rtol=1e-14)
        else:
            assert np.any(S > np.abs(value) * (1 + 1e-6))


def test_absent_stream_weight_gradient_has_no_terms(rng):
    a = attrs_dict(0, 2, 0, 0)
    inputs = nrc_forward_inputs(rng, d=D, seq=0, sek=0)
    fwd = refspec.norm_rope_concat(**inputs, **a, out_dtype=F64)
    grads = {f"grad_{n}_output": rng.standard_normal(getattr(fwd, f"{n}_output").shape)
             for n in ("query", "key", "value")}
    kw = nrc_backward_kwargs(inputs, fwd, grads, a)
    exact = refspec.norm_rope_concat_backward(**kw, out_dtype=F64)
    terms = norm_rope_concat_backward_terms({k: v for k, v in kw.items() if k not in a}, a)
    for name in ("grad_norm_added_query_weight", "grad_norm_added_key_bias"):
        assert terms[name].reduced_terms == 0
        np.testing.assert_array_equal(terms[name].sum_abs, np.zeros(D))
        np.testing.assert_array_equal(getattr(exact, name), np.zeros(D))


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32), ids=("f16", "bf16", "f32"))
def test_copy_outputs_are_bit_identical(rng, dtype):
    """The copy class: gradValue/gradEncoderValue (and the no-norm, no-rope query gradient) are the
    split and transposed output gradient, bit for bit; valueOutput is the concatenated value."""
    a, inputs, kw, tensors = nrc_case(rng, (0, 1, 0, 1), dtype=dtype)
    bwd = refspec.norm_rope_concat_backward(**kw)
    terms = norm_rope_concat_backward_terms(tensors, a)
    sk, sek, sq = inputs["key"].shape[1], inputs["encoder_key"].shape[1], inputs["query"].shape[1]
    gv, gq = kw["grad_value_output"], kw["grad_query_output"]
    seq = inputs["encoder_query"].shape[1]
    for name, got, src in (("grad_value", bwd.grad_value, gv[:, :, sek:]),
                           ("grad_encoder_value", bwd.grad_encoder_value, gv[:, :, :sek]),
                           ("grad_query", bwd.grad_query, gq[:, :, seq:])):
        assert terms[name].comparison_class == COPY
        assert got.dtype == np.dtype(dtype)
        assert got.tobytes() == np.ascontiguousarray(src.transpose(0, 2, 1, 3)).tobytes()
    assert sk + sek == gv.shape[2] and sq + seq == gq.shape[2]
    fwd = refspec.norm_rope_concat(**inputs, **a)
    value = np.concatenate((inputs["encoder_value"], inputs["value"]), axis=1).transpose(0, 2, 1, 3)
    assert norm_rope_concat_terms(**{k: a[k] for k in ("norm_type", "norm_added_type", "rope_type")},
                                  D=D)["value_output"].comparison_class == COPY
    assert fwd.value_output.tobytes() == np.ascontiguousarray(value).tobytes()


@pytest.mark.parametrize("norm_type, norm_added_type, rope_type, query_class", (
    (0, 0, 0, COPY), (0, 0, 1, ELEMENTWISE), (0, 0, 2, ELEMENTWISE), (1, 0, 0, ROW_REDUCTION),
    (0, 2, 1, ROW_REDUCTION), (2, 2, 2, ROW_REDUCTION)))
def test_norm_rope_concat_forward_terms(norm_type, norm_added_type, rope_type, query_class):
    terms = norm_rope_concat_terms(norm_type, norm_added_type, rope_type, D=D)
    assert terms["value_output"].comparison_class == COPY
    for name in ("query_output", "key_output"):
        assert terms[name].comparison_class == query_class
        if query_class == ROW_REDUCTION:
            assert terms[name].reduced_terms == D
    for name in refspec.NormRopeConcatOutputs._fields[3:]:
        assert terms[name].comparison_class == ROW_REDUCTION and terms[name].reduced_terms == D


def test_nrc_sum_abs_counts_rope_products_that_cancel():
    """With cos = sin = 1 and an all-ones gradient, half-mode RoPE backward gives
    g'[i+h] = g[i+h]*c - g[i]*s = 0: the products cancel, yet each contributes |1| to S."""
    B, N, S, D = 1, 2, 3, 4
    rng = np.random.default_rng(7)
    q = rng.standard_normal((B, S, N, D))
    k = rng.standard_normal((B, S, N, D))
    w = rng.standard_normal(D)
    ones = np.ones((S, D))
    fwd = refspec.norm_rope_concat(q, k, k, norm_query_weight=w, norm_query_bias=w,
                                   norm_key_weight=w, norm_key_bias=w, rope_sin=ones, rope_cos=ones,
                                   norm_type=2, rope_type=2, is_training=True, out_dtype=np.float64)
    g = np.ones((B, N, S, D))
    tensors = dict(grad_query_output=g, grad_key_output=g, grad_value_output=g, query=q, key=k,
                   norm_query_weight=w, norm_query_mean=fwd.norm_query_mean,
                   norm_query_rstd=fwd.norm_query_rstd, norm_key_weight=w,
                   norm_key_mean=fwd.norm_key_mean, norm_key_rstd=fwd.norm_key_rstd,
                   rope_sin=ones, rope_cos=ones)
    attrs = dict(norm_type=2, norm_added_type=0, rope_type=2, concat_order=0)
    grads = refspec.norm_rope_concat_backward(**tensors, **attrs, out_dtype=np.float64)
    np.testing.assert_array_equal(grads.grad_norm_query_bias, [2 * B * S * N] * 2 + [0, 0])
    meta = norm_rope_concat_backward_terms(tensors, attrs)["grad_norm_query_bias"]
    np.testing.assert_array_equal(meta.sum_abs, [2.0 * B * S * N] * D)
