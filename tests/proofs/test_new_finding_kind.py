"""Adding a kind of finding to the diagnosis takes one function and two entries, with no other
change to the package (docs/architecture.md, "Adding a finding kind"): ``offset``, a kernel
that adds a constant to every element, defined in this file only, is named by ``refspec
compare`` and ``refspec run`` in every report once registered, and not before."""

from __future__ import annotations

import json

import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.comparator.diagnosis import diagnose, findings
from refspec.spec.dtypes import round_to
from cli_helpers import invoke as run


def offsets(s, fail, golden_agrees):
    """The golden plus a constant: the constant the failing elements are off by (their median
    difference), a candidate the judge's own checks hold the kernel's values to."""
    a, g = s.a[fail], s.g[fail]
    ok = np.isfinite(a) & np.isfinite(g)
    if not ok.any():
        return []
    c = float(np.median(a[ok] - g[ok]))
    if c == 0 or not np.isfinite(c):
        return []
    return findings.candidate(s, fail, golden_agrees, s.g + c, "offset",
                              f"the golden plus {c:.6g}", {"offset": c})


@pytest.fixture
def offset_kind():
    """The kind registered for the test, and taken out again."""
    findings.KINDS.insert(findings.KINDS.index("scale"), "offset")
    diagnose.CANDIDATES.append(offsets)
    yield
    diagnose.CANDIDATES.remove(offsets)
    findings.KINDS.remove("offset")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    path = tmp_path_factory.mktemp("finding") / "smoke.h5"
    assert run("generate", "--sweep", "smoke", "--op", "rope_grad", "--dtype", "float32", "-o",
               path).exit_code == 0
    return path


def _shifted(path, by=0.25) -> dict:
    """The kernel: every output of every positive case is the golden plus ``by``."""
    out = {}
    with goldens.open(path) as gf:
        for cid in gf.case_ids():
            case = gf[cid]
            if case.is_negative:
                continue
            out[cid] = {n: round_to(np.asarray(case.exact[n][()]) + by, case.expected[n].dtype)
                        for n in case.output_names}
    return out


def test_a_finding_kind_from_outside_names_the_offset(smoke, offset_kind):
    report = compare(smoke, _shifted(smoke), only_present=True)
    failing = [r for r in report.results if r.status == "fail"]
    assert failing and all(r.diagnosis and r.diagnosis[0].kind == "offset" for r in failing), \
        [r.diagnosis[:1] for r in failing]
    assert all(r.diagnosis[0].detail["offset"] == pytest.approx(0.25, rel=1e-6) for r in failing)
    assert "diagnosis: offset: the golden plus 0.25" in str(report)


def test_without_it_the_diagnosis_does_not_name_it(smoke):
    report = compare(smoke, _shifted(smoke), only_present=True)
    kinds = {f.kind for r in report.results for f in r.diagnosis}
    assert "offset" not in kinds and report.failures


def test_every_report_of_the_command_line_shows_it(smoke, offset_kind, tmp_path):
    """``refspec compare`` in this process: the terminal, JSON and JUnit reports name it."""
    actual = tmp_path / "out.npz"
    np.savez(actual, **{f"{cid}/{n}": v for cid, outs in _shifted(smoke).items()
                        for n, v in outs.items()})
    js, xml = tmp_path / "r.json", tmp_path / "r.xml"
    result = run("compare", smoke, actual, "--only-present", "--json", js, "--junit", xml)
    assert result.exit_code == 1
    assert "diagnosis: offset: the golden plus 0.25" in result.output
    entries = [r for r in json.loads(js.read_text())["results"] if r["status"] == "fail"]
    assert entries and all(r["diagnosis"][0]["kind"] == "offset" for r in entries)
    assert "diagnosis: offset: the golden plus 0.25" in xml.read_text()
