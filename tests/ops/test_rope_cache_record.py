"""RopeWithSinCosCache as a record (refspec.ops.rope_cache_records): the smoke sweep's blocks go
through list, generate, export and run with no operator-specific code outside the record; the
goldens are the spec function on the stored inputs; the positions follow their pattern and pick
rows inside the cache; export names the files as the vendor's API does; a vLLM-style torch
implementation passes and broken ones fail naming an element."""

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
    out = tmp_path_factory.mktemp("cache") / "cache.h5"
    res = run("generate", "--op", "rope_cache", "-o", out)
    assert res.exit_code == 0, res.stderr
    return out


def test_the_smoke_sweep_covers_styles_modes_patterns_profiles_and_faults():
    p = [c.params for c in load_sweep("smoke").cases() if c.op == "rope_cache"]
    assert {q["style"] for q in p} == {"neox", "gptj"}
    assert {q["mrope"] for q in p} == {"none", "16,24,24", "8,4,4"}
    assert {q["positions"] for q in p} == {"sequential", "repeated", "shuffled", "edges"}
    assert {q["soc"] for q in p} == {"A2", "A3", "950", None}
    assert {q["dtype"] for q in p} == {"float16", "bfloat16", "float32", "float64"}
    assert {q["fault"] for q in p} == {"none", "positions_dtype", "cache_dtype", "query_width",
                                       "odd_rotary_dim"}
    assert {q["R"] < q["head_size"] for q in p} == {True, False}
    listed = run("list", "--op", "rope_cache", "--where", "style=gptj").output.split()
    assert listed and all("/style=gptj/" in i for i in listed)


def test_positions_follow_their_pattern_inside_the_cache():
    record = ops.get("rope_cache")
    base = {"soc": "A2", "T": 8, "Nq": 2, "Nk": 1, "R": 32, "M": 5, "head_size": 64,
            "mrope": "16,24,24", "style": "neox", "dtype": "float32", "dist": "random",
            "fault": "none"}
    seen = {}
    for pattern in ("sequential", "repeated", "shuffled", "edges"):
        pos = record.generation.sample({**base, "positions": pattern}, 3)["positions"]
        assert pos.shape == (3, 8) and pos.dtype == np.int64
        assert pos.min() >= 0 and pos.max() < 5
        seen[pattern] = pos
    assert list(seen["sequential"][0]) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert list(seen["repeated"][0]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert set(seen["edges"].ravel()) == {0, 4}
    assert list(seen["shuffled"][0]) != list(seen["sequential"][0])
    assert sorted(np.bincount(seen["shuffled"][0], minlength=5)) == [1, 1, 2, 2, 2]  # 0..7 mod 5
    rows = {tuple(r) for r in seen["edges"]}
    assert len(rows) == 2, "mrope's position rows differ, so a kernel must use each"


def test_goldens_are_the_spec_function_on_the_stored_inputs(golden):
    negative = 0
    with goldens.open(golden) as gf:
        for case in gf:
            x = {n: case.inputs[n][()] for n in case.input_names}
            attrs = ops.get(case.op).attrs_of(case.params)
            if case.is_negative:
                negative += 1
                with pytest.raises(refspec.AclnnError) as info:
                    refspec.rope_with_sin_cos_cache(**x, **attrs, soc=case.params["soc"])
                assert info.value.code == case.expected_error
                continue
            exact = refspec.rope_with_sin_cos_cache(**x, **attrs, soc=case.params["soc"],
                                                    out_dtype=np.float64)
            for name, source, want in zip(("query_out", "key_out"), ("query", "key"), exact):
                assert np.array_equal(case.exact[name][()], want)
                got = case.expected[name][()]
                assert got.dtype == x[source].dtype and got.shape == x[source].shape
            assert attrs["is_neox_style"] is (case.params["style"] == "neox")
    assert negative >= 5


def test_export_names_the_files_as_the_vendor_api(golden, tmp_path):
    assert run("export", golden, "-o", tmp_path / "e").exit_code == 0
    for path in (tmp_path / "e").rglob("case.json"):
        desc = json.loads(path.read_text())
        assert desc["aclnn_operator"] == "aclnnRopeWithSinCosCache"
        if desc["expected_error"]:
            continue
        names = {f["name"] for f in desc["files"]}
        assert {"positions.bin", "queryIn.bin", "keyIn.bin", "cosSinCache.bin",
                "golden_queryOut.bin", "golden_keyOut.bin"} <= names
        break
    else:
        pytest.fail("no positive case exported")


def test_a_float32_implementation_passes_and_a_lost_minus_fails(golden):
    assert run("run", golden, "--impl", f"{NUMPY_IMPL}:EVERY", "--repeat", "0").exit_code == 0
    res = run("run", golden, "--impl", f"{NUMPY_IMPL}:LOST_MINUS", "--repeat", "0")
    assert res.exit_code == 1 and "FAIL " in res.output


def test_a_torch_implementation_passes_and_broken_ones_fail(golden):
    pytest.importorskip("torch")
    res = run("run", golden, "--impl", TORCH_IMPL, "--framework", "torch", "--repeat", "0")
    assert res.exit_code == 0, res.output[-2000:]
    assert "negative cases judged by status" in res.output.splitlines()[-1]
    res = run("run", golden, "--impl", f"{TORCH_IMPL}:one_position_row", "--framework", "torch",
              "--repeat", "0")
    failed = [line for line in res.output.splitlines() if line.startswith("FAIL ")]
    assert res.exit_code == 1 and failed
    assert all("/mrope=none/" not in line for line in failed)
    res = run("run", golden, "--impl", f"{TORCH_IMPL}:pass_through_rotated", "--framework",
              "torch", "--repeat", "0")
    failed = [line for line in res.output.splitlines() if line.startswith("FAIL ")]
    assert res.exit_code == 1 and failed
    assert all("R32" in line or "R16" in line for line in failed if "rope_cache/" in line)
