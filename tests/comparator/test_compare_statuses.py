"""Statuses beyond pass/fail (docs/compare.md, "Statuses"): negative cases judged by the status
a harness writes (status.json or compare(status=...)), valid inputs rejected, cases not run
(partial runs, --only-present), a standard stricter than the dtype (too_strict); their place in
the text, JSON, JUnit and HTML reports and in the exit code. Also the small things: cosine
exactly 1 and clamped, --failures-only keeping the total, the float16/bfloat16 hint, the .npy
wording, readers ignoring a retired self_stats attribute, asking for case= and pytest
tracebacks without refspec.testing's frames."""

from __future__ import annotations

from dataclasses import replace
from refspec.goldens.cases import CaseData
import json
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import ml_dtypes
import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec import ops
from refspec.comparator import CompareUsageError, compare
from refspec.comparator.judging.metrics import cosine
from refspec.comparator.reports.render_html import render_html
from refspec.comparator.reports.render_junit import render_junit
from refspec.comparator.reports.render_text import render_text
from refspec.comparator.sources.trees import MOST_TWIN_NOTES
from refspec.goldens.example import rope_grad_case
from refspec.goldens.export import export_cases as export
from refspec.spec.dtypes import round_to
from refspec.testing import assert_matches_golden

POS = ["rope/pos/a", "rope/pos/b", "rope/pos/c"]
NEG = "rope/neg/d=odd"
BIG = "rope/big/bf16"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "g.h5"
    neg = rope_grad_case(dtype="float32", seed=3)
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        for k, cid in enumerate(POS):
            w.write_case(rope_grad_case(shape=(1, 2, 4, 8), dtype='float16', seed=k, case_id=cid,
                                        soc="A2"))
        w.write_case(CaseData(NEG, neg.op, {**neg.params, "soc": "A2"}, 3, neg.inputs, regenerate='r',
                              error=refspec.TilingError('dy: D=31 must be even')))
    return str(path)


def _write_outputs(golden, root, case_ids, skip=()):
    with goldens.open(golden) as gf:
        for cid in case_ids:
            case = gf[cid]
            for n in case.output_names:
                if n in skip:
                    continue
                a = case.expected[n][()]
                a.view(f"u{a.itemsize}").tofile(
                    root.joinpath(*cid.split("/"), ops.get(case.op).tensor_file(n)))


def _status(root, cid, code):
    root.joinpath(*cid.split("/"), "status.json").write_text(json.dumps({"code": code}))


@pytest.fixture
def exported(golden, tmp_path):
    out = tmp_path / "out"
    export(golden, out)
    _write_outputs(golden, out, POS)
    return out


def test_case_json_says_the_expected_code(golden, exported):
    for cid, code in ((POS[0], 0), (NEG, 561002)):
        desc = json.loads(exported.joinpath(*cid.split("/"), "case.json").read_text())
        assert desc["expected_code"] == code
        assert desc["status_file"]["name"] == "status.json"


def test_negative_case_passes_only_with_the_expected_code(golden, exported):
    _status(exported, NEG, 561002)
    rep = compare(golden, str(exported))
    row = next(r for r in rep.results if r.case_id == NEG)
    assert (row.output, row.status) == ("(status)", "pass") and rep.exit_code == 0
    assert "1 negative cases judged" in rep.summary_line()
    _status(exported, NEG, 0)
    rep = compare(golden, str(exported))
    row = next(r for r in rep.results if r.case_id == NEG)
    assert row.status == "fail" and "accepted an input it must reject" in row.reason
    assert "561002" in row.reason and rep.exit_code == 1
    _status(exported, NEG, 161002)
    row = next(r for r in compare(golden, str(exported)).results if r.case_id == NEG)
    assert row.status == "fail" and "returned 161002" in row.reason


def test_negative_case_without_status_is_not_run(golden, exported):
    rep = compare(golden, str(exported))
    assert [n.case_id for n in rep.not_run] == [NEG] and rep.exit_code == 1
    assert all(r.case_id != NEG for r in rep.results)
    assert compare(golden, str(exported), only_present=True).exit_code == 0


