"""Small, real golden cases computed by the spec functions, for the store's docs example, the
compression benchmark and the store's tests (the sweep generator builds the real sets).

Each function returns the ``refspec.goldens.cases.CaseData`` that ``GoldenWriter.write_case``
takes: random inputs rounded to the case dtype, outputs from the public spec functions rounded
once and exact (``out_dtype=np.float64``), and the tolerance terms of ``refspec.spec.terms``.
"""

from __future__ import annotations

import numpy as np

from .cases import CaseData
from ..spec.dtypes import dtype_name, resolve_dtype, round_to
from ..spec.enums import RopeMode, RopeType
from ..spec.nrc import norm_rope_concat, norm_rope_concat_backward
from ..spec.rope import rotary_position_embedding_grad
from ..spec.terms import norm_rope_concat_backward_terms, rope_grad_terms

__all__ = ["rope_grad_case", "nrc_backward_case"]


def rope_grad_case(shape=(2, 4, 16, 32), dtype="float32", mode=0, with_x=True, seed=0,
                   soc=None, case_id="rope_grad/example") -> CaseData:
    """RotaryPositionEmbeddingGrad, BNSD (``shape`` = B, N, S, D) with cos/sin 11SD, random
    inputs."""
    B, N, S, D = shape
    dt = resolve_dtype(dtype)
    rng = np.random.default_rng(seed)
    dy = round_to(rng.standard_normal((B, N, S, D)), dt)
    cos = round_to(np.cos(rng.uniform(-np.pi, np.pi, (1, 1, S, D))), dt)
    sin = round_to(np.sin(rng.uniform(-np.pi, np.pi, (1, 1, S, D))), dt)
    x = round_to(rng.standard_normal((B, N, S, D)), dt) if with_x else None
    names = ("dx", "dcos", "dsin")
    rounded = rotary_position_embedding_grad(dy, cos, sin, x, mode=mode, soc=soc)
    exact = rotary_position_embedding_grad(dy, cos, sin, x, mode=mode, soc=soc, out_dtype=np.float64)
    params = dict(op="rope_grad", mode=RopeMode(mode).label, layout="BNSD", cos="11SD",
                  dtype=dtype_name(dt), soc=soc, dist="random", B=B, N=N, S=S, D=D,
                  x=bool(with_x))
    return CaseData(case_id, "rope_grad", params, seed, dict(dy=dy, cos=cos, sin=sin, x=x),
                    expected=dict(zip(names, rounded)), exact=dict(zip(names, exact)),
                    terms=rope_grad_terms(dy, cos, sin, x, mode=mode, soc=soc),
                    axes=dict.fromkeys(names, "BNSD"),
                    regenerate=f"refspec.goldens.example.rope_grad_case(shape={tuple(shape)}, "
                               f"dtype={dtype_name(dt)!r}, mode={mode}, with_x={with_x}, "
                               f"seed={seed})")


def nrc_backward_case(dtype="float32", norm_type=2, norm_added_type=1, rope_type=2, seed=0,
                      soc=None, case_id="nrc_grad/example") -> CaseData:
    """NormRopeConcatBackward with both streams (B1 N2 Sq8 Sk8 Seq4 Sek4 D16, concat order 0);
    mean/rstd from the spec's forward (float32)."""
    B, N, Sq, Sk, Seq, Sek, D, concat_order = 1, 2, 8, 8, 4, 4, 16, 0
    dt = resolve_dtype(dtype)
    rng = np.random.default_rng(seed)

    def r(*shape):
        return round_to(rng.standard_normal(shape), dt)

    q, k, v = r(B, Sq, N, D), r(B, Sk, N, D), r(B, Sk, N, D)
    eq, ek, ev = r(B, Seq, N, D), r(B, Sek, N, D), r(B, Sek, N, D)
    w = {n: r(D) for n in ("norm_query_weight", "norm_key_weight", "norm_added_query_weight",
                           "norm_added_key_weight")}
    bias = {n: r(D) for n in ("norm_query_bias", "norm_key_bias", "norm_added_query_bias",
                              "norm_added_key_bias")}
    Sr = min(Sq + Seq, Sk + Sek)
    angle = rng.uniform(-np.pi, np.pi, (Sr, D))
    rope_cos, rope_sin = round_to(np.cos(angle), dt), round_to(np.sin(angle), dt)
    attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                 concat_order=concat_order)
    fwd = norm_rope_concat(q, k, v, eq, ek, ev, **w, **bias, rope_sin=rope_sin, rope_cos=rope_cos,
                           is_training=True, **attrs, soc=soc)
    inputs = dict(grad_query_output=r(B, N, Sq + Seq, D), grad_key_output=r(B, N, Sk + Sek, D),
                  grad_value_output=r(B, N, Sk + Sek, D), query=q, key=k, encoder_query=eq,
                  encoder_key=ek)
    for stream, prefix in (("query", "norm_query"), ("key", "norm_key"),
                           ("encoder_query", "norm_added_query"), ("encoder_key", "norm_added_key")):
        typ = norm_type if prefix.startswith("norm_q") or prefix.startswith("norm_k") else norm_added_type
        inputs[f"{prefix}_weight"] = w[f"{prefix}_weight"] if typ == 2 else None
        inputs[f"{prefix}_mean"] = getattr(fwd, f"{prefix}_mean")
        inputs[f"{prefix}_rstd"] = getattr(fwd, f"{prefix}_rstd")
    inputs.update(rope_sin=rope_sin if rope_type else None, rope_cos=rope_cos if rope_type else None)
    rounded = norm_rope_concat_backward(**inputs, **attrs, soc=soc)._asdict()
    exact = norm_rope_concat_backward(**inputs, **attrs, soc=soc, out_dtype=np.float64)._asdict()
    terms = norm_rope_concat_backward_terms(inputs, attrs, soc)
    expected = {n: a for n, a in rounded.items() if a is not None}
    axes = {n: ("D" if a.ndim == 1 else "BSND") for n, a in expected.items()}
    params = dict(op="nrc_grad", norm_type=norm_type, norm_added_type=norm_added_type,
                  rope_type=RopeType(rope_type).name.lower(), concat_order=concat_order,
                  dtype=dtype_name(dt), soc=soc, dist="random", B=B, N=N, Sq=Sq, Sk=Sk, Seq=Seq,
                  Sek=Sek, D=D, Sr=Sr)
    return CaseData(case_id, "nrc_grad", params, seed, inputs, expected=expected,
                    exact={n: exact[n] for n in expected}, terms=terms, axes=axes,
                    regenerate=f"refspec.goldens.example.nrc_backward_case("
                               f"dtype={dtype_name(dt)!r}, seed={seed})")
