"""`refspec golden` (case folders, --msprobe, --vendor-ut), `refspec check-dump` and
`refspec compare GOLDEN --msprobe DUMP`: outputs, exit codes and one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import refspec.goldens as goldens

from msprobe_helpers import ROPE_MAP, DumpWriter, nrc_call, nrc_map, rope_calls
from cli_helpers import assert_user_error, invoke as run


@pytest.fixture
def dump(tmp_path):
    """(a dump of a correct float32 implementation, one of a broken one, the mapping file)."""
    out = []
    for name, bug, nrc_bug in (("good", None, None), ("bad", "wrong_sin_partner", "value_from_key")):
        rng = np.random.default_rng(3)
        w = DumpWriter(tmp_path / name, "mindspore")
        rope_calls(w, rng, calls=2, bug=bug)
        nrc_call(w, rng, bug=nrc_bug)
        w.close()
        out.append(tmp_path / name)
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2") + nrc_map("A2"))
    return out[0], out[1], tmp_path / "map.toml"


def test_golden_from_a_dump_then_compare_it_call_by_call(dump, tmp_path):
    good, bad, mapping = dump
    res = run("golden", "--msprobe", good, "--map", mapping, "-o", tmp_path / "g.h5")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip().startswith("wrote 6 cases (0 negative) to ")
    res = run("compare", tmp_path / "g.h5", "--msprobe", good)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: 29 passed")
    res = run("golden", "--msprobe", bad, "--map", mapping, "-o", tmp_path / "b.h5")
    res = run("compare", tmp_path / "b.h5", "--msprobe", bad, "--failures-only")
    assert res.exit_code == 1
    assert "rope_grad/msprobe/step0/rank0/NPU.npu_rotary_position_embedding.0" in res.stdout
    assert "    dx[b=" in res.stdout and " ulp) [rotary_position_embedding_grad" in res.stdout


def test_check_dump_makes_the_goldens_and_prints_the_report(dump, tmp_path):
    good, bad, mapping = dump
    res = run("check-dump", good, "--map", mapping)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "goldens: 6 calls (0 rejected by their profile)" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: 29 passed, 0 failed")
    res = run("check-dump", bad, "--map", mapping, "--json", tmp_path / "r.json",
              "-o", tmp_path / "kept.h5")
    assert res.exit_code == 1
    report = json.loads((tmp_path / "r.json").read_text())
    failed = [r for r in report["results"] if r["status"] not in ("pass", "too_strict")]
    assert {(r["case_id"].split("/")[-1], r["output"]) for r in failed} == {
        ("NPU.npu_rotary_position_embedding.0", "dx"), ("NPU.npu_rotary_position_embedding.1", "dx"),
        ("NPU.npu_norm_rope_concat.0", "grad_value"),
        ("NPU.npu_norm_rope_concat.0", "grad_encoder_value")}
    assert all(".backward.output." in r["source"] for r in failed)
    assert "    grad_value[b=0,s=" in res.stdout and "nrc_grad/msprobe/step0/rank0/NPU.npu_norm_rope_concat.0" in res.stdout
    with goldens.open(tmp_path / "kept.h5") as gf:
        assert len(gf) == 6
    assert_user_error(run("check-dump", bad, "--map", mapping, "-o", tmp_path / "kept.h5"),
                   "kept.h5: exists")


def test_golden_from_case_folders_and_vendor_ut_data(tmp_path):
    rng = np.random.default_rng(5)
    d = tmp_path / "case"
    d.mkdir()
    for name, shape in (("dy", (2, 8, 3, 16)), ("cos", (1, 8, 1, 16)), ("sin", (1, 8, 1, 16))):
        np.save(d / f"{name}.npy", rng.standard_normal(shape).astype(np.float16))
    (d / "case.json").write_text(json.dumps({"operator": "rope_grad", "soc": "A2",
                                             "attributes": {"mode": 3}}))
    res = run("golden", d, "-o", tmp_path / "g.h5")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("negative case rope_grad/case: the profile rejects it with 561002")
    assert lines[1].startswith("wrote 1 cases (1 negative)")
    ut = tmp_path / "ut"
    ut.mkdir()
    B, N, D, Sq, Sk = 1, 2, 8, 3, 4
    for name, shape in (("gradQueryOutput", (B, N, Sq, D)), ("gradKeyOutput", (B, N, Sk, D)),
                        ("gradValueOutput", (B, N, Sk, D)), ("query", (B, Sq, N, D)),
                        ("key", (B, Sk, N, D))):
        rng.standard_normal(shape).astype(np.float32).tofile(ut / f"{name}.bin")
    res = run("golden", "--vendor-ut", ut, "--ut-args", f"{B} {N} {D} {Sq} {Sk} {Sq} {Sk} 0 float32 0",
              "-o", tmp_path / "ut.h5")
    assert res.exit_code == 0, res.stderr
    with goldens.open(tmp_path / "ut.h5") as gf:
        (cid,) = gf.case_ids()
        assert cid == "nrc_grad/vendor-ut/tiling=0/dtype=float32/B1N2Sq3Sk4Seq0Sek0D8"
        assert gf[cid].soc == "A2"


def test_usage_errors_are_one_line(dump, tmp_path):
    good, _, mapping = dump
    out = tmp_path / "o.h5"
    assert_user_error(run("golden", "-o", out), "give one source of inputs")
    assert_user_error(run("golden", tmp_path, "--msprobe", good, "--map", mapping, "-o", out),
                   "got DIR and --msprobe")
    assert_user_error(run("golden", "--msprobe", good, "-o", out), "go together")
    assert_user_error(run("golden", "--vendor-ut", tmp_path, "-o", out), "needs --ut-args")
    assert_user_error(run("golden", good, "--soc", "A2", "-o", out), "--soc applies to --vendor-ut")
    assert_user_error(run("golden", good, "-o", out), str(good), "no case.json")
    (tmp_path / "bad.toml").write_text('[[api]]\nname = "npu_rope"\noperator = "rope_grad"\n'
                                       'soc = "A2"\ninputs = { dy = "backward.input.0" }\n')
    assert_user_error(run("golden", "--msprobe", good, "--map", tmp_path / "bad.toml", "-o", out),
                   "no API 'npu_rope' in the dump")
    assert_user_error(run("check-dump", good, "--map", tmp_path / "bad.toml"), "no API 'npu_rope'")
    assert_user_error(run("compare", tmp_path / "g.h5"), "missing ACTUAL")
    run("golden", "--msprobe", good, "--map", mapping, "-o", tmp_path / "g.h5")
    assert_user_error(run("compare", tmp_path / "g.h5", good, "--msprobe", good), "not both")
    assert_user_error(run("golden", "--msprobe", good, "--map", mapping, "-o", tmp_path / "g.h5"),
                   "g.h5: exists")
    assert run("golden", "--msprobe", good, "--map", mapping, "-o", tmp_path / "g.h5",
               "--force").exit_code == 0
