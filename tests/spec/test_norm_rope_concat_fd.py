"""NormRopeConcatBackward against finite differences of NormRopeConcat (docs/norm_rope_concat.md §1, §2).

With output gradients gq, gk, gv the scalar L(theta) = <gq, query_output> + <gk, key_output> +
<gv, value_output> has directional derivative sum_i <grad_i, delta_i> along any direction delta of
the inputs (query, key, value, the encoder streams, every weight and bias). The backward takes
mean/rstd as given; the true gradient through the forward's own mean/rstd equals the LayerNorm
backward formula when they are the exact forward statistics, so they come from the forward with
``is_training=True, out_dtype=np.float64``.

The derivative is taken by a fourth-order central difference (Richardson, h and 2h) in float64,
along a few random directions per case, for all 54 attribute combinations, with and without
encoder streams, and with Sr = 1, min(Sq+Seq, Sk+Sek) - 1 and min(Sq+Seq, Sk+Sek). Tensors the
forward ignores (weights and biases of a norm type below 2, weights of absent streams) get no or
zero gradient, and the finite difference confirms zero.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from spec_helpers import NRC_ATTRS, attrs_dict, inner, nrc_backward_kwargs, nrc_forward_inputs

F64 = np.float64
SIZES = dict(b=2, n=2, d=6, sq=3, sk=4)
ENCODER = dict(seq=2, sek=3)
H = 1e-3
DIRECTIONS = 3


def cases():
    for attrs in NRC_ATTRS:
        for enc in (False, True):
            lmin = min(SIZES["sq"] + enc * ENCODER["seq"], SIZES["sk"] + enc * ENCODER["sek"])
            for sr_name, sr in ((("one", 1), ("min-1", lmin - 1), ("min", lmin)) if attrs[2] else (("-", None),)):
                yield pytest.param(attrs, enc, sr, id="nt{}-nat{}-rt{}-co{}-{}-sr{}".format(
                    *attrs, "enc" if enc else "noenc", sr_name))


def loss(inputs, attrs, grads):
    out = refspec.norm_rope_concat(**inputs, **attrs, eps=1e-5, out_dtype=F64)
    return (inner(grads["grad_query_output"], out.query_output)
            + inner(grads["grad_key_output"], out.key_output)
            + inner(grads["grad_value_output"], out.value_output))


def directional_fd(inputs, attrs, grads, delta):
    def at(t):
        moved = {k: (v + t * delta[k] if k in delta else v) for k, v in inputs.items()}
        return loss(moved, attrs, grads)
    return (8 * (at(H) - at(-H)) - (at(2 * H) - at(-2 * H))) / (12 * H)


def check_case(rng, attrs_tuple, enc, sr, seq=None, sek=None):
    attrs = attrs_dict(*attrs_tuple)
    seq = ENCODER["seq"] * enc if seq is None else seq
    sek = ENCODER["sek"] * enc if sek is None else sek
    inputs = nrc_forward_inputs(rng, **SIZES, seq=seq, sek=sek, sr=sr, rope_type=attrs["rope_type"])
    fwd = refspec.norm_rope_concat(**inputs, **attrs, eps=1e-5, is_training=True, out_dtype=F64)
    grads = {f"grad_{name}_output": rng.standard_normal(getattr(fwd, f"{name}_output").shape)
             for name in ("query", "key", "value")}
    bwd = refspec.norm_rope_concat_backward(**nrc_backward_kwargs(inputs, fwd, grads, attrs),
                                            out_dtype=F64)
    perturbed = [k for k in inputs if not k.startswith("rope_")]
    for name in perturbed:
        g = getattr(bwd, f"grad_{name}")
        assert g is None or g.shape == inputs[name].shape, name
    for _ in range(DIRECTIONS):
        delta = {k: rng.standard_normal(inputs[k].shape) for k in perturbed}
        terms = [inner(getattr(bwd, f"grad_{k}"), delta[k]) for k in perturbed
                 if getattr(bwd, f"grad_{k}") is not None]
        analytic = sum(terms)
        fd = directional_fd(inputs, attrs, grads, delta)
        scale = sum(abs(t) for t in terms) + 1.0
        assert abs(fd - analytic) <= 1e-8 * scale, (fd, analytic)
    return bwd


@pytest.mark.parametrize("attrs, enc, sr", list(cases()))
def test_backward_is_the_gradient_of_the_forward(rng, attrs, enc, sr):
    bwd = check_case(rng, attrs, enc, sr)
    norm_type, norm_added_type = attrs[0], attrs[1]
    assert (bwd.grad_norm_query_weight is not None) == (norm_type == 2)
    assert (bwd.grad_norm_added_key_bias is not None) == (norm_added_type == 2)
    assert (bwd.grad_encoder_query is not None) == enc
    assert (bwd.grad_encoder_value is not None) == enc


@pytest.mark.parametrize("seq, sek", ((2, 0), (0, 3)), ids=("encoder_query-only", "encoder_key-only"))
@pytest.mark.parametrize("attrs", [(2, 2, 2, 1), (1, 2, 1, 0), (2, 1, 2, 0)],
                         ids=lambda a: "nt{}-nat{}-rt{}-co{}".format(*a))
def test_one_encoder_stream(rng, attrs, seq, sek):
    lmin = min(SIZES["sq"] + seq, SIZES["sk"] + sek)
    bwd = check_case(rng, attrs, None, lmin, seq=seq, sek=sek)
    assert (bwd.grad_encoder_query is not None) == bool(seq)
    assert (bwd.grad_encoder_key is not None) == bool(sek)


def test_finite_difference_check_has_teeth(rng):
    """A backward with the statistics slightly off (rstd scaled by 1.001) fails the check, so the
    tolerance is far tighter than any real error."""
    attrs = attrs_dict(1, 0, 0, 0)
    inputs = nrc_forward_inputs(rng, **SIZES, seq=0, sek=0)
    fwd = refspec.norm_rope_concat(**inputs, **attrs, is_training=True, out_dtype=F64)
    grads = {f"grad_{n}_output": rng.standard_normal(getattr(fwd, f"{n}_output").shape)
             for n in ("query", "key", "value")}
    kw = nrc_backward_kwargs(inputs, fwd, grads, attrs)
    kw["norm_query_rstd"] = kw["norm_query_rstd"] * 1.001
    bwd = refspec.norm_rope_concat_backward(**kw, out_dtype=F64)
    delta = {"query": rng.standard_normal(inputs["query"].shape)}
    analytic = inner(bwd.grad_query, delta["query"])
    fd = directional_fd(inputs, attrs, grads, delta)
    assert abs(fd - analytic) > 1e-4 * (abs(analytic) + 1.0)
