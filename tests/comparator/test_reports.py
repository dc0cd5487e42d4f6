"""What the reports say, on reports built by hand (docs/compare.md, "Reports"): the ulp column
names the element it is about, ratios just below 1 never print as 1, the hint for cases not run
fits what is missing, the JSON entries of passing and failing outputs have one shape, terminal
rows fit the terminal, and the pytest plugin's message of a negative case says why the input is
invalid."""

from __future__ import annotations

import re

from refspec.comparator.judging.metrics import Element, Metrics
from refspec.comparator.judging.naming import format_ratio
from refspec.comparator.reports.render_html import render_html
from refspec.comparator.reports.render_text import render_text, row_cells, terminal_width
from refspec.comparator.judging.outcomes import STATUS_ROW, NotRun, OutputResult
from refspec.comparator.reports.report import Report
from refspec.pytest_plugin import failure_text

CASE = "rope_grad/soc=A2/mode=half/layout=BNSD/cos=11SD/dtype=float16/x=0/dist=position-coded/B2N3S4D8"
CONTEXT = "rotary_position_embedding_grad mode=half layout=BNSD cos=11SD dtype=float16"


def _output(status="fail", badness=2.5, case_id=CASE, op="rope_grad", output="dx"):
    """An output whose largest absolute error (0.5 ulp) is not its worst element (2.5 ulp)."""
    big = Element(7, 64.03125, 64.0, 0.03125, 0.5, 0.4)
    worst = Element(3, 0.0107, 0.01, 0.0007, 2.5, badness)
    m = Metrics(n=192, n_numeric=192, failures=int(badness > 1), max_badness=badness,
                max_abs=big, max_rel=0.07, max_rel_at=worst, mean_rel=0.001, rmse=0.002,
                cosine=0.999, worst=[worst, big])
    m.ulp_hist[3] = 191
    m.ulp_hist[4] = 1
    r = OutputResult(case_id, op, output, CONTEXT, comparison_class="elementwise",
                     dtype="float16", shape=(2, 3, 4, 8), axes="BNSD", status=status,
                     reason="1 of 192 elements (0.521%) not within tolerance", metrics=m,
                     regenerate=f"refspec generate --case {case_id}")
    r.message = r.element_line(worst)
    return r


def _report(*results, not_run=()):
    return Report("g.h5", "out/", "default", results=list(results), not_run=list(not_run))


def test_the_ulp_column_says_whose_ulps_it_shows():
    r = _output()
    assert "(2.5 ulp)" in r.message                  # the worst element, in the message
    text = render_text(_report(r))
    head = text.splitlines()[0].split()
    assert "ulp@max" in head and "ulp" not in head
    assert row_cells(r)[6:8] == ("0.0312", "0.5")     # the element of the max abs error
    assert "<th class='num ulp'>ulp@max</th>" in render_html(_report(r))


def test_ratios_show_which_side_of_1_they_are_on():
    assert format_ratio(0.9999993) == "0.999999"
    assert format_ratio(1.0000004) == "1.0000004"
    assert format_ratio(1.0) == "1" and format_ratio(0.98) == "0.98"
    assert format_ratio(4090.4) == "4.09e+03" and format_ratio(float("inf")) == "inf"
    close = _output(status="pass", badness=0.9999993)
    text = render_text(_report(close))
    assert "closest: 0.999999 of the allowed error" in text, text
    html = render_html(_report(_output(badness=1.0000004)))
    assert "<td class='num'>1.0000004</td><td class='fails'>fails" in html
    assert "0.999999 of the allowed error" in render_html(_report(close))


def test_not_run_hint_names_the_operators_when_whole_operators_are_missing():
    ran = _output(status="pass", badness=0.5)
    whole = _report(ran, not_run=[NotRun("rope/a", "rope", "no output"),
                                  NotRun("rope/b", "rope", "no output")])
    line = next(ln for ln in render_text(whole).splitlines() if ln.startswith("NOT RUN"))
    assert "--op rope_grad if only the operators that were run were meant" in line, line
    assert "--only-present" not in line
    partial = _report(ran, not_run=[NotRun("rope_grad/b", "rope_grad", "no output")])
    line = next(ln for ln in render_text(partial).splitlines() if ln.startswith("NOT RUN"))
    assert "--only-present if only the others were meant" in line, line


def _same_shape(compact, full, where="entry"):
    """Every field of ``compact`` is in ``full`` with a value of the same type (None aside)."""
    for k, v in compact.items():
        assert k in full, f"{where}.{k} not in the full entry"
        w = full[k]
        if v is None or w is None:
            continue
        assert type(v) is type(w) or {type(v), type(w)} <= {int, float}, (where, k, v, w)
        if isinstance(v, dict):
            _same_shape(v, w, f"{where}.{k}")


