"""Validation of NormRopeConcat and NormRopeConcatBackward (docs/norm_rope_concat.md §3).

Both operators share the rules; the backward adds its gradient inputs and the saved statistics.
NormRopeConcat exists only on A2/A3, so ``soc="950"`` is itself rejected (161002).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .checks import as_tensor, check_attr, check_same_dtype, check_soc, require
from .errors import ParamInvalidError, ParamNullptrError, TilingError

__all__ = ["Stream", "STREAMS", "check_nrc_args"]

MAX_D = 1024

class Stream(NamedTuple):
    """The names that belong to one normed tensor (a stream): its norm-type attribute and the
    spec's parameter names of its LayerNorm weight and bias and of its saved mean and rstd."""

    norm: str
    weight: str
    bias: str
    mean: str
    rstd: str


def _stream(norm: str, prefix: str) -> Stream:
    return Stream(norm, f"{prefix}_weight", f"{prefix}_bias", f"{prefix}_mean", f"{prefix}_rstd")


#: stream tensor -> its Stream, for the four normed tensors (docs/norm_rope_concat.md, Parameters)
STREAMS = {
    "query": _stream("norm_type", "norm_query"),
    "key": _stream("norm_type", "norm_key"),
    "encoder_query": _stream("norm_added_type", "norm_added_query"),
    "encoder_key": _stream("norm_added_type", "norm_added_key"),
}
_STAT_NAMES = {name for st in STREAMS.values() for name in (st.mean, st.rstd)}


def _expect_shape(arr, name, shape, ctx, what=""):
    if arr is not None and tuple(arr.shape) != tuple(shape):
        raise TilingError(f"{name}: shape {tuple(arr.shape)} must be {tuple(shape)}{what} [{ctx}]")


