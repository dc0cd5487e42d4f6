"""`refspec show`, `refspec export`, `refspec merge`: output and one-line errors (exit 2)."""

from refspec.goldens.cases import CaseData
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.goldens.example import nrc_backward_case, rope_grad_case
from cli_helpers import assert_user_error, invoke as run

SWEEP = dict(sweep_name="cli", sweep_definition='name = "cli"\nseed = 9\n', sweep_seed=9)
RG = "rope_grad/mode=half/dtype=bfloat16/B2N4S16D32"
NRC = "nrc_grad/types=2,1/dtype=float32"
NEG = "rope_grad/neg/mode=quarter/soc=A2"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "g.h5"
    neg = rope_grad_case(dtype="float16", seed=4)
    with goldens.GoldenWriter(path, **SWEEP) as w:
        w.write_case(rope_grad_case(dtype='bfloat16', seed=1, case_id=RG))
        w.write_case(nrc_backward_case(dtype='float32', seed=2, case_id=NRC))
        w.write_case(CaseData(NEG, neg.op, {**neg.params, 'soc': 'A2'}, 4, neg.inputs,
                              regenerate='refspec generate --sweep cli --case ' + NEG,
                              error=refspec.TilingError('mode: 2 has no kernel on A2')))
    return str(path)


def test_show_file_summary(golden):
    res = run("show", golden)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert "sweep:             cli (seed 9)" in out
    assert "cases:             3 (1 negative)" in out
    assert "nrc_grad 1" in out and "rope_grad 2" in out
    assert "bfloat16 1" in out and "float16 1" in out and "float32 1" in out
    assert "A2 1" in out and "none 2" in out and "schema_version:    2" in out
    summary = json.loads(run("show", golden, "--json").stdout)
    assert summary["cases"] == 3 and summary["negative"] == 1 and summary["complete"] is True
    assert summary["attrs"]["sweep_definition"] == SWEEP["sweep_definition"]
    # the data size is the sum of every dataset's logical size
    with goldens.open(golden) as gf:
        total = sum(g[n].nbytes for c in gf for g in (c.inputs, c.expected, c.exact, c.sum_abs) for n in g)
    assert summary["data_bytes"] == total and summary["file_bytes"] == os.path.getsize(golden)
    assert run("show", golden, "--ids").stdout.split() == [RG, NRC, NEG]


def test_show_case(golden):
    res = run("show", golden, RG)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert f"case:              {RG}" in out and "op:                rope_grad" in out
    assert '  mode:                "half"' in out and '  layout:              "BNSD"' in out
    assert "seed:              1" in out and "soc:               none (math only)" in out
    assert "expected error:    none (positive case)" in out
    dy = next(line for line in out.splitlines() if line.strip().startswith("dy "))
    assert "2x4x16x32" in dy and "bfloat16" in dy and "8.0 KiB" in dy and " none" in dy
    dcos = next(line for line in out.splitlines() if line.strip().startswith("dcos "))
    assert "class=reduction K=8 axes=BNSD sum_abs=yes" in dcos
    assert "regenerate:        refspec.goldens.example.rope_grad_case(" in out
    neg = run("show", golden, NEG).stdout
    assert "expected error:    561002 ACLNN_ERR_INNER_TILING_ERROR: mode: 2 has no kernel on A2" in neg
    data = json.loads(run("show", golden, NRC, "--json").stdout)
    gq = data["outputs"]["grad_query"]
    assert gq["comparison_class"] == "row_reduction" and gq["reduced_terms"] == 16
    assert gq["shape"] == [1, 8, 2, 16] and gq["dtype"] == "float32" and gq["bytes"] == 1 * 8 * 2 * 16 * 4
    assert gq["exact"]["dtype"] == "float64" and gq["sum_abs"]["shape"] == [1, 8, 2, 16]
    assert data["params"]["norm_type"] == 2 and data["expected_error"] is None


def test_export_and_merge_commands(golden, tmp_path):
    res = run("export", golden, "--case", RG, "--format", "npy", "-o", tmp_path / "out")
    assert res.exit_code == 0, res.stderr
    d = tmp_path / "out" / RG
    assert (d / "golden_dx.npy").exists() and (d / "case.json").exists()
    assert np.load(d / "dy.npy", allow_pickle=False).dtype == np.uint16
    assert_user_error(run("export", golden, "--case", RG, "--format", "npy", "-o", tmp_path / "out"),
                   "exists", "--force")
    assert run("export", golden, "--case", RG, "--format", "npy", "-o", tmp_path / "out",
               "--force").exit_code == 0
    res = run("merge", tmp_path / "m.h5", golden)
    assert res.exit_code == 0, res.stderr
    assert "merged 3 cases from 1 shard(s)" in res.stderr
    assert_user_error(run("merge", tmp_path / "m.h5", golden), "exists", "--force")
    assert_user_error(run("merge", tmp_path / "m2.h5", golden, golden), "duplicate case id")


