"""One pass over an output answers every question its judge asks (docs/compare.md, "Judging" and
"Too strict"): the verdict, whether the standard is stricter than the dtype (the counts of the
elements that equal the rounded golden, and the cap checked on the others) and the HTML report's
error map. Each is held here to the question asked on its own, by a second pass of ``measure``
under the rule that exempts the rounded golden (``Rule.exempt_rounded``) or under the cap as an
element check, as the judge asked it before it kept these counts; and the judge is seen to
measure each output once (the ratio standard its benchmark once more)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from refspec.comparator import resolve_rule
from refspec.comparator.judging import judge as judge_module
from refspec.comparator.judging.golden_output import golden_output
from refspec.comparator.judging.judge import JudgedOutput, judge
from refspec.comparator.judging.measure import measure
from refspec.comparator.judging.options import CompareOptions
from refspec.comparator.judging.standards import Rule
from refspec.comparator.judging.verdict import passes
from refspec.comparator.sources.arrays import ArrayActual
from refspec.comparator.sources.memory_case import MemoryCase
from refspec.goldens.cases import CaseData
from refspec.spec.dtypes import round_to
from refspec.spec.terms import OutputTerms

BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPE = (160, 1100)                     # 176,000 elements: several blocks, and compiled
POOL = ThreadPoolExecutor(2)


def _case(g, dtype, cls="elementwise", K=None, S=None):
    e = round_to(g, dtype)
    terms = {"y": OutputTerms(cls, K, S)}
    return MemoryCase(CaseData("c/1", "rope", {"dtype": np.dtype(dtype).name}, 0, {},
                               {"y": e.reshape(SHAPE)}, {"y": g.reshape(SHAPE)}, terms,
                               {"y": "SD"})), e


def _kernel(rng, g, e, dtype, wrong=True):
    """The rounded golden (whose rounding error exceeds an absolute threshold where the values
    are large); ``wrong``: a few elements one ulp off and a few far off."""
    a = e.copy()
    if not wrong:
        return a
    with np.errstate(over="ignore"):
        a[::501] = np.nextafter(a[::501], np.array(np.inf, dtype=a.dtype))
        a[::7919] = round_to(g[::7919] * 1.01, dtype)
    return a


def _options(fast, **kw):
    return CompareOptions(read_elements=50_000, fast=fast, pool=POOL if fast else None, **kw)


def _job(case, a, rule, opts):
    return JudgedOutput(case, golden_output(case, "y"), ArrayActual("arr", a.reshape(SHAPE)),
                        rule, opts)


def _asked_apart(case, a, rule, opts):
    """(status, elements equal to the rounded golden among the failures): the too-strict
    question answered by passes of its own, as the judge answered it before the one pass kept
    its counts."""
    golden, actual = golden_output(case, "y"), ArrayActual("arr", a.reshape(SHAPE))
    quiet = replace(opts, top=0)
    m = measure(case, golden, actual, rule, quiet)
    if passes(m, rule):
        return "pass", None
    exempt = replace(rule, exempt_rounded=True, max_abs_cap=None)
    again = measure(case, golden, actual, exempt, quiet)
    rounded, ok = m.failures - again.failures, passes(again, exempt)
    cap = rule.max_abs_cap
    if ok and cap is not None and m.max_abs.abs_err > cap:
        capped = Rule(rule.standard, rtol=0.0, atol=cap, exempt_rounded=True)
        ok = passes(measure(case, golden, actual, capped, quiet), capped)
        rounded = max(rounded, 1)
    return ("too_strict" if ok else "fail"), rounded


STRICT = [("vendor-threshold", {}), ("ascend-mixed", {}), ("default", {"rtol": 0.0, "atol": 0.0}),
          ("torch", {"rtol": 2.0 ** -30, "atol": 2.0 ** -20})]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("standard, over", STRICT, ids=[s for s, _ in STRICT])
@pytest.mark.parametrize("scale", [1.0, 3000.0])
@pytest.mark.parametrize("wrong", [True, False], ids=["wrong", "rounded"])
@pytest.mark.parametrize("fast", [True, False])
def test_the_one_pass_answers_too_strict_as_a_pass_of_its_own(rng, dtype, standard, over, scale,
                                                              wrong, fast):
    g = rng.standard_normal(int(np.prod(SHAPE))) * scale
    case, e = _case(g, dtype)
    a = _kernel(rng, g, e, dtype, wrong)
    rule = resolve_rule(standard, np.dtype(dtype).name, "elementwise", None, **over)
    opts = _options(fast, standard=standard, **over)
    res = judge(_job(case, a, rule, opts), "ctx")
    status, rounded = _asked_apart(case, a, rule, opts)
    assert res.status == status
    if status != "pass":
        assert res.golden_failures == rounded


@pytest.mark.parametrize("fast", [True, False])
def test_a_cap_that_only_rounded_elements_exceed_is_too_strict_and_one_other_fails(rng, fast):
    """The cap on the max abs error, checked on the elements that are not the rounded golden:
    too strict when only rounded elements exceed it, a failure when another one does."""
    g = rng.standard_normal(int(np.prod(SHAPE)))
    g[::997] = 3000.5                          # rounding to float16 errs by 0.5 > the 0.1 cap
    case, e = _case(g, np.float16)
    rule = resolve_rule("ascend-mixed", "float16", "elementwise", None)
    opts = _options(fast, standard="ascend-mixed")
    res = judge(_job(case, e.copy(), rule, opts), "ctx")
    assert (res.status, res.golden_failures) == _asked_apart(case, e.copy(), rule, opts) \
        == ("too_strict", 1)
    a = e.copy()
    a[5] = round_to(np.array([g[5] + 0.25]), np.float16)[0]   # within 99%, but over the cap
    res = judge(_job(case, a, rule, opts), "ctx")
    assert res.status == _asked_apart(case, a, rule, opts)[0] == "fail"


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("standard", ["vendor-threshold", "ratio"])
def test_each_output_is_measured_once(rng, monkeypatch, fast, standard):
    """A failing output, with the HTML report's map asked for and the too-strict question
    applying: one pass of ``measure`` (and one over the ratio standard's benchmark)."""
    g = rng.standard_normal(int(np.prod(SHAPE))) * 3000
    case, e = _case(g, np.float32)
    a = _kernel(rng, g, e, np.float32)
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[2])
        return measure(*args, **kwargs)

    monkeypatch.setattr(judge_module, "measure", counted)
    rule = resolve_rule(standard, "float32", "elementwise", None)
    opts = _options(fast, standard=standard, heatmaps=True)
    bench = e.reshape(SHAPE) if standard == "ratio" else None
    res = judge(JudgedOutput(case, golden_output(case, "y"), ArrayActual("arr", a.reshape(SHAPE)),
                             rule, opts, bench), "ctx")
    assert res.status != "pass" and res.metrics.heatmap is not None
    assert len(calls) == (2 if standard == "ratio" else 1)


