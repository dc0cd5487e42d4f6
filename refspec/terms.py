"""Tolerance metadata of every output (spec/tolerances.md, "Policy").

Each output gets a comparison class; reductions also get the number of reduced terms K and the
per-element sum of absolute terms S, from which a comparator derives a data-dependent atol
(K * u_acc * S bounds the float32 accumulation error of any summation order). The sums reuse the
spec's own formula blocks on absolute values, never a second copy of the math.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

import numpy as np

from .dtypes import to_float64
from .enums import NormType, RopeMode, RopeType
from .nrc_checks import STREAMS
from .norm_rope_concat import (ROPE_TYPE_TO_MODE, backward_args, backward_exact, bnsd_to_bsnd,
                               split_seq)
from .reduce import broadcast_dims, sum_to_shape
from .rope import ROPE_BACKWARD, ROPE_FORWARD
from .rope_checks import check_rope_args

__all__ = ["COPY", "ELEMENTWISE", "ROW_REDUCTION", "REDUCTION", "CLASSES", "OutputTerms",
           "rope_grad_terms", "rope_terms", "norm_rope_concat_backward_terms", "norm_rope_concat_terms"]

COPY, ELEMENTWISE, ROW_REDUCTION, REDUCTION = "copy", "elementwise", "row_reduction", "reduction"
CLASSES = (COPY, ELEMENTWISE, ROW_REDUCTION, REDUCTION)


class OutputTerms(NamedTuple):
    """Comparison class, number of reduced terms K (None if not a reduction) and the
    per-element sum of |terms| S (None where the class needs none)."""

    comparison_class: str
    reduced_terms: int | None = None
    sum_abs: np.ndarray | None = None


def rope_terms(x, cos, sin, mode=0, soc=None) -> dict[str, OutputTerms]:
    """RotaryPositionEmbedding: y is elementwise (two products per element)."""
    check_rope_args("rotary_position_embedding", "x", x, cos, sin, None, mode, soc)
    return {"y": OutputTerms(ELEMENTWISE)}


def rope_grad_terms(dy, cos, sin, x=None, mode=0, soc=None) -> dict[str, OutputTerms]:
    """RotaryPositionEmbeddingGrad: dx elementwise; dcos = sum(dy*P1(x), dims) and
    dsin = sum(dy*P2(x), dims) are reductions with K = product of the reduced axes' sizes and
    S = sum(|dy*P(x)|, dims), where y = P1(x)*cos + P2(x)*sin is the mode's forward (so
    P1(x) = forward(x, 1, 0) and P2(x) = forward(x, 0, 1))."""
    args = check_rope_args("rotary_position_embedding_grad", "dy", dy, cos, sin, x, mode, soc)
    out = {"dx": OutputTerms(ELEMENTWISE)}
    if args.x is None:
        return out
    d, x64 = to_float64(args.primary), to_float64(args.x)
    shape = args.cos.shape
    K = prod(d.shape[i] for i in broadcast_dims(d.shape, shape))
    forward = ROPE_FORWARD[RopeMode(args.mode)]
    ones, zeros = np.ones(x64.shape[-1]), np.zeros(x64.shape[-1])
    out["dcos"] = OutputTerms(REDUCTION, K, sum_to_shape(np.abs(d * forward(x64, ones, zeros)), shape))
    out["dsin"] = OutputTerms(REDUCTION, K, sum_to_shape(np.abs(d * forward(x64, zeros, ones)), shape))
    return out


def norm_rope_concat_terms(norm_type=0, norm_added_type=0, rope_type=0, D=None) -> dict[str, OutputTerms]:
    """NormRopeConcat forward: value_output is a copy; query/key outputs are row reductions
    (K = D) when normed, elementwise under RoPE alone, copies otherwise; mean/rstd are row
    reductions over D."""
    def stream_class(t):
        if t != NormType.NONE:
            return OutputTerms(ROW_REDUCTION, D)
        return OutputTerms(ELEMENTWISE) if rope_type != RopeType.NONE else OutputTerms(COPY)
    qk = stream_class(max(norm_type, norm_added_type))
    out = {"query_output": qk, "key_output": qk, "value_output": OutputTerms(COPY)}
    for stream, (type_attr, _w, _b, mean, rstd) in STREAMS.items():
        out[mean] = out[rstd] = OutputTerms(ROW_REDUCTION, D)
    return out


def norm_rope_concat_backward_terms(tensors: dict, attrs: dict, soc=None) -> dict[str, OutputTerms]:
    """NormRopeConcatBackward, per output name (§3 and tolerances.md):

    - grad_value, grad_encoder_value: copy;
    - a stream's dx with norm type 0: copy without RoPE, elementwise with it;
    - with norm type 1/2, dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat)) is a row reduction,
      K = D, S = |rstd|*(|gw| + mean_D|gw| + |xhat|*mean_D|gw*xhat|);
    - dbias = sum_BSN g' and dweight = sum_BSN g'*xhat: reductions with K = B*S*N rows,
      S = sum_BSN |g'| and sum_BSN |g'*xhat|,
    where |g'| stands for A, the sum of the absolute RoPE-backward products that make g'
    (:func:`_upstream_abs`), since those products may cancel before the LayerNorm sums.
    """
    t, a, _ = backward_args(tensors, attrs, soc)
    upstream = _upstream_abs(t, a)
    D = t["query"].shape[-1]
    out = {"grad_value": OutputTerms(COPY)}
    if t["encoder_key"] is not None:
        out["grad_encoder_value"] = OutputTerms(COPY)
    for stream, (type_attr, weight, bias, mean, rstd) in STREAMS.items():
        norm = a[type_attr]
        x = t[stream]
        if norm == NormType.AFFINE_LAYER_NORM and x is None:
            out[f"grad_{weight}"] = out[f"grad_{bias}"] = OutputTerms(REDUCTION, 0, np.zeros(D))
        if x is None:
            continue
        g = upstream[stream]  # A >= |g'|
        if norm == NormType.NONE:
            out[f"grad_{stream}"] = OutputTerms(ELEMENTWISE if a["rope_type"] else COPY)
            continue
        abs_xhat = np.abs((x - t[mean]) * t[rstd])                 # |xhat|
        gw = g * np.abs(t[weight]) if norm == NormType.AFFINE_LAYER_NORM else g
        s_dx = np.abs(t[rstd]) * (gw + gw.mean(axis=-1, keepdims=True)
                                  + abs_xhat * (gw * abs_xhat).mean(axis=-1, keepdims=True))
        out[f"grad_{stream}"] = OutputTerms(ROW_REDUCTION, D, s_dx)
        if norm == NormType.AFFINE_LAYER_NORM:
            rows = prod(x.shape[:3])
            out[f"grad_{bias}"] = OutputTerms(REDUCTION, rows, g.sum(axis=(0, 1, 2)))
            out[f"grad_{weight}"] = OutputTerms(REDUCTION, rows, (g * abs_xhat).sum(axis=(0, 1, 2)))
    return out


def _upstream_abs(t: dict, a: dict) -> dict:
    """For each stream, A = per element the sum of |products| that the RoPE backward adds up into
    g' (|g| where no RoPE applies): the RoPE backward formula block of the dataflow's step 2
    applied at positions p < Sr with the sin part and the cos part of the rope tables alone
    (each element is then a single product), minus what it gives with both parts zero; positions
    p >= Sr, which step 2 passes through unchanged, give |g| + |g| - |g|. The parts are then
    split and transposed as step 1 does (each stream's array laid out as NumPy lays out
    ``np.abs`` of that BSND view, so later sums over it add in the same order)."""
    if a["rope_type"] == RopeType.NONE:
        plain = dict(a, norm_type=NormType.NONE, norm_added_type=NormType.NONE)
        return {k: np.abs(v) for k, v in backward_exact(t, plain)[1].items()}
    rotate_grad = ROPE_BACKWARD[ROPE_TYPE_TO_MODE[RopeType(a["rope_type"])]]
    cos, sin = t["rope_cos"][None, None], t["rope_sin"][None, None]
    zeros = np.zeros_like(t["rope_cos"])[None, None]
    Sr = t["rope_cos"].shape[0]
    seq = {s: (0 if t[s] is None else t[s].shape[1]) for s in STREAMS}
    out = {}
    for out_name, stream, encoder in (("grad_query_output", "query", "encoder_query"),
                                      ("grad_key_output", "key", "encoder_key")):
        g = t[out_name]
        head = g[:, :, :Sr]
        A = np.empty(g.shape)
        A[:, :, :Sr] = np.abs(rotate_grad(head, cos, zeros)[0]) + np.abs(rotate_grad(head, zeros, sin)[0])
        if not np.isfinite(head).all():    # else both parts zero give +-0: subtracting |+-0| is exact
            A[:, :, :Sr] -= np.abs(rotate_grad(head, zeros, zeros)[0])
        tail = np.abs(g[:, :, Sr:])
        A[:, :, Sr:] = tail + tail - tail
        for name, part in zip((stream, encoder), split_seq(A, seq[stream], seq[encoder],
                                                           a["concat_order"])):
            out[name] = bnsd_to_bsnd(part).copy(order="K")
    return out