def test_json_entries_have_one_shape():
    doc = _report(_output(status="pass", badness=0.5), _output(case_id=CASE + "x")).to_dict()
    assert doc["schema"] == "refspec-compare/3"
    failing, passing = doc["results"]
    assert failing["status"] == "fail" and passing["status"] == "pass"
    _same_shape(passing, failing)
    for entry in (passing, failing):
        m = entry["metrics"]
        assert m["max_abs_error"] == 0.03125 and m["mismatches"] == int(entry is failing)
        assert m["ulp_histogram"] == [0, 0, 0, 191, 1]
        assert m["elements"] == 192 and m["max_badness"] in (0.5, 2.5)
    assert failing["metrics"]["max_abs_error_at"]["ulps"] == 0.5
    assert failing["diagnosis"] == [] and "patterns" in doc
    assert len(doc["ulp_histogram_bins"]) == 24


def test_terminal_rows_fit_the_width():
    rows = [_output(), _output(status="pass", badness=0.5)]
    full = render_text(_report(*rows), verbose=True)
    assert max(len(ln) for ln in full.splitlines()[:2]) > 200      # one line a row, however long
    text = render_text(_report(*rows), width=120, verbose=True)
    lines = text.splitlines()
    table = [ln for ln in lines if not ln.startswith(" ")][:3]       # the header and the rows
    assert all(len(ln) <= 120 for ln in table), table
    assert re.search(r"rope_grad/soc=A2/mode=\S*\.\.\.\S*/B2N3S4D8$", table[1]), table[1]
    assert "    1 of 192 elements (0.521%) not within tolerance" in lines   # the detail, whole
    narrow = render_text(_report(*rows), width=80, verbose=True).splitlines()
    assert all(len(ln) <= 80 for ln in narrow[:2]) and f"    {CASE}" in narrow   # the id whole
    assert terminal_width() is None                  # pytest captures stdout: not a terminal


def test_the_plugin_message_of_a_negative_case_says_why():
    reason = ("accepted an input it must reject (expected aclnn 561002 "
              "ACLNN_ERR_INNER_TILING_ERROR: mode: 2 is not supported on A2)")
    neg = OutputResult(CASE, "rope_grad", STATUS_ROW, CONTEXT, status="fail", reason=reason,
                       message=f"{STATUS_ROW} = 0 but should be 561002 [{CONTEXT}]",
                       regenerate="refspec generate --case x")
    text = failure_text(_report(neg))
    assert text.splitlines()[:2] == [neg.message, reason], text
    numeric = _output()
    numeric.message = f"{numeric.message}; {numeric.reason}"
    assert numeric.reason not in failure_text(_report(numeric)).splitlines()[1:]


def test_every_report_shows_a_failing_output_s_detail_in_one_order():
    """The terminal, JUnit, HTML, the pytest plugin and refspec.testing each show the message,
    the diagnosis and the hint of a failing output (none leaves one out), and the parts each
    shows stand in one order: message, reason, diagnosis, hint, actual, rule, worst elements,
    regenerate."""
    import pytest
    from refspec.comparator.diagnosis.findings import Finding
    from refspec.comparator.reports.render_junit import render_junit
    from refspec.testing import _raise_if_failed

    r = _output()
    r.source, r.rule = "out/dx.bin", "|a-g| <= 2^-10 + 2^-10*|g|"
    r.hint = "read as bfloat16, 100% of the first 192 elements are within its tolerance"
    r.diagnosis = [Finding("sign", "the golden's negative: all 192 elements agree with it", 1.0),
                   Finding("region", "the failing elements lie only at d = 4..7", 1.0)]
    with pytest.raises(AssertionError) as raised:
        _raise_if_failed(_report(r))
    texts = {"terminal": render_text(_report(r)), "junit": render_junit(_report(r)),
             "html": render_html(_report(r)), "plugin": failure_text(_report(r)),
             "testing": str(raised.value)}
    marks = ["diagnosis: sign", "diagnosis: region", "hint: read as bfloat16",
             "regenerate: refspec generate"]
    for name, text in texts.items():
        assert r.message.replace("'", "&#x27;" if name == "html" else "'") in text, name
        text = re.sub(r"<[^>]+>", "", text).replace("&#x27;", "'")
        if name == "html":                            # the findings as a list under "diagnosis:"
            text = re.sub(r"(sign|region): ", r"diagnosis: \1: ", text)
        found = [text.find(m) for m in marks]
        assert all(i >= 0 for i in found) and found == sorted(found), (name, found)
