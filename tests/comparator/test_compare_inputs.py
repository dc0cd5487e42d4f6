"""Proof (d): every input problem is a per-output status, never a crash; every actual-output
form is read (export directory / tree of .bin and .npy, .npz, HDF5, msprobe dumps)."""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.goldens.cases import CaseData
from refspec.goldens.export import export_cases as export
from refspec.goldens.example import nrc_backward_case, rope_grad_case

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden")
    path = str(d / "g.h5")
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(2, 2, 4, 8), dtype='bfloat16', case_id='rope/bf16'))
        w.write_case(nrc_backward_case(dtype='float16', case_id='nrc/f16'))
    return path


def expected_arrays(path):
    with goldens.open(path) as gf:
        return {c.case_id: {n: c.expected[n][()] for n in c.output_names} for c in gf}


def statuses(report):
    return {(r.case_id, r.output): r for r in report.results}


def test_export_directory_with_every_problem(golden, tmp_path):
    out = tmp_path / "out"
    export(golden, out)
    exp = expected_arrays(golden)
    rope = out / "rope" / "bf16"
    exp["rope/bf16"]["dx"].view(np.uint16).tofile(rope / "dx.bin")                # good .bin (bits)
    np.save(rope / "dcos.npy", exp["rope/bf16"]["dcos"].view(np.uint16))          # .npy as uint16
    np.save(rope / "dsinOut.npy", exp["rope/bf16"]["dsin"])                       # .npy as V2, alias
    nrc = out / "nrc" / "f16"
    for name, a in exp["nrc/f16"].items():
        camel = "".join(p.capitalize() if i else p for i, p in enumerate(name.split("_")))
        a.tofile(nrc / f"{camel}.bin")
    os.remove(nrc / "gradKey.bin")                                                 # missing
    np.zeros(3, np.float16).tofile(nrc / "gradQuery.bin")                          # size
    np.save(nrc / "grad_encoder_query.npy", exp["nrc/f16"]["grad_encoder_query"].astype(np.float32))
    os.remove(nrc / "gradEncoderQuery.bin")                                        # dtype (.npy)
    np.save(nrc / "gradEncoderKey.npy", exp["nrc/f16"]["grad_encoder_key"].reshape(-1))
    os.remove(nrc / "gradEncoderKey.bin")                                          # shape (.npy)
    (nrc / "gradNormQueryBias.npy").write_bytes(b"\x93NUMPY garbage")
    os.remove(nrc / "gradNormQueryBias.bin")                                       # unreadable
    report = compare(golden, str(out))
    s = statuses(report)
    assert all(s[("rope/bf16", n)].status == "pass" for n in ("dx", "dcos", "dsin"))
    assert s[("nrc/f16", "grad_key")].status == "missing"
    r = s[("nrc/f16", "grad_query")]
    assert r.status == "size_mismatch" and "6 bytes" in r.reason and "512 bytes" in r.reason
    assert s[("nrc/f16", "grad_encoder_query")].status == "dtype_mismatch"
    assert "float32" in s[("nrc/f16", "grad_encoder_query")].reason
    assert s[("nrc/f16", "grad_encoder_key")].status == "shape_mismatch"
    assert s[("nrc/f16", "grad_norm_query_bias")].status == "unreadable"
    assert s[("nrc/f16", "grad_value")].status == "pass"
    assert not report.passed and report.exit_code == 1
    for r in report.failures:
        assert r.message and "\n" not in r.message and r.context in r.message


def test_bin_written_as_wrong_dtype_says_sizes(golden, tmp_path):
    exp = expected_arrays(golden)
    d = tmp_path / "rope" / "bf16"
    d.mkdir(parents=True)
    exp["rope/bf16"]["dx"].astype(np.float32).tofile(d / "dx.bin")
    r = statuses(compare(golden, str(tmp_path), cases=["rope/bf16"]))[("rope/bf16", "dx")]
    assert r.status == "size_mismatch"
    assert "512 bytes, expected 256 bytes" in r.reason and "32-bit" in r.reason


