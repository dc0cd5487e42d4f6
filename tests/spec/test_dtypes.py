"""The dtype contract: float16/bfloat16/float32 in, the documented dtype out (mean/rstd float32),
each output correctly rounded (to nearest, ties to even) from the exact float64 result.

Correct rounding is checked against an independent reference written here with Python fractions:
the exact value is scaled to the format's quantum at its binade (or the subnormal quantum), the
integer significand is rounded half to even, and anything at or beyond 2^(emax+1) overflows to inf.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import refspec
from refspec import round_to
from spec_helpers import attrs_dict, nrc_backward_kwargs, nrc_forward_inputs

F64 = np.float64
BF16 = refspec.bfloat16
#: significand bits p (with the implicit one), minimum and maximum normal exponents
FORMATS = {np.dtype(np.float16): (11, -14, 15), BF16: (8, -126, 127), np.dtype(np.float32): (24, -126, 127)}
DTYPES = tuple(FORMATS)
IDS = ("float16", "bfloat16", "float32")


def exact_round(v: float, dtype) -> float:
    """The value of ``v`` correctly rounded (ties to even) to ``dtype``, as a Python float."""
    if math.isnan(v) or math.isinf(v) or v == 0:
        return v
    p, emin, emax = FORMATS[np.dtype(dtype)]
    q = Fraction(abs(v))
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - p + 1)
    m = q / quantum
    n = m.numerator // m.denominator
    rest = m - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    result = n * quantum
    if result >= Fraction(2) ** (emax + 1):
        return math.copysign(math.inf, v)
    return math.copysign(float(result), v)


def assert_correctly_rounded(rounded: np.ndarray, exact: np.ndarray, dtype):
    assert rounded.dtype == np.dtype(dtype)
    got = rounded.astype(F64).ravel()
    for g, e in zip(got, np.asarray(exact, F64).ravel()):
        want = exact_round(float(e), dtype)
        if math.isnan(want):
            assert math.isnan(g), (e, g)
        else:
            assert g == want and math.copysign(1, g) == math.copysign(1, want), (float(e).hex(), g, want)


def test_reference_rounding_itself():
    """The reference against hand-checked values (so the oracle is not taken on trust)."""
    assert exact_round(1 + 2 ** -8 + 2 ** -30, BF16) == 1 + 2 ** -7
    assert exact_round(1 + 2 ** -8, BF16) == 1.0
    assert exact_round(1 + 3 * 2 ** -8, BF16) == 1 + 2 ** -6
    assert exact_round(65519.0, np.float16) == 65504.0
    assert exact_round(65520.0, np.float16) == math.inf
    assert exact_round(3 * 2.0 ** -25, np.float16) == 2.0 ** -23
    assert exact_round(-(2.0 ** -25), np.float16) == 0.0 and math.copysign(1, exact_round(-(2.0 ** -25), np.float16)) < 0


# --- refspec.round_to ------------------------------------------------------------------------

def special_values(dtype):
    p, emin, emax = FORMATS[np.dtype(dtype)]
    ulp1 = 2.0 ** (1 - p)                             # spacing of the format in [1, 2)
    big = (2 - ulp1) * 2.0 ** emax                    # largest finite
    sub = 2.0 ** (emin - p + 1)                       # smallest subnormal
    vals = [1 + ulp1 / 2, 1 + 3 * ulp1 / 2, 1 + ulp1 / 2 + 2.0 ** -40, 1 + ulp1 / 2 - 2.0 ** -40,
            big, big + ulp1 / 4 * 2.0 ** emax, big + ulp1 / 2 * 2.0 ** emax,
            big + ulp1 / 2 * 2.0 ** emax - 2.0 ** (emax - 40), 2.0 ** (emax + 1), 1e300,
            sub, sub / 2, 3 * sub / 2, sub / 2 + 2.0 ** (emin - p - 30), 2.0 ** emin - sub / 2,
            2.0 ** emin - sub / 4, 1e-300, 0.0, -0.0, math.inf, -math.inf, math.nan]
    return vals + [-v for v in vals]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_round_to_specials(dtype):
    vals = np.array(special_values(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # overflow and NaN handled without warnings
        out = round_to(vals, dtype)
    assert_correctly_rounded(out, vals, dtype)


def test_bfloat16_double_rounding_trap():
    """Rounding float64 -> float32 -> bfloat16 rounds twice (older ml_dtypes releases converted
    float64 that way); round_to rounds once."""
    v = np.array([1 + 2.0 ** -8 + 2.0 ** -30, -(1 + 2.0 ** -8 + 2.0 ** -30)])
    twice = v.astype(np.float32).astype(ml_dtypes.bfloat16)
    assert twice.astype(F64).tolist() == [1.0, -1.0]                            # the trap
    assert round_to(v, BF16).astype(F64).tolist() == [1 + 2.0 ** -7, -(1 + 2.0 ** -7)]


def neighbours_midpoints(rng, dtype, count):
    """Random representable values of ``dtype``, the exact midpoints to their upper neighbours,
    and points a float64 ulp either side of each midpoint (all exact in float64)."""
    bits = {2: np.uint16, 4: np.uint32}[np.dtype(dtype).itemsize]
    raw = rng.integers(0, np.iinfo(bits).max, count, dtype=bits)
    with np.errstate(invalid="ignore"):                    # NaN bit patterns among them
        a = raw.view(dtype).astype(F64)
        b = (raw + bits(1)).view(dtype).astype(F64)        # the neighbour away from zero
    ok = np.isfinite(a) & np.isfinite(b)
    mid = (a[ok] + b[ok]) / 2
    return np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), a[ok]])


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_round_to_random_midpoints_and_magnitudes(rng, dtype):
    vals = np.concatenate([neighbours_midpoints(rng, dtype, 400),
                           rng.choice([-1, 1], 400) * 10.0 ** rng.uniform(-48, 40, 400)])
    assert_correctly_rounded(round_to(vals, dtype), vals, dtype)


def test_round_to_bfloat16_of_random_float64_bit_patterns(rng):
    """Any float64 (random bit patterns: NaNs, infinities, subnormals, every binade) rounds to
    bfloat16 as the reference does, through the rounding to odd float32 at every magnitude."""
    vals = rng.integers(0, 2 ** 64, 3000, dtype=np.uint64, endpoint=False).view(F64)
    near = rng.standard_normal(1000) * 2.0 ** rng.integers(-140, 128, 1000)
    with np.errstate(over="ignore", invalid="ignore"):
        assert_correctly_rounded(round_to(np.concatenate([vals, near]), BF16),
                                 np.concatenate([vals, near]), BF16)


# --- the operators -------------------------------------------------------------------------

def rope_inputs(rng, dtype, shape=(2, 3, 4, 8), cshape=(1, 1, 4, 8)):
    return [rng.uniform(-2, 2, s).astype(dtype) for s in (shape, shape, cshape, cshape)]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("mode", (0, 1, 2, 3))
def test_rope_outputs_dtype_and_rounding(rng, dtype, mode):
    x, dy, cos, sin = rope_inputs(rng, dtype)
    y = refspec.rotary_position_embedding(x, cos, sin, mode)
    assert_correctly_rounded(y, refspec.rotary_position_embedding(x, cos, sin, mode, out_dtype=F64), dtype)
    exact = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=F64)
    for got, want in zip(refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode), exact):
        assert got.shape == want.shape
        assert_correctly_rounded(got, want, dtype)


@pytest.mark.parametrize("out_dtype, expected", (("bf16", BF16), ("fp16", np.float16),
                                                 (np.float32, np.float32), ("float64", F64)))
def test_rope_out_dtype_override(rng, out_dtype, expected):
    x, dy, cos, sin = rope_inputs(rng, BF16)
    exact = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 1, out_dtype=F64)
    got = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 1, out_dtype=out_dtype)
    for g, e in zip(got, exact):
        if np.dtype(expected) == F64:
            np.testing.assert_array_equal(g, e)
        else:
            assert_correctly_rounded(g, e, expected)


def test_bfloat16_trap_through_dcos():
    """dcos = sum over S of dy*x with terms 1, 2^-8, 2^-30: exact 1 + 2^-8 + 2^-30 must become
    1 + 2^-7 in bfloat16 (a float32 accumulator rounded naively gives 1)."""
    dy = np.zeros((1, 1, 3, 2), BF16)
    x = np.zeros((1, 1, 3, 2), BF16)
    dy[..., 0] = np.array([1, 2.0 ** -8, 2.0 ** -15]).reshape(1, 1, 3)
    x[..., 0] = np.array([1, 1, 2.0 ** -15]).reshape(1, 1, 3)
    cos = sin = np.ones((1, 1, 1, 2), BF16)
    exact = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 0, out_dtype=F64)[1]
    assert exact[0, 0, 0, 0] == 1 + 2.0 ** -8 + 2.0 ** -30
    dcos = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 0)[1]
    assert dcos.dtype == BF16 and float(dcos[0, 0, 0, 0]) == 1 + 2.0 ** -7


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_rope_overflow_to_inf_and_nan(dtype):
    big = {np.dtype(np.float16): 60000.0, BF16: 3e38, np.dtype(np.float32): 3e38}[np.dtype(dtype)]
    x = np.array([[big, -big], [np.nan, 1.0]], dtype)
    cos = np.array([[2.0, 2.0]], dtype)
    sin = np.array([[0.0, 0.0]], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = refspec.rotary_position_embedding(x, cos, sin, 0)
    assert y.dtype == np.dtype(dtype)
    assert y[0].astype(F64).tolist() == [math.inf, -math.inf]
    assert np.isnan(y[1].astype(F64)).all()       # NaN*cos and NaN*sin spread through the row


def test_math_only_widens_integers_to_float64():
    x = np.arange(8).reshape(1, 1, 1, 8)
    y = refspec.rotary_position_embedding(x, np.ones((1, 1, 1, 8), np.int16), np.zeros((1, 1, 1, 8), bool), 0)
    assert y.dtype == F64 and y.ravel().tolist() == list(range(8))


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_norm_rope_concat_dtypes_and_rounding(rng, dtype):
    attrs = attrs_dict(2, 1, 2, 1)
    inputs = nrc_forward_inputs(rng, d=8, rope_type=2, dtype=dtype)
    fwd = refspec.norm_rope_concat(**inputs, **attrs, is_training=True)
    exact = refspec.norm_rope_concat(**inputs, **attrs, is_training=True, out_dtype=F64)
    for name in fwd._fields:
        got, want = getattr(fwd, name), getattr(exact, name)
        assert got is not None, name
        stat = "mean" in name or "rstd" in name
        assert_correctly_rounded(got, want, np.float32 if stat else dtype)
    grads = {f"grad_{n}_output": rng.uniform(-2, 2, getattr(fwd, f"{n}_output").shape).astype(dtype)
             for n in ("query", "key", "value")}
    kw = nrc_backward_kwargs(inputs, fwd, grads, attrs)
    bwd = refspec.norm_rope_concat_backward(**kw, soc="A2")
    bwd_exact = refspec.norm_rope_concat_backward(**kw, out_dtype=F64)
    for name in bwd._fields:
        got, want = getattr(bwd, name), getattr(bwd_exact, name)
        assert (got is None) == (want is None), name
        if got is not None:
            assert_correctly_rounded(got, want, dtype)
