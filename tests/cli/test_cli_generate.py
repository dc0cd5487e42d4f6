"""`refspec list` and `refspec generate`: output, filters, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import refspec.goldens as goldens
from refspec.goldens.cases import probe
from refspec.goldens.sweep import load_sweep
from cli_helpers import assert_user_error, invoke as run

TINY = """
name = "tiny"
seed = 3
[[block]]
op = "rope_grad"
[block.axes]
soc = ["A2", "950"]
mode = ["half", "quarter"]
layout = ["BNSD", "TND"]
dtype = ["bfloat16", "float32"]
shape = ["B2N3S4D8"]
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return str(path)


def test_list_prints_ids_of_the_default_smoke_sweep():
    result = run("list")
    assert result.exit_code == 0
    assert result.stdout.split() == [c.id for c in load_sweep("smoke").cases()]


def test_list_filters_and_json(tiny):
    result = run("list", "--sweep", tiny, "--soc", "950", "--mode", "quarter", "--dtype", "bf16")
    ids = result.stdout.split()
    assert ids == ["rope_grad/soc=950/mode=quarter/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N3S4D8",
                   "rope_grad/soc=950/mode=quarter/layout=TND/cos=T1D/dtype=bfloat16/x=1/dist=random/B2N3S4D8"]
    doc = json.loads(run("list", "--sweep", tiny, "--json").stdout)
    assert doc["sweep"] == "tiny" and doc["tier"] == "all" and len(doc["cases"]) == 16
    for row in doc["cases"]:
        err = probe(row["params"])
        assert row["expected_error_code"] == (None if err is None else err.code)
        assert row["op"] == "rope_grad" and isinstance(row["seed"], int)
    codes = {r["id"].split("/")[1] + "/" + r["id"].split("/")[2] + "/" + r["id"].split("/")[3]:
             r["expected_error_code"] for r in doc["cases"] if "dtype=float32" in r["id"]}
    assert codes["soc=A2/mode=quarter/layout=BNSD"] == 561002          # A2: no quarter mode
    assert codes["soc=950/mode=half/layout=TND"] == 561002             # 950: 4-D only
    assert codes["soc=950/mode=quarter/layout=BNSD"] is None
    assert run("list", "--sweep", tiny, "--layout", "TND", "--op", "rope").stdout == ""


@pytest.mark.parametrize("args, fragments", [
    (["list", "--sweep", "nosuch"], ["unknown sweep 'nosuch'", "smoke"]),
    (["list", "--dtype", "fp8"], ["--dtype: unknown value 'fp8'", "bfloat16"]),
    (["list", "--mode", "spiral"], ["--mode: unknown value 'spiral'"]),
    (["list", "--op", "gemm"], ["--op: unknown value 'gemm'"]),
    (["list", "--soc", "910"], ["--soc: unknown value '910'"]),
    (["list", "--tier", "nope"], ["no tier 'nope'", "smoke"]),
    (["generate", "--case", "rope_grad/nope", "-o", "{tmp}/x.h5"], ["not in sweep 'smoke'"]),
    (["generate", "--shard", "3/2", "-o", "{tmp}/x.h5"], ["--shard '3/2'", "K/N"]),
    (["generate", "--op", "rope", "--soc", "A3", "-o", "{tmp}/x.h5"],
     ["no case of sweep 'smoke' matches"]),
    (["generate", "-o", "{tmp}/missing/x.h5"], ["does not exist"]),
    (["generate", "-o", "{tmp}"], ["is a directory"]),
    (["generate", "--resume", "--force", "-o", "{tmp}/x.h5"], ["exclude each other"]),
])
def test_user_errors_are_one_line_exit_2(args, fragments, tmp_path):
    assert_user_error(run(*[a.replace("{tmp}", str(tmp_path)) for a in args]), *fragments)


def test_bad_option_values_exit_2(tmp_path):
    result = run("generate", "--compression", "zstd", "-o", str(tmp_path / "x.h5"))
    assert result.exit_code == 2 and "zstd" in result.stderr and "Traceback" not in result.output
    result = run("generate", "--jobs", "-1", "-o", str(tmp_path / "x.h5"))
    assert result.exit_code == 2
    assert run("generate").exit_code == 2                     # -o is required


