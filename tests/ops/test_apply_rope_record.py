"""ApplyRotaryPosEmb(V2) as records (refspec.ops.apply_rope_records): the smoke sweep's blocks
go through list, generate, show, export, compare and run with no operator-specific code outside
the record; the goldens are the spec functions on the stored inputs; export names the files as
the vendor's API does; a torch implementation written from the documents passes and broken ones
fail naming an element."""

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

OPS = ("apply_rope", "apply_rope_v2")
TORCH_IMPL = TESTS / "impls" / "torch_family.py"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = tmp_path_factory.mktemp("apply") / "apply.h5"
    res = run("generate", "--op", OPS[0], "--op", OPS[1], "-o", out)
    assert res.exit_code == 0, res.stderr
    return out


def test_the_smoke_sweep_covers_every_layout_mode_profile_and_fault():
    cases = [c for c in load_sweep("smoke").cases() if c.op in OPS]
    p = [c.params for c in cases]
    v2 = [q for q in p if q["op"] == "apply_rope_v2"]
    assert {q["layout"] for q in p} == {"BSND", "SBND", "BNSD", "TND"}
    assert {q["rotary_mode"] for q in v2} == {"half", "interleave", "quarter"}
    assert {q["soc"] for q in p} == {"A2", "A3", "950", None}
    assert {q["dtype"] for q in p} == {"float16", "bfloat16", "float32", "float64"}
    assert {q["fault"] for q in p} == {"none", "cos_dtype", "sin_shape", "key_dim"}
    assert {q["dist"] for q in p} == {"random", "rotary", "vendor", "position-coded", "special"}
    assert {c.op for c in cases} == set(OPS)
    listed = run("list", "--mode", "quarter", "--op", "apply_rope_v2").output.split()
    assert listed and all("/rotary_mode=quarter/" in i for i in listed)


def test_goldens_are_the_spec_functions_on_the_stored_inputs(golden):
    negative = 0
    with goldens.open(golden) as gf:
        for case in gf:
            record = ops.get(case.op)
            x = {n: case.inputs[n][()] for n in case.input_names}
            attrs = record.attrs_of(case.params)
            fn = getattr(refspec, record.function)
            if case.is_negative:
                negative += 1
                with pytest.raises(refspec.AclnnError) as info:
                    fn(**x, **attrs, soc=case.params["soc"])
                assert info.value.code == case.expected_error
                continue
            exact = fn(**x, **attrs, soc=case.params["soc"], out_dtype=np.float64)
            for name, want in zip(("query_out", "key_out"), exact):
                assert np.array_equal(case.exact[name][()], want)
                got = case.expected[name][()]
                assert got.dtype == x["query"].dtype and got.shape == x["query" if name ==
                                                                       "query_out" else "key"].shape
            assert case.output_meta("query_out")["axes"] == case.params["layout"]
    assert negative >= 10


def test_export_names_the_files_as_the_vendor_api(golden, tmp_path):
    assert run("export", golden, "-o", tmp_path / "e").exit_code == 0
    desc = json.loads(next((tmp_path / "e").rglob("case.json")).read_text())
    names = {f["name"] for f in desc["files"]}
    assert {"queryRef.bin", "keyRef.bin", "cos.bin", "sin.bin", "golden_queryOut.bin",
            "golden_keyOut.bin"} <= names or desc["expected_error"]
    assert desc["aclnn_operator"] in ("aclnnApplyRotaryPosEmb", "aclnnApplyRotaryPosEmbV2")
    golden_files = [f for f in desc["files"] if f["role"] == "golden"]
    assert {f["output_file"] for f in golden_files} <= {"queryOut.bin", "keyOut.bin"}


def test_a_torch_implementation_passes_and_broken_ones_fail(golden):
    pytest.importorskip("torch")
    res = run("run", golden, "--impl", TORCH_IMPL, "--framework", "torch")
    assert res.exit_code == 0, res.output[-2000:]
    assert "negative cases judged by status" in res.output.splitlines()[-1]
    res = run("run", golden, "--impl", f"{TORCH_IMPL}:key_untouched", "--framework", "torch")
    assert res.exit_code == 1
    failed = [line for line in res.output.splitlines() if line.startswith("FAIL ")]
    assert failed and all(" key_out " in line and "apply_rope_v2/" in line for line in failed)
    assert "key_out[b=" in res.output or "key_out[s=" in res.output or "key_out[t=" in res.output
