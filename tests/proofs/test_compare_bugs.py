"""Proof (b): deliberately broken implementations fail, on every case where the bug changes
the result (docs/compare.md: "a kernel with any indexing, sign, pairing, layout, broadcast
or rounding-mode bug must fail").

"Changes the result" is decided here without the comparator: a copy output or a 16-bit
elementwise output with any bit different from the correct device-like output, or any other
element further from it than twice the published Ascend mixed tolerance (atol + 2*rtol*|g|,
numbers from the table in docs/compare.md). Each bug must change the result on at least
one case, so no test is vacuous.
"""

from __future__ import annotations

import numpy as np
import pytest

import implementations as impl
from implementations import attrs_of
from refspec.comparator import compare
from case_grids import nrc_cases, rope_cases

pytestmark = pytest.mark.slow      # grids of cases judged per bug: seconds per test

#: docs/compare.md, Ascend mixed tolerance (rtol = atol)
ASCEND = {"float32": 2.0 ** -13, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}")


def changed_outputs(case, ok: dict, bug: dict) -> list[str]:
    names = []
    for name in case.output_names:
        meta = case.output_meta(name)
        a, b = np.asarray(ok[name]), np.asarray(bug[name])
        if a.shape != b.shape:
            names.append(name)
            continue
        cls, dt = meta["comparison_class"], meta["dtype"]
        if cls == "copy" or (cls == "elementwise" and dt != "float32"):
            if np.any(_bits(a) != _bits(b)):
                names.append(name)
            continue
        g = np.abs(case.exact[name])
        tol = 2 * (ASCEND[dt] + 2 * ASCEND[dt] * g)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore"):
            far = ~(np.abs(a64 - b64) <= tol)
        if np.any(far & ~(np.isnan(a64) & np.isnan(b64))):
            names.append(name)
    return names


@pytest.fixture(scope="module")
def rope_grid():
    return rope_cases(grad=True)


@pytest.fixture(scope="module")
def nrc_grid():
    return nrc_cases(backward=True) + nrc_cases(backward=True, scale=1e-3, every=2)


def _check_bug(cases, bug):
    ok = {c.case_id: impl.run(c.op, attrs_of(c), c.inputs) for c in cases}
    broken = {c.case_id: impl.run(c.op, attrs_of(c), c.inputs, bug) for c in cases}
    report = compare(cases, broken)
    by_case = {}
    for r in report.results:
        by_case.setdefault(r.case_id, {})[r.output] = r
    changed_cases, missed = 0, []
    for c in cases:
        changed = changed_outputs(c, ok[c.case_id], broken[c.case_id])
        if not changed:
            continue
        changed_cases += 1
        for name in changed:
            r = by_case[c.case_id][name]
            if r.passed:
                missed.append(f"{c.case_id}:{name}")
    assert changed_cases > 0, f"bug {bug} never changes the result: the test would be vacuous"
    assert not missed, f"bug {bug} not caught on {len(missed)} outputs: {missed[:10]}"
    return report, changed_cases


@pytest.mark.parametrize("bug", impl.ROPE_BUGS)
def test_rope_grad_bug_is_caught_wherever_it_changes_the_result(rope_grid, bug):
    report, n = _check_bug(rope_grid, bug)
    if bug in ("swapped_halves", "lost_minus", "wrong_sin_partner", "truncation"):
        assert n >= len(rope_grid) // 2       # these change nearly every case


@pytest.mark.parametrize("bug", impl.NRC_BUGS)
def test_nrc_backward_bug_is_caught_wherever_it_changes_the_result(nrc_grid, bug):
    _check_bug(nrc_grid, bug)


@pytest.mark.parametrize("bug", ["lost_minus", "truncation"])
def test_rope_forward_bug_is_caught(bug):
    cases = rope_cases(grad=False)[::3]
    _check_bug(cases, bug)


def test_failing_message_names_a_wrong_element(rope_grid):
    """The message of a caught bug names an element whose value really is wrong."""
    case = next(c for c in rope_grid if c.params["mode"] == "half" and c.params["dtype"] == "float32"
                and c.params["layout"] == "BNSD")
    broken = impl.run(case.op, attrs_of(case), case.inputs, "lost_minus")
    r = next(r for r in compare(case, broken).results if r.output == "dx")
    assert not r.passed
    worst = r.metrics.worst[0]
    idx = np.unravel_index(worst.flat, case.expected["dx"].shape)
    assert broken["dx"][idx] == np.float32(worst.actual)
    assert case.exact["dx"][idx] == worst.golden
    named = ",".join(f"{k}={v}" for k, v in zip("bnsd", idx))
    assert r.message.startswith(f"dx[{named}] = ")
