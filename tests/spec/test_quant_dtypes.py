"""The 8-bit dtypes of quantised caches (refspec.spec.quant_dtypes).

HiFloat8 has no library here, so its table is checked against a brute-force decoding of all 256
codes written in this file from the format's definition (bit strings read field by field), and
every rounding (HiFloat8, float8_e4m3fn, float8_e5m2, int8) against a brute-force search for the
nearest value of the format's own table with the stated tie rule and saturation.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import refspec
from refspec.spec import quant_dtypes as q
from refspec.spec.dtypes import dtype_name, round_to, to_float64

#: dot field -> exponent width, written out as the format's definition gives it
DOT = {"11": 4, "10": 3, "01": 2, "001": 1, "0001": 0}


def brute_hif8(code: int) -> float:
    """One code's value from its bit string: sign, dot (prefix code), exponent (sign-magnitude,
    implicit leading magnitude bit), mantissa; denormal 0000 mmm = 2^(m-23)."""
    s = format(code, "08b")
    sign, rest = (-1.0 if s[0] == "1" else 1.0), s[1:]
    if code == 0x80:
        return float("nan")
    for dot, width in DOT.items():
        if rest.startswith(dot):
            field, mant = rest[len(dot):len(dot) + width], rest[len(dot) + width:]
            e = 0
            if width:
                e = int("1" + field[1:], 2) * (-1 if field[0] == "1" else 1)
            if e == 15 and mant == "1":
                return sign * float("inf")
            return sign * (1 + int(mant, 2) / 2 ** len(mant)) * 2.0 ** e
    m = int(rest[4:], 2)
    return 0.0 if m == 0 else sign * 2.0 ** (m - 23)


BRUTE = np.array([brute_hif8(c) for c in range(256)])


def nearest(x, table, away: bool, top: float):
    """Brute force: the value of ``table`` nearest to x (ties: larger magnitude if ``away``,
    else even last code bit), after saturating x's rounding at +-top."""
    finite = table[np.isfinite(table)]
    out = np.empty_like(x)
    for i, v in enumerate(x):
        if abs(v) >= top:
            out[i] = np.copysign(top, v)
            continue
        d = np.abs(finite - v)
        best = finite[d == d.min()]
        if len(best) > 1:
            if away:
                pick = best[np.argmax(np.abs(best))]
            else:
                codes = [int(np.flatnonzero(table == b)[0]) for b in best]
                pick = best[[c % 2 == 0 for c in codes].index(True)]
        else:
            pick = best[0]
        out[i] = np.clip(pick, -top, top)
    return out


def test_hifloat8_table_is_the_bit_field_definition():
    t = q.hifloat8_values()
    both_nan = np.isnan(t) & np.isnan(BRUTE)
    assert np.array_equal(t[~both_nan], BRUTE[~both_nan]) and both_nan.sum() == 1
    finite = BRUTE[np.isfinite(BRUTE)]
    assert len(finite) == 253 and finite.max() == 2.0 ** 15 and finite[finite > 0].min() == 2.0 ** -22
    assert len(set(finite[finite > 0])) == 126            # every positive code a distinct value
    assert BRUTE[0x00] == 0 and np.isnan(BRUTE[0x80]) and BRUTE[0x6F] == np.inf


def test_every_finite_hifloat8_code_round_trips():
    codes = np.arange(256, dtype=np.uint8)
    fin = np.isfinite(BRUTE)
    back = round_to(BRUTE[fin], q.hifloat8).view(np.uint8)
    assert np.array_equal(back, codes[fin])
    assert np.array_equal(to_float64(codes.view(q.hifloat8))[fin], BRUTE[fin])


def _samples(rng, table):
    """Random values over the table's range, every value, and every midpoint of neighbours."""
    finite = np.unique(table[np.isfinite(table)])
    mids = (finite[1:] + finite[:-1]) / 2
    top = finite.max()
    rnd = rng.uniform(-1, 1, 3000) * top * 1.3
    small = rng.standard_normal(3000) * 2.0 ** rng.integers(-26, 4, 3000)
    return np.concatenate([finite, mids, rnd, small, [top * 1.2, -top * 1.2, 1e300]])


def test_hifloat8_rounds_to_nearest_ties_away_and_saturates():
    x = _samples(np.random.default_rng(1), BRUTE)
    got = q.decode(round_to(x, q.hifloat8))
    assert np.array_equal(got, nearest(x, BRUTE, away=True, top=2.0 ** 15))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2], ids=str)
def test_float8_rounds_to_nearest_even_and_saturates(dtype):
    table = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
    x = _samples(np.random.default_rng(2), table)
    got = round_to(x, dtype)
    assert got.dtype == np.dtype(dtype)
    top = float(ml_dtypes.finfo(dtype).max)
    assert np.array_equal(got.astype(np.float64), nearest(x, table, away=False, top=top))


def test_int8_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, 300.0, -128.5, -1e9, 3.49999])
    assert round_to(x, np.int8).tolist() == [0, 2, 2, 0, -2, 126, 127, 127, -128, -128, 3]


def test_negative_values_rounding_to_zero():
    """float8 keep the sign of a zero; HiFloat8 has none (0x80 is NaN), int8 neither."""
    x = np.array([-1e-30])
    assert round_to(x, ml_dtypes.float8_e4m3fn).view(np.uint8)[0] == 0x80
    assert round_to(x, q.hifloat8).view(np.uint8)[0] == 0x00
    assert round_to(x, np.int8)[0] == 0


def test_names_and_the_public_dtype():
    assert [dtype_name(d) for d in q.QUANT_DTYPES] == ["int8", "float8_e4m3fn", "float8_e5m2",
                                                       "hifloat8"]
    assert refspec.hifloat8 is q.hifloat8
    assert not q.is_quant_dtype(np.float16) and not q.is_quant_dtype("nope")
