"""InterleaveRope as a record (refspec.ops.interleave_rope_records): the smoke sweep's blocks go
through list, generate, export and run with no operator-specific code outside the record; the
goldens are the spec function on the stored inputs; export names the files as the operator
does; implementations written from the README pass and broken ones fail."""

from __future__ import annotations

import json

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec import ops
from refspec.goldens.sweep import load_sweep
from cli_helpers import invoke as run
from repo_paths import TESTS

TORCH_IMPL = TESTS / "impls" / "torch_family.py"
NUMPY_IMPL = TESTS / "impls" / "numpy_float32.py"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = tmp_path_factory.mktemp("irope") / "irope.h5"
    res = run("generate", "--op", "interleave_rope", "-o", out)
    assert res.exit_code == 0, res.stderr
    return out


def test_the_smoke_sweep_covers_the_profiles_tables_and_faults():
    p = [c.params for c in load_sweep("smoke").cases() if c.op == "interleave_rope"]
    assert {q["soc"] for q in p} == {"A2", "A3", "950", None}
    assert {"B1SD", "B11D", "11SD", "BNSD"} <= {q["cos"] for q in p}
    assert {q["dtype"] for q in p} == {"float16", "bfloat16", "float32", "float64"}
    assert {q["fault"] for q in p} == {"none", "cos_dtype", "sin_shape"}
    assert {q["S"] for q in p if q["soc"] in ("A2", "A3")} >= {1, 512}, "both plans of A2/A3"
    listed = run("list", "--op", "interleave_rope", "--where", "cos=b11d").output.split()
    assert listed and all("/cos=B11D/" in i for i in listed)


def test_a_table_pattern_must_name_x_s_axes():
    axis = next(a for a in ops.get("interleave_rope").sweep.axes if a.name == "cos")
    assert axis.parse("b1sd") == "B1SD"
    for bad in ("T1D", "BS1D", "B1S"):
        with pytest.raises(ValueError, match="pattern"):
            axis.parse(bad)


def test_goldens_are_the_spec_function_on_the_stored_inputs(golden):
    negative = 0
    with goldens.open(golden) as gf:
        for case in gf:
            x = {n: case.inputs[n][()] for n in case.input_names}
            soc = case.params["soc"]
            if case.is_negative:
                negative += 1
                with pytest.raises(refspec.AclnnError) as info:
                    refspec.interleave_rope(**x, soc=soc)
                assert info.value.code == case.expected_error
                continue
            exact = refspec.interleave_rope(**x, soc=soc, out_dtype=np.float64)
            assert np.array_equal(case.exact["y"][()], exact)
            got = case.expected["y"][()]
            assert got.dtype == x["x"].dtype and got.shape == x["x"].shape
            assert np.shape(x["cos"]) == tuple(
                1 if c == "1" else case.params[c] for c in case.params["cos"][:-1]) + (
                case.params["D"],)
    assert negative >= 5


def test_export_names_the_files_as_the_operator(golden, tmp_path):
    assert run("export", golden, "-o", tmp_path / "e").exit_code == 0
    descs = [json.loads(p.read_text()) for p in (tmp_path / "e").rglob("case.json")]
    assert {d["aclnn_operator"] for d in descs} == {"aclnnInterleaveRope"}
    positive = next(d for d in descs if not d["expected_error"])
    assert {"x.bin", "cos.bin", "sin.bin", "golden_y.bin"} <= {f["name"] for f in positive["files"]}


def test_a_float32_implementation_passes_and_a_lost_minus_fails(golden):
    assert run("run", golden, "--impl", f"{NUMPY_IMPL}:EVERY", "--repeat", "0").exit_code == 0
    res = run("run", golden, "--impl", f"{NUMPY_IMPL}:LOST_MINUS", "--repeat", "0")
    assert res.exit_code == 1 and "FAIL " in res.output


def test_a_torch_implementation_passes_and_one_that_interleaves_back_fails(golden):
    pytest.importorskip("torch")
    res = run("run", golden, "--impl", TORCH_IMPL, "--framework", "torch", "--repeat", "0")
    assert res.exit_code == 0, res.output[-2000:]
    res = run("run", golden, "--impl", f"{TORCH_IMPL}:interleaved_back", "--framework", "torch",
              "--repeat", "0")
    failed = [line for line in res.output.splitlines() if line.startswith("FAIL ")]
    assert res.exit_code == 1 and failed and "y[b=" in res.output