def test_malformed_and_invalid_sweep_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace('soc = ["A2", "950"]', 'soc = ["A2", "950"'))
    assert_user_error(run("list", "--sweep", str(bad)), str(bad), "malformed TOML", "line")
    bad.write_text(TINY.replace('"quarter"', '"quartet"'))
    assert_user_error(run("generate", "--sweep", str(bad), "-o", str(tmp_path / "o.h5")),
                      str(bad), "block 1", "axis 'mode': unknown value 'quartet'")
    assert not (tmp_path / "o.h5").exists()


def test_unwritable_output_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):
            assert_user_error(run("generate", "--op", "rope", "-o", str(ro / "x.h5")), "not writable")
            return
    finally:
        ro.chmod(0o700)
    # privileges that ignore permissions: a directory where no file can be created at all
    if not os.path.isdir("/proc/self"):
        pytest.skip("no unwritable directory available")
    assert_user_error(run("generate", "--op", "rope", "-o", "/proc/self/x.h5"), "/proc/self/x.h5")


def test_generate_writes_a_file_and_a_summary(tiny, tmp_path):
    out = tmp_path / "t.h5"
    result = run("generate", "--sweep", tiny, "--dtype", "float32", "-o", str(out),
                 "--compression", "gzip")
    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert line.startswith("wrote 8 cases (4 negative) to ") and " MB on disk, " in line
    with goldens.open(out) as gf:
        assert len(gf.case_ids()) == 8 and gf.attrs["sweep_name"] == "tiny"
        assert gf.attrs["compression"].startswith("gzip") and gf.attrs["tier"] == "all"
        negative = [c for c in gf if c.is_negative]
        assert len(negative) == 4 and all(c.expected_error == 561002 for c in negative)
    # an existing output needs --force or --resume
    assert_user_error(run("generate", "--sweep", tiny, "-o", str(out)), "exists", "--force", "--resume")
    result = run("generate", "--sweep", tiny, "--dtype", "float32", "--resume", "-o", str(out))
    assert result.exit_code == 0 and "wrote 0 cases" in result.stdout and "8 already present" in result.stdout
    (tmp_path / "u.h5.part").write_text("")
    assert_user_error(run("generate", "--sweep", tiny, "-o", str(tmp_path / "u.h5")),
                      "interrupted run", "--resume")


def test_generate_one_case_and_shards_with_merge(tiny, tmp_path):
    cid = "rope_grad/soc=950/mode=quarter/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/dist=random/B2N3S4D8"
    one = tmp_path / "one.h5"
    assert run("generate", "--sweep", tiny, "--case", cid, "-o", str(one)).exit_code == 0
    parts = []
    for k in (1, 2):
        part = tmp_path / f"s{k}.h5"
        result = run("generate", "--sweep", tiny, "--shard", f"{k}/2", "-o", str(part))
        assert result.exit_code == 0 and "wrote 8 cases" in result.stdout
        parts.append(str(part))
    merged = tmp_path / "m.h5"
    assert run("merge", str(merged), *parts).exit_code == 0
    with goldens.open(one) as a, goldens.open(merged) as m:
        assert a.case_ids() == [cid] and len(m.case_ids()) == 16
        for name in a[cid].inputs:
            assert a[cid].inputs[name].read().tobytes() == m[cid].inputs[name].read().tobytes()
        for name in a[cid].expected:
            assert a[cid].exact[name].read().tobytes() == m[cid].exact[name].read().tobytes()
    with goldens.open(parts[0]) as p1:
        assert p1.attrs["shard"] == "1/2"
        order = [c.id for c in load_sweep(tiny).cases()]
        assert p1.case_ids() == order[0::2]


def test_console_script_bare_generate_uses_smoke_and_no_traceback(tmp_path):
    exe = os.path.join(os.path.dirname(sys.executable), "refspec")
    if not os.path.exists(exe):
        pytest.skip("console script not installed")
    proc = subprocess.run([exe, "generate", "--op", "rope", "--soc", "950", "-o", str(tmp_path / "g.h5")],
                          capture_output=True, text=True, timeout=120)
    want = len([c for c in load_sweep("smoke").cases() if c.op == "rope" and c.params["soc"] == "950"])
    assert proc.returncode == 0 and proc.stdout.startswith(f"wrote {want} cases"), proc.stderr
    assert (tmp_path / "g.h5").exists() and not (tmp_path / "g.h5.part").exists()
    proc = subprocess.run([exe, "list", "--sweep", str(tmp_path / "none.toml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