def test_a_run_that_judged_nothing_fails_even_with_only_present(golden, tmp_path):
    out = tmp_path / "empty"
    export(golden, out)                  # inputs only: the kernel wrote nothing at all
    rep = compare(golden, str(out), only_present=True)
    assert rep.results == [] and len(rep.not_run) == 4
    assert rep.exit_code == 1 and rep.summary_line().startswith("FAIL")
    assert rep.summary_line().endswith("; nothing was judged")
    assert "nothing was judged, which fails the run" in render_text(rep)
    suite = ET.fromstring(render_junit(rep))
    assert suite.get("errors") == "1" and suite.get("skipped") == "4" and suite.get("tests") == "5"
    assert [e.get("type") for e in suite.iter("error")] == ["nothing_judged"]


def test_status_file_that_cannot_be_read(golden, exported):
    exported.joinpath(*NEG.split("/"), "status.json").write_text('{"code": "561002"}')
    row = next(r for r in compare(golden, str(exported)).results if r.case_id == NEG)
    assert row.status == "unreadable" and "integer" in row.reason


@pytest.mark.parametrize("text, what", [(b"", "empty"), (b"  \n", "empty"),
                                        (b"{code: 0}", "not JSON (Expecting property name "
                                                      "enclosed in double quotes at line 1, "
                                                      "column 2)"),
                                        (b"\xff\xfe", "not UTF-8 text")])
def test_an_empty_or_broken_status_file_says_what_was_expected(golden, exported, text, what):
    """An empty status.json (a harness that died before writing it) or one that is not JSON:
    the reason says what is wrong with the file and what it should hold, not the JSON
    parser's bare message."""
    path = exported.joinpath(*NEG.split("/"), "status.json")
    path.write_bytes(text)
    row = next(r for r in compare(golden, str(exported)).results if r.case_id == NEG)
    assert row.status == "unreadable"
    assert row.reason.startswith(f"{path}: {what}; expected {{\"code\": <integer>}} (0 when "
                                 "the kernel accepted the input"), row.reason
    assert "char 0" not in row.reason


def test_two_files_for_one_output_are_named_with_the_one_judged(golden, exported):
    """dx.bin and dx.npy both beside a case's inputs: the .bin is judged as before, and the
    report's notes say so and name the file not read, in the terminal, HTML and JSON reports."""
    case = exported.joinpath(*POS[0].split("/"))
    dx = np.fromfile(case / "dx.bin", dtype=np.float16)
    np.save(case / "dx.npy", (dx + np.float16(1)).reshape(1, 2, 4, 8))    # a wrong one, not read
    rep = compare(golden, str(exported))
    rows = {r.output: r for r in rep.results if r.case_id == POS[0]}
    assert rows["dx"].status == "pass" and rows["dx"].source == str(case / "dx.bin")
    note = f"{case / 'dx.bin'} judged; {case / 'dx.npy'} also there, not read"
    assert len(rep.notes) == 1 and rep.notes[0].startswith(note), rep.notes
    assert f"note: {note}" in render_text(rep)
    assert note in render_html(rep)
    assert rep.to_dict()["notes"] == rep.notes
    assert compare(golden, str(exported), cases=[POS[1]]).notes == []
    for cid in POS:                       # many outputs with two files: a few named, then a count
        for name in ("dx", "dcos", "dsin"):
            folder = exported.joinpath(*cid.split("/"))
            (folder / f"{name}.npy").write_bytes(b"not read")
    rep = compare(golden, str(exported))
    assert all(r.status == "pass" for r in rep.results if r.output != "(status)")
    assert len(rep.notes) == MOST_TWIN_NOTES + 1, rep.notes
    assert rep.notes[-1].startswith(f"{3 * 3 - MOST_TWIN_NOTES} more outputs have more than one "
                                    "file: the first of <name>.bin, <name>.npy")


