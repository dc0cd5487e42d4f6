"""Accuracy with a cause (docs/compare.md, "Diagnosis"): errors beyond what rounding in the
output dtype allows, but of the size a narrower arithmetic gives, are a ``precision`` finding
that names that arithmetic, evaluated by the spec (its ``sum_dtype``, its inputs read through
the narrower dtype); a kernel computing in its 16-bit output dtype stays plain ``precision``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from golden_files import smoke_golden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "impls"))

import diagnosis_corpus as corpus  # noqa: E402  (tests/impls/diagnosis_corpus.py)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return smoke_golden(tmp_path_factory.mktemp("cause"), "rope_grad", "rope_cache")


def _failing(kernel: str, golden: str) -> list:
    report = corpus.judge(corpus.BROKEN.get(kernel) or corpus.CORRECT[kernel], golden)
    return [r for r in report.results if r.status == "fail" and r.output != "(status)"]


def test_sums_accumulated_in_bfloat16_by_a_float32_kernel_are_named(smoke):
    """A float32 kernel accumulating dcos and dsin in bfloat16: its float32 and float64
    outputs, far beyond one rounding, got no finding at all; now the first says the sums."""
    wide = [r for r in _failing("rg_bf16_accumulation", smoke)
            if r.dtype in ("float32", "float64")]
    assert len(wide) >= 8 and {r.output for r in wide} == {"dcos", "dsin"}
    for r in wide:
        first = r.diagnosis[0]
        assert first.kind == "precision", (r.case_id, r.output, first.line())
        assert first.detail["cause"] == "bfloat16 accumulation", (r.case_id, first.line())
        assert "the errors of sums accumulated in bfloat16 (in the spec's order)" in first.summary
        assert 1 / 3 <= first.detail["rms_ratio"] <= 3


def test_a_cache_read_through_float16_is_named(smoke):
    failing = _failing("rc_cache_float16", smoke)
    wide = [r for r in failing if r.dtype == "float32"]
    assert wide
    for r in wide:
        first = r.diagnosis[0]
        assert (first.kind, first.detail["cause"], first.detail["inputs"]) == \
            ("precision", "inputs read as float16", ["cos_sin_cache"]), first.line()


def test_a_kernel_computing_in_its_16_bit_dtype_stays_plain_precision(smoke):
    failing = _failing("rope_grad_correct_io", smoke)
    assert failing and {r.dtype for r in failing} <= {"float16", "bfloat16"}
    for r in failing:
        assert r.diagnosis[0].kind == "precision" and "cause" not in r.diagnosis[0].detail
