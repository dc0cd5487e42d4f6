"""Patterns across cases (docs/compare.md, "Patterns across cases"): the one line per operator
and output names what sets the failing cases apart from the passing ones: a parameter, the
output's class (reduced or not, over which axes), a pair of them, or, when nothing does, says
so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from refspec.comparator.diagnosis.patterns import failure_patterns
from refspec.comparator.judging.outcomes import OutputResult
from refspec.goldens import GoldenFile

from golden_files import smoke_golden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "impls"))

import diagnosis_corpus as corpus  # noqa: E402  (tests/impls/diagnosis_corpus.py)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return smoke_golden(tmp_path_factory.mktemp("patterns"), "rope_grad")


def _row(case: int, status: str, cls="elementwise", K=None, shape=(2, 4, 8), **params):
    return OutputResult(case_id=f"c{case}", op="op", output="out", context="", status=status,
                        comparison_class=cls, reduced_terms=K, shape=shape, axes="BND",
                        params=params)


def test_a_kernel_wrong_only_where_it_sums_is_named_by_the_output_class(smoke):
    """dcos accumulated in bfloat16 is wrong exactly where dcos sums terms (a broadcast cos
    pattern); the line names that class, not a parameter that happens to hold the failures."""
    report = corpus.judge(corpus.BROKEN["rg_bf16_accumulation"], str(smoke), diagnose=False)
    with GoldenFile(smoke) as gf:                 # the reduced dcos outputs, from the file
        dcos = [gf[c] for c in gf.case_ids()
                if not gf[c].is_negative and "dcos" in gf[c].output_names]
        reduced = sum(1 for c in dcos if (c.output_meta("dcos").get("reduced_terms") or 0) > 1)
    assert 0 < reduced < len(dcos)
    failed = {r.case_id for r in report.results if r.output == "dcos" and r.status == "fail"}
    assert len(failed) == reduced                 # the kernel's mistake, as measured
    line = next(p.line() for p in failure_patterns(report.results) if p.output == "dcos")
    assert line == (f"rope_grad dcos: {reduced} of {reduced} cases where dcos is reduced fail, "
                    f"0 of {len(dcos) - reduced} others")


def test_a_reduction_over_the_wrong_axes_is_named_by_the_axes_it_sums_over():
    """Reductions over B and N fail, the one over N alone passes: the class alone does not
    split them, the axes do."""
    rows = [_row(0, "fail", "reduction", 8, (1, 4, 1, 8), mode="half"),
            _row(1, "fail", "reduction", 8, (1, 4, 1, 8), mode="interleave"),
            _row(2, "pass", "reduction", 4, (2, 4, 1, 8), mode="half"),
            _row(3, "pass", "reduction", 4, (2, 4, 1, 8), mode="interleave"),
            _row(4, "pass", "elementwise", None, (2, 4, 4, 8), mode="half")]
    for r in rows:
        r.axes = "BSND"
    line, = (p.line() for p in failure_patterns(rows))
    assert line == "op out: 2 of 2 cases where out is reduced over B+N fail, 0 of 3 others"


def test_a_pair_of_parameters_is_named_when_no_one_parameter_splits():
    rows = [_row(i, "fail" if (mode, dtype) == ("half", "bfloat16") else "pass",
                 mode=mode, dtype=dtype)
            for i, (mode, dtype) in enumerate((m, d) for m in ("half", "interleave", "quarter")
                                              for d in ("float16", "bfloat16", "float32"))]
    rows += [_row(9, "fail", mode="half", dtype="bfloat16")]
    line, = (p.line() for p in failure_patterns(rows))
    assert line == "op out: 2 of 2 mode=half, dtype=bfloat16 cases fail, 0 of 8 others"


def test_when_nothing_separates_the_failures_the_line_says_so():
    """Every combination of mode and dtype has one failing and one passing case."""
    rows = [_row(i, "fail" if i % 2 else "pass", mode=("half", "interleave", "quarter")[i // 4],
                 dtype=("float16", "bfloat16")[(i // 2) % 2]) for i in range(12)]
    line, = (p.line() for p in failure_patterns(rows))
    assert line == "op out: 6 of 12 cases fail, and no parameter or output class sets them apart"


def test_a_clean_split_on_one_parameter_keeps_its_line():
    rows = [_row(i, "fail" if mode == "half" else "pass", mode=mode, dist=dist)
            for i, (mode, dist) in enumerate((m, d) for m in ("half", "interleave")
                                             for d in ("normal", "special", "vendor"))]
    line, = (p.line() for p in failure_patterns(rows))
    assert line == "op out: 3 of 3 mode=half cases fail, 0 of 3 others"