def test_filters_that_leave_none_of_the_cases_given_say_so(golden):
    """Case objects given to compare() and filters that remove all of them: the error names
    what each filter removed, as for a golden file."""
    with goldens.open(golden) as gf:
        cases = [gf[c] for c in POS]
        with pytest.raises(goldens.UnknownCaseError, match=re.escape(
                "no case selected: compare() was given 3 cases; soc 950 removed 3 cases (chip "
                "profile A2), leaving none")):
            compare(cases, {}, socs=["950"])
        with pytest.raises(goldens.UnknownCaseError, match=re.escape(
                "operator rope removed 3 cases (operator rope_grad), leaving none")):
            compare(cases, {}, operators=["rope"])
        assert len(compare(cases, str(golden), socs=["A2"]).results) > 0


def test_a_bad_status_file_does_not_hide_the_outputs(golden, exported):
    """A status.json that cannot be read is reported, and the case's outputs are judged all the
    same: a wrong output shows now, not after the status file is fixed."""
    _status(exported, NEG, 561002)
    exported.joinpath(*POS[0].split("/"), "status.json").write_text("{not json")
    dx = exported.joinpath(*POS[0].split("/"), "dx.bin")
    wrong = np.fromfile(dx, dtype=np.float16)
    (wrong + np.float16(1)).tofile(dx)
    rows = {r.output: r for r in compare(golden, str(exported)).results if r.case_id == POS[0]}
    assert rows["(status)"].status == "unreadable" and "status.json" in rows["(status)"].reason
    assert rows["dx"].status == "fail" and rows["dcos"].status == "pass"


def test_a_parent_folder_of_the_cases_says_where_they_are(golden, exported):
    """ACTUAL one level above the export (or a folder inside it): every case is not run, and
    the reason names the folder that holds the cases."""
    for actual in (exported.parent, exported / "rope"):
        rep = compare(golden, str(actual))
        assert not rep.results and len(rep.not_run) == 4
        assert {n.reason for n in rep.not_run} == {
            f"{actual} holds no case folders; they are under {exported} (compare against that "
            "folder)"}
        assert f"they are under {exported}" in render_text(rep)


@pytest.fixture(scope="module")
def math_only(tmp_path_factory):
    """A2 cases beside math-only ones: a float64 case (the math accepts it, a chip rejects
    float64 with 161002) and a case the math rejects (odd D)."""
    path = tmp_path_factory.mktemp("m") / "m.h5"
    neg = rope_grad_case(dtype="float32", seed=5)
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(1, 2, 4, 8), dtype="float16", case_id="a2", soc="A2"))
        w.write_case(rope_grad_case(shape=(1, 2, 4, 8), dtype="float64", case_id="math/f64"))
        w.write_case(CaseData("math/odd", neg.op, neg.params, 5, neg.inputs, regenerate="r",
                              error=refspec.TilingError("dy: D=31 must be even")))
    return str(path)


def test_the_math_only_profile_statuses_are_judged_only_when_selected(math_only, tmp_path):
    """A kernel for one chip rejects float64 (161002) and answers the odd D with a code of its
    own: by default neither math-only status is judged (no REJECTED or failing row; a note
    lists them) while the A2 case is; with --soc none (socs=["none"]) they are judged."""
    out = tmp_path / "out"
    export(math_only, out)
    _write_outputs(math_only, out, ["a2"])
    _status(out, "math/f64", 161002)
    _status(out, "math/odd", 161002)
    rep = compare(math_only, str(out))
    assert rep.passed and not rep.not_run, rep.summary_line()
    assert {r.case_id for r in rep.results} == {"a2"}
    assert len(rep.notes) == 1 and rep.notes[0].startswith("2 math-only cases (soc=none) not "
                                                           "judged by their status")
    assert "math/f64: returned 161002" in rep.notes[0] and "--soc none" in rep.notes[0]
    assert rep.notes[0] in render_text(rep)
    rep = compare(math_only, str(out), socs=["none"])
    rows = {r.case_id: r.status for r in rep.results}
    assert rows == {"math/f64": "rejected", "math/odd": "fail"} and not rep.passed
    # the math-only numbers are judged by default: a kernel that answers float64
    _write_outputs(math_only, out, ["math/f64"])
    _status(out, "math/f64", 0)
    rep = compare(math_only, str(out), socs=["A2", None])
    assert {r.case_id for r in rep.results if r.output == "dx"} == {"a2", "math/f64"}
    rep = compare(math_only, str(out))
    assert {r.case_id for r in rep.results if r.output == "dx"} == {"a2", "math/f64"}
    assert rep.notes and "math/odd" in rep.notes[0] and "math/f64" not in rep.notes[0]


