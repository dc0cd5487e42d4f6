"""The diagnosis of failing outputs (docs/compare.md, "Diagnosis"): each kind of the vocabulary
is produced by a kernel with that mistake (tests/impls/diagnosis_kernels.py), right kernels that
are only less accurate are diagnosed ``precision``, and every report shows the findings and the
patterns across cases."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from refspec import ops
from refspec.cli import main
from refspec.comparator import compare
from refspec.comparator.diagnosis.findings import KINDS
from refspec.goldens import GoldenFile

IMPLS = Path(__file__).resolve().parents[1] / "impls"
sys.path.insert(0, str(IMPLS))

import diagnosis_kernels  # noqa: E402  (tests/impls/diagnosis_kernels.py)
import numpy_float32  # noqa: E402  (tests/impls/numpy_float32.py)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    path = tmp_path_factory.mktemp("diagnosis") / "smoke.h5"
    result = CliRunner().invoke(main, ["generate", "-o", str(path), "--op", "rope_grad"])
    assert result.exit_code == 0, result.output
    return path


def _outputs(kernel, path) -> dict:
    """{case id: {output: array}} of a RotaryPositionEmbeddingGrad kernel on every positive
    case of the golden file."""
    record = ops.get("rope_grad")
    out = {}
    with GoldenFile(path) as gf:
        for case in map(gf.__getitem__, gf.case_ids()):
            if case.is_negative:
                continue
            call = record.call_of(case.params, case.input_arrays())
            dx, dcos, dsin = kernel(**call.inputs, **call.attrs, soc=call.soc)
            out[case.case_id] = {k: v for k, v in (("dx", dx), ("dcos", dcos), ("dsin", dsin))
                                 if v is not None}
    return out


def _failures(kind, path, **options):
    kernel = diagnosis_kernels.KERNELS[kind].rotary_position_embedding_grad
    report = compare(str(path), _outputs(kernel, path), **options)
    failing = [r for r in report.results if r.status == "fail"]
    assert failing, f"the {kind} kernel fails nothing"
    return report, failing


def _reduced(params) -> list:
    """The axes dcos is summed over: those where cos has 1 and dy does not (the kernel that
    gets the reduction wrong skips the first of them)."""
    sizes = {"B": params["B"], "N": params["N"], "S": params["S"], "T": params["B"] * params["S"]}
    return [letter for c, letter in zip(params["cos"], params["layout"])
            if c == "1" and sizes[letter] > 1]


#: kernel -> the outputs it breaks, the kind of finding it must get, a check of the details
#: (of one finding of that kind, given the case parameters)
EXPECTED = {
    "sign": (("dsin",), "sign", None),
    "scale": (("dx",), "scale", lambda d, p: d["factor"] == 2.0),
    "zero": (("dcos",), "zero", None),
    "constant": (("dsin",), "constant", lambda d, p: d["value"] == 0.5),
    "nonfinite": (("dx",), "nonfinite", lambda d, p: d["nan"] > 0),
    "copy": (("dx",), "copy", lambda d, p: d["of"] == "input:dy"),
    "copy_output": (("dcos",), "copy", lambda d, p: d["of"] == "output:dsin"),
    "permuted": (("dx",), "permuted", lambda d, p: (d["axis"], d["how"]) == ("D", "halves exchanged")),
    "alternative": (("dx", "dcos", "dsin"), "alternative", lambda d, p: (d["param"], d["value"]) == ("mode", "interleave")),
    "reduction": (("dcos", "dsin"), "reduction", lambda d, p: d["axes"] == _reduced(p)[1:]),
    "rounding": (("dx", "dcos", "dsin"), "rounding", lambda d, p: d["mode"] == "toward_zero"),
    "dtype": (("dx",), "dtype", lambda d, p: d["as"] == "bfloat16"),
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_kind_is_found_for_the_kernel_that_makes_it(smoke, kind):
    outputs, expected, check = EXPECTED[kind]
    _, failing = _failures(kind, smoke)
    assert {r.output for r in failing} == set(outputs), {r.output for r in failing}
    found = 0
    for r in failing:
        findings = [f for f in r.diagnosis if f.kind == expected]
        if expected == "rounding" and not findings:
            # a special-value case may hold too few elements where the modes differ to say
            assert r.diagnosis[0].kind == "precision", [f.line() for f in r.diagnosis]
            continue
        assert findings, (r.case_id, [f.line() for f in r.diagnosis])
        assert all(f.agreement >= 0.9 for f in findings)
        assert check is None or any(check(d, r.params) for f in findings
                                    for d in [f.detail] + f.detail.get("same_as", [])), findings
        found += 1
    assert found >= 0.9 * len(failing)
    first = [r.diagnosis[0].kind for r in failing]
    # rounding explains the bits of an accuracy deviation: precision comes first
    allowed = {expected, "precision"} if expected == "rounding" else {expected}
    assert sum(k in allowed for k in first) >= 0.9 * len(first), first


def test_a_half_of_d_that_is_wrong_is_named_as_the_part_a_finding_explains(smoke):
    """lost_minus: the sign of the rotation's second half is lost, so dx is wrong in one half of
    D only: the finding that explains it says that half (its ``part``) and that every element
    there agrees with it."""
    _, failing = _failures("region", smoke, cases="*mode=half/*")
    for r in failing:
        first = r.diagnosis[0]
        D = r.shape[-1]
        assert first.agreement == 1.0 and first.kind != "unexplained", [f.line() for f in r.diagnosis]
        # (at position 0, sin is 0 and the lost minus changes nothing: s = 1.. may be named)
        assert first.detail["part"]["axes"]["D"] == [[D // 2, D]], first.detail
        assert f"d = {D // 2}..{D - 1} (all " in first.summary, first.summary


def test_an_output_unwritten_after_its_first_block_is_zero_from_that_element_on(smoke):
    # (special values hold zeros that a zero fill gets right)
    _, failing = _failures("tail", smoke, cases=["*/dist=random/*", "*/dist=rotary/*"])
    for r in failing:
        first = r.diagnosis[0]
        assert first.kind == "zero", [f.line() for f in r.diagnosis]
        # the elements before 64 may be right or zero by chance (a zero golden); from the
        # first failing one on, every element is wrong
        part = first.detail["part"]
        assert "flat" in part and part["flat"][0] >= 64, [f.line() for f in r.diagnosis]
        assert f"flat indices {part['flat'][0]}.." in first.summary


def test_a_float32_kernel_held_to_exactness_is_diagnosed_precision(smoke):
    """The NumPy float32 kernel passes the default standard; with rtol = atol = 0 every output
    fails by its float32 or 16-bit rounding alone, and each is diagnosed floating-point
    accuracy, never a logic error."""
    report = compare(str(smoke), _outputs(numpy_float32.EVERY.rotary_position_embedding_grad,
                                          smoke), rtol=0.0, atol=0.0)
    failing = [r for r in report.results if r.status == "fail"]
    assert len(failing) > 20
    for r in failing:
        assert r.diagnosis and r.diagnosis[0].kind == "precision", (
            r.case_id, r.output, [f.line() for f in r.diagnosis])
        assert {f.kind for f in r.diagnosis} <= {"precision", "rounding", "dtype"}


def test_a_torch_kernel_computing_in_16_bits_is_diagnosed_precision(smoke, tmp_path):
    pytest.importorskip("torch")
    report_path = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["run", str(smoke), "--impl", str(IMPLS / "torch_16bit.py"),
                                       "--framework", "torch", "--op", "rope_grad",
                                       "--case", "*mode=half/*", "--case", "*mode=interleave/*",
                                       "--json", str(report_path)])
    assert result.exit_code == 1, result.output[-2000:]        # 16-bit arithmetic fails some
    doc = json.loads(report_path.read_text())
    # (the kernel checks no argument: the negative cases fail on their status)
    failing = [r for r in doc["results"] if r["status"] == "fail" and r["output"] != "(status)"]
    assert len(failing) > 20 and {r["dtype"] for r in failing} <= {"float16", "bfloat16"}
    for r in failing:
        assert r["diagnosis"] and r["diagnosis"][0]["kind"] == "precision", (
            r["case_id"], r["output"], r["diagnosis"])


def test_passing_outputs_get_no_diagnosis_and_it_can_be_left_out(smoke):
    kernel = diagnosis_kernels.KERNELS["sign"].rotary_position_embedding_grad
    actual = _outputs(kernel, smoke)
    report = compare(str(smoke), actual)
    assert all(not r.diagnosis for r in report.results if r.status != "fail")
    assert all(r.diagnosis for r in report.results if r.status == "fail")
    quiet = compare(str(smoke), actual, diagnose=False)
    assert [r.status for r in quiet.results] == [r.status for r in report.results]
    assert not any(r.diagnosis for r in quiet.results)


def _sign_counts(path):
    """(half-mode cases with dsin, cases with dsin of the other modes), from the file."""
    with GoldenFile(path) as gf:
        with_x = [gf[c].params["mode"] for c in gf.case_ids()
                  if not gf[c].is_negative and "dsin" in gf[c].output_names]
    half = with_x.count("half")
    return half, len(with_x) - half


def test_the_whole_journey_names_the_sign_and_the_mode(smoke, tmp_path):
    """A kernel with dsin's sign flipped in half mode: ``refspec run`` prints, under the first
    failing output, a first finding that names the sign, and one line naming the mode."""
    report = tmp_path / "r.json"
    junit, page = tmp_path / "r.xml", tmp_path / "r.html"
    result = CliRunner().invoke(main, ["run", str(smoke), "--impl",
                                       f"{IMPLS / 'diagnosis_kernels.py'}:SIGN", "--op",
                                       "rope_grad", "--json", str(report), "--junit", str(junit),
                                       "--html", str(page)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    first_fail = next(i for i, line in enumerate(lines) if line.startswith("FAIL"))
    first_finding = next(line for line in lines[first_fail:] if "diagnosis:" in line)
    assert first_finding.strip().startswith("diagnosis: sign: the golden's negative"), first_finding
    assert "mode=half" in lines[first_fail + 1]                  # the message's context
    half, others = _sign_counts(smoke)
    pattern = f"pattern: rope_grad dsin: {half} of {half} mode=half cases fail, 0 of {others} others"
    assert pattern in lines, "\n".join(lines[-15:])

    doc = json.loads(report.read_text())
    failing = [r for r in doc["results"] if r["status"] == "fail"]
    assert len(failing) == half
    for r in failing:
        d = r["diagnosis"]
        assert d[0]["kind"] == "sign" and d[0]["agreement"] == 1.0
        assert all(f["kind"] in KINDS and set(f) == {"kind", "summary", "agreement", "detail"}
                   for f in d)
    assert doc["patterns"][0]["line"] == pattern.removeprefix("pattern: ")
    assert "diagnosis: sign: the golden&apos;s negative" in junit.read_text() or \
        "diagnosis: sign: the golden's negative" in junit.read_text()
    html = page.read_text()
    assert "<b>sign</b>: the golden&#x27;s negative" in html and "Patterns across cases" in html


def test_refspec_testing_and_the_plugin_messages_carry_the_diagnosis(smoke):
    from refspec.testing import assert_matches_golden
    kernel = diagnosis_kernels.KERNELS["zero"].rotary_position_embedding_grad
    actual = _outputs(kernel, smoke)
    cid = next(c for c, outs in actual.items() if "dcos" in outs)
    with pytest.raises(AssertionError) as err:
        assert_matches_golden(str(smoke), actual[cid], case=cid)
    assert re.search(r"^diagnosis: zero: ", str(err.value), re.M), str(err.value)


def test_hypotheses_are_evaluated_by_the_spec_of_the_record(smoke):
    """The record's own hypotheses are data: an operator without them gets the generic findings
    and the generated hypotheses only (no finding names another mode)."""
    from dataclasses import replace
    record = ops.get("rope_grad")
    kernel = diagnosis_kernels.KERNELS["alternative"].rotary_position_embedding_grad
    actual = _outputs(kernel, smoke)
    bare = replace(record, comparison=replace(record.comparison, hypotheses=()))
    ops.OPERATORS["rope_grad"] = bare
    try:
        report = compare(str(smoke), actual)
    finally:
        ops.OPERATORS["rope_grad"] = record
    assert not any(f.detail.get("param") == "mode" for r in report.results for f in r.diagnosis)
    assert np.any([r.status == "fail" for r in report.results])
    assert all(r.diagnosis for r in report.results if r.status == "fail")


def test_the_pytest_plugin_shows_the_diagnosis(smoke, tmp_path):
    import subprocess
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "--refspec-golden", str(smoke), "--refspec-impl",
         f"{IMPLS / 'diagnosis_kernels.py'}:SIGN", "--refspec-op", "rope_grad",
         "--refspec-case", "*/mode=half/*"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 1, result.stdout[-3000:]
    assert re.search(r"^diagnosis: sign: the golden's negative", result.stdout, re.M), \
        result.stdout[-3000:]


def test_a_large_output_is_diagnosed_on_a_slice_of_its_case():
    """An output above VIEW_ELEMENTS is diagnosed on a slice of its case along the axes its
    operator computes independently: the spec's hypotheses are evaluated on the slice's inputs,
    and the finding names the part of D that holds the mistake."""
    from refspec.comparator.diagnosis.views import VIEW_ELEMENTS
    from refspec.comparator.sources.memory_case import spec_case
    rng = np.random.default_rng(5)
    B, N, S, D = 64, 4, 64, 128                      # 2^21 elements, twice the largest view
    assert B * N * S * D > VIEW_ELEMENTS
    x = rng.standard_normal((B, N, S, D)).astype(np.float32)
    theta = rng.uniform(0, 6.3, (1, 1, S, D)).astype(np.float32)
    case = spec_case("rope", x=x, cos=np.cos(theta), sin=np.sin(theta), mode=0, soc="A2")
    y = np.array(case.expected["y"][()], copy=True)
    y[..., D // 2:] *= -1                             # the second half's sign lost
    (r,) = compare(case, {"y": y}).failures
    first = r.diagnosis[0]
    assert first.kind == "sign" and first.agreement == 1.0, [f.line() for f in r.diagnosis]
    assert first.detail["part"] == {"axes": {"D": [[D // 2, D]]}}, first.detail
    assert f"d = {D // 2}..{D - 1}" in first.summary


def test_axes_without_letters_are_named_one_way_everywhere():
    """An output whose axes have no letters names them i0, i1 in its message, its error map
    and its findings alike (``naming.axis_names``)."""
    from refspec.comparator.sources.memory_case import MemoryCase
    from refspec.goldens.cases import CaseData
    from refspec.spec.terms import OutputTerms
    rng = np.random.default_rng(11)
    g = rng.standard_normal((6, 8))
    e = g.astype(np.float32)
    case = MemoryCase(CaseData("c/1", "rope", {"dtype": "float32"}, 0, {}, {"y": e}, {"y": g},
                               {"y": OutputTerms("elementwise", None, None)}, {"y": ""}))
    a = e.copy()
    a[:, 4:] = -a[:, 4:]                              # the second half of i1's sign lost
    (r,) = compare(case, {"y": a}, heatmaps=True).failures
    assert "y[i0=" in r.message and r.heat_axes == ("i0", "i1")
    parts = [f.detail.get("part", {}).get("axes", {}) for f in r.diagnosis]
    assert "i1" in parts[0], [f.line() for f in r.diagnosis]
    assert "i1 = 4..7" in r.diagnosis[0].summary, r.diagnosis[0].summary


@pytest.mark.parametrize("written", ["twin", "mostly_zero"])
def test_the_hint_and_the_dtype_finding_give_one_answer(written):
    """The judge's hint and the diagnosis's ``dtype`` finding ask one test
    (``judging.twins``): bfloat16 bits written where float16 is expected get both; an output
    that is zero where the golden is and wrong at one element (zeros read as bfloat16 are zeros
    too, so nearly every element "agrees" either way) gets neither."""
    from refspec.comparator.sources.memory_case import MemoryCase
    from refspec.goldens.cases import CaseData
    from refspec.spec.dtypes import bfloat16, round_to
    from refspec.spec.terms import OutputTerms
    rng = np.random.default_rng(3)
    g = rng.standard_normal(64)
    if written == "mostly_zero":
        g[:] = 0.0
    e = round_to(g, np.float16)
    case = MemoryCase(CaseData("c/1", "rope", {"dtype": "float16"}, 0, {}, {"y": e}, {"y": g},
                               {"y": OutputTerms("elementwise", None, None)}, {"y": "D"}))
    if written == "twin":
        a = round_to(g, bfloat16).view(np.float16)
    else:
        a = e.copy()
        a[7] = 1.0
    (r,) = compare(case, {"y": a}).failures
    has_hint = r.hint.startswith("read as bfloat16")
    has_finding = any(f.kind == "dtype" for f in r.diagnosis)
    assert has_hint == has_finding == (written == "twin"), (r.hint, [f.line() for f in r.diagnosis])