@pytest.mark.parametrize("fast", [True, False])
def test_the_error_map_is_the_one_a_pass_of_its_own_keeps(rng, fast):
    """The map kept by the one pass equals a pass that keeps nothing but the map (as the HTML
    report's map was made before); an output that passes keeps none."""
    g = rng.standard_normal(int(np.prod(SHAPE)))
    case, e = _case(g, BF16)
    a = _kernel(rng, g, e, BF16)
    rule = resolve_rule("default", "bfloat16", "elementwise", None)
    opts = _options(fast, heatmaps=True, heatmap_axes="SD")
    res = judge(_job(case, a, rule, opts), "ctx")
    alone = measure(case, golden_output(case, "y"), ArrayActual("arr", a.reshape(SHAPE)), rule,
                    replace(opts, top=0, heatmaps=False), heat=(SHAPE, 0, 1))
    assert res.status == "fail" and res.heat_axes == ("S", "D")
    assert np.array_equal(res.metrics.heatmap, alone.heatmap)
    assert judge(_job(case, e.copy(), rule, opts), "ctx").metrics.heatmap is None


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("standard", ["default", "ascend-mixed", "vendor-threshold"])
def test_keeping_the_error_map_changes_nothing_else(rng, fast, standard):
    """With the HTML report's map kept in the same pass, every other field of the report is
    the one a comparison without it gives."""
    g = rng.standard_normal(int(np.prod(SHAPE))) * 300
    case, e = _case(g, BF16)
    a = _kernel(rng, g, e, BF16)
    rule = resolve_rule(standard, "bfloat16", "elementwise", None)
    plain = judge(_job(case, a, rule, _options(fast, standard=standard)), "ctx")
    mapped = judge(_job(case, a, rule, _options(fast, standard=standard, heatmaps=True)), "ctx")
    assert plain.status != "pass" and mapped.metrics.heatmap is not None
    assert plain.to_dict() == mapped.to_dict()


@pytest.mark.parametrize("axes", [None, "SD", "DS", "S", "D"])
@pytest.mark.parametrize("special", [False, True])
def test_the_compiled_pass_and_the_numpy_pass_draw_one_error_map(rng, axes, special):
    """The same map from both passes, over any axes, whether a block holds special values or
    not (a map is a maximum: exact in any order)."""
    g = rng.standard_normal(int(np.prod(SHAPE)))
    case, e = _case(g, np.float16)
    a = _kernel(rng, g, e, np.float16)
    if special:
        a[::4999] = np.nan
    rule = resolve_rule("default", "float16", "elementwise", None)
    maps = [judge(_job(case, a, rule, _options(fast, heatmaps=True, heatmap_axes=axes)),
                  "ctx").metrics.heatmap for fast in (True, False)]
    assert maps[0].shape == maps[1].shape and maps[0].max() > 1
    assert np.array_equal(maps[0], maps[1])


@pytest.mark.parametrize("shape, i, j", [((3, 4, 5, 6), 2, 3), ((3, 4, 5, 6), 3, 1),
                                         ((2, 7, 1, 9), 1, None), ((6, 10), 0, 1),
                                         ((4, 3, 8), 0, 2)])
def test_the_error_map_folds_as_an_element_by_element_maximum(rng, shape, i, j):
    """``ErrorMap.add`` over steps of every length, contiguous and scattered, from any flat
    index, against the largest value per cell found element by element here."""
    from refspec.comparator.judging.error_map import ErrorMap
    n = int(np.prod(shape))
    values = rng.random(n) * 3
    values[::13] = np.inf
    want = np.zeros((shape[i], shape[j]) if j is not None else (1, shape[i]))
    for flat, v in enumerate(values):
        idx = np.unravel_index(flat, shape)
        cell = (idx[i], idx[j]) if j is not None else (0, idx[i])
        want[cell] = max(want[cell], min(v, 1e300))
    got = ErrorMap(shape, i, j)
    lo = 0
    for size in rng.integers(1, n // 2, 40):
        hi = min(lo + int(size), n)
        if lo % 2:
            where = np.flatnonzero(rng.random(hi - lo) < 0.7)
            got.add(lo, where, values[lo:hi][where])
            rest = np.setdiff1d(np.arange(hi - lo), where)
            got.add(lo, rest, values[lo:hi][rest])
        else:
            got.add(lo, None, values[lo:hi])
        lo = hi
        if lo == n:
            break
    got.add(lo, None, values[lo:])
    assert np.array_equal(got.cells, want)