def test_soc_selects_the_cases_of_compare_run_and_export(math_only, tmp_path):
    out = tmp_path / "out"
    export(math_only, out, socs={"A2"})
    assert [p.parent.name for p in out.rglob("case.json")] == ["a2"]
    _write_outputs(math_only, out, ["a2"])
    rep = compare(math_only, str(out), socs=["a2"])
    assert rep.passed and {r.case_id for r in rep.results} == {"a2"} and not rep.notes
    with pytest.raises(CompareUsageError, match="--soc: unknown value 'B9'"):
        compare(math_only, str(out), socs=["B9"])


def test_positive_case_with_a_non_zero_status_is_rejected(golden, exported):
    _status(exported, NEG, 561002)
    _status(exported, POS[1], 561002)
    _status(exported, POS[0], 0)
    rep = compare(golden, str(exported))
    rows = [r for r in rep.results if r.case_id == POS[1]]
    assert [(r.output, r.status) for r in rows] == [("(status)", "rejected")]
    assert "for a valid input" in rows[0].reason and rep.exit_code == 1
    assert "1 valid inputs rejected" in rep.summary_line()
    assert all(r.status == "pass" for r in rep.results if r.case_id == POS[0])
    assert render_text(rep).splitlines()[1].startswith("REJECTED")
    suite = ET.fromstring(render_junit(rep).split("\n", 1)[1])
    assert suite.get("failures") == "1"


def test_python_api_takes_the_status(golden):
    with goldens.open(golden) as gf:
        exp = {n: gf[POS[0]].expected[n][()] for n in gf[POS[0]].output_names}
    rep = compare(golden, exp, cases=[POS[0]], status=0)
    assert rep.passed
    rep = compare(golden, exp, cases=[POS[0]], status=561002)
    assert [r.status for r in rep.results] == ["rejected"]
    rep = compare(golden, {NEG: {}}, cases=[NEG], status={NEG: 561002})
    assert [r.status for r in rep.results] == ["pass"]
    with pytest.raises(CompareUsageError, match="integer"):
        compare(golden, exp, cases=[POS[0]], status="0")


def test_partial_run_not_run_summarised_per_operator(golden, tmp_path):
    out = tmp_path / "partial"
    export(golden, out)
    _write_outputs(golden, out, POS[:1])
    _write_outputs(golden, out, POS[1:2], skip=("dsin",))      # run, one output missing
    rep = compare(golden, str(out))
    assert sorted(n.case_id for n in rep.not_run) == sorted([POS[2], NEG])
    missing = [r for r in rep.results if r.status == "missing"]
    assert [(r.case_id, r.output) for r in missing] == [(POS[1], "dsin")]
    text = render_text(rep)
    not_run = [ln for ln in text.splitlines() if ln.startswith("NOT RUN")]
    assert len(not_run) == 1 and "2 x rope_grad" in not_run[0]
    assert POS[2] not in text                                  # ids only in the JSON report
    doc = rep.to_dict()
    assert {n["case_id"] for n in doc["not_run"]} == {POS[2], NEG}
    assert doc["summary"]["not_run_by_operator"] == {"rope_grad": 2}
    assert rep.exit_code == 1
    suite = ET.fromstring(render_junit(rep).split("\n", 1)[1])
    assert len(suite.findall("testcase/error[@type='not_run']")) == 2
    assert "Not run (2 cases)" in render_html(rep)


def test_only_present_on_the_command_line(golden, tmp_path):
    out = tmp_path / "partial"
    export(golden, out)
    _write_outputs(golden, out, POS[:1])
    code = "import sys; from refspec.cli import main; sys.argv[0] = 'refspec'; main()"
    run = lambda *a: subprocess.run([sys.executable, "-c", code, "compare", golden, str(out), *a],  # noqa: E731
                                    capture_output=True, text=True)
    p = run()
    assert p.returncode == 1 and "3 cases not run" in p.stdout.splitlines()[-1]
    p = run("--only-present")
    assert p.returncode == 0, p.stdout
    assert p.stdout.splitlines()[-1].startswith("PASS") and "cases not run, which do not fail the run" in p.stdout


