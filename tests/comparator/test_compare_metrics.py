"""Metrics and judging rules against independent computations: streamed blocks give the same
numbers as one pass, NaN/Inf matching, saturation, small values, copies, reductions' hard bound,
the rounding gate (errata E12), standards and overrides."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from refspec.goldens.cases import CaseData
from refspec.comparator import compare, resolve_rule
from refspec.comparator.judging.golden_output import golden_output
from refspec.comparator.judging.judge import JudgedOutput, judge
from refspec.comparator.judging.options import CompareOptions
from refspec.comparator.sources.memory_case import MemoryCase
from refspec.spec.terms import OutputTerms

BF16 = np.dtype(ml_dtypes.bfloat16)


def one_case(exact, dtype, cls="elementwise", K=None, S=None, axes="BNSD", expected=None):
    exact = np.asarray(exact, np.float64)
    if expected is None:
        with np.errstate(over="ignore"):
            expected = exact.astype(np.float32).astype(dtype) if dtype != np.float64 else exact
    terms = {"y": OutputTerms(cls, K, S)}
    return MemoryCase(CaseData("c/1", "rope", {"mode": "half", "layout": "BNSD", "cos": "11SD",
                                               "dtype": np.dtype(dtype).name}, 0, {},
                               {"y": expected}, {"y": exact}, terms, {"y": axes}))


def run(case, actual, **kw):
    return compare(case, {"y": actual}, **kw).results[0]


def test_metrics_equal_independent_float64_computation(rng):
    g = rng.standard_normal((3, 4, 50, 16)) * 3
    a = (g + rng.standard_normal(g.shape) * 1e-3).astype(np.float32)
    r = run(one_case(g, np.float32), a)
    m = r.metrics
    d = a.astype(np.float64) - g
    assert m.n == g.size and m.n_numeric == g.size
    assert m.rmse == pytest.approx(math.sqrt(np.mean(d * d)), rel=1e-12)
    cos = np.dot(a.ravel().astype(np.float64), g.ravel()) / (np.linalg.norm(a.astype(np.float64)) * np.linalg.norm(g))
    assert m.cosine == pytest.approx(cos, rel=1e-12)
    i = int(np.argmax(np.abs(d)))
    assert m.max_abs.flat == i and m.max_abs.abs_err == np.abs(d).ravel()[i]
    big = np.abs(g) >= 2.0 ** -14
    rel = (np.abs(d) / np.abs(g))[big]
    assert m.max_rel == pytest.approx(rel.max(), rel=1e-12)
    assert m.mean_rel == pytest.approx(rel.mean(), rel=1e-9)
    assert m.n_small == int((~big).sum())
    spacing = np.spacing(np.abs(g).astype(np.float32)).astype(np.float64)  # float32 ulp of |g|
    ulps = np.abs(d) / np.where(np.abs(g) < 2.0 ** -126, 2.0 ** -149, spacing)
    assert sum(m.ulp_hist) == g.size
    assert m.ulp_hist[0] == int((ulps == 0).sum())
    # worst elements: the 10 largest errors (this rule's tolerance grows with |g|, so rank by
    # error / (atol + rtol*|g|))
    bad = np.abs(d) / (2.0 ** -13 + 2.0 ** -13 * np.abs(g))
    top = set(np.argsort(bad.ravel())[-10:].tolist())
    assert {e.flat for e in m.worst} == top


def test_streaming_in_small_blocks_gives_identical_metrics(rng):
    g = rng.standard_normal((5, 3, 40, 8))
    a = (g * (1 + rng.standard_normal(g.shape) * 1e-2)).astype(np.float16)
    case = one_case(g, np.float16)
    big = compare(case, {"y": a}).results[0].metrics
    rule = resolve_rule("default", "float16", "elementwise", None)
    small = judge(JudgedOutput(case, golden_output(case, "y"), _array_actual(a), rule,
                               CompareOptions(read_elements=7)), "ctx").metrics
    for field in ("n", "failures", "rmse", "cosine", "max_rel", "mean_rel", "n_small", "ulp_hist"):
        x, y = getattr(big, field), getattr(small, field)
        assert x == pytest.approx(y, rel=1e-12), field
    assert big.max_abs.flat == small.max_abs.flat
    assert [e.flat for e in big.worst] == [e.flat for e in small.worst]


def _array_actual(a):
    from refspec.comparator.sources.arrays import ArrayActual
    return ArrayActual("arr", a)


def test_copy_differing_in_one_element_fails_and_names_it(rng):
    g = rng.standard_normal((2, 3, 4, 8)).astype(np.float16).astype(np.float64)
    a = g.astype(np.float16)
    a[1, 2, 3, 4] = np.nextafter(a[1, 2, 3, 4], np.float16(np.inf))
    r = run(one_case(g, np.float16, "copy", axes="BSND"), a)
    assert r.status == "fail" and r.metrics.failures == 1
    assert r.message.startswith("y[b=1,s=2,n=3,d=4] = ")
    assert "(1.0 ulp)" in r.message
    b = g.astype(np.float16)
    b[0, 0, 0, 0] = -b[0, 0, 0, 0] if b[0, 0, 0, 0] == 0 else b[0, 0, 0, 0]
    assert run(one_case(g, np.float16, "copy"), g.astype(np.float16)).passed


def test_copy_sign_of_zero_matters():
    g = np.zeros((1, 1, 1, 4))
    a = np.zeros((1, 1, 1, 4), np.float32)
    a[0, 0, 0, 2] = -0.0
    r = run(one_case(g, np.float32, "copy"), a)
    assert not r.passed and r.metrics.worst[0].flat == 2


def test_nan_inf_positional_matching_and_saturation():
    g = np.array([np.nan, np.inf, -np.inf, 1.0, 70000.0, 2.0])[None, None, None]
    ok = np.array([-np.nan, np.inf, -np.inf, 1.0, np.inf, 2.0], np.float16)[None, None, None]
    r = run(one_case(g, np.float16), ok)
    assert r.passed and r.metrics.n_special_matched == 4 and r.metrics.n_numeric == 2
    wrong = ok.copy()
    wrong[..., 1] = -np.inf                      # +Inf only matches +Inf
    wrong[..., 3] = np.nan                       # NaN where a number is due
    r = run(one_case(g, np.float16), wrong)
    assert not r.passed and r.metrics.inf_mismatches == 1 and r.metrics.nan_mismatches == 1
    sat = ok.copy()
    sat[..., 1] = 65504.0
    sat[..., 4] = 65504.0                        # saturated device: max-finite for +Inf
    assert not run(one_case(g, np.float16), sat).passed
    assert run(one_case(g, np.float16), sat, saturation=True).passed
    neg = sat.copy()
    neg[..., 4] = -65504.0
    assert not run(one_case(g, np.float16), neg, saturation=True).passed


def test_rounding_gate_accepts_either_neighbour_of_a_tie_only():
    """E12: half away from zero and half to even differ at ties; both pass. Elsewhere only the
    nearest neighbour passes (a 1-ulp error fails for 16-bit elementwise outputs)."""
    lo = np.float64(ml_dtypes.bfloat16(1.0))
    ulp = 2.0 ** -7
    tie = lo + ulp / 2                            # exactly between 1 and 1 + 2^-7
    g = np.array([tie, 1.0 + 0.3 * ulp])[None, None, None]
    even = np.array([1.0, 1.0], BF16)[None, None, None]
    away = np.array([1.0 + ulp, 1.0], BF16)[None, None, None]
    assert run(one_case(g, BF16), even).passed
    assert run(one_case(g, BF16), away).passed
    far = np.array([1.0, 1.0 + ulp], BF16)[None, None, None]   # 0.7 ulp off: the far neighbour
    r = run(one_case(g, BF16), far)
    assert not r.passed and r.metrics.worst[0].flat == 1
    # the Ascend mixed numbers alone accept it: the gate is what catches truncation
    assert run(one_case(g, BF16), far, standard="ascend-mixed").passed


def test_reduction_data_dependent_atol_and_hard_bound():
    g = np.ones((1, 1, 1, 4))
    S = np.full((1, 1, 1, 4), 100.0)
    # K = 1024: atol_i = max(2^-13, 8*sqrt(K)*2^-24*S) = 1.53e-3 admits an error of 1e-3 ...
    err = np.array([0, 1e-3, -1e-3, 0])
    a = (g + err).astype(np.float32)
    assert run(one_case(g, np.float32, "reduction", K=1024, S=S), a).passed
    # ... which the dtype's atol alone (2^-13 + 2^-13*|g|) rejects
    assert not run(one_case(g, np.float32, "reduction", K=1024), a).passed
    # K = 4: the hard bound gamma(K+3)*S + ulp/2 = 4.2e-5 rejects 1e-4, the mixed rule would not
    a = (g + np.array([0, 1e-4, 0, 0])).astype(np.float32)
    r = run(one_case(g, np.float32, "reduction", K=4, S=S), a)
    assert not r.passed and r.metrics.failures == 1 and r.metrics.worst[0].flat == 1
    assert run(one_case(g, np.float32, "reduction", K=4), a).passed


def test_overrides_replace_the_numbers_and_show_in_the_report(rng):
    g = rng.standard_normal((1, 1, 8, 8))
    a = (g * 1.01).astype(np.float32)
    case = one_case(g, np.float32)
    assert not compare(case, {"y": a}).passed
    rep = compare(case, {"y": a}, rtol=0.02)
    assert rep.passed and rep.overrides == {"rtol": 0.02}
    assert "override rtol=0.02" in rep.summary_line()
    assert "0.02" in rep.results[0].rule


@pytest.mark.parametrize("standard,ok", [("ascend-mixed", True), ("torch", False),
                                         ("vendor-threshold", False), ("default", False)])
def test_standards_differ_as_published(standard, ok):
    """0.5% of float32 elements off by 1e-3: within the 99% rule (and under its cap), outside
    every-element rules."""
    g = np.linspace(0.5, 1.0, 1000)[None, None, None]
    a = g.astype(np.float32)
    a[..., ::200] += np.float32(1e-3)
    assert compare(one_case(g, np.float32), {"y": a}, standard=standard).passed is ok


def test_ratio_standard_uses_the_float32_benchmark():
    from case_grids import rope_cases
    import implementations as impl
    from implementations import attrs_of
    cases = rope_cases(grad=True)[:24]
    good = {c.case_id: impl.run(c.op, attrs_of(c), c.inputs) for c in cases}
    rep = compare(cases, good, standard="ratio")
    assert rep.passed, str(rep)
    assert all(r.ratio["level"] == "L0" for r in rep.results)
    bad = {c.case_id: impl.run(c.op, attrs_of(c), c.inputs, "lost_minus") for c in cases}
    assert not compare(cases, bad, standard="ratio").passed


def test_rule_table_has_sources():
    from refspec.comparator.judging.standards import STANDARDS, standard_table
    assert all(s.sources for s in STANDARDS.values())
    assert all(row["source"] for row in standard_table())
    assert resolve_rule("default", "bfloat16", "copy", None).bitwise
    assert resolve_rule("ratio", "float32", "elementwise", None, op="norm_rope_concat_backward").ratio_level == "L2"