def check_nrc_args(op: str, primary_name: str, tensors: dict, attrs: dict, soc, backward: bool):
    """Apply docs/norm_rope_concat.md §3 and return ``(arrays, attrs, soc)``.

    ``tensors`` maps the Python parameter names to what the caller passed (None = absent);
    ``attrs`` holds norm_type, norm_added_type, rope_type, concat_order (and eps, is_training for
    the forward). Arrays keep their dtypes; absent tensors stay None.
    """
    ctx = op
    soc = check_soc(soc, op, allowed=("A2", "A3"))
    required = (("grad_query_output", "grad_key_output", "grad_value_output", "query", "key")
                if backward else ("query", "key", "value"))
    for name in required:
        require(tensors.get(name), name, ctx)
    arrays = {name: (None if v is None else as_tensor(v, name, ctx, soc)) for name, v in tensors.items()}
    primary = arrays[primary_name]
    if soc is not None:
        for name, arr in arrays.items():
            if arr is None:
                continue
            if name in _STAT_NAMES:
                if arr.dtype != np.float32:
                    raise ParamInvalidError(f"{name}: dtype {arr.dtype} must be float32 [{ctx}]")
            else:
                check_same_dtype(arr, name, primary, primary_name, ctx)

    a = dict(attrs)
    a["norm_type"] = check_attr(attrs["norm_type"], "norm_type", (0, 1, 2), ctx)
    a["norm_added_type"] = check_attr(attrs["norm_added_type"], "norm_added_type", (0, 1, 2), ctx)
    a["rope_type"] = check_attr(attrs["rope_type"], "rope_type", (0, 1, 2), ctx)
    a["concat_order"] = check_attr(attrs["concat_order"], "concat_order", (0, 1), ctx)
    if not backward:
        eps = attrs["eps"]
        try:
            eps_ok = (not isinstance(eps, bool) and isinstance(eps, (int, float, np.floating, np.integer))
                      and math.isfinite(float(eps)) and float(eps) >= 0)
        except OverflowError:   # an int beyond float range
            eps_ok = False
        if not eps_ok:
            raise ParamInvalidError(f"eps: {eps!r} must be a finite number >= 0 [{ctx}]")
        a["eps"] = float(eps)
        if not isinstance(attrs["is_training"], (bool, np.bool_)):
            raise ParamInvalidError(f"is_training: {attrs['is_training']!r} must be a bool [{ctx}]")
        a["is_training"] = bool(attrs["is_training"])
    ctx = (f"{op} norm_type={a['norm_type']} norm_added_type={a['norm_added_type']} "
           f"rope_type={a['rope_type']} concat_order={a['concat_order']}" + (f" soc={soc}" if soc else ""))

    # Tensors the attributes require (161001 here; errata E9, E11: the vendor does not check).
    for stream, (type_attr, weight, bias, mean, rstd) in STREAMS.items():
        if arrays.get(stream) is None:
            continue
        t = a[type_attr]
        needed = []
        if t == 2:
            needed.append(weight)
            if not backward:
                needed.append(bias)
        if t >= 1 and backward:
            needed += [mean, rstd]
        for name in needed:
            if arrays.get(name) is None:
                raise ParamNullptrError(f"{name}: required when {type_attr}={t} and {stream} is given "
                                        f"(got None) [{ctx}]")
    if a["rope_type"] != 0:
        for name in ("rope_sin", "rope_cos"):
            if arrays.get(name) is None:
                raise ParamNullptrError(f"{name}: required when rope_type={a['rope_type']} (got None) [{ctx}]")

    # Shapes (561002).
    q = arrays["query"]
    if q.ndim != 4:
        raise TilingError(f"query: rank {q.ndim} (shape {q.shape}) must be 4, (B, Sq, N, D) [{ctx}]")
    B, _, N, D = q.shape
    if D < 1 or (soc is not None and D > MAX_D):
        raise TilingError(f"query: D={D} out of range; allowed: 1..{MAX_D}, even [{ctx}]")
    if D % 2 and (soc is not None or a["rope_type"] != 0):
        raise TilingError(f"query: D={D} must be even [{ctx}]")
    seq = {}
    for name in ("query", "key", "value", "encoder_query", "encoder_key", "encoder_value"):
        arr = arrays.get(name)
        if arr is None:
            seq[name] = 0
            continue
        if arr.ndim != 4 or (arr.shape[0], arr.shape[2], arr.shape[3]) != (B, N, D):
            raise TilingError(f"{name}: shape {arr.shape} must be (B={B}, S, N={N}, D={D}) [{ctx}]")
        seq[name] = arr.shape[1]
    Lq = seq["query"] + seq["encoder_query"]
    Lk = seq["key"] + seq["encoder_key"]
    if backward:
        _expect_shape(arrays["grad_query_output"], "grad_query_output", (B, N, Lq, D), ctx, " (B, N, Sq+Seq, D)")
        _expect_shape(arrays["grad_key_output"], "grad_key_output", (B, N, Lk, D), ctx, " (B, N, Sk+Sek, D)")
        _expect_shape(arrays["grad_value_output"], "grad_value_output", (B, N, Lk, D), ctx,
                      " (B, N, Sv+Sev, D) with Sv = Sk and Sev = Sek")
    else:
        if seq["value"] != seq["key"]:
            raise TilingError(f"value: Sv={seq['value']} must equal key's Sk={seq['key']} [{ctx}]")
        if seq["encoder_value"] != seq["encoder_key"]:
            raise TilingError(f"encoder_value: Sev={seq['encoder_value']} must equal encoder_key's "
                              f"Sek={seq['encoder_key']} (absent means 0) [{ctx}]")
    for stream, (type_attr, weight, bias, mean, rstd) in STREAMS.items():
        for name in (weight, bias):
            _expect_shape(arrays.get(name), name, (D,), ctx)
        if arrays.get(stream) is not None:
            for name in (mean, rstd):
                _expect_shape(arrays.get(name), name, (B, seq[stream], N, 1), ctx)
    if a["rope_type"] != 0:
        sin, cos = arrays["rope_sin"], arrays["rope_cos"]
        if sin.ndim != 2 or sin.shape[1] != D:
            raise TilingError(f"rope_sin: shape {sin.shape} must be (Sr, D={D}) [{ctx}]")
        _expect_shape(cos, "rope_cos", sin.shape, ctx, " (rope_sin's shape)")
        Sr = sin.shape[0]
        if not 1 <= Sr <= min(Lq, Lk):
            raise TilingError(f"rope_sin: Sr={Sr} out of range; allowed: 1 <= Sr <= min(Sq+Seq, Sk+Sek) "
                              f"= {min(Lq, Lk)} [{ctx}]")
    return arrays, a, soc
