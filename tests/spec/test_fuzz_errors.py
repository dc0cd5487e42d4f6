"""Hypothesis: whatever the arguments, the four operators either return the documented outputs or
raise an AclnnError (never another exception type).

Each example starts from a coherent call (random layout, cos pattern, sizes including 0, dtypes,
attributes, chip profile) so that the success paths are reached often, then replaces a random
subset of the arguments with junk: None, integer/bool/complex/object/string arrays, ragged lists,
scalars, strings, out-of-range or non-integer attributes, unknown profiles and output dtypes.
A successful call must return arrays of the documented shapes and dtypes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refspec
from refspec.spec.dtypes import resolve_dtype
from spec_helpers import NRC_STREAMS

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

FLOATS = (np.float16, refspec.bfloat16, np.float32, np.float64)
OTHER_DTYPES = (np.int32, np.int8, np.uint8, bool, np.complex64, np.complex128, object, "U2")

dtypes = st.one_of(st.sampled_from(FLOATS), st.sampled_from(FLOATS), st.sampled_from(OTHER_DTYPES))

def mostly(valid, invalid, p_invalid=0.15):
    """``valid`` most of the time, ``invalid`` with probability about ``p_invalid``."""
    return st.integers(0, 99).flatmap(lambda u: invalid if u < 100 * p_invalid else valid)


socs = mostly(st.sampled_from([None, None, "A2", "A3", "950", "a2", "Ascend950", 950]),
              st.sampled_from(["A1", "", 3.5, "910b"]), 0.08)
nrc_socs = mostly(st.sampled_from([None, None, "A2", "A3", "a3"]),
                  st.sampled_from(["950", "A1", "", 3.5, "910b"]), 0.08)
out_dtypes = mostly(st.sampled_from([None, None, None, np.float64, "bf16", np.float16, "float32"]),
                    st.sampled_from(["int8", "nope", np.complex64, object, 7]), 0.08)
attr_values = st.one_of(st.integers(-3, 5), st.sampled_from(
    [1.0, 1.5, -0.0, "1", "x", True, False, None, np.int64(1), np.int8(-1), np.float32(2.0),
     np.array(1), np.array([1]), float("nan"), float("inf"), 10 ** 30, 1 + 0j, b"1", [1]]))
eps_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
    [0, 1, -1, 10 ** 400, "1e-5", None, True, np.float16(1e-3), np.array(1e-5), 1e-5 + 0j]))
bools = st.sampled_from([True, False, np.bool_(True), 0, 1, "yes", None])


@st.composite
def junk(draw):
    """Anything but a well-formed tensor."""
    kind = draw(st.sampled_from(["none", "array", "ragged", "scalar", "string", "object"]))
    if kind == "none":
        return None
    if kind == "array":
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=5)))
        return np.zeros(shape, draw(dtypes))
    if kind == "ragged":
        return [[1.0, 2.0], [3.0]]
    if kind == "scalar":
        return draw(st.sampled_from([0.0, 1, True, 2 + 1j]))
    if kind == "string":
        return "tensor"
    return np.array([object(), None], dtype=object)


def maybe_junk(draw, value, p_junk):
    return draw(junk()) if draw(st.integers(0, 99)) < 100 * p_junk else value


def expected_dtype(primary, out_dtype):
    if out_dtype is not None:
        return resolve_dtype(out_dtype)
    dt = np.asarray(primary).dtype
    return dt if dt in FLOATS else np.dtype(np.float64)


# --- RotaryPositionEmbedding(+Grad) ----------------------------------------------------------

@st.composite
def rope_args(draw, grad):
    rank = draw(st.sampled_from([4, 4, 4, 3, 3, 2, 5, 1]))
    D = draw(st.sampled_from([0, 2, 4, 6, 8, 12, 3]))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(rank - 1)) + (D,)
    cshape = tuple(size if draw(st.booleans()) else 1 for size in shape[:-1]) + (D,)
    dtype = draw(mostly(st.sampled_from(FLOATS), dtypes, 0.3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    def arr(s):
        return rng.uniform(-2, 2, s).astype(dtype) if np.dtype(dtype).kind == "f" else np.zeros(s, dtype)
    p_junk = draw(st.sampled_from([0.0, 0.0, 0.1, 0.3]))
    args = dict(primary=arr(shape), cos=arr(cshape), sin=arr(cshape))
    if grad:
        args["x"] = arr(shape) if draw(st.booleans()) else None
    args = {k: maybe_junk(draw, v, p_junk) for k, v in args.items()}
    mode = draw(mostly(st.sampled_from([0, 1, 2, 3]), attr_values, 0.3))
    return args, mode, draw(socs), draw(out_dtypes)


@SETTINGS
@given(rope_args(grad=False))
def test_rotary_position_embedding_raises_only_aclnn_errors(case):
    args, mode, soc, out_dtype = case
    try:
        y = refspec.rotary_position_embedding(args["primary"], args["cos"], args["sin"], mode,
                                              soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    assert isinstance(y, np.ndarray)
    assert y.shape == np.shape(args["primary"])
    assert y.dtype == expected_dtype(args["primary"], out_dtype)


@SETTINGS
@given(rope_args(grad=True))
def test_rotary_position_embedding_grad_raises_only_aclnn_errors(case):
    args, mode, soc, out_dtype = case
    try:
        dx, dcos, dsin = refspec.rotary_position_embedding_grad(
            args["primary"], args["cos"], args["sin"], args["x"], mode, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    dt = expected_dtype(args["primary"], out_dtype)
    assert dx.shape == np.shape(args["primary"]) and dx.dtype == dt
    if args["x"] is None:
        assert dcos is None and dsin is None
    else:
        assert dcos.shape == np.shape(args["cos"]) and dsin.shape == np.shape(args["cos"])
        assert dcos.dtype == dt and dsin.dtype == dt


# --- NormRopeConcat(+Backward) ---------------------------------------------------------------

@st.composite
def nrc_args(draw, backward):
    B, N = draw(st.integers(0, 2)), draw(st.integers(1, 3))
    D = draw(st.sampled_from([2, 4, 6, 3, 0]))
    Sq, Sk = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    Seq, Sek = draw(st.sampled_from([0, 0, 1, 2])), draw(st.sampled_from([0, 0, 1, 2]))
    attrs = {name: draw(mostly(st.integers(0, hi), attr_values, 0.1))
             for name, hi in (("norm_type", 2), ("norm_added_type", 2), ("rope_type", 2), ("concat_order", 1))}
    dtype = draw(mostly(st.sampled_from(FLOATS), dtypes, 0.3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    def arr(*s, dt=dtype):
        return rng.uniform(-2, 2, s).astype(dt) if np.dtype(dt).kind == "f" else np.zeros(s, dt)
    t = dict(query=arr(B, Sq, N, D), key=arr(B, Sk, N, D))
    if Seq:
        t["encoder_query"] = arr(B, Seq, N, D)
    if Sek:
        t["encoder_key"] = arr(B, Sek, N, D)
    Sr = draw(mostly(st.integers(1, max(1, min(Sq + Seq, Sk + Sek))),
                     st.integers(0, max(Sq + Seq, Sk + Sek) + 1), 0.2))
    if attrs["rope_type"] != 0 or draw(st.booleans()):
        t["rope_sin"], t["rope_cos"] = arr(Sr, D), arr(Sr, D)
    for stream, (attr, w, b, mean, rstd) in NRC_STREAMS.items():
        normed = attrs[attr] if isinstance(attrs[attr], int) else 2
        if normed == 2 or draw(st.integers(0, 9)) == 0:
            t[w] = arr(D)
            if not backward:
                t[b] = arr(D)
        if backward and (normed >= 1 or draw(st.integers(0, 9)) == 0):
            S = dict(query=Sq, key=Sk, encoder_query=Seq, encoder_key=Sek)[stream]
            t[mean], t[rstd] = arr(B, S, N, 1, dt=np.float32), np.ones((B, S, N, 1), np.float32)
    if backward:
        t.update(grad_query_output=arr(B, N, Sq + Seq, D), grad_key_output=arr(B, N, Sk + Sek, D),
                 grad_value_output=arr(B, N, Sk + Sek, D))
    else:
        t["value"] = arr(B, Sk, N, D)
        if Sek:
            t["encoder_value"] = arr(B, Sek, N, D)
    p_junk = draw(st.sampled_from([0.0, 0.0, 0.0, 0.05, 0.2]))
    t = {k: maybe_junk(draw, v, p_junk) for k, v in t.items()}
    if not backward:
        attrs["eps"] = draw(mostly(st.sampled_from([1e-5, 1e-6, 0.0]), eps_values, 0.2))
        attrs["is_training"] = draw(mostly(st.booleans(), bools, 0.2))
    return t, attrs, draw(nrc_socs), draw(out_dtypes)


@SETTINGS
@given(nrc_args(backward=False))
def test_norm_rope_concat_raises_only_aclnn_errors(case):
    t, attrs, soc, out_dtype = case
    try:
        out = refspec.norm_rope_concat(**t, **attrs, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    B, Sq, N, D = np.shape(t["query"])
    seq = {k: np.shape(t[k])[1] if t.get(k) is not None else 0
           for k in ("query", "key", "value", "encoder_query", "encoder_key", "encoder_value")}
    dt = expected_dtype(t["query"], out_dtype)
    assert out.query_output.shape == (B, N, seq["query"] + seq["encoder_query"], D)
    assert out.key_output.shape == (B, N, seq["key"] + seq["encoder_key"], D)
    assert out.value_output.shape == (B, N, seq["value"] + seq["encoder_value"], D)
    assert out.query_output.dtype == out.key_output.dtype == out.value_output.dtype == dt
    for stream, (attr, _w, _b, mean, rstd) in NRC_STREAMS.items():
        produced = bool(attrs["is_training"]) and t.get(stream) is not None and int(attrs[attr]) > 0
        for name in (mean, rstd):
            stat = getattr(out, name)
            assert (stat is not None) == produced, name
            if produced:
                assert stat.shape == (B, seq[stream], N, 1)
                assert stat.dtype == (np.dtype(np.float32) if out_dtype is None else resolve_dtype(out_dtype))


@SETTINGS
@given(nrc_args(backward=True))
def test_norm_rope_concat_backward_raises_only_aclnn_errors(case):
    t, attrs, soc, out_dtype = case
    try:
        grads = refspec.norm_rope_concat_backward(**t, **attrs, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    dt = expected_dtype(t["grad_query_output"], out_dtype)
    D = np.shape(t["query"])[-1]
    for name in ("query", "key", "encoder_query", "encoder_key"):
        g = getattr(grads, f"grad_{name}")
        assert (g is None) == (t.get(name) is None), name
        if g is not None:
            assert g.shape == np.shape(t[name]) and g.dtype == dt
    assert grads.grad_value.shape == np.shape(t["key"]) and grads.grad_value.dtype == dt
    assert (grads.grad_encoder_value is None) == (t.get("encoder_key") is None)
    for stream, (attr, w, b, _m, _r) in NRC_STREAMS.items():
        for name in (w, b):
            g = getattr(grads, f"grad_{name}")
            assert (g is not None) == (int(attrs[attr]) == 2), name
            if g is not None:
                assert g.shape == (D,) and g.dtype == dt
