"""Proof (e): `refspec compare` exit codes and reports (terminal, JSON keys, JUnit XML that
parses, HTML with an image per failing output)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import refspec.goldens as goldens
from refspec import ops
from refspec.goldens.export import export_cases as export
from refspec.goldens.example import nrc_backward_case, rope_grad_case
from cli_helpers import assert_user_error, invoke


def refspec_cli(*args, cwd=None):
    code = "import sys; from refspec.cli import main; sys.argv[0] = 'refspec'; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    g = d / "g.h5"
    with goldens.GoldenWriter(g, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(2, 2, 4, 8), dtype='float16', case_id='rope/a'))
        w.write_case(nrc_backward_case(dtype='bfloat16', case_id='nrc/b'))
    good, bad = d / "good", d / "bad"
    export(g, good)
    export(g, bad)
    with goldens.open(g) as gf:
        for case in gf:
            for n in case.output_names:
                a = case.expected[n][()]
                bits = a.view(f"u{a.itemsize}")
                bits.tofile(good.joinpath(*case.case_id.split("/"), ops.get(case.op).tensor_file(n)))
                if n == "dx":
                    a = a.copy()
                    a[1, 0, 3, 2] += 1
                if n == "grad_key":
                    continue
                a.view(f"u{a.itemsize}").tofile(bad.joinpath(*case.case_id.split("/"), ops.get(case.op).tensor_file(n)))
    return d, g, good, bad


def test_all_pass_exit_0(setup):
    d, g, good, _ = setup
    p = refspec_cli("compare", g, good)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].startswith("PASS: ")


def test_failures_exit_1_with_reports(setup, tmp_path):
    d, g, _, bad = setup
    p = refspec_cli("compare", g, bad, "--json", tmp_path / "r.json", "--junit", tmp_path / "r.xml",
                    "--html", tmp_path / "r.html")
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1].startswith("FAIL: ")
    # failures first: the first rows after the header are not passes
    assert lines[1].split()[0] in ("MISSING", "FAIL")
    assert any(ln.strip().startswith("dx[b=1,n=0,s=3,d=2] = ") for ln in lines)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema"] == "refspec-compare/3"
    assert set(doc) >= {"golden", "actual", "standard", "overrides", "saturation", "summary", "results"}
    r0 = next(r for r in doc["results"] if r["output"] == "dx")
    assert set(r0) >= {"case_id", "output", "verdict", "status", "reason", "message", "metrics",
                       "worst", "regenerate", "rule", "comparison_class", "dtype", "shape", "axes"}
    m = r0["metrics"]
    assert set(m) >= {"mismatches", "mismatch_fraction", "max_abs_error", "max_rel_error", "rmse",
                      "cosine", "nan_mismatches", "inf_mismatches", "ulp_histogram", "small_values"}
    assert m["max_abs_error_at"]["index"] == {"b": 1, "n": 0, "s": 3, "d": 2}
    assert len(r0["worst"]) == 10
    missing = next(r for r in doc["results"] if r["output"] == "grad_key")
    assert missing["status"] == "missing"
    suite = ET.parse(tmp_path / "r.xml").getroot()
    cases = suite.findall("testcase")
    assert len(cases) == len(doc["results"])
    assert len(suite.findall("testcase/failure")) == 1 and len(suite.findall("testcase/error")) == 1
    html = (tmp_path / "r.html").read_text()
    assert html.count("<svg class='pic'") == 2            # dx: error heatmap and ulp histogram
    assert "dx[b=1,n=0,s=3,d=2]" in html


@pytest.mark.parametrize("args", [
    ["--standard", "nope"], ["--rtol", "abc"], ["--case", "zz*"], ["--case", "no/such"],
    ["--standard", "ratio", "--rtol", "0.1"], ["--heatmap-axes", "12"], ["--json", "/nonexistent/dir/r.json"],
])
def test_usage_errors_exit_2_one_line(setup, args):
    d, g, good, _ = setup
    p = refspec_cli("compare", g, good, *args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("refspec: error: ") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


def test_unreadable_golden_and_missing_actual_exit_2(setup, tmp_path):
    d, g, good, _ = setup
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    for args in ((tmp_path / "junk.h5", good), (tmp_path / "none.h5", good), (g, tmp_path / "none")):
        p = refspec_cli("compare", *args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_override_shown_and_case_filter(setup):
    d, g, _, bad = setup
    p = refspec_cli("compare", g, bad, "--case", "rope/*", "--atol", "2")
    assert p.returncode == 0, p.stdout
    assert "override atol=2" in p.stdout


def test_html_pictures_need_no_matplotlib(setup, tmp_path):
    d, g, _, bad = setup
    code = ("import sys; sys.modules['matplotlib'] = None; from refspec.cli import main; "
            "sys.argv[0] = 'refspec'; main()")
    p = subprocess.run([sys.executable, "-c", code, "compare", str(g), str(bad), "--html",
                        str(tmp_path / "r.html")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stderr
    text = (tmp_path / "r.html").read_text()
    assert text.count("<svg class='pic'") == 2 and "<table>" in text


@pytest.fixture(scope="module")
def smoke_rope_grad(tmp_path_factory):
    path = tmp_path_factory.mktemp("selection") / "smoke.h5"
    assert invoke("generate", "-o", path, "--op", "rope_grad", "--op", "rope").exit_code == 0
    with goldens.open(path) as gf:
        a2 = next(c for c in gf.case_ids() if c.startswith("rope_grad/soc=A2/"))
        n_a2 = sum(c.startswith("rope_grad/soc=A2/") for c in gf.case_ids())
    return path, a2, n_a2


def test_an_empty_selection_says_which_filter_removed_which_cases(smoke_rope_grad, tmp_path):
    """Filters that together leave nothing: refspec's one line says what each filter removed
    (and why: the cases' chip profile or operator), not a run that judged nothing."""
    path, a2, n_a2 = smoke_rope_grad
    res = invoke("compare", path, tmp_path, "--soc", "950", "--case", a2)
    assert_user_error(res, f"no case selected: --case {a2} chose 1 case; --soc 950 removed it "
                           "(chip profile A2), leaving none")
    assert "nothing was judged" not in res.output
    res = invoke("compare", path, tmp_path, "--case", "rope_grad/soc=A2/*", "--op", "rope",
                 "--soc", "A2")
    assert_user_error(res, f"--case rope_grad/soc=A2/* chose {n_a2} cases; --op rope removed "
                           f"{n_a2} cases (operator rope_grad), leaving none")
    res = invoke("run", path, "--impl", "numpy_float32", "--soc", "950", "--case", a2)
    assert_user_error(res, "--soc 950 removed it (chip profile A2)")
    res = invoke("export", path, "-o", tmp_path / "out", "--soc", "950", "--case", a2)
    assert_user_error(res, "--soc 950 removed it (chip profile A2)")
    # a selection that leaves some cases is judged as before
    res = invoke("compare", path, tmp_path, "--soc", "A2", "--case", a2)
    assert res.exit_code == 1 and "1 cases not run" in res.output, res.output


def test_an_empty_selection_in_the_pytest_plugin_names_its_options(smoke_rope_grad, tmp_path):
    path, a2, _ = smoke_rope_grad
    impl = Path(__file__).resolve().parents[1] / "impls" / "numpy_float32.py"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "--refspec-golden", str(path),
                        "--refspec-impl", str(impl), "--refspec-soc", "950", "--refspec-case", a2],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 4, p.stdout[-2000:] + p.stderr[-2000:]
    assert (f"no case selected: --refspec-case {a2} chose 1 case; --refspec-soc 950 removed it "
            "(chip profile A2), leaving none") in p.stderr, p.stderr
