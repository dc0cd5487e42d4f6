"""Input distributions: determinism, exact representability and each distribution's promise."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from refspec.spec.dtypes import bfloat16, round_to
from refspec.ops.sampling import (DISTRIBUTIONS, NRC_VENDOR, draw, draw_tables, position_code, position_decode,
                            position_period, rotary_angles)

DTYPES = [np.dtype(np.float16), bfloat16, np.dtype(np.float32)]


def f64(a):
    return np.asarray(a).astype(np.float64)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values_are_exact_in_their_dtype_and_deterministic(dist, dtype):
    for role in ("data", "grad", "weight", "bias"):
        a = draw(dist, role, (3, 5, 8), dtype, 42, "dy", large=100.0)
        assert a.dtype == dtype and a.shape == (3, 5, 8)
        assert np.array_equal(round_to(f64(a), dtype).view(np.uint8), a.view(np.uint8))
        again = draw(dist, role, (3, 5, 8), dtype, 42, "dy", large=100.0)
        assert np.array_equal(a.view(np.uint8), again.view(np.uint8))
    positions = np.arange(5.0)[:, None]
    c, s = draw_tables(dist, (5, 8), dtype, 42, positions=positions)
    for t in (c, s):
        assert t.dtype == dtype and np.array_equal(round_to(f64(t), dtype).view(np.uint8), t.view(np.uint8))


@pytest.mark.parametrize("dist", ["random", "rotary", "vendor", "special"])
def test_streams_depend_on_seed_and_tensor_name(dist):
    a = draw(dist, "grad", (64,), np.float32, 1, "dy")
    assert not np.array_equal(a, draw(dist, "grad", (64,), np.float32, 2, "dy"))
    assert not np.array_equal(a, draw(dist, "grad", (64,), np.float32, 1, "x"))


def test_random_tables_have_distinct_halves_and_pair_members():
    c, s = draw_tables("random", (64, 32), np.float32, 3)
    for t in (c, s):
        assert np.mean(t[:, :16] == t[:, 16:]) < 0.01          # halves differ (half mode)
        assert np.mean(t[:, 0::2] == t[:, 1::2]) < 0.01        # pair members differ (interleave)
        assert np.all(np.abs(f64(t)) <= 1)
    assert np.allclose(f64(c) ** 2 + f64(s) ** 2, 1, atol=1e-6)  # one angle per element
    assert abs(np.corrcoef(f64(c[:, :16]).ravel(), f64(c[:, 16:]).ravel())[0, 1]) < 0.1


def test_random_values_are_independent_gaussians():
    a = f64(draw("random", "grad", (100000,), np.float32, 5, "dy"))
    assert abs(a.mean()) < 0.02 and abs(a.std() - 1) < 0.02
    assert np.unique(a).size > 99000


@pytest.mark.parametrize("pairing", ["half", "interleave", "quarter"])
def test_rotary_tables_follow_the_frequency_formula_and_pairing(pairing):
    D, S = 16, 40
    pos = np.arange(S, dtype=np.float64)[:, None]
    c, s = draw_tables("rotary", (S, D), np.float32, 0, positions=pos, pairing=pairing)
    if pairing == "half":
        freq = 10000.0 ** (-2.0 * np.arange(D // 2) / D)
        expect = pos * np.concatenate([freq, freq])
        assert np.array_equal(c[:, :D // 2], c[:, D // 2:])
    elif pairing == "interleave":
        freq = 10000.0 ** (-2.0 * np.arange(D // 2) / D)
        expect = pos * np.repeat(freq, 2)
        assert np.array_equal(c[:, 0::2], c[:, 1::2])
    else:
        freq = 10000.0 ** (-2.0 * np.arange(D // 4) / (D // 2))
        expect = pos * np.tile(freq, 4)
        q = D // 4
        assert np.array_equal(c[:, :q], c[:, q:2 * q]) and np.array_equal(c[:, 2 * q:3 * q], c[:, 3 * q:])
    assert np.array_equal(c, np.cos(expect).astype(np.float32))
    assert np.array_equal(s, np.sin(expect).astype(np.float32))
    assert np.array_equal(c[0], np.ones(D, np.float32))       # position 0: no rotation


def test_vendor_element_table_has_a_distinct_frequency_per_element():
    pos = np.arange(6.0)[:, None]
    angles = rotary_angles(pos, 8, "element")
    assert np.array_equal(angles, pos / 10000.0 ** (np.arange(8) / 8))
    c, _ = draw_tables("vendor", (6, 8), np.float32, 0, positions=pos, vendor=NRC_VENDOR)
    assert np.array_equal(c, np.cos(angles).astype(np.float32))


def test_vendor_ranges():
    x = f64(draw("vendor", "data", (200000,), np.float32, 1, "x"))
    assert -2 <= x.min() < -1.99 and 1.99 < x.max() <= 2
    c, s = (f64(t) for t in draw_tables("vendor", (200000, 2), np.float32, 1))
    assert -3 <= c.min() < -2.99 and 3.99 < c.max() <= 4
    assert -4 <= s.min() < -3.99 and 4.99 < s.max() <= 5
    q = f64(draw("vendor", "data", (200000,), np.float32, 1, "query", vendor=NRC_VENDOR))
    assert abs(q.mean() + 5) < 0.1 and abs(q.std() - 10) < 0.1


@pytest.mark.parametrize("dtype", DTYPES + [np.dtype(np.float64)], ids=str)
def test_position_codes_decode_to_their_index(dtype):
    period = position_period(dtype)
    n = min(period + 37, 3 * 4096 + 5)
    shape = (n,)
    v = position_code(shape, dtype, "dy")
    idx = position_decode(v, dtype, "dy")
    assert np.array_equal(idx, np.arange(n) % period)
    assert np.all(np.abs(f64(v)) <= 4) and np.all(v != 0)
    # distinct tensors carry distinct codes at the same index; a swapped element points home
    other = position_code(shape, dtype, "x")
    assert np.mean(f64(other) == f64(v)) < 0.01
    swapped = v.copy()
    swapped[[3, 10]] = swapped[[10, 3]]
    assert list(position_decode(swapped, dtype, "dy")[[3, 10]]) == [10, 3]
    nd = position_code((2, 3, 4), dtype, "dy")
    assert np.array_equal(position_decode(nd, dtype, "dy"), np.arange(24).reshape(2, 3, 4) % period)


def test_position_periods():
    assert position_period(bfloat16) == 512
    assert position_period(np.float16) == 4096
    assert position_period(np.float32) == 2 ** 25


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_has_zeros_subnormals_and_large_values(dtype):
    info = ml_dtypes.finfo(dtype)
    large = float(info.max) / 4
    v = f64(draw("special", "grad", (4000,), dtype, 9, "dy", large=large))
    tiny = float(info.smallest_normal)
    assert np.sum(v == 0) > 500 and np.any(np.signbit(v[v == 0]))     # signed zeros
    sub = (v != 0) & (np.abs(v) < tiny)
    assert sub.sum() > 500                                              # subnormals
    assert np.sum(np.abs(v) >= large / 2) > 500                         # large magnitudes
    assert np.all(np.isfinite(v)) and np.abs(v).max() <= large * (1 + 2 ** -7)
    small = f64(draw("special", "data", (4000,), dtype, 9, "x", large=0.01))
    assert np.abs(small).max() <= 0.01 * (1 + 2 ** -7)                  # the bound is respected
    c, s = (f64(t) for t in draw_tables("special", (100, 40), dtype, 9))
    for t in (c, s):
        assert np.any(t == 0) and np.any(np.abs(t) == 1) and np.any((t != 0) & (np.abs(t) < tiny))
        assert np.all(np.abs(t) <= 1)


def test_unknown_distribution():
    with pytest.raises(ValueError, match="unknown distribution 'uniform'"):
        draw("uniform", "data", (2,), np.float32, 0, "x")


@pytest.mark.parametrize("forward", [True, False], ids=["nrc", "nrc_grad"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_special_normalised_streams_stay_within_float32_layer_norm(forward, dtype):
    """A normalised stream's special values are as large as the kernel's float32 LayerNorm
    allows: the sum of D squared deviations stays finite in float32 (evaluated with the spec's
    own LayerNorm on float32 values), and the large category is near that limit, or near a
    quarter of the dtype's maximum where that is smaller. A stream that is not normalised keeps
    a quarter of the dtype's maximum."""
    from refspec import ops
    from refspec.spec.enums import NormType
    from refspec.spec.nrc import layer_norm
    record = ops.get("nrc" if forward else "nrc_grad")
    D = 64
    p = {"op": record.id, "soc": "A2", "norm_type": 1, "norm_added_type": 0, "rope_type": "none",
         "concat_order": 0, "dtype": dtype, "dist": "special", "fault": "none", "B": 2, "N": 3,
         "Sq": 4, "Sk": 4, "Seq": 2, "Sek": 2, "D": D, "Sr": 0,
         **({"training": True, "eps": 1e-5} if forward else {})}
    drawn = record.generation.sample(p, 5)
    top = float(ml_dtypes.finfo(dtype).max)
    limit = min(top / 4, float(np.sqrt(np.finfo(np.float32).max / D)) / 4)
    for name in ("query", "key"):
        x = f64(drawn[name])
        assert limit / 2 <= np.abs(x).max() <= limit * (1 + 2 ** -7), name
        with np.errstate(over="raise"):
            xhat, mean, rstd = layer_norm(x.astype(np.float32), NormType.LAYER_NORM)
        assert np.all(np.isfinite(xhat)) and np.all(rstd > 0) and np.all(np.isfinite(mean))
    assert np.abs(f64(drawn["encoder_query"])).max() >= top / 8        # norm_added_type 0