def test_cli_errors_are_one_line(golden, tmp_path):
    assert_user_error(run("show", tmp_path / "missing.h5"), "missing.h5: no such file")
    notes = tmp_path / "notes.h5"
    notes.write_text("not hdf5")
    assert_user_error(run("show", notes), "not an HDF5 file")
    assert_user_error(run("show", golden, "rope_grad/nope"), "case 'rope_grad/nope' is not in")
    assert_user_error(run("export", golden, "--case", "nope", "-o", tmp_path / "o"), "'nope' is not in")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_user_error(run("export", golden, "-o", blocker / "sub"))          # cannot create the dir
    assert_user_error(run("export", golden, "-o", blocker), "is a file")
    res = run("export", golden, "--format", "pt", "-o", tmp_path / "o")
    assert res.exit_code == 2 and "Traceback" not in res.stderr


def test_real_process_one_line_exit_2(golden, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    for args, fragment in ((["show", golden, "no/such/case"], "is not in"),
                           (["export", golden, "-o", str(blocker / "x")], str(blocker)),
                           (["show", str(tmp_path / "none.h5")], "no such file")):
        proc = subprocess.run([sys.executable, "-c", "from refspec.cli import main; main()",
                               *map(str, args)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("refspec: error:") and fragment in lines[0]
        assert "Traceback" not in proc.stderr


def test_show_and_pack_of_a_jobs_run_and_merge_allow_partial(tmp_path):
    from refspec.goldens.engine import Run, generate
    from refspec.goldens.sweep import load_sweep
    smoke = load_sweep("smoke")
    cases = smoke.cases()[:40]
    out = tmp_path / "j.h5"
    generate(smoke, cases, out, jobs=2)
    res = run("show", out)
    assert res.exit_code == 0, res.stderr
    assert "complete:          yes" in res.output and f"cases:             {len(cases)}" in res.output
    assert "part files in" in res.output and "refspec pack" in res.output
    res = run("pack", out, "-o", tmp_path / "self.h5")
    assert res.exit_code == 0, res.stderr
    assert "part files" not in run("show", tmp_path / "self.h5").output
    assert_user_error(run("pack", out, "-o", tmp_path / "self.h5"), "exists", "--force")
    shard1 = tmp_path / "s1.h5"
    generate(Run.of(smoke, extra_attrs={"shard": "1/2", "tier": "smoke"}), cases[0::2], shard1)
    assert_user_error(run("merge", tmp_path / "m.h5", shard1), "missing shard 2/2", "--allow-partial")
    res = run("merge", tmp_path / "m.h5", shard1, "--allow-partial")
    assert res.exit_code == 0 and "PARTIAL: missing shard 2/2" in res.stderr
    assert_user_error(run("show", tmp_path / "m.h5"), "m.h5: incomplete: a partial merge "
                      "(missing shard 2/2)", "--allow-incomplete")
    assert "complete:          NO (partial: missing shard 2/2)" in run(
        "show", tmp_path / "m.h5", "--allow-incomplete").output


def test_show_of_an_unknown_case_says_how_to_list_the_ids(golden):
    assert_user_error(run("show", golden, "nosuch"), "case 'nosuch' is not in",
                      f"`refspec show {golden} --ids` lists them")
    listed = run("show", golden, "--ids")
    assert listed.exit_code == 0 and listed.output.split() == [RG, NRC, NEG]


def test_a_truncated_file_is_reported_truncated_not_locked(golden, tmp_path):
    cut = tmp_path / "cut.h5"
    cut.write_bytes(open(golden, "rb").read()[:20000])
    res = run("show", cut)
    assert_user_error(res, "cut.h5: cannot open the HDF5 file: truncated")
    assert "locked" not in res.stderr


def test_a_missing_file_names_what_an_interrupted_run_left_beside_it(golden, tmp_path):
    """After Ctrl-C, OUT.h5 does not exist yet: the message names OUT.h5.part (or the
    OUT.h5.parts/ folder of a --jobs run) and what to do with it."""
    out = tmp_path / "x.h5"
    part = tmp_path / "x.h5.part"
    part.write_bytes(open(golden, "rb").read())
    assert_user_error(run("show", out), "x.h5: no such file", f"{part} beside it",
                      f"`refspec show --allow-incomplete {part}`", "--resume")
    assert run("show", "--allow-incomplete", part).exit_code == 0
    part.unlink()
    (tmp_path / "x.h5.parts").mkdir()
    assert_user_error(run("show", out), "x.h5: no such file", f"x.h5.parts{os.sep} beside it",
                      "--resume")
