"""The compiled pass (CompareOptions.fast True; numba) gives the report of the NumPy pass
(fast=False) on varied data: actuals identical to the rounded
golden, 1-ulp perturbations, gross errors, NaN/Inf, signed zeros, subnormals, small values and
zeros, goldens beyond the dtype's range, saturation, every dtype, comparison class, standard
and --rtol/--atol overrides, several blocks, blocks judged in threads. Every verdict, count,
maximum, element, histogram bin and worst element is equal; the three float sums (RMSE, cosine,
mean relative error) are added in another order, so they agree to 1e-12 relative. Also the
compiled pass's bit-pattern ulp histogram against an independent count with math.frexp."""

from __future__ import annotations

import dataclasses
import math
import zlib
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from refspec.goldens.cases import CaseData
from refspec.comparator import resolve_rule
from refspec.comparator.sources.arrays import ArrayActual
from refspec.comparator.judging.golden_output import golden_output
from refspec.comparator.judging.judge import JudgedOutput, judge
from refspec.comparator.judging.options import CompareOptions
from refspec.comparator.judging.metrics import ULP_BIN_EXPONENTS
from refspec.comparator.sources.memory_case import MemoryCase
from refspec.comparator.judging.standards import STANDARD_NAMES
from refspec.spec.terms import OutputTerms

