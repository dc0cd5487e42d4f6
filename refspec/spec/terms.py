"""Tolerance metadata of every output (docs/compare.md, "Judging"; docs/norm_rope_concat.md §4).

Each output gets a comparison class; reductions also get the number of reduced terms K and the
per-element sum of absolute terms S, from which a comparator derives a data-dependent atol
(K * u_acc * S bounds the float32 accumulation error of any summation order). The sums reuse the
spec's own formula blocks on absolute values, block by block as the outputs are computed, never
a second copy of the math. ``rope_elementwise_sum_abs`` and
``norm_rope_concat_backward_elementwise_sum_abs`` give S for elementwise outputs too (the
comparator's float32 evaluation bound).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

import numpy as np

from . import blocks
from .enums import NormType, RopeMode, RopeType
from .dtypes import to_float64
from .nrc import ROPE_TYPE_TO_MODE, backward_args, backward_exact, upstream_rows
from .nrc_checks import STREAMS
from .reduce import reduced_terms, sum_rows, sum_to_shape
from .rope import ROPE_BACKWARD, ROPE_FORWARD
from .rope_checks import check_rope_args

__all__ = ["COPY", "ELEMENTWISE", "ROW_REDUCTION", "REDUCTION", "QUANTISED", "CACHE", "CLASSES",
           "OutputTerms", "CacheTerms",
           "rope_grad_terms", "rope_terms", "norm_rope_concat_backward_terms",
           "norm_rope_concat_terms", "upstream_abs", "rope_elementwise_sum_abs",
           "norm_rope_concat_backward_elementwise_sum_abs", "needs_elementwise_sum_abs"]

COPY, ELEMENTWISE, ROW_REDUCTION, REDUCTION = "copy", "elementwise", "row_reduction", "reduction"
#: codes of an 8-bit dtype (int8, float8, HiFloat8), and a cache updated in place
#: (docs/compare.md, "Quantised codes and caches updated in place: what the golden stores")
QUANTISED, CACHE = "quantised", "cache"
CLASSES = (COPY, ELEMENTWISE, ROW_REDUCTION, REDUCTION, QUANTISED, CACHE)


class OutputTerms(NamedTuple):
    """Comparison class, number of reduced terms K (None if not a reduction) and the
    per-element sum of |terms| S (None where the class needs none)."""

    comparison_class: str
    reduced_terms: int | None = None
    sum_abs: np.ndarray | None = None


class CacheTerms(NamedTuple):
    """The terms of a ``CACHE`` output, a cache the call updates in place (the golden is the
    whole cache after the call): ``written``, the flat C-order offsets of the elements the call
    writes (int64, ascending); ``written_class``, the class of the values written
    (``QUANTISED``, ``ELEMENTWISE``, ``ROW_REDUCTION`` or ``COPY``); K and S those of the written
    values, S one per written offset, in their order. A ``QUANTISED`` value's exact value is
    the one before rounding (``x*scale + offset``) and S bounds the arithmetic before it."""

    comparison_class: str
    reduced_terms: int | None
    sum_abs: np.ndarray | None
    written: np.ndarray
    written_class: str


def needs_elementwise_sum_abs(dtype) -> bool:
    """Whether an elementwise output of ``dtype`` gets its S: float32 and float64 outputs do
    (the comparator's float32 evaluation bound, docs/compare.md "Judging"); a 16-bit output is
    judged by the nearest-rounding gate, which needs none."""
    return np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64))


def rope_terms(x, cos, sin, mode=0, soc=None) -> dict[str, OutputTerms]:
    """RotaryPositionEmbedding: y is elementwise (two products per element), with S for
    float32 and float64 outputs (``rope_elementwise_sum_abs``)."""
    args = check_rope_args("rotary_position_embedding", "x", x, cos, sin, None, mode, soc)
    S = (rope_elementwise_sum_abs(args.primary, args.cos, args.sin, args.mode, grad=False)
         if needs_elementwise_sum_abs(args.primary.dtype) else None)
    return {"y": OutputTerms(ELEMENTWISE, None, S)}


def rope_grad_terms(dy, cos, sin, x=None, mode=0, soc=None) -> dict[str, OutputTerms]:
    """RotaryPositionEmbeddingGrad: dx elementwise (with S for float32 and float64 outputs);
    ``dcos = sum(dy*P1(x), dims)`` and
    ``dsin = sum(dy*P2(x), dims)`` are reductions with K = product of the reduced axes' sizes and
    ``S = sum(|dy*P(x)|, dims)``, where ``y = P1(x)*cos + P2(x)*sin`` is the mode's forward (so
    ``P1(x) = forward(x, 1, 0)`` and ``P2(x) = forward(x, 0, 1)``)."""
    args = check_rope_args("rotary_position_embedding_grad", "dy", dy, cos, sin, x, mode, soc)
    S = (rope_elementwise_sum_abs(args.primary, args.cos, args.sin, args.mode, grad=True)
         if needs_elementwise_sum_abs(args.primary.dtype) else None)
    out = {"dx": OutputTerms(ELEMENTWISE, None, S)}
    if args.x is None:
        return out
    full, shape = args.primary.shape, args.cos.shape
    K = reduced_terms(full, shape)
    forward = ROPE_FORWARD[RopeMode(args.mode)]
    ones, zeros = np.ones(full[-1]), np.zeros(full[-1])

    def sums(d, c, _s, x64):
        return (sum_to_shape(np.abs(d * forward(x64, ones, zeros)), c.shape),
                sum_to_shape(np.abs(d * forward(x64, zeros, ones)), c.shape))

    s_cos, s_sin = blocks.by_blocks(sums, args.primary, (args.cos, args.sin), args.x,
                                    reduced=(True, True))
    out["dcos"] = OutputTerms(REDUCTION, K, s_cos)
    out["dsin"] = OutputTerms(REDUCTION, K, s_sin)
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


def upstream_abs(g, rope_type, rope_cos, rope_sin):
    """A = per element the sum of |products| that step 2 (RoPE backward) adds up into g'
    (|g| where no RoPE applies), for ``refspec.spec.nrc.upstream_rows`` in place of
    ``rope_positions_grad``: step 2's formula block at positions p < Sr with the cos part and
    the sin part of the tables alone (each element is then a single product), minus what it
    gives with both parts zero (+-0 for finite g); positions p >= Sr, which step 2 passes
    through unchanged, give |g| + |g| - |g|."""
    if rope_type == RopeType.NONE:
        return np.abs(g)
    rotate_grad = ROPE_BACKWARD[ROPE_TYPE_TO_MODE[RopeType(rope_type)]]
    cos, sin = rope_cos[None, None], rope_sin[None, None]
    zeros = np.zeros_like(cos)
    Sr = rope_cos.shape[0]
    head = g[:, :, :Sr]
    A = np.empty(g.shape)
    A[:, :, :Sr] = np.abs(rotate_grad(head, cos, zeros)[0]) + np.abs(rotate_grad(head, zeros, sin)[0])
    if not np.isfinite(head).all():
        A[:, :, :Sr] -= np.abs(rotate_grad(head, zeros, zeros)[0])
    tail = np.abs(g[:, :, Sr:])
    A[:, :, Sr:] = tail + tail - tail
    return A


def norm_rope_concat_backward_terms(tensors: dict, attrs: dict, soc=None) -> dict[str, OutputTerms]:
    """NormRopeConcatBackward, per output name (docs/norm_rope_concat.md §2-§4):

    - grad_value, grad_encoder_value: copy;
    - a stream's dx with norm type 0: copy without RoPE, elementwise with it (with S for
      float32 and float64 outputs, ``norm_rope_concat_backward_elementwise_sum_abs``);
    - with norm type 1/2, ``dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat))`` is a row
      reduction, K = D, ``S = |rstd|*(|gw| + mean_D|gw| + |xhat|*mean_D|gw*xhat|)``;
    - ``dbias = sum_BSN g'`` and ``dweight = sum_BSN g'*xhat``: reductions with ``K = B*S*N``
      rows, ``S = sum_BSN |g'|`` and ``sum_BSN |g'*xhat|``,
    where |g'| stands for A of ``upstream_abs``, since the RoPE products may cancel before
    the LayerNorm sums. Computed row block by row block like the gradients themselves.
    """
    t, a, T = backward_args(tensors, attrs, soc)
    D = t["query"].shape[-1]
    out = {"grad_value": OutputTerms(COPY)}
    elementwise = []
    if t["encoder_key"] is not None:
        out["grad_encoder_value"] = OutputTerms(COPY)
    for stream, (type_attr, weight, bias, mean, rstd) in STREAMS.items():
        norm = a[type_attr]
        affine = norm == NormType.AFFINE_LAYER_NORM
        x = t[stream]
        if affine and x is None:
            out[f"grad_{weight}"] = out[f"grad_{bias}"] = OutputTerms(REDUCTION, 0, np.zeros(D))
        if x is None:
            continue
        if norm == NormType.NONE:
            out[f"grad_{stream}"] = OutputTerms(ELEMENTWISE if a["rope_type"] else COPY)
            if a["rope_type"] and needs_elementwise_sum_abs(T):
                elementwise.append(f"grad_{stream}")
            continue
        plan = blocks.plan(x.shape, (0, 1, 2))
        s_dx = np.empty(x.shape)
        sums = (blocks.Reduction(plan), blocks.Reduction(plan)) if affine else ()
        abs_w = np.abs(to_float64(t[weight])) if affine else None
        for rows in plan.blocks:
            A = upstream_rows(t, a, stream, rows, step2=upstream_abs)                 # A >= |g'|
            r = to_float64(t[rstd][rows])
            abs_xhat = np.abs((to_float64(x[rows]) - to_float64(t[mean][rows])) * r)
            gw = A * abs_w if affine else A
            s_dx[rows] = np.abs(r) * (gw + gw.mean(axis=-1, keepdims=True)
                                      + abs_xhat * (gw * abs_xhat).mean(axis=-1, keepdims=True))
            for total, part in zip(sums, (A, A * abs_xhat)):
                total.put(rows, sum_rows(part).reshape(1, 1, 1, -1))
        out[f"grad_{stream}"] = OutputTerms(ROW_REDUCTION, D, s_dx)
        if affine:
            rows_count = prod(x.shape[:3])
            out[f"grad_{bias}"] = OutputTerms(REDUCTION, rows_count, sums[0].result().reshape(-1))
            out[f"grad_{weight}"] = OutputTerms(REDUCTION, rows_count, sums[1].result().reshape(-1))
    if elementwise:
        S = norm_rope_concat_backward_elementwise_sum_abs(t, a, elementwise)
        out.update({n: OutputTerms(ELEMENTWISE, None, S[n]) for n in elementwise})
    return out


def _abs64(a):
    return None if a is None else np.abs(np.asarray(a, dtype=np.float64))


def rope_elementwise_sum_abs(primary, cos, sin, mode, grad: bool) -> np.ndarray:
    """S of RoPE's elementwise output (dx of the backward when ``grad``, else y): each element
    is one cos product plus or minus one sin product, so the formula block F on absolute values
    gives max(F(|d|, |c|, |s|), F(|d|, |c|, -|s|)) = |cos product| + |sin product|. Computed
    block by block (``refspec.spec.blocks.by_blocks``)."""
    F = (ROPE_BACKWARD if grad else ROPE_FORWARD)[RopeMode(int(mode))]

    def sum_abs(d, c, s):
        d, c, s = np.abs(d), np.abs(c), np.abs(s)
        plus, minus = F(d, c, s), F(d, c, -s)
        if grad:
            plus, minus = plus[0], minus[0]
        return np.maximum(plus, minus)

    return blocks.by_blocks(sum_abs, primary, (cos, sin))[0]


def norm_rope_concat_backward_elementwise_sum_abs(tensors: dict, attrs: dict, names,
                                                  soc=None) -> dict[str, np.ndarray]:
    """S of the elementwise gradients ``names`` (a stream's dx under RoPE with norm type 0),
    from the backward dataflow on absolute values with the sin table's sign flipped or not."""
    t, a, _ = backward_args(tensors, attrs, soc)
    ab = {k: _abs64(v) for k, v in t.items()}
    plus = backward_exact(ab, a)
    if ab.get("rope_sin") is not None:
        ab["rope_sin"] = -ab["rope_sin"]
    minus = backward_exact(ab, a)
    return {n: np.maximum(plus[n], minus[n]) for n in names if plus.get(n) is not None}
