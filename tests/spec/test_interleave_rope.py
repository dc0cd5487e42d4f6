"""InterleaveRope (docs/interleave_rope.md).

Evidence that the output is right: a NumPy oracle written here from the README's lines (the
reshape to pairs, the transpose, the rotate-half with the index fixed as erratum E26 says), a
torch transcription of the same lines (skipped without torch), and identities (cos = 1, sin = 0
leaves the de-interleaved input; rotating back by -theta gives it back; the 950 path's
RotaryPositionEmbedding mode 3 is the same function). Then every validation rule of §4 per chip
profile, the tolerance terms, the errata E26-E27, and a fuzz test that nothing but an
AclnnError is ever raised.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.irope import interleave_rope_terms
from refspec.spec.terms import ELEMENTWISE
from spec_helpers import assert_aclnn, bits

F64 = np.float64


# --- oracles, from the README's formulas -----------------------------------------------------

def deinterleave(x):
    """q = reshape(x, [..., D/2, 2]).transpose(-1, -2).reshape([..., D])."""
    x = np.asarray(x, F64)
    D = x.shape[-1]
    return np.swapaxes(x.reshape(x.shape[:-1] + (D // 2, 2)), -1, -2).reshape(x.shape)


def reinterleave(q):
    """The inverse: value i of the first half back to 2i, value i of the second half to 2i+1."""
    D = q.shape[-1]
    return np.swapaxes(q.reshape(q.shape[:-1] + (2, D // 2)), -1, -2).reshape(q.shape)


def rotate_half(q):
    """RotateHalf(q)_i = -q_{i+D/2} for i < D/2, q_{i-D/2} otherwise (E26: the README writes
    q_{i+D/2} for the second case too)."""
    D = q.shape[-1]
    i = np.arange(D)
    return np.where(i < D // 2, -q[..., (i + D // 2) % D], q[..., (i - D // 2) % D])


def oracle(x, cos, sin):
    q = deinterleave(x)
    return q * np.asarray(cos, F64) + rotate_half(q) * np.asarray(sin, F64)


def inputs(rng, B=2, N=3, S=5, D=64, cos_s=None, dtype=F64):
    cos_s = S if cos_s is None else cos_s
    x = rng.uniform(-2, 2, (B, N, S, D)).astype(dtype)
    c, s = (rng.uniform(-1, 1, (B, 1, cos_s, D)).astype(dtype) for _ in range(2))
    return x, c, s


# --- the output against the oracles ------------------------------------------------------------

@pytest.mark.parametrize("cos_s", (1, 5))
@pytest.mark.parametrize("D", (2, 8, 64))
def test_output_equals_the_oracle(rng, D, cos_s):
    x, c, s = inputs(rng, D=D, cos_s=cos_s)
    np.testing.assert_allclose(refspec.interleave_rope(x, c, s, out_dtype=F64), oracle(x, c, s),
                               rtol=1e-15, atol=1e-15)


def test_output_equals_a_torch_transcription_of_the_readme(rng):
    torch = pytest.importorskip("torch")
    x, c, s = inputs(rng)
    B, N, S, D = x.shape
    t = torch.from_numpy(x)
    q = t.reshape(B, N, S, D // 2, 2).transpose(-1, -2).reshape(B, N, S, D)
    rot = torch.cat((-q[..., D // 2:], q[..., : D // 2]), dim=-1)
    want = q * torch.from_numpy(c) + rot * torch.from_numpy(s)
    np.testing.assert_array_equal(refspec.interleave_rope(x, c, s, out_dtype=F64), want.numpy())


def test_cos_1_sin_0_leaves_the_deinterleaved_input(rng):
    """With nothing rotated, y is q: the even positions of each head, then the odd ones."""
    x, c, s = inputs(rng, dtype=np.float16)
    y = refspec.interleave_rope(x, np.ones_like(c), np.zeros_like(s), soc="A2")
    assert np.array_equal(bits(y), bits(np.concatenate((x[..., 0::2], x[..., 1::2]), axis=-1)))


def test_rotating_back_by_minus_theta_gives_the_input(rng):
    x, _, _ = inputs(rng)
    theta = rng.uniform(-10, 10, (2, 1, 5, 32))
    cos, sin = np.concatenate((np.cos(theta),) * 2, -1), np.concatenate((np.sin(theta),) * 2, -1)
    y = refspec.interleave_rope(x, cos, sin, out_dtype=F64)
    q = refspec.interleave_rope(reinterleave(y), cos, -sin, out_dtype=F64)   # = deinterleave(x)
    np.testing.assert_allclose(reinterleave(q), x, rtol=0, atol=1e-12)
    assert np.abs(y - deinterleave(x)).max() > 0.1


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32))
def test_it_is_rotary_position_embedding_mode_3(rng, dtype):
    """What the 950 path calls: bit for bit the same output."""
    x, c, s = inputs(rng, dtype=dtype)
    assert np.array_equal(bits(refspec.interleave_rope(x, c, s)),
                          bits(refspec.rotary_position_embedding(x, c, s, 3)))


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16))
def test_output_rounded_once_to_its_dtype(rng, dtype):
    x, c, s = inputs(rng, S=70, N=8, dtype=dtype, cos_s=1)
    y = refspec.interleave_rope(x, c, s, soc="A3")
    assert y.dtype == dtype
    assert np.array_equal(bits(y), bits(refspec.round_to(oracle(x, c, s), dtype)))


def test_inputs_are_not_modified(rng):
    x, c, s = inputs(rng, dtype=np.float16)
    before = [a.copy() for a in (x, c, s)]
    refspec.interleave_rope(x, c, s)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip((x, c, s), before))


# --- validation (docs/interleave_rope.md §4) --------------------------------------------------

NULL, INVALID, TILING = (ParamNullptrError, 161001), (ParamInvalidError, 161002), (TilingError, 561002)
X, C = (2, 3, 5, 64), (2, 1, 5, 64)


def call(shape=X, cshape=C, dtype=np.float16, soc=None, **override):
    """Zero tensors of the given shapes; ``override`` replaces x, cos or sin by name."""
    t = dict(x=np.zeros(shape, dtype), cos=np.zeros(cshape, dtype), sin=np.zeros(cshape, dtype))
    t.update(override)
    return refspec.interleave_rope(t["x"], t["cos"], t["sin"], soc=soc)


def row(rule, cls_code, argument, **kw):
    return pytest.param(kw, *cls_code, argument, id=rule)


REJECTED = [
    row("x-missing-A2", NULL, "x", x=None, soc="A2"),
    row("cos-missing", NULL, "cos", cos=None),
    row("sin-missing-A3", NULL, "sin", sin=None, soc="A3"),
    row("x-float32-A2", INVALID, "x", dtype=np.float32, soc="A2"),
    row("x-int32-A3", INVALID, "x", x=np.zeros(X, np.int32), soc="A3"),
    row("x-complex", INVALID, "x", x=np.zeros(X, np.complex64)),
    row("cos-dtype-differs-A2", INVALID, "cos", cos=np.zeros(C, refspec.bfloat16), soc="A2"),
    row("sin-dtype-differs-950", INVALID, "sin", sin=np.zeros(C, np.float32), soc="950"),
    # A2/A3: the operator's tiling
    row("A2-x-3-D", TILING, "x", shape=(3, 5, 64), soc="A2"),
    row("A2-cos-3-D", TILING, "cos", cshape=(1, 5, 64), soc="A2"),
    row("A2-empty", TILING, "x", shape=(2, 0, 5, 64), soc="A2"),
    row("A2-D-128", TILING, "x", shape=(2, 3, 5, 128), cshape=(2, 1, 5, 128), soc="A2"),
    row("A3-D-32", TILING, "x", shape=(2, 3, 5, 32), cshape=(2, 1, 5, 32), soc="A3"),
    row("A2-sin-shape-differs", TILING, "sin", sin=np.zeros((2, 1, 1, 64), np.float16), soc="A2"),
    row("A2-cos-B-1", TILING, "cos", cshape=(1, 1, 5, 64), soc="A2"),
    row("A2-cos-N-3", TILING, "cos", cshape=(2, 3, 5, 64), soc="A2"),
    row("A2-cos-S-2", TILING, "cos", cshape=(2, 1, 2, 64), soc="A2"),
    # math only and 950: RotaryPositionEmbedding mode 3's rules
    row("none-D-odd", TILING, "x", shape=(2, 3, 5, 7), cshape=(2, 1, 5, 7)),
    row("none-cos-rank", TILING, "cos", cshape=(1, 5, 64)),
    row("none-cos-axis-neither-1-nor-x's", TILING, "cos", cshape=(2, 2, 5, 64)),
    row("950-TND", TILING, "x", shape=(5, 3, 64), cshape=(5, 1, 64), soc="950"),
    row("950-D-1026", TILING, "x", shape=(1, 1, 1, 1026), cshape=(1, 1, 1, 1026), soc="950"),
    row("950-empty", TILING, "x", shape=(2, 3, 0, 64), cshape=(2, 1, 0, 64), soc="950"),
    row("soc-unknown", INVALID, "soc", soc="A1"),
]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(**kw)
    assert_aclnn(excinfo, cls, code, argument)
    # the rules shared with RotaryPositionEmbedding mode 3 keep that operator's wording: its
    # layout inference names the primary tensor dy and gives the shapes as the context
    message = str(excinfo.value)
    assert message.endswith("]") and ("[interleave_rope" in message or "mode=3" in message)


def test_out_dtype_rejected():
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.interleave_rope(np.zeros(X), np.zeros(C), np.zeros(C), out_dtype="int8")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-float16-B1SD", dict(soc="A2")),
        ("A3-bfloat16-B11D", dict(cshape=(2, 1, 1, 64), dtype=refspec.bfloat16, soc="A3")),
        ("A2-fixed-32-32-1", dict(shape=(32, 32, 1, 64), cshape=(32, 1, 1, 64), soc="A2")),
        ("A2-long-sequence", dict(shape=(1, 2, 512, 64), cshape=(1, 1, 512, 64), soc="A2")),
        ("950-float32-D-1024-cos-B-1", dict(shape=(1, 2, 3, 1024), cshape=(1, 1, 3, 1024), dtype=np.float32, soc="950")),
        ("950-cos-per-head", dict(cshape=(2, 3, 5, 64), soc="950")),
        ("none-float64-D-2", dict(shape=(2, 3, 5, 2), cshape=(1, 1, 5, 2), dtype=F64)),
        ("none-3-D", dict(shape=(5, 3, 8), cshape=(5, 1, 8))),
        ("none-ints-widened", dict(dtype=np.int32)),
    ]
]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    assert call(**kw).shape == kw.get("shape", X)


# --- tolerance terms ---------------------------------------------------------------------------

def test_terms_are_elementwise_with_the_sum_of_absolute_products(rng):
    x, c, s = inputs(rng, dtype=np.float32)
    t = interleave_rope_terms(x, c, s)["y"]
    assert t.comparison_class == ELEMENTWISE and t.reduced_terms is None
    q = deinterleave(x)
    want = np.abs(q * c) + np.abs(rotate_half(q) * s)
    np.testing.assert_allclose(t.sum_abs, want, rtol=1e-15, atol=0)
    assert np.all(t.sum_abs >= np.abs(oracle(x, c, s)) * (1 - 1e-15))


@pytest.mark.parametrize("dtype, out_dtype, given", [(np.float16, None, False), (refspec.bfloat16, None, False),
                                                     (np.float16, F64, True), (refspec.bfloat16, "fp32", True)])
def test_terms_sum_abs_only_for_32_and_64_bit_outputs(rng, dtype, out_dtype, given):
    x, c, s = inputs(rng, dtype=dtype)
    assert (interleave_rope_terms(x, c, s, soc="A2", out_dtype=out_dtype)["y"].sum_abs is not None) == given


# --- errata E26-E27 ----------------------------------------------------------------------------

def test_E26_rotate_half_takes_the_second_half_from_the_first():
    """The README defines RotateHalf(q)_i as -q_{i+D/2} for i < D/2 and q_{i+D/2} otherwise:
    for i >= D/2 that index is past the end of the head. Its prose (the second half takes the
    first half's values) and the rotate-half convention mean q_{i-D/2}."""
    D = 8
    q = np.arange(1.0, D + 1)
    literal = [(-q[i + D // 2] if i < D // 2 else None) for i in range(D)]
    assert all(i + D // 2 >= D for i in range(D // 2, D))     # no such element
    assert literal[: D // 2] == [-5.0, -6.0, -7.0, -8.0]
    x = np.stack((q[: D // 2], q[D // 2:]), axis=-1).reshape(1, 1, 1, D)   # de-interleaves to q
    y = refspec.interleave_rope(x, np.zeros((1, 1, 1, D)), np.ones((1, 1, 1, D)), out_dtype=F64)
    assert y.reshape(-1).tolist() == [-5.0, -6.0, -7.0, -8.0, 1.0, 2.0, 3.0, 4.0]


def test_E27_950_calls_rotary_position_embedding_mode_3(rng):
    """The README names A2/A3 only, with D = 64, float16/bfloat16, cos of x's B and N = 1; on
    950 the host code calls RotaryPositionEmbedding in mode 3 instead, whose 950 rules take any
    even D up to 1024, float32, and cos axes of 1 or x's size. refspec's 950 profile is that
    operator's."""
    x, c, s = (a[:1] for a in inputs(rng, D=128, dtype=np.float32, cos_s=1))
    y = refspec.interleave_rope(x, c, s, soc="950", out_dtype=F64)
    np.testing.assert_allclose(y, oracle(x, c, s), rtol=1e-15, atol=1e-15)
    for soc in ("A2", "A3"):
        with pytest.raises(refspec.AclnnError) as excinfo:
            refspec.interleave_rope(x, c, s, soc=soc)
        assert_aclnn(excinfo, ParamInvalidError, 161002, "x")
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.interleave_rope(x.astype(np.float16), c.astype(np.float16), s.astype(np.float16), soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "x")


# --- fuzz: nothing but AclnnError ----------------------------------------------------------------

JUNK = [None, "tensor", [[1.0, 2.0], [3.0]], np.zeros((2, 3), np.complex64), np.zeros((0,)), 3.0,
        np.zeros((1, 1, 1, 2), np.int8), np.array([object()], dtype=object)]


@st.composite
def interleave_args(draw):
    rank = draw(st.sampled_from([4, 4, 4, 3, 2, 5]))
    D = draw(st.sampled_from([0, 2, 4, 64, 3, 6]))
    lead = [draw(st.integers(0, 3)) for _ in range(rank - 1)]
    c = tuple(n if draw(st.booleans()) else 1 for n in lead) + (D,)
    dtype = draw(st.sampled_from([np.float16, refspec.bfloat16, np.float32, F64, np.int32, bool]))
    t = [np.ones(tuple(lead) + (D,), dtype), np.ones(c, dtype), np.ones(c, dtype)]
    t = [draw(st.sampled_from(JUNK)) if draw(st.integers(0, 9)) == 0 else a for a in t]
    soc = draw(st.sampled_from([None, None, "A2", "A3", "950", "ascend910_93", "A1", 3]))
    out_dtype = draw(st.sampled_from([None, None, F64, "bf16", "int8"]))
    return t, soc, out_dtype


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(interleave_args())
def test_only_aclnn_errors_are_raised(case):
    t, soc, out_dtype = case
    try:
        y = refspec.interleave_rope(*t, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    assert y.shape == np.shape(t[0])