def test_one_case_arrays_for_several_cases_ask_for_case(golden):
    with goldens.open(golden) as gf:
        exp = {n: gf[POS[0]].expected[n][()] for n in gf[POS[0]].output_names}
    with pytest.raises(CompareUsageError, match="case="):
        compare(golden, exp)
    with pytest.raises(CompareUsageError, match="case="):
        assert_matches_golden(golden, exp)
    assert_matches_golden(golden, exp, case=POS[0])


# -- a standard stricter than the dtype -----------------------------------------------------

@pytest.fixture(scope="module")
def big_bf16(tmp_path_factory):
    """A bfloat16 case with values beyond 4, where half an ulp (2^-6 and more) exceeds the
    vendor script's absolute threshold 2^-7."""
    path = tmp_path_factory.mktemp("s") / "g.h5"
    kw = rope_grad_case(shape=(1, 2, 16, 16), dtype="bfloat16", seed=4)
    for k in ("dy", "x"):
        kw.inputs[k] = round_to(np.asarray(kw.inputs[k], np.float64) * 8, ml_dtypes.bfloat16)
    i = kw.inputs
    names = ("dx", "dcos", "dsin")
    rounded = refspec.rotary_position_embedding_grad(i["dy"], i["cos"], i["sin"], i["x"], mode=0)
    exact = refspec.rotary_position_embedding_grad(i["dy"], i["cos"], i["sin"], i["x"], mode=0,
                                                   out_dtype=np.float64)
    kw.expected, kw.exact = dict(zip(names, rounded)), dict(zip(names, exact))
    from refspec.spec.terms import rope_grad_terms
    kw.terms = rope_grad_terms(i["dy"], i["cos"], i["sin"], i["x"], mode=0)
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(replace(kw, case_id=BIG))
    dx_err = np.abs(np.asarray(kw.expected["dx"], np.float64) - kw.exact["dx"])
    assert np.count_nonzero(dx_err > 2.0 ** -7) > 0          # the rounded golden fails it
    return str(path), {n: np.asarray(kw.expected[n]).copy() for n in names}


def _float32_layer_norm(x):
    """A float32 kernel's LayerNorm over D, two passes as documented (no rescaling)."""
    with np.errstate(all="ignore"):
        d = x - x.mean(-1, keepdims=True, dtype=np.float32)
        return d / np.sqrt((d * d).mean(-1, keepdims=True, dtype=np.float32) + np.float32(1e-5))


def test_a_case_beyond_float32_arithmetic_is_too_strict():
    """Inputs whose LayerNorm variance overflows float32 (a real run's, say): what a float32
    kernel gives there is too_strict, saying why, not a failure; a NaN on ordinary inputs
    fails."""
    from refspec.comparator.sources.memory_case import spec_case
    rng = np.random.default_rng(0)
    q = (rng.standard_normal((1, 3, 2, 8)) * 1e37).astype(np.float32)       # B S N D
    k, v = (rng.standard_normal((1, 3, 2, 8)).astype(np.float32) for _ in range(2))

    def kernel(q, k):
        return {"query_output": _float32_layer_norm(q).transpose(0, 2, 1, 3),
                "key_output": _float32_layer_norm(k).transpose(0, 2, 1, 3),
                "value_output": v.transpose(0, 2, 1, 3)}
    out = kernel(q, k)
    assert np.all(out["query_output"] == 0)          # its variance overflowed to inf
    rep = compare(spec_case("nrc", query=q, key=k, value=v, norm_type=1), out)
    rows = {r.output: r for r in rep.results}
    assert rows["query_output"].status == "too_strict" and rep.passed
    assert "LayerNorm statistics overflow float32 in query (6 of 6 rows)" in rows["query_output"].reason
    assert rows["query_output"].message.endswith("[golden beyond the kernel's arithmetic]")
    assert rows["key_output"].status == rows["value_output"].status == "pass"
    small = q / np.float32(1e37)
    out = kernel(small, k)
    out["query_output"][0, 1, 2, 3] = np.nan
    rep = compare(spec_case("nrc", query=small, key=k, value=v, norm_type=1), out)
    assert {r.output: r.status for r in rep.results}["query_output"] == "fail"


