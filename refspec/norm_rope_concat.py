"""NormRopeConcat and NormRopeConcatBackward (spec/norm_rope_concat.md §2, §3).

One function per step of the documented dataflow; the RoPE steps call the RotaryPositionEmbedding
formula blocks of :mod:`refspec.rope` (ropeType 1 is mode 1, ropeType 2 is mode 0), so there is
one copy of that math. Streams are BSND, concatenated outputs BNSD.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .checks import check_out_dtype, output_dtype
from .dtypes import round_to, to_float64
from .enums import ConcatOrder, NormType, RopeMode, RopeType
from .nrc_checks import STREAMS, check_nrc_args
from .rope import ROPE_BACKWARD, ROPE_FORWARD

__all__ = [
    "NormRopeConcatOutputs", "NormRopeConcatGrads", "ROPE_TYPE_TO_MODE",
    "layer_norm", "concat_seq", "split_seq", "bsnd_to_bnsd", "bnsd_to_bsnd",
    "rope_positions", "rope_positions_grad", "layer_norm_backward",
    "norm_rope_concat", "norm_rope_concat_backward",
]

#: ropeType -> RotaryPositionEmbedding mode of the same rotation (§1: the numberings differ)
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
    """NormRopeConcatBackward outputs (§3); None where the arguments produce no such output."""

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


# --- forward steps (§2 "Dataflow") ----------------------------------------------------------

def layer_norm(x, norm_type, weight=None, bias=None, eps=1e-5):
    """Step 1: LayerNorm over D per (b, s, n) row; returns (out, mean, rstd).

    mean = sum(x)/D; var = sum((x - mean)^2)/D; rstd = 1/sqrt(var + eps);
    xhat = (x - mean)*rstd; type 2: out = xhat*weight + bias. Type 0 returns x and no statistics.
    """
    if norm_type == NormType.NONE:
        return x, None, None
    D = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) / D                      # mean = sum(x)/D
    var = ((x - mean) ** 2).sum(axis=-1, keepdims=True) / D       # var = sum((x - mean)^2)/D
    rstd = 1.0 / np.sqrt(var + eps)                               # rstd = 1/sqrt(var + eps)
    xhat = (x - mean) * rstd                                      # xhat = (x - mean)*rstd
    if norm_type == NormType.AFFINE_LAYER_NORM:
        return xhat * weight + bias, mean, rstd                   # type 2: out = xhat*weight + bias
    return xhat, mean, rstd


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


# --- backward steps (§3 "Math") -------------------------------------------------------------

def rope_positions_grad(g, rope_type, rope_cos, rope_sin):
    """Step 2: RoPE backward at p < Sr, exactly RotaryPositionEmbeddingGrad's dx of mode 1
    (ropeType 1) or mode 0 (ropeType 2); positions p >= Sr pass g through unchanged."""
    if rope_type == RopeType.NONE:
        return g
    Sr = rope_cos.shape[0]
    rotate_grad = ROPE_BACKWARD[ROPE_TYPE_TO_MODE[RopeType(rope_type)]]
    out = g.copy()
    out[:, :, :Sr] = rotate_grad(g[:, :, :Sr], rope_cos[None, None], rope_sin[None, None])[0]
    return out


def split_seq(g, s_stream, s_encoder, concat_order):
    """Step 1: split a concatenated BNSD gradient along S by concatOrder: (stream, encoder)."""
    if concat_order == ConcatOrder.STREAM_FIRST:
        return g[:, :, :s_stream], g[:, :, s_stream:s_stream + s_encoder]
    return g[:, :, s_encoder:s_encoder + s_stream], g[:, :, :s_encoder]


def bnsd_to_bsnd(t):
    """Step 1 (end): transpose each part back to BSND."""
    return t.transpose(0, 2, 1, 3)


def layer_norm_backward(g, x, mean, rstd, norm_type, weight=None):
    """Step 3: LayerNorm backward with the given mean and rstd; returns (dx, dweight, dbias).

    xhat = (x - mean)*rstd; type 2: dbias = sum_BSN g, dweight = sum_BSN g*xhat, gw = g*weight;
    type 1: gw = g; dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat)); type 0: dx = g.
    """
    if norm_type == NormType.NONE:
        return g, None, None                                      # type 0: dx = g'
    xhat = (x - mean) * rstd                                      # xhat = (x - mean)*rstd
    dweight = dbias = None
    if norm_type == NormType.AFFINE_LAYER_NORM:
        dbias = g.sum(axis=(0, 1, 2))                             # dbias = sum over B, S, N of g'
        dweight = (g * xhat).sum(axis=(0, 1, 2))                  # dweight = sum over B, S, N of g'*xhat
        gw = g * weight                                           # gw = g'*weight
    else:
        gw = g                                                    # type 1: gw = g'
    dx = rstd * (gw - gw.mean(axis=-1, keepdims=True)
                 - xhat * (gw * xhat).mean(axis=-1, keepdims=True))   # dx = rstd*(gw - mean_D(gw) - xhat*mean_D(gw*xhat))
    return dx, dweight, dbias


# --- public operators -----------------------------------------------------------------------

def _widen(arrays):
    return {k: (None if v is None else to_float64(v)) for k, v in arrays.items()}


def _round_all(values: dict, dtypes: dict, out_dtype):
    return {k: (None if v is None else round_to(v, output_dtype(dtypes[k], out_dtype)))
            for k, v in values.items()}


def norm_rope_concat(query, key, value, encoder_query=None, encoder_key=None, encoder_value=None,
                     norm_query_weight=None, norm_query_bias=None, norm_key_weight=None,
                     norm_key_bias=None, norm_added_query_weight=None, norm_added_query_bias=None,
                     norm_added_key_weight=None, norm_added_key_bias=None, rope_sin=None,
                     rope_cos=None, norm_type=0, norm_added_type=0, rope_type=0, concat_order=0,
                     eps=1e-5, is_training=False, *, soc=None, out_dtype=None):
    """NormRopeConcat forward (spec/norm_rope_concat.md §2): norm, concat, transpose, RoPE.

    Returns :class:`NormRopeConcatOutputs`: outputs in query's dtype, statistics float32
    (both rounded once, half to even), or everything exact with ``out_dtype=np.float64``.
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
    t = _widen(arrays)
    T = arrays["query"].dtype

    normed, stats = {}, {}
    for stream, (type_attr, weight, bias, mean_name, rstd_name) in STREAMS.items():
        if t[stream] is None:
            normed[stream] = None
            continue
        normed[stream], mean, rstd = layer_norm(t[stream], a[type_attr], t[weight], t[bias], a["eps"])
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