def test_truncated_npy_and_directory_in_place_of_file(golden, tmp_path):
    exp = expected_arrays(golden)
    d = tmp_path / "rope" / "bf16"
    d.mkdir(parents=True)
    np.save(d / "dx.npy", exp["rope/bf16"]["dx"].view(np.uint16))
    data = (d / "dx.npy").read_bytes()
    (d / "dx.npy").write_bytes(data[:-10])
    (d / "dcos.bin").mkdir()
    s = statuses(compare(golden, str(tmp_path), cases=["rope/bf16"]))
    assert s[("rope/bf16", "dx")].status == "unreadable" and "truncated" in s[("rope/bf16", "dx")].reason
    assert s[("rope/bf16", "dcos")].status == "unreadable"
    assert s[("rope/bf16", "dsin")].status == "missing"


def test_npz_keys_by_case_and_bare_names(golden, tmp_path):
    exp = expected_arrays(golden)
    arrays = {f"{c}/{n}": a.view(np.uint16) if a.dtype == BF16 else a
              for c, outs in exp.items() for n, a in outs.items()}
    np.savez(tmp_path / "all.npz", **arrays)
    assert compare(golden, str(tmp_path / "all.npz")).passed
    np.savez(tmp_path / "one.npz", **{n: a.view(np.uint16) for n, a in exp["rope/bf16"].items()})
    assert compare(golden, str(tmp_path / "one.npz"), cases=["rope/bf16"]).passed
    # a pickled object array is never loaded
    np.savez(tmp_path / "obj.npz", **{"rope/bf16/dx": np.array([object()], dtype=object)})
    r = statuses(compare(golden, str(tmp_path / "obj.npz"), cases=["rope/bf16"]))[("rope/bf16", "dx")]
    assert r.status == "unreadable"


def test_npz_with_mapping_file(golden, tmp_path):
    exp = expected_arrays(golden)
    np.savez(tmp_path / "run.npz", **{"first": exp["rope/bf16"]["dx"].view(np.uint16)})
    (tmp_path / "map.toml").write_text('[[map]]\nkey = "first"\ncase = "rope/bf16"\noutput = "dx"\n')
    s = statuses(compare(golden, str(tmp_path / "run.npz"), cases=["rope/bf16"],
                         mapping=str(tmp_path / "map.toml")))
    assert s[("rope/bf16", "dx")].status == "pass"


def test_hdf5_of_another_implementation(golden, tmp_path):
    other = str(tmp_path / "other.h5")
    with goldens.open(golden) as gf, goldens.GoldenWriter(other, sweep_name="x", sweep_definition="",
                                                            sweep_seed=0) as w:
        for case in gf:
            exp = {n: case.expected[n][()] for n in case.output_names}
            if case.case_id == "rope/bf16":
                exp["dx"] = exp["dx"].copy()
                exp["dx"][1, 0, 2, 5] = -exp["dx"][1, 0, 2, 5] - 1
            from refspec.spec.terms import OutputTerms
            terms = {n: OutputTerms(case.output_meta(n)["comparison_class"],
                                    case.output_meta(n)["reduced_terms"],
                                    case.sum_abs[n][()] if n in case.sum_abs else None)
                     for n in case.output_names}
            w.write_case(CaseData(case.case_id, case.op, case.params, case.seed,
                                  {n: case.inputs[n][()] for n in case.input_names}, exp,
                                  {n: case.exact[n][()] for n in case.output_names}, terms,
                                  {n: case.output_meta(n)["axes"] for n in case.output_names}))
    report = compare(golden, other)
    bad = report.failures
    assert [(r.case_id, r.output) for r in bad] == [("rope/bf16", "dx")]
    assert bad[0].message.startswith("dx[b=1,n=0,s=2,d=5] = ")


def _msprobe_dump(root, golden, torch_files=False):
    exp = expected_arrays(golden)["rope/bf16"]
    rank = root / "step0" / "rank0"
    (rank / "dump_tensor_data").mkdir(parents=True)
    outs = []
    for i, name in enumerate(("dx", "dcos", "dsin")):
        a = exp[name]
        data_name = f"NPU.npu_rotary_mul.0.backward.output.{i}.{'pt' if torch_files else 'npy'}"
        if torch_files:
            import torch
            torch.save(torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16),
                       rank / "dump_tensor_data" / data_name)
        elif i == 2:
            np.save(rank / "dump_tensor_data" / data_name, a.astype(np.float32))   # bf16 as float32
        else:
            np.save(rank / "dump_tensor_data" / data_name, a)                      # bf16 as V2
        outs.append({"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": list(a.shape),
                     "Max": float(a.astype(np.float32).max()), "Min": 0.0, "Mean": 0.0, "Norm": 0.0,
                     "requires_grad": False, "data_name": data_name})
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": str(root),
           "data": {"NPU.npu_rotary_mul.0.backward": {"input": [], "output": outs}}}
    (rank / "dump.json").write_text(json.dumps(doc))
    return rank