BF16 = np.dtype(ml_dtypes.bfloat16)
N = 4700 * 43                     # several compute steps of 2^16, the last one partial
SHAPE = (N // 43, 43)


def _golden(rng, kind):
    g = rng.standard_normal(N) * 3
    if kind == "small":
        g[::5] *= 1e-6
        g[::17] = 0.0
        g[3::29] = 2.0 ** -140
    if kind == "edge":
        g[::7] = 0.0
        g[1::7] = -0.0
        g[2::7] = 2.0 ** -1070                 # float64 subnormal
        g[3::7] = rng.standard_normal(g[3::7].size) * 2.0 ** -135   # float32 subnormal range
        g[4::7] = 65519.0                      # float16 rounds to max finite
        g[5::7] = 3.5e38                       # beyond float32/bfloat16 max, rounds to max
    if kind == "special":
        g[7] = np.nan
        g[11] = np.inf
        g[13] = -np.inf
        g[70000] = np.nan
        g[150000] = 1e300           # rounds to an infinity in every narrow dtype
    return g


def _actual(rng, g, e, dtype, kind):
    a = e.copy()
    if kind == "ulp":
        with np.errstate(invalid="ignore", over="ignore"):
            i = np.arange(0, N, 97)
            a[i] = np.nextafter(a[i], np.array(np.inf, dtype=a.dtype))
    elif kind == "gross":
        a[::1013] = (g[::1013] * 1.5 + 0.25).astype(dtype)
    elif kind == "edge":
        a[::7] = -a[::7]            # -0 where the golden is +0 (and the reverse)
        a[1::14] = 0.0
        a[2::7] = -a[2::7]
        with np.errstate(over="ignore"):
            a[3::21] = np.nextafter(a[3::21], np.array(np.inf, dtype=a.dtype))
    elif kind == "special":
        a[7] = np.nan               # matches
        a[11] = np.inf              # matches
        a[13] = 1.0                 # Inf mismatch
        a[21] = np.nan              # NaN mismatch
        a[99999] = np.inf           # Inf mismatch in another step
    return a


def _case(g, e, dtype, cls, K, S):
    terms = {"y": OutputTerms(cls, K, S)}
    return MemoryCase(CaseData("c/1", "rope", {"mode": "half", "layout": "BNSD", "cos": "11SD",
                                               "dtype": np.dtype(dtype).name}, 0, {},
                               {"y": e.reshape(SHAPE)}, {"y": g.reshape(SHAPE)}, terms,
                               {"y": "SD"}))


POOL = ThreadPoolExecutor(2)


def _judged(case, actual, rule, opts, bench=None, sum_abs=None):
    """The verdict of output y of ``case``."""
    return judge(JudgedOutput(case, golden_output(case, "y"), actual, rule, opts, bench, sum_abs),
                 "ctx")


def _both(case, a, dtype_name, cls, K, standard, sum_abs=None, bench=None, **over):
    rule = resolve_rule(standard, dtype_name, cls, K, **over)
    out = []
    for fast in (True, False):
        opts = CompareOptions(standard=standard, read_elements=100_000, fast=fast,
                              pool=POOL if fast else None, **over)
        out.append(_judged(case, ArrayActual("arr", a.reshape(SHAPE)), rule, opts, bench,
                           sum_abs))
    return out


SUMS = ("rmse", "cosine", "mean_rel")


def _assert_close(x, y):
    """Equal, floats within 1e-12 relative (the ratios of the ratio standard hold sums)."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys()
        for k in x:
            _assert_close(x[k], y[k])
    elif isinstance(x, float) and isinstance(y, float):
        assert abs(x - y) <= 1e-12 * max(abs(x), abs(y)), (x, y)
    else:
        assert x == y


def _assert_same(fast, ref):
    assert fast.status == ref.status
    assert fast.reason == ref.reason
    assert fast.message == ref.message
    _assert_close(fast.ratio, ref.ratio)
    assert fast.metrics.n == ref.metrics.n > 0
    f, r = dataclasses.asdict(fast.metrics), dataclasses.asdict(ref.metrics)
    for k in SUMS:
        x, y = f.pop(k), r.pop(k)
        assert (x is None) == (y is None), k
        if x is not None:
            assert abs(x - y) <= 1e-12 * max(abs(x), abs(y)), (k, x, y)
    # every other field; repr prints each float exactly (shortest round-trip) and NaN as nan
    assert repr(f) == repr(r)


DTYPES = [(np.float32, "float32"), (np.float16, "float16"), (BF16, "bfloat16"),
          (np.float64, "float64")]
KINDS = ["identical", "ulp", "gross", "special", "small", "edge"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype,dname", DTYPES, ids=[d for _, d in DTYPES])
@pytest.mark.parametrize("kind", KINDS)
def test_fast_equals_reference_every_standard(dtype, dname, kind):
    rng = np.random.default_rng(zlib.crc32(f"{dname}/{kind}".encode()))
    g = _golden(rng, kind)
    with np.errstate(over="ignore"):
        e = g.astype(np.float32).astype(dtype) if dtype is not np.float64 else g.copy()
    a = _actual(rng, g, e, dtype, kind)
    S = np.abs(g) * 2 + 0.5
    for cls, K in (("elementwise", None), ("row_reduction", 64), ("reduction", 5000)):
        case = _case(g, e, dtype, cls, K, None if cls == "elementwise" else S.reshape(SHAPE))
        for standard in STANDARD_NAMES:
            bench = None
            if standard == "ratio":
                bench = _actual(rng, g, e, dtype, "ulp").reshape(SHAPE)
            fast, ref = _both(case, a, dname, cls, K, standard, bench=bench)
            _assert_same(fast, ref)
        # the float32 evaluation bound of elementwise outputs (S derived from the inputs)
        if cls == "elementwise":
            _assert_same(*_both(case, a, dname, cls, K, "default", sum_abs=S.reshape(SHAPE)))
        for over in ({"rtol": 1e-3}, {"atol": 1e-4}, {"rtol": 0.0, "atol": 0.0}):
            _assert_same(*_both(case, a, dname, cls, K, "torch", **over))
            _assert_same(*_both(case, a, dname, cls, K, "default", **over))


def test_fast_equals_reference_copy_and_saturation():
    rng = np.random.default_rng(5)
    g = _golden(rng, "special")
    with np.errstate(over="ignore"):
        e = g.astype(np.float16)
    a = _actual(rng, g, e, np.float16, "special")
    a[150000] = np.float16(65504.0)             # max finite where the golden overflows
    case = _case(g, e, np.float16, "copy", None, None)
    _assert_same(*_both(case, a, "float16", "copy", None, "default"))
    case = _case(g, e, np.float16, "elementwise", None, None)
    rule = resolve_rule("default", "float16", "elementwise", None)
    res = [_judged(case, ArrayActual("arr", a.reshape(SHAPE)), rule,
                   CompareOptions(saturation=True, read_elements=70_000, fast=f))
           for f in (True, False)]
    _assert_same(*res)


def _bin_independent(x: float) -> int:
    if x == 0:
        return 0
    mant, exp = math.frexp(x)
    k = exp - (mant == 0.5)                     # x in (2^(k-1), 2^k]
    k = min(max(k, ULP_BIN_EXPONENTS[0]), ULP_BIN_EXPONENTS[-1] + 1)
    return 1 + k - ULP_BIN_EXPONENTS[0]


def test_compiled_ulp_histogram_against_frexp():
    """The compiled pass bins ulps from bit patterns; an independent count with math.frexp of the
    same ulp distances (a float64 output at g = 1, so the ulps are |a - 1| / 2^-52; binade
    edges, subnormal and huge distances included)."""
    ulps = np.array([0.0, 2.0 ** -40, 0.25, 0.5, 0.5000001, 1.0, 1.5, 2.0, 3.0, 4.0, 2.0 ** 20,
                     2.0 ** 20 + 1, 2.0 ** 21, 2.0 ** 40])
    rng = np.random.default_rng(9)
    ulps = np.concatenate([ulps, np.abs(rng.standard_normal(5000)) * 2.0 ** rng.integers(-8, 30, 5000)])
    g = np.ones(ulps.size)
    a = 1.0 + ulps * 2.0 ** -52
    got = (a - 1.0) / 2.0 ** -52                    # the distances the judge sees
    want = np.zeros(len(ULP_BIN_EXPONENTS) + 2, np.int64)
    for v in got.tolist():
        want[_bin_independent(v)] += 1
    terms = {"y": OutputTerms("elementwise", None, None)}
    case = MemoryCase(CaseData("c/1", "rope", {"dtype": "float64"}, 0, {}, {"y": g}, {"y": g},
                               terms, {"y": "D"}))
    rule = resolve_rule("torch", "float64", "elementwise", None)
    res = _judged(case, ArrayActual("arr", a), rule, CompareOptions(fast=True))
    assert res.metrics.ulp_hist == want.tolist()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bug", [None, "truncation", "lost_minus"])
def test_compare_fast_flag_same_report_on_a_spec_case(dtype, bug):
    """Through the public API, on a RoPE grad case computed by the spec (dx elementwise with the
    evaluation bound, dcos/dsin reductions with S), judged against a device-like kernel."""
    from refspec.comparator import compare
    from refspec.comparator.sources.memory_case import spec_case
    from implementations import rope_grad

    rng = np.random.default_rng(3)
    dt = BF16 if dtype == "bfloat16" else np.dtype(np.float32)
    dy = rng.standard_normal((2, 8, 300, 64)).astype(dt)
    cos = rng.standard_normal((1, 1, 300, 64)).astype(dt)
    sin = rng.standard_normal((1, 1, 300, 64)).astype(dt)
    x = rng.standard_normal((2, 8, 300, 64)).astype(dt)
    case = spec_case("rotary_position_embedding_grad", dy=dy, cos=cos, sin=sin, x=x, mode=0)
    actual = rope_grad(dy, cos, sin, x, mode=0, bug=bug)
    for standard in STANDARD_NAMES:
        r_fast, r_ref = (compare(case, actual, standard=standard, fast=f) for f in (True, False))
        assert len(r_fast.results) == len(r_ref.results) == 3
        for a, b in zip(r_fast.results, r_ref.results):
            assert a.output == b.output
            _assert_same(a, b)