def test_rounded_golden_failing_the_standard_is_too_strict(big_bf16):
    path, exp = big_bf16
    rep = compare(path, exp, standard="vendor-threshold")
    dx = next(r for r in rep.results if r.output == "dx")
    assert dx.status == "too_strict" and dx.golden_failures == dx.metrics.failures > 0
    assert "stricter than bfloat16" in dx.reason
    assert rep.passed and rep.exit_code == 0
    assert rep.counts()["too_strict"] >= 1
    assert "where the standard is stricter than the dtype" in rep.summary_line()
    assert any(ln.startswith("TOO STRICT") for ln in render_text(rep).splitlines())
    suite = ET.fromstring(render_junit(rep).split("\n", 1)[1])
    assert int(suite.get("skipped")) == rep.counts()["too_strict"]
    assert "class='too_strict'" in render_html(rep)
    # the default standard accepts the correctly rounded value
    assert compare(path, exp).passed and not compare(path, exp).counts()["too_strict"]


def test_a_real_error_beside_unattainable_ones_still_fails(big_bf16):
    path, exp = big_bf16
    bad = dict(exp)
    dx = bad["dx"].copy()
    dx[0, 1, 3, 2] = dx[0, 1, 3, 2] + ml_dtypes.bfloat16(1.0)
    bad["dx"] = dx
    row = next(r for r in compare(path, bad, standard="vendor-threshold").results
               if r.output == "dx")
    assert row.status == "fail"
    assert row.golden_failures > 0 and "equal the golden rounded to bfloat16" in row.reason


# -- small things -----------------------------------------------------------------------------

def test_cosine_exactly_one_for_identical_arrays_and_clamped():
    x = np.array([[[[0.1, 0.3]]]], np.float32)
    case = refspec.comparator.spec_case("rotary_position_embedding", x=x, cos=np.ones_like(x),
                                        sin=np.zeros_like(x), mode=0)
    y = case.exact["y"]
    assert np.array_equal(y, x.astype(np.float64))             # the golden is exactly x
    s = float(np.sum(y * y))
    assert s / (np.sqrt(s) * np.sqrt(s)) > 1.0                 # the textbook formula: 1 + 2^-52
    assert case.expected["y"].dtype == np.float32
    y = case.expected["y"]
    m = compare(case, {"y": y}).results[0].metrics
    assert m.cosine == 1.0
    assert cosine(1.0 + 2.0 ** -52, 1.0, 1.0, identical=False) == 1.0
    assert cosine(-1.0 - 2.0 ** -52, 1.0, 1.0, identical=False) == -1.0
    assert cosine(0.0, 0.0, 0.0, identical=True) == 1.0        # both all zero
    assert cosine(0.0, 0.0, 4.0, identical=False) == 0.0       # one side all zero


def test_failures_only_keeps_the_total_line(golden, exported):
    _status(exported, NEG, 561002)
    code = "import sys; from refspec.cli import main; sys.argv[0] = 'refspec'; main()"
    p = subprocess.run([sys.executable, "-c", code, "compare", golden, str(exported),
                        "--failures-only"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    report = compare(golden, str(exported))
    header, total = p.stdout.strip().splitlines()           # the passes left out
    assert total == report.summary_line()
    assert header.startswith(f"golden {report.golden_digest} made {report.golden_created}; judged ")


def test_float16_bfloat16_mix_up_hint(tmp_path):
    path = tmp_path / "g.h5"
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(1, 2, 8, 16), dtype='bfloat16', seed=1,
                                    case_id='rope/bf'))
    out = tmp_path / "out"
    export(str(path), out)
    with goldens.open(path) as gf:
        exact = {n: gf["rope/bf"].exact[n][()] for n in ("dx", "dcos", "dsin")}
    d = out / "rope" / "bf"
    exact["dx"].astype(np.float16).tofile(d / "dx.bin")            # float16 bits in a .bin
    np.save(d / "dcos.npy", exact["dcos"].astype(np.float16))      # float16 in a .npy
    exact["dsin"].astype(ml_dtypes.bfloat16).view(np.uint16).tofile(d / "dsin.bin")
    (d / "status.json").write_text('{"code": 0}')
    rows = {r.output: r for r in compare(str(path), str(out)).results}
    assert rows["dx"].status == "fail" and "was float16 written where bfloat16" in rows["dx"].hint
    assert "hint: read as float16" in render_text(compare(str(path), str(out)))
    assert rows["dcos"].status == "dtype_mismatch"
    assert "was float16 written where bfloat16 is expected" in rows["dcos"].reason
    assert rows["dsin"].hint == ""


