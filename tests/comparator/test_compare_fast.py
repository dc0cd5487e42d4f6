"""The fused step (JudgeOptions.fast, the default) gives exactly the report of the reference
step (fast=False) on varied data: actuals identical to the rounded golden, 1-ulp perturbations,
gross errors, NaN/Inf, small values and zeros, every dtype, comparison class, standard and
--rtol/--atol overrides, blocks split into several compute steps. Also the bit-pattern ulp
histogram against an independent count with math.frexp."""

from __future__ import annotations

import math
import zlib

import ml_dtypes
import numpy as np
import pytest

from refspec.comparator import resolve_rule
from refspec.comparator.actuals import ArrayActual
from refspec.comparator.judge import JudgeOptions, judge_output
from refspec.comparator.metrics import ULP_BIN_EXPONENTS, ulp_bin_counts
from refspec.comparator.memory_case import MemoryCase
from refspec.comparator.standards import STANDARD_NAMES
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
        with np.errstate(invalid="ignore"):
            i = np.arange(0, N, 97)
            a[i] = np.nextafter(a[i], np.array(np.inf, dtype=a.dtype))
    elif kind == "gross":
        a[::1013] = (g[::1013] * 1.5 + 0.25).astype(dtype)
    elif kind == "special":
        a[7] = np.nan               # matches
        a[11] = np.inf              # matches
        a[13] = 1.0                 # Inf mismatch
        a[21] = np.nan              # NaN mismatch
        a[99999] = np.inf           # Inf mismatch in another step
    return a


def _case(g, e, dtype, cls, K, S):
    terms = {"y": OutputTerms(cls, K, S)}
    return MemoryCase("c/1", "rotary_position_embedding",
                      {"mode": 0, "layout": "BNSD", "cos_pattern": "11SD",
                       "dtype": np.dtype(dtype).name}, {}, {"y": e.reshape(SHAPE)},
                      {"y": g.reshape(SHAPE)}, terms, {"y": "SD"})


def _both(case, a, dtype_name, cls, K, standard, sum_abs=None, bench=None, **over):
    rule = resolve_rule(standard, dtype_name, cls, K, **over)
    out = []
    for fast in (True, False):
        opts = JudgeOptions(standard=standard, read_elements=100_000, fast=fast, **over)
        out.append(judge_output(case, "y", ArrayActual("arr", a.reshape(SHAPE)), rule, opts,
                                "ctx", bench, sum_abs))
    return out


def _assert_same(fast, ref):
    assert fast.status == ref.status
    assert fast.reason == ref.reason
    assert fast.message == ref.message
    assert fast.ratio == ref.ratio
    # every field; repr prints each float exactly (shortest round-trip) and NaN as nan
    assert repr(fast.metrics) == repr(ref.metrics)
    assert fast.metrics.n == ref.metrics.n > 0


DTYPES = [(np.float32, "float32"), (np.float16, "float16"), (BF16, "bfloat16"),
          (np.float64, "float64")]
KINDS = ["identical", "ulp", "gross", "special", "small"]


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
    res = [judge_output(case, "y", ArrayActual("arr", a.reshape(SHAPE)), rule,
                        JudgeOptions(saturation=True, read_elements=70_000, fast=f), "ctx")
           for f in (True, False)]
    _assert_same(*res)


def _bin_independent(x: float) -> int:
    if x == 0:
        return 0
    mant, exp = math.frexp(x)
    k = exp - (mant == 0.5)                     # x in (2^(k-1), 2^k]
    k = min(max(k, ULP_BIN_EXPONENTS[0]), ULP_BIN_EXPONENTS[-1] + 1)
    return 1 + k - ULP_BIN_EXPONENTS[0]


def test_ulp_bin_counts_against_frexp():
    rng = np.random.default_rng(9)
    x = np.concatenate([[0.0, 5e-324, 2.0 ** -1022, 0.25, 0.5, 0.5000001, 1.0, 1.5, 2.0,
                         2.0 ** 20, 2.0 ** 20 + 1, 2.0 ** 21, 1e300],
                        np.abs(rng.standard_normal(5000)) * 10.0 ** rng.integers(-8, 9, 5000)])
    want = np.zeros(len(ULP_BIN_EXPONENTS) + 2, np.int64)
    for v in x.tolist():
        want[_bin_independent(v)] += 1
    assert ulp_bin_counts(x).tolist() == want.tolist()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bug", [None, "truncation", "lost_minus"])
def test_compare_fast_flag_same_report_on_a_spec_case(dtype, bug):
    """Through the public API, on a RoPE grad case computed by the spec (dx elementwise with the
    evaluation bound, dcos/dsin reductions with S), judged against a device-like kernel."""
    from refspec.comparator import compare
    from refspec.comparator.memory_case import spec_case
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
            assert (a.output, a.status, a.reason, a.message) == (b.output, b.status, b.reason,
                                                                b.message)
            assert repr(a.metrics) == repr(b.metrics)


@pytest.mark.parametrize("drop", [[0], [9], [0, 1], [3, 4, 5], [0, 9], [2, 7], list(range(10))])
def test_drop_few_equals_boolean_selection(drop):
    from refspec.comparator.metrics import _drop
    x = np.arange(10.0) * 1.5
    keep = np.ones(10, bool)
    keep[drop] = False
    assert _drop(x, keep, len(drop)).tolist() == x[keep].tolist()
