"""NormRopeConcat and NormRopeConcatBackward (docs/norm_rope_concat.md §1-§2).

One function per step of the documented dataflow; the RoPE steps call the RotaryPositionEmbedding
formula blocks of ``refspec.spec.rope`` (ropeType 1 is mode 1, ropeType 2 is mode 0), so there
is one copy of that math. Streams are BSND, concatenated outputs BNSD.

Every step of the backward works row by row (a row is one (b, s, n) of a stream, or one
(b, n, p) of a concatenated gradient) except the weight and bias sums over B, S, N, whose order
``refspec.spec.reduce`` states; so ``backward_exact`` runs the steps on cache-sized row
blocks of each stream (``refspec.spec.blocks``), with the bits of the steps applied to whole
arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import blocks
from .checks import check_out_dtype, output_dtype
from .dtypes import round_to, widen
from .enums import ConcatOrder, NormType, RopeMode, RopeType
from .nrc_checks import STREAMS, check_nrc_args
from .reduce import sum_rows
from .rope import ROPE_BACKWARD, ROPE_FORWARD

__all__ = [
    "NormRopeConcatOutputs", "NormRopeConcatGrads", "ROPE_TYPE_TO_MODE", "UPSTREAM",
    "FORWARD_TENSORS", "BACKWARD_TENSORS",
    "layer_norm", "concat_seq", "stream_positions", "split_seq", "bsnd_to_bnsd", "bnsd_to_bsnd",
    "rope_positions", "rope_positions_grad", "layer_norm_backward", "upstream_rows",
    "stream_gradients", "value_gradients", "backward_args", "backward_exact",
    "norm_rope_concat", "norm_rope_concat_backward",
]

#: ropeType -> RotaryPositionEmbedding mode of the same rotation (the numberings differ:
#: docs/norm_rope_concat.md, Parameters)
ROPE_TYPE_TO_MODE = {RopeType.INTERLEAVE: RopeMode.INTERLEAVE, RopeType.HALF: RopeMode.HALF}


class NormRopeConcatOutputs(NamedTuple):
    """NormRopeConcat outputs; statistics are None unless is_training and the tensor is normed."""

    query_output: np.ndarray
    key_output: np.ndarray
    value_output: np.ndarray
    norm_query_mean: np.ndarray | None = None
    norm_query_rstd: np.ndarray | None = None
    norm_key_mean: np.ndarray | None = None
    norm_key_rstd: np.ndarray | None = None
    norm_added_query_mean: np.ndarray | None = None
    norm_added_query_rstd: np.ndarray | None = None
    norm_added_key_mean: np.ndarray | None = None
    norm_added_key_rstd: np.ndarray | None = None


class NormRopeConcatGrads(NamedTuple):
    """NormRopeConcatBackward outputs (docs/norm_rope_concat.md, Parameters); None where the
    arguments produce no such output."""

    grad_query: np.ndarray
    grad_key: np.ndarray
    grad_value: np.ndarray
    grad_encoder_query: np.ndarray | None = None
    grad_encoder_key: np.ndarray | None = None
    grad_encoder_value: np.ndarray | None = None
    grad_norm_query_weight: np.ndarray | None = None
    grad_norm_query_bias: np.ndarray | None = None
    grad_norm_key_weight: np.ndarray | None = None
    grad_norm_key_bias: np.ndarray | None = None
    grad_norm_added_query_weight: np.ndarray | None = None
    grad_norm_added_query_bias: np.ndarray | None = None
    grad_norm_added_key_weight: np.ndarray | None = None
    grad_norm_added_key_bias: np.ndarray | None = None


#: NormRopeConcat's tensor parameters, in the order of its signature
FORWARD_TENSORS = (("query", "key", "value", "encoder_query", "encoder_key", "encoder_value")
                   + tuple(n for st in STREAMS.values() for n in (st.weight, st.bias))
                   + ("rope_sin", "rope_cos"))
#: NormRopeConcatBackward's tensor parameters, in the order of its signature (absent optional
#: ones may be left out of the ``tensors`` of ``backward_args``)
BACKWARD_TENSORS = (("grad_query_output", "grad_key_output", "grad_value_output", "query", "key",
                     "encoder_query", "encoder_key")
                    + tuple(n for st in STREAMS.values() for n in (st.weight, st.mean, st.rstd))
                    + ("rope_sin", "rope_cos"))


# --- forward steps (docs/norm_rope_concat.md §1) ---------------------------------------------

def layer_norm(x, norm_type, weight=None, bias=None, eps=1e-5, norm_axis=-1):
    """Step 1: LayerNorm over D per (b, s, n) row; returns (out, mean, rstd).

    ``mean = sum(x)/D``; ``var = sum((x - mean)^2)/D``; ``rstd = 1/sqrt(var + eps)``;
    ``xhat = (x - mean)*rstd``; type 2: ``out = xhat*weight + bias``. Type 0 returns x and no
    statistics. ``norm_axis`` (default D, the last): the axis the statistics are taken over.
    """
    if norm_type == NormType.NONE:
        return x, None, None
    D = x.shape[norm_axis]
    mean = x.sum(axis=norm_axis, keepdims=True) / D               # mean = sum(x)/D
    var = ((x - mean) ** 2).sum(axis=norm_axis, keepdims=True) / D  # var = sum((x - mean)^2)/D
    rstd = 1.0 / np.sqrt(var + eps)                               # rstd = 1/sqrt(var + eps)
    xhat = (x - mean) * rstd                                      # xhat = (x - mean)*rstd
    if norm_type == NormType.AFFINE_LAYER_NORM:
        return xhat * weight + bias, mean, rstd                   # type 2: out = xhat*weight + bias
    return xhat, mean, rstd


def stream_positions(s_stream: int, s_encoder: int, concat_order) -> tuple[slice, slice]:
    """Where a stream and its encoder stream lie along the concatenated S (step 2 of the
    forward, step 1 of the backward): order 0 gives [stream, encoder], order 1 [encoder, stream]."""
    if concat_order == ConcatOrder.STREAM_FIRST:
        return slice(0, s_stream), slice(s_stream, s_stream + s_encoder)
    return slice(s_encoder, s_encoder + s_stream), slice(0, s_encoder)


def concat_seq(stream, encoder, concat_order):
    """Step 2: concat along S; order 0 gives [stream, encoder], order 1 [encoder, stream]."""
    if encoder is None:
        return stream
    parts = (stream, encoder) if concat_order == ConcatOrder.STREAM_FIRST else (encoder, stream)
    return np.concatenate(parts, axis=1)


def bsnd_to_bnsd(t):
    """Step 3: transpose (0, 2, 1, 3), BSND -> BNSD."""
    return t.transpose(0, 2, 1, 3)


def rope_positions(h, rope_type, rope_cos, rope_sin):
    """Step 4: RoPE at concatenated positions p < Sr with cos = ropeCos[p], sin = ropeSin[p]
    broadcast over B and N; positions p >= Sr pass through."""
    if rope_type == RopeType.NONE:
        return h
    Sr = rope_cos.shape[0]
    rotate = ROPE_FORWARD[ROPE_TYPE_TO_MODE[RopeType(rope_type)]]
    out = h.copy()
    out[:, :, :Sr] = rotate(h[:, :, :Sr], rope_cos[None, None], rope_sin[None, None])
    return out


# --- backward steps (docs/norm_rope_concat.md §2) --------------------------------------------

def rope_positions_grad(g, rope_type, rope_cos, rope_sin):
    """Step 2: RoPE backward at p < Sr, exactly RotaryPositionEmbeddingGrad's dx of mode 1
    (ropeType 1) or mode 0 (ropeType 2); positions p >= Sr pass g through unchanged. Position p
    is g's index along S; the tables' rows are positions 0 .. Sr-1 of g."""
    if rope_type == RopeType.NONE:
        return g
    Sr = rope_cos.shape[0]
    rotate_grad = ROPE_BACKWARD[ROPE_TYPE_TO_MODE[RopeType(rope_type)]]
    out = g.copy()
    out[:, :, :Sr] = rotate_grad(g[:, :, :Sr], rope_cos[None, None], rope_sin[None, None])[0]
    return out


def split_seq(g, s_stream, s_encoder, concat_order):
    """Step 1: split a concatenated BNSD gradient along S by concatOrder: (stream, encoder)."""
    return tuple(g[:, :, p] for p in stream_positions(s_stream, s_encoder, concat_order))


def bnsd_to_bsnd(t):
    """Step 1 (end): transpose each part back to BSND."""
    return t.transpose(0, 2, 1, 3)


def layer_norm_backward(g, x, mean, rstd, norm_type, weight=None, sum_dtype=None, norm_axis=-1):
    """Step 3: LayerNorm backward with the given mean and rstd; returns (dx, dweight, dbias).

    ``xhat = (x - mean)*rstd``; type 2: ``dbias = sum_BSN g``, ``dweight = sum_BSN g*xhat``,
    ``gw = g*weight``; type 1: ``gw = g``; ``dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat))``;
    type 0: ``dx = g``.
    The sums over B, S, N add in the order of ``refspec.spec.reduce.sum_rows`` (``sum_dtype``:
    each partial sum rounded to that dtype); ``norm_axis`` (default D, the last): the axis the
    means ``mean_D`` are taken over.
    """
    if norm_type == NormType.NONE:
        return g, None, None                                      # type 0: dx = g'
    xhat = (x - mean) * rstd                                      # xhat = (x - mean)*rstd
    dweight = dbias = None
    if norm_type == NormType.AFFINE_LAYER_NORM:
        dbias = sum_rows(g, sum_dtype)                            # dbias = sum over B, S, N of g'
        dweight = sum_rows(g * xhat, sum_dtype)                   # dweight = sum over B, S, N of g'*xhat
        gw = g * weight                                           # gw = g'*weight
    else:
        gw = g                                                    # type 1: gw = g'
    dx = rstd * (gw - gw.mean(axis=norm_axis, keepdims=True)
                 - xhat * (gw * xhat).mean(axis=norm_axis, keepdims=True))   # dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat))
    return dx, dweight, dbias


# --- the backward dataflow, row block by row block -----------------------------------------

#: stream -> (the concatenated upstream gradient it gets its part of, the non-encoder stream of
#: that concatenation)
UPSTREAM = {"query": ("grad_query_output", "query"), "encoder_query": ("grad_query_output", "query"),
            "key": ("grad_key_output", "key"), "encoder_key": ("grad_key_output", "key")}


def _wide(a, work):
    return None if a is None else np.asarray(a).astype(work, copy=False)


def _length(t: dict, name: str) -> int:
    return 0 if t.get(name) is None else t[name].shape[1]


def upstream_rows(t: dict, a: dict, stream: str, rows: tuple, work=np.float64, step2=None):
    """Steps 1 and 2 for the rows ``rows`` (b, s, n, d slices) of ``stream``: the stream's
    positions of its concatenated upstream gradient (the split of step 1), widened to ``work``,
    RoPE backward at p < Sr (step 2), transposed back to BSND. ``step2(g, rope_type, cos, sin)``
    stands in for ``rope_positions_grad`` where given (the tolerance terms pass the
    absolute-value variant of ``refspec.spec.terms``)."""
    out_name, main = UPSTREAM[stream]
    where = stream_positions(_length(t, main), _length(t, "encoder_" + main), a["concat_order"])
    start = where[0 if stream == main else 1].start
    lo, hi, _ = rows[1].indices(t[stream].shape[1])
    p = slice(start + lo, start + hi)                 # the rows' positions in the concatenation
    g = _wide(t[out_name][rows[0], :, p], work)                               # step 1: the stream's part
    cos = sin = None
    if a["rope_type"] != RopeType.NONE:
        cos, sin = _wide(t["rope_cos"][p], work), _wide(t["rope_sin"][p], work)
    g = (step2 or rope_positions_grad)(g, a["rope_type"], cos, sin)          # step 2 at p < Sr
    return np.ascontiguousarray(bnsd_to_bsnd(g))                             # step 1: back to BSND


def stream_gradients(t: dict, a: dict, stream: str, work=np.float64, sum_dtype=None,
                     norm_axis=-1) -> dict:
    """Steps 1-3 for one stream, row block by row block: ``grad_<stream>`` and, for the affine
    LayerNorm, the stream's weight and bias gradients (None where not produced; zeros for an
    absent stream, whose sums have no terms). Means over another axis than D (``norm_axis``)
    need that axis whole: one block."""
    type_attr, weight, bias, mean, rstd = STREAMS[stream]
    norm = a[type_attr]
    affine = norm == NormType.AFFINE_LAYER_NORM
    names = (f"grad_{stream}", f"grad_{weight}", f"grad_{bias}")
    x = t[stream]
    if x is None:
        zeros = np.zeros(t["query"].shape[-1], work) if affine else None
        return dict(zip(names, (None, zeros, zeros)))
    whole = norm_axis % x.ndim != x.ndim - 1
    plan = blocks.plan(x.shape, (0, 1, 2), x.size if whole else blocks.BLOCK_ELEMENTS)
    dx = np.empty(x.shape, work)
    sums = (blocks.Reduction(plan, work, sum_dtype),
            blocks.Reduction(plan, work, sum_dtype)) if affine else ()
    w = _wide(t[weight], work) if affine else None
    for rows in plan.blocks:
        g = upstream_rows(t, a, stream, rows, work)                              # steps 1, 2
        stats = (None, None) if norm == NormType.NONE else (_wide(t[mean][rows], work),
                                                            _wide(t[rstd][rows], work))
        dx[rows], dweight, dbias = layer_norm_backward(g, _wide(x[rows], work), *stats, norm, w,
                                                       sum_dtype, norm_axis)      # step 3
        for total, part in zip(sums, (dweight, dbias)):
            total.put(rows, part.reshape(1, 1, 1, -1))
    out = [dx] + [total.result().reshape(-1) for total in sums]
    return dict(zip(names, out + [None] * (3 - len(out))))


def value_gradients(t: dict, a: dict, work=np.float64) -> dict:
    """Step 4: gradValue and gradEncoderValue, the split and transposed parts of
    gradValueOutput (exact copies; gradEncoderValue only when encoderKey is given)."""
    part_value, part_encoder = split_seq(t["grad_value_output"], _length(t, "key"),
                                         _length(t, "encoder_key"), a["concat_order"])
    return {"grad_value": np.ascontiguousarray(bnsd_to_bsnd(part_value), dtype=work),
            "grad_encoder_value": (None if t["encoder_key"] is None else
                                   np.ascontiguousarray(bnsd_to_bsnd(part_encoder), dtype=work))}


# --- public operators -----------------------------------------------------------------------

def _round_all(values: dict, dtypes: dict, out_dtype):
    return {k: (None if v is None else round_to(v, output_dtype(dtypes[k], out_dtype)))
            for k, v in values.items()}


def norm_rope_concat(query, key, value, encoder_query=None, encoder_key=None, encoder_value=None,
                     norm_query_weight=None, norm_query_bias=None, norm_key_weight=None,
                     norm_key_bias=None, norm_added_query_weight=None, norm_added_query_bias=None,
                     norm_added_key_weight=None, norm_added_key_bias=None, rope_sin=None,
                     rope_cos=None, norm_type=0, norm_added_type=0, rope_type=0, concat_order=0,
                     eps=1e-5, is_training=False, *, soc=None, out_dtype=None, norm_axis=-1):
    """NormRopeConcat forward (docs/norm_rope_concat.md §1): norm, concat, transpose, RoPE.

    Returns ``NormRopeConcatOutputs``: outputs in query's dtype, statistics float32
    (both rounded once, half to even), or everything exact with ``out_dtype=np.float64``.
    ``norm_axis`` (-1: D) the axis of the BSND streams the LayerNorm statistics are taken over:
    what a kernel taking them over another axis computes (for the diagnosis, docs/compare.md).
    """
    op = "norm_rope_concat"
    out_dtype = check_out_dtype(out_dtype, op)
    tensors = dict(query=query, key=key, value=value, encoder_query=encoder_query,
                   encoder_key=encoder_key, encoder_value=encoder_value,
                   norm_query_weight=norm_query_weight, norm_query_bias=norm_query_bias,
                   norm_key_weight=norm_key_weight, norm_key_bias=norm_key_bias,
                   norm_added_query_weight=norm_added_query_weight,
                   norm_added_query_bias=norm_added_query_bias,
                   norm_added_key_weight=norm_added_key_weight,
                   norm_added_key_bias=norm_added_key_bias, rope_sin=rope_sin, rope_cos=rope_cos)
    attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                 concat_order=concat_order, eps=eps, is_training=is_training)
    arrays, a, _ = check_nrc_args(op, "query", tensors, attrs, soc, backward=False)
    t = widen(arrays)
    T = arrays["query"].dtype

    normed, stats = {}, {}
    for stream, (type_attr, weight, bias, mean_name, rstd_name) in STREAMS.items():
        if t[stream] is None:
            normed[stream] = None
            continue
        normed[stream], mean, rstd = layer_norm(t[stream], a[type_attr], t[weight], t[bias], a["eps"],
                                                norm_axis)
        if a["is_training"] and mean is not None:
            stats[mean_name], stats[rstd_name] = mean, rstd          # (B, S, N, 1) row statistics

    order, rt = a["concat_order"], a["rope_type"]
    q = rope_positions(bsnd_to_bnsd(concat_seq(normed["query"], normed["encoder_query"], order)),
                       rt, t["rope_cos"], t["rope_sin"])
    k = rope_positions(bsnd_to_bnsd(concat_seq(normed["key"], normed["encoder_key"], order)),
                       rt, t["rope_cos"], t["rope_sin"])
    v = bsnd_to_bnsd(concat_seq(t["value"], t["encoder_value"], order))
    main = dict(query_output=q, key_output=k, value_output=v)
    outs = _round_all(main, dict.fromkeys(main, T), out_dtype)
    outs.update(_round_all(stats, dict.fromkeys(stats, np.float32), out_dtype))
    return NormRopeConcatOutputs(**outs)




def backward_args(tensors: dict, attrs: dict, soc=None):
    """Validate the backward's tensors (by parameter name; a name left out means absent) and
    attributes (norm_type, norm_added_type, rope_type, concat_order); returns (the arrays in
    their given dtypes, attributes, dtype T)."""
    tensors = {**dict.fromkeys(BACKWARD_TENSORS), **tensors}
    arrays, a, _ = check_nrc_args("norm_rope_concat_backward", "grad_query_output", tensors,
                                  attrs, soc, backward=True)
    return arrays, a, arrays["grad_query_output"].dtype


def backward_exact(t: dict, a: dict, work=np.float64, sum_dtype=None, norm_axis=-1) -> dict:
    """The backward dataflow (docs/norm_rope_concat.md §2) on validated arrays ``t`` and
    attributes ``a``, computed in ``work`` (float64: the exact values), the sums over B, S, N
    accumulated in ``sum_dtype`` (None: ``work``), the LayerNorm means over ``norm_axis`` of
    BSND (D): the gradients by output name, None where not produced."""
    grads = value_gradients(t, a, work)                                          # step 4
    for stream in STREAMS:                                                        # steps 1-3
        grads.update(stream_gradients(t, a, stream, work, sum_dtype, norm_axis))
    return {name: grads[name] for name in NormRopeConcatGrads._fields}


def norm_rope_concat_backward(grad_query_output, grad_key_output, grad_value_output, query, key,
                              encoder_query=None, encoder_key=None,
                              norm_query_weight=None, norm_query_mean=None, norm_query_rstd=None,
                              norm_key_weight=None, norm_key_mean=None, norm_key_rstd=None,
                              norm_added_query_weight=None, norm_added_query_mean=None,
                              norm_added_query_rstd=None, norm_added_key_weight=None,
                              norm_added_key_mean=None, norm_added_key_rstd=None,
                              rope_sin=None, rope_cos=None, norm_type=0, norm_added_type=0,
                              rope_type=0, concat_order=0, *, soc=None, out_dtype=None,
                              sum_dtype=None, norm_axis=-1):
    """NormRopeConcatBackward (docs/norm_rope_concat.md §2): split, RoPE backward, LayerNorm
    backward with the given mean and rstd, value gradients as exact copies. ``sum_dtype`` (None:
    exact) rounds every partial sum of the weight and bias gradients to that dtype in the stated
    order (``refspec.spec.reduce``): what a kernel accumulating in it computes; ``norm_axis``
    (-1: D) the axis of the BSND streams the LayerNorm backward's means run over: what a kernel
    taking them over another axis computes (both for the diagnosis, docs/compare.md).

    Returns ``NormRopeConcatGrads`` in gradQueryOutput's dtype (or ``out_dtype``).
    """
    out_dtype = check_out_dtype(out_dtype, "norm_rope_concat_backward")
    tensors = dict(grad_query_output=grad_query_output, grad_key_output=grad_key_output,
                   grad_value_output=grad_value_output, query=query, key=key,
                   encoder_query=encoder_query, encoder_key=encoder_key,
                   norm_query_weight=norm_query_weight, norm_query_mean=norm_query_mean,
                   norm_query_rstd=norm_query_rstd, norm_key_weight=norm_key_weight,
                   norm_key_mean=norm_key_mean, norm_key_rstd=norm_key_rstd,
                   norm_added_query_weight=norm_added_query_weight,
                   norm_added_query_mean=norm_added_query_mean,
                   norm_added_query_rstd=norm_added_query_rstd,
                   norm_added_key_weight=norm_added_key_weight,
                   norm_added_key_mean=norm_added_key_mean, norm_added_key_rstd=norm_added_key_rstd,
                   rope_sin=rope_sin, rope_cos=rope_cos)
    attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                 concat_order=concat_order)
    t, a, T = backward_args(tensors, attrs, soc)
    grads = backward_exact(t, a, sum_dtype=sum_dtype, norm_axis=norm_axis)
    return NormRopeConcatGrads(**_round_all(grads, dict.fromkeys(grads, T), out_dtype))