#: the backward's tensor parameters (absent optional ones may be left out of ``tensors``)
BACKWARD_TENSORS = (("grad_query_output", "grad_key_output", "grad_value_output", "query", "key",
                     "encoder_query", "encoder_key", "rope_sin", "rope_cos")
                    + tuple(n for spec in STREAMS.values() for n in (spec[1], spec[3], spec[4])))


def backward_args(tensors: dict, attrs: dict, soc=None):
    """Validate the backward's tensors (by parameter name; a name left out means absent) and
    attributes (norm_type, norm_added_type, rope_type, concat_order); returns (float64 arrays,
    attributes, dtype T)."""
    tensors = {**dict.fromkeys(BACKWARD_TENSORS), **tensors}
    arrays, a, _ = check_nrc_args("norm_rope_concat_backward", "grad_query_output", tensors,
                                  attrs, soc, backward=True)
    return _widen(arrays), a, arrays["grad_query_output"].dtype



def backward_exact(t: dict, a: dict):
    """The §3 dataflow on validated float64 arrays ``t`` and attributes ``a``.

    Returns ``(grads, upstream)``: the exact gradients by output name, and for each normed
    stream the gradient g' that reaches its LayerNorm (after RoPE backward, split, transpose).
    """
    order, rt = a["concat_order"], a["rope_type"]
    Sq, Sk = t["query"].shape[1], t["key"].shape[1]
    Seq = 0 if t["encoder_query"] is None else t["encoder_query"].shape[1]
    Sek = 0 if t["encoder_key"] is None else t["encoder_key"].shape[1]

    g = {}
    for out_name, stream, encoder, s_stream, s_enc in (
            ("grad_query_output", "query", "encoder_query", Sq, Seq),
            ("grad_key_output", "key", "encoder_key", Sk, Sek)):
        rotated = rope_positions_grad(t[out_name], rt, t["rope_cos"], t["rope_sin"])   # step 2
        part_stream, part_encoder = split_seq(rotated, s_stream, s_enc, order)        # step 1
        g[stream], g[encoder] = bnsd_to_bsnd(part_stream), bnsd_to_bsnd(part_encoder)
    part_value, part_enc_value = split_seq(t["grad_value_output"], Sk, Sek, order)    # step 4

    grads = dict(grad_value=bnsd_to_bsnd(part_value),
                 grad_encoder_value=bnsd_to_bsnd(part_enc_value) if t["encoder_key"] is not None else None)
    D = t["query"].shape[-1]
    for stream, (type_attr, weight, bias, mean, rstd) in STREAMS.items():
        if t[stream] is None:   # an absent stream has no rows: its weight gradients are sums of nothing
            grads[f"grad_{stream}"] = None
            dweight = dbias = np.zeros(D) if a[type_attr] == NormType.AFFINE_LAYER_NORM else None
        else:                                                                          # step 3
            grads[f"grad_{stream}"], dweight, dbias = layer_norm_backward(
                g[stream], t[stream], t[mean], t[rstd], a[type_attr], t[weight])
        grads[f"grad_{weight}"], grads[f"grad_{bias}"] = dweight, dbias
    return grads, g


def norm_rope_concat_backward(grad_query_output, grad_key_output, grad_value_output, query, key,
                              encoder_query=None, encoder_key=None,
                              norm_query_weight=None, norm_query_mean=None, norm_query_rstd=None,
                              norm_key_weight=None, norm_key_mean=None, norm_key_rstd=None,
                              norm_added_query_weight=None, norm_added_query_mean=None,
                              norm_added_query_rstd=None, norm_added_key_weight=None,
                              norm_added_key_mean=None, norm_added_key_rstd=None,
                              rope_sin=None, rope_cos=None, norm_type=0, norm_added_type=0,
                              rope_type=0, concat_order=0, *, soc=None, out_dtype=None):
    """NormRopeConcatBackward (spec/norm_rope_concat.md §3): split, RoPE backward, LayerNorm
    backward with the given mean and rstd, value gradients as exact copies.

    Returns :class:`NormRopeConcatGrads` in gradQueryOutput's dtype (or ``out_dtype``).
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
    grads, _ = backward_exact(t, a)
    return NormRopeConcatGrads(**_round_all(grads, dict.fromkeys(grads, T), out_dtype))
