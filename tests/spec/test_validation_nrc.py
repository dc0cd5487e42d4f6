"""Every validation rule of docs/norm_rope_concat.md §3 triggers the documented error.

Each row starts from a valid call (all streams, LayerNorm with affine weights on both, half RoPE,
float32 on profile A2) and breaks exactly one rule; the test checks the error class, the aclnn
code and that the message starts with the argument's name. The accepted rows hold the other side
of each boundary.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from spec_helpers import NRC_STREAMS, assert_aclnn

Bz, Nz, Dz, SQ, SEQ, SK, SEK, SR = 2, 2, 8, 3, 2, 4, 3, 4     # min(Sq+Seq, Sk+Sek) = 5
F32 = np.float32


def valid(op, d=Dz, dtype=F32, sr=SR, attrs=(2, 2, 2, 0)):
    """Valid keyword arguments of the backward ("bwd") or the forward ("fwd")."""
    def z(*shape, dt=dtype):
        return np.zeros(shape, dt)
    stream_s = dict(query=SQ, key=SK, encoder_query=SEQ, encoder_key=SEK)
    kw = {name: z(Bz, s, Nz, d) for name, s in stream_s.items()}
    kw.update(rope_sin=z(sr, d), rope_cos=z(sr, d))
    kw.update(zip(("norm_type", "norm_added_type", "rope_type", "concat_order"), attrs))
    for stream, (_a, weight, bias, mean, rstd) in NRC_STREAMS.items():
        kw[weight] = z(d)
        if op == "bwd":
            kw[mean] = z(Bz, stream_s[stream], Nz, 1, dt=F32)
            kw[rstd] = np.ones((Bz, stream_s[stream], Nz, 1), F32)
        else:
            kw[bias] = z(d)
    if op == "bwd":
        kw.update(grad_query_output=z(Bz, Nz, SQ + SEQ, d), grad_key_output=z(Bz, Nz, SK + SEK, d),
                  grad_value_output=z(Bz, Nz, SK + SEK, d))
    else:
        kw.update(value=z(Bz, SK, Nz, d), encoder_value=z(Bz, SEK, Nz, d))
    return kw


def call(op, soc="A2", d=Dz, dtype=F32, sr=SR, attrs=(2, 2, 2, 0), drop=(), **override):
    kw = valid(op, d, dtype, sr, attrs)
    for name in drop:
        kw.pop(name, None)
    kw.update(override)
    fn = refspec.norm_rope_concat_backward if op == "bwd" else refspec.norm_rope_concat
    return fn(**kw, soc=soc)


NULL, INVALID, TILING = (ParamNullptrError, 161001), (ParamInvalidError, 161002), (TilingError, 561002)


def row(rule, cls, code, argument, op="bwd", **kw):
    return pytest.param(op, kw, cls, code, argument, id=f"{op}-{rule}")


def z(*shape, dt=F32):
    return np.zeros(shape, dt)


REJECTED = [
    # required tensors -> 161001
    *[row(f"{n}-missing", *NULL, n, **{n: None})
      for n in ("grad_query_output", "grad_key_output", "grad_value_output", "query", "key")],
    *[row(f"{n}-missing", *NULL, n, op="fwd", **{n: None}) for n in ("query", "key", "value")],
    # dtypes -> 161002
    row("grad_query_output-int32", *INVALID, "grad_query_output", grad_query_output=z(Bz, Nz, 5, Dz, dt=np.int32)),
    row("grad_query_output-float64-on-A2", *INVALID, "grad_query_output", dtype=np.float64),
    row("grad_query_output-complex-math-only", *INVALID, "grad_query_output", soc=None,
        grad_query_output=z(Bz, Nz, 5, Dz, dt=np.complex128)),
    row("query-object-math-only", *INVALID, "query", soc=None, query=np.zeros((Bz, SQ, Nz, Dz), object)),
    row("key-float16", *INVALID, "key", key=z(Bz, SK, Nz, Dz, dt=np.float16)),
    row("grad_value_output-bfloat16", *INVALID, "grad_value_output",
        grad_value_output=z(Bz, Nz, 7, Dz, dt=refspec.bfloat16)),
    row("encoder_query-float16", *INVALID, "encoder_query", encoder_query=z(Bz, SEQ, Nz, Dz, dt=np.float16)),
    row("norm_query_weight-float16", *INVALID, "norm_query_weight", norm_query_weight=z(Dz, dt=np.float16)),
    row("rope_cos-bfloat16", *INVALID, "rope_cos", rope_cos=z(SR, Dz, dt=refspec.bfloat16)),
    row("norm_key_mean-float16", *INVALID, "norm_key_mean", norm_key_mean=z(Bz, SK, Nz, 1, dt=np.float16)),
    row("norm_added_query_rstd-float64", *INVALID, "norm_added_query_rstd",
        norm_added_query_rstd=z(Bz, SEQ, Nz, 1, dt=np.float64)),
    row("means-float32-even-for-float16", *INVALID, "norm_query_mean", dtype=np.float16,
        norm_query_mean=z(Bz, SQ, Nz, 1, dt=np.float16)),
    row("value-float16", *INVALID, "value", op="fwd", value=z(Bz, SK, Nz, Dz, dt=np.float16)),
    row("norm_key_bias-float16", *INVALID, "norm_key_bias", op="fwd", norm_key_bias=z(Dz, dt=np.float16)),
    row("encoder_value-bfloat16", *INVALID, "encoder_value", op="fwd",
        encoder_value=z(Bz, SEK, Nz, Dz, dt=refspec.bfloat16)),
    # D -> 561002
    row("D-odd", *TILING, "query", d=7, attrs=(2, 2, 0, 0)),
    row("D-odd-rope", *TILING, "query", d=7, soc=None),
    row("D-1026", *TILING, "query", d=1026),
    row("D-odd", *TILING, "query", op="fwd", d=9, attrs=(0, 0, 0, 0)),
    row("D-1026", *TILING, "query", op="fwd", d=1026),
    # attributes -> 561002
    row("norm_type-3", *TILING, "norm_type", norm_type=3),
    row("norm_type-string", *TILING, "norm_type", norm_type="1"),
    row("norm_added_type--1", *TILING, "norm_added_type", norm_added_type=-1),
    row("rope_type-3", *TILING, "rope_type", rope_type=3),
    row("concat_order-2", *TILING, "concat_order", concat_order=2),
    row("concat_order-0.5", *TILING, "concat_order", concat_order=0.5),
    row("norm_type-3", *TILING, "norm_type", op="fwd", norm_type=3),
    row("rope_type-None", *TILING, "rope_type", op="fwd", rope_type=None),
    row("concat_order--1", *TILING, "concat_order", op="fwd", concat_order=-1),
    # shapes -> 561002
    row("query-rank-3", *TILING, "query", query=z(Bz, SQ, Nz * Dz)),
    row("key-B-differs", *TILING, "key", key=z(Bz + 1, SK, Nz, Dz)),
    row("encoder_query-N-differs", *TILING, "encoder_query", encoder_query=z(Bz, SEQ, Nz + 1, Dz)),
    row("encoder_key-D-differs", *TILING, "encoder_key", encoder_key=z(Bz, SEK, Nz, Dz + 2)),
    row("grad_query_output-S", *TILING, "grad_query_output", grad_query_output=z(Bz, Nz, SQ + SEQ + 1, Dz)),
    row("grad_key_output-S", *TILING, "grad_key_output", grad_key_output=z(Bz, Nz, SK, Dz)),
    row("grad_value_output-S", *TILING, "grad_value_output", grad_value_output=z(Bz, Nz, SK + SEK - 1, Dz)),
    row("grad_query_output-BSND", *TILING, "grad_query_output", grad_query_output=z(Bz, SQ + SEQ, Nz, Dz)),
    row("grad_key_output-N", *TILING, "grad_key_output", grad_key_output=z(Bz, Nz + 1, SK + SEK, Dz)),
    row("norm_query_weight-shape", *TILING, "norm_query_weight", norm_query_weight=z(Dz + 2)),
    row("norm_added_key_weight-2d", *TILING, "norm_added_key_weight", norm_added_key_weight=z(1, Dz)),
    row("norm_key_mean-rank-3", *TILING, "norm_key_mean", norm_key_mean=z(Bz, SK, Nz)),
    row("norm_added_key_rstd-S", *TILING, "norm_added_key_rstd", norm_added_key_rstd=z(Bz, SEK + 1, Nz, 1)),
    row("norm_query_rstd-D-not-1", *TILING, "norm_query_rstd", norm_query_rstd=z(Bz, SQ, Nz, Dz)),
    row("rope_sin-D", *TILING, "rope_sin", rope_sin=z(SR, Dz - 2), rope_cos=z(SR, Dz - 2)),
    row("rope_sin-1d", *TILING, "rope_sin", rope_sin=z(Dz), rope_cos=z(Dz)),
    row("rope_cos-differs", *TILING, "rope_cos", rope_cos=z(SR - 1, Dz)),
    row("Sr-0", *TILING, "rope_sin", sr=0),
    row("Sr-above-min", *TILING, "rope_sin", sr=6),
    row("Sr-above-min", *TILING, "rope_sin", op="fwd", sr=6),
    row("value-Sv-differs", *TILING, "value", op="fwd", value=z(Bz, SK + 1, Nz, Dz)),
    row("encoder_value-Sev-differs", *TILING, "encoder_value", op="fwd", encoder_value=z(Bz, SEK - 1, Nz, Dz)),
    row("encoder_value-absent", *TILING, "encoder_value", op="fwd", encoder_value=None),
    row("value-N-differs", *TILING, "value", op="fwd", value=z(Bz, SK, Nz + 1, Dz)),
    # tensors the attributes require -> 161001 (errata E9, E11)
    *[row(f"{n}-missing", *NULL, n, **{n: None}) for n in (
        "norm_query_mean", "norm_query_rstd", "norm_key_mean", "norm_key_rstd", "norm_added_query_mean",
        "norm_added_query_rstd", "norm_added_key_mean", "norm_added_key_rstd", "norm_query_weight",
        "norm_key_weight", "norm_added_query_weight", "norm_added_key_weight", "rope_sin", "rope_cos")],
    row("mean-missing-type-1", *NULL, "norm_added_key_mean", attrs=(0, 1, 0, 0), norm_added_key_mean=None),
    row("rope_cos-missing-interleave", *NULL, "rope_cos", attrs=(0, 0, 1, 0), rope_cos=None),
    *[row(f"{n}-missing", *NULL, n, op="fwd", **{n: None}) for n in (
        "norm_query_weight", "norm_query_bias", "norm_added_key_weight", "norm_added_key_bias",
        "rope_sin", "rope_cos")],
    # the profile: NormRopeConcat exists only on A2/A3
    row("soc-950", *INVALID, "soc", soc="950"),
    row("soc-950", *INVALID, "soc", op="fwd", soc="950"),
    row("soc-unknown", *INVALID, "soc", soc="A5"),
    # forward-only attributes (not in the documents; the spec checks what the math needs)
    row("eps-negative", *INVALID, "eps", op="fwd", eps=-1e-5),
    row("eps-nan", *INVALID, "eps", op="fwd", eps=float("nan")),
    row("eps-string", *INVALID, "eps", op="fwd", eps="1e-5"),
    row("is_training-int", *INVALID, "is_training", op="fwd", is_training=1),
]


@pytest.mark.parametrize("op, kw, cls, code, argument", REJECTED)
def test_rule_rejects(op, kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(op, **kw)
    assert_aclnn(excinfo, cls, code, argument)


@pytest.mark.parametrize("op", ("fwd", "bwd"))
def test_out_dtype_rejected(op):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(op, out_dtype="int16")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


NO_ENCODERS = ("encoder_query", "encoder_key", "encoder_value", "norm_added_query_mean",
               "norm_added_query_rstd", "norm_added_key_mean", "norm_added_key_rstd")
NO_ENCODER_GRADS = dict(grad_query_output=z(Bz, Nz, SQ, Dz), grad_key_output=z(Bz, Nz, SK, Dz),
                        grad_value_output=z(Bz, Nz, SK, Dz))
NO_WEIGHTS = ("norm_query_weight", "norm_key_weight", "norm_added_query_weight", "norm_added_key_weight")

ACCEPTED = [
    pytest.param(op, kw, id=f"{op}-{name}") for op in ("fwd", "bwd") for name, kw in [
        ("valid-A2", {}),
        ("valid-A3", dict(soc="A3")),
        ("D-1024", dict(d=1024)),
        ("D-2", dict(d=2)),
        ("Sr-1", dict(sr=1)),
        ("Sr-min", dict(sr=5)),
        ("bfloat16", dict(dtype=refspec.bfloat16)),
        ("float16", dict(dtype=np.float16)),
        ("no-rope-no-tables", dict(attrs=(2, 2, 0, 1), drop=("rope_sin", "rope_cos"))),
        ("no-norm-no-stats-no-weights", dict(attrs=(0, 0, 1, 0), drop=NO_WEIGHTS)),
        ("no-encoders", dict(drop=NO_ENCODERS, sr=3, **(NO_ENCODER_GRADS if op == "bwd" else {}))),
        ("math-only-float64", dict(soc=None, dtype=np.float64)),
        ("math-only-D-odd-without-rope", dict(soc=None, d=7, attrs=(2, 2, 0, 0))),
        ("numpy-int-attributes", dict(attrs=(np.int64(1), np.int32(2), np.int8(1), np.int16(1)))),
    ]
]


@pytest.mark.parametrize("op, kw", ACCEPTED)
def test_boundary_accepted(op, kw):
    out = call(op, **kw)
    assert all(isinstance(a, np.ndarray) for a in out[:3])