def test_single_npy_wording(golden, tmp_path):
    with goldens.open(golden) as gf:
        dx = gf[POS[0]].expected["dx"][()]
    np.save(tmp_path / "dx.npy", dx)
    rows = {r.output: r for r in compare(golden, str(tmp_path / "dx.npy"), cases=[POS[0]]).results}
    assert rows["dx"].status == "pass"
    assert rows["dcos"].status == "missing"
    assert "is one array, read as output 'dx'" in rows["dcos"].reason
    assert "no key" not in rows["dcos"].reason


def test_file_with_a_self_stats_attribute_is_read(golden, tmp_path):
    """Golden files written before self statistics were retired carry `self_stats` on their
    expected datasets; readers ignore it."""
    import shutil

    import h5py
    old = tmp_path / "old.h5"
    shutil.copy(golden, old)
    with h5py.File(old, "r+") as f:
        ds = f["cases"][POS[0]]["expected"]["dx"]
        ds.attrs["self_stats"] = json.dumps({"version": 1, "n": int(np.prod(ds.shape))})
    with goldens.open(old) as gf:
        exp = {n: gf[POS[0]].expected[n][()] for n in gf[POS[0]].output_names}
    rep = compare(str(old), exp, cases=[POS[0]])
    assert rep.passed and len(rep.results) == 3


def test_pytest_failure_points_at_the_callers_line(golden, tmp_path):
    test = tmp_path / "test_kernel.py"
    test.write_text(textwrap.dedent(f"""
        import numpy as np
        import refspec.goldens as goldens
        from refspec.testing import assert_matches_golden

        def test_kernel():
            with goldens.open({golden!r}) as gf:
                case = gf[{POS[0]!r}]
                out = {{n: case.expected[n][()].copy() for n in case.output_names}}
            out["dx"][0, 1, 2, 3] += 1
            assert_matches_golden({golden!r}, out, case={POS[0]!r})
    """))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 1
    assert "dx[b=0,n=1,s=2,d=3]" in p.stdout
    assert "assert_matches_golden(" in p.stdout                 # the caller's line
    assert "testing.py" not in p.stdout and "_raise_if_failed" not in p.stdout


def test_cap_that_rejects_the_rounded_golden_is_too_strict():
    """ascend-mixed caps the max abs error at 0.1 for bfloat16: half an ulp of values in
    [64, 128) is 0.25, so the correctly rounded output can exceed the cap; one element moved
    by an ulp (within rtol, but not the rounded golden) must still fail."""
    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(7)
    x = round_to(rng.uniform(64, 128, (1, 2, 8, 16)), bf16)
    cos = round_to(np.cos(rng.uniform(-3, 3, (1, 1, 8, 16))), bf16)
    sin = round_to(np.sin(rng.uniform(-3, 3, (1, 1, 8, 16))), bf16)
    case = refspec.comparator.spec_case("rotary_position_embedding", x=x, cos=cos, sin=sin,
                                        mode=0)
    y = np.asarray(case.expected["y"])
    err = np.abs(y.astype(np.float64) - case.exact["y"])
    assert err.max() > 0.1                                   # the rounding alone is over the cap
    row = compare(case, {"y": y}, standard="ascend-mixed").results[0]
    assert row.status == "too_strict", row.reason
    moved = y.copy()
    i = np.unravel_index(int(np.argmin(err)), y.shape)
    bits = moved.view(np.uint16)
    bits[i] += 1                                             # one ulp away from the rounded value
    row = compare(case, {"y": moved}, standard="ascend-mixed").results[0]
    assert row.status == "fail"