MAP = """
[[map]]
data_name = "NPU.npu_rotary_mul.0.backward.output.0.{ext}"
case = "rope/bf16"
output = "dx"

[[map]]
api = "NPU.npu_rotary_mul.0.backward"
index = 1
case = "rope/bf16"
output = "dcos"

[[map]]
api = "NPU.npu_rotary_mul.0.backward"
index = 2
case = "rope/bf16"
output = "dsinOut"
"""


def test_msprobe_npy_dump_with_mapping(golden, tmp_path):
    _msprobe_dump(tmp_path / "dump", golden)
    (tmp_path / "map.toml").write_text(MAP.format(ext="npy"))
    report = compare(golden, str(tmp_path / "dump"), cases=["rope/bf16"], mapping=str(tmp_path / "map.toml"))
    assert report.passed, str(report)


def test_msprobe_json_dtype_is_authoritative(golden, tmp_path):
    rank = _msprobe_dump(tmp_path / "dump", golden)
    doc = json.loads((rank / "dump.json").read_text())
    doc["data"]["NPU.npu_rotary_mul.0.backward"]["output"][0]["dtype"] = "torch.float16"
    (rank / "dump.json").write_text(json.dumps(doc))
    (tmp_path / "map.json").write_text(json.dumps({"map": [
        {"data_name": "NPU.npu_rotary_mul.0.backward.output.0.npy", "case": "rope/bf16", "output": "dx"}]}))
    s = statuses(compare(golden, str(tmp_path / "dump"), cases=["rope/bf16"], mapping=str(tmp_path / "map.json")))
    assert s[("rope/bf16", "dx")].status == "dtype_mismatch"
    assert s[("rope/bf16", "dcos")].status == "missing"           # not in the mapping


def test_msprobe_pt_dump(golden, tmp_path):
    pytest.importorskip("torch")
    _msprobe_dump(tmp_path / "dump", golden, torch_files=True)
    (tmp_path / "map.toml").write_text(MAP.format(ext="pt"))
    report = compare(golden, str(tmp_path / "dump"), cases=["rope/bf16"], mapping=str(tmp_path / "map.toml"))
    assert report.passed, str(report)


def test_unusable_arguments_raise(golden, tmp_path):
    from refspec.comparator import CompareUsageError, MappingError
    with pytest.raises(CompareUsageError):
        compare(golden, str(tmp_path / "nothere"))
    (tmp_path / "dump" / "step0" / "rank0").mkdir(parents=True)
    (tmp_path / "dump" / "step0" / "rank0" / "dump.json").write_text("{}")
    with pytest.raises(CompareUsageError):
        compare(golden, str(tmp_path / "dump"))                   # msprobe needs a mapping
    (tmp_path / "bad.toml").write_text("[[map]]\ncase = 1\n")
    with pytest.raises(MappingError):
        compare(golden, str(tmp_path / "dump"), mapping=str(tmp_path / "bad.toml"))
    with pytest.raises(CompareUsageError):
        compare(golden, {}, standard="nope")
    with pytest.raises(goldens.GoldenFileError):
        compare(str(tmp_path / "bad.toml"), {})


def test_a_golden_file_compared_with_itself_passes(tmp_path):
    """A golden file as the actual outputs: its expected outputs decoded as the reader decodes
    them (bfloat16 included) and each case's status the one it was made with, so a negative
    case is judged by its expected code; a file of a --jobs run (an index and its parts) too."""
    from refspec.goldens.engine import generate
    from refspec.goldens.sweep import load_sweep
    sweep = load_sweep("smoke")
    cases = [c for c in sweep.cases() if c.op in ("rope_grad", "nrc")][::6]
    assert {c.params["dtype"] for c in cases} >= {"bfloat16", "float16", "float32"}
    for jobs in (1, 2):
        path = tmp_path / f"g{jobs}.h5"
        generate(sweep, cases, path, jobs=jobs)
        report = compare(str(path), str(path))
        assert report.passed and not report.not_run, report.summary_line()
        negative = [r for r in report.results if r.output == "(status)"]
        assert negative and all(r.status == "pass" for r in negative)
        assert {r.dtype for r in report.results} >= {"bfloat16", "float16", "float32"}
