"""Export of golden cases to .bin / .npy directories with case.json."""

from dataclasses import replace
from refspec.goldens.cases import CaseData
import hashlib
import io
import json
import os

import ml_dtypes
import numpy as np
import pytest

import refspec
import refspec.goldens.export as export_mod
import refspec.goldens as goldens
from refspec.goldens.export import ExportError, export_cases as export
from refspec.goldens.example import nrc_backward_case, rope_grad_case

SWEEP = dict(sweep_name="exp", sweep_definition="", sweep_seed=1)
ROPE_ID = "rope_grad/mode=half/layout=BNSD/cos=11SD/dtype=bfloat16/x=1/B2N4S16D32"
NRC_ID = "nrc_grad/types=2,1/dtype=float16"
NEG_ID = "rope_grad/neg/d=odd"


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "g.h5"
    cases = {ROPE_ID: rope_grad_case(dtype="bfloat16", seed=1),
             NRC_ID: nrc_backward_case(dtype="float16", norm_type=2, norm_added_type=1, seed=2)}
    neg = rope_grad_case(dtype="float32", seed=3)
    with goldens.GoldenWriter(path, **SWEEP) as w:
        for case_id, kw in cases.items():
            w.write_case(replace(kw, case_id=case_id))
        w.write_case(CaseData(NEG_ID, neg.op, {**neg.params, "soc": "A2"}, 3, neg.inputs, regenerate='r',
                              error=refspec.TilingError('dy: D=31 must be even')))
    return path, cases, neg


def le_bytes(a):
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        a = a.view(np.uint16)
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


@pytest.mark.parametrize("small_blocks", [False, True])
def test_bin_export_is_raw_little_endian_with_vendor_names(golden, tmp_path, monkeypatch, small_blocks):
    path, cases, _ = golden
    if small_blocks:                       # several blocks per file
        monkeypatch.setattr(export_mod, "BLOCK_BYTES", 300)
    dirs = export(path, tmp_path, [ROPE_ID, NRC_ID], fmt="bin")
    assert dirs == [os.path.join(tmp_path, *ROPE_ID.split("/")), os.path.join(tmp_path, *NRC_ID.split("/"))]
    d = dirs[0]
    assert sorted(os.listdir(d)) == sorted(["dy.bin", "cos.bin", "sin.bin", "x.bin", "golden_dx.bin",
                                            "golden_dcos.bin", "golden_dsin.bin", "case.json"])
    kw = cases[ROPE_ID]
    for name, arr in kw.inputs.items():
        assert open(os.path.join(d, f"{name}.bin"), "rb").read() == le_bytes(arr)
    for name, arr in kw.expected.items():
        raw = open(os.path.join(d, f"golden_{name}.bin"), "rb").read()
        assert raw == le_bytes(arr) and len(raw) == arr.size * 2
    nrc = dirs[1]
    kw = cases[NRC_ID]
    assert open(os.path.join(nrc, "gradQueryOutput.bin"), "rb").read() == le_bytes(kw.inputs["grad_query_output"])
    assert open(os.path.join(nrc, "normQueryMean.bin"), "rb").read() == le_bytes(kw.inputs["norm_query_mean"])
    assert open(os.path.join(nrc, "ropeSin.bin"), "rb").read() == le_bytes(kw.inputs["rope_sin"])
    assert open(os.path.join(nrc, "golden_gradNormQueryWeight.bin"), "rb").read() == \
        le_bytes(kw.expected["grad_norm_query_weight"])
    assert not os.path.exists(os.path.join(nrc, "normAddedQueryWeight.bin"))     # absent input
    assert not [f for f in os.listdir(nrc) if f.endswith(".tmp")]


def test_case_json_describes_every_file(golden, tmp_path):
    path, cases, _ = golden
    (d,) = export(path, tmp_path, [NRC_ID], fmt="bin")
    desc = json.load(open(os.path.join(d, "case.json")))
    kw = cases[NRC_ID]
    assert desc["operator"] == "nrc_grad"
    assert desc["aclnn_operator"] == "aclnnNormRopeConcatBackward"
    assert desc["case_id"] == NRC_ID and desc["seed"] == 2 and desc["expected_error"] is None
    assert desc["parameters"]["norm_type"] == 2 and desc["regenerate"] == kw.regenerate
    files = {f["name"]: f for f in desc["files"]}
    assert set(files) | {"case.json"} == set(os.listdir(d))
    inputs = [f for f in desc["files"] if f["role"] == "input"]
    assert [f["python_name"] for f in inputs] == [n for n, a in kw.inputs.items() if a is not None]
    for f in desc["files"]:
        on_disk = open(os.path.join(d, f["name"]), "rb").read()
        assert f["byte_size"] == len(on_disk) == f["data_bytes"]
        assert f["sha256"] == hashlib.sha256(on_disk).hexdigest()
        src = (kw.inputs if f["role"] == "input" else kw.expected)[f["python_name"]]
        assert f["shape"] == list(src.shape) and f["dtype"] == np.dtype(src.dtype).name
    gq = files["golden_gradQuery.bin"]
    assert gq["role"] == "golden" and gq["output_file"] == "gradQuery.bin"
    assert gq["comparison_class"] == "row_reduction" and gq["reduced_terms"] == 16
    assert files["golden_gradValue.bin"]["output_file"] == "gradValue.bin"
    assert files["normQueryRstd.bin"]["dtype"] == "float32"


def test_npy_export_matches_np_save_byte_for_byte(golden, tmp_path):
    path, cases, _ = golden
    (d,) = export(path, tmp_path, [ROPE_ID], fmt="npy")
    kw = cases[ROPE_ID]
    desc = json.load(open(os.path.join(d, "case.json")))
    assert {f["name"] for f in desc["files"]} == {"dy.npy", "cos.npy", "sin.npy", "x.npy",
                                                  "golden_dx.npy", "golden_dcos.npy", "golden_dsin.npy"}
    for name, arr in [*kw.inputs.items(), *(("golden_" + k, v) for k, v in kw.expected.items())]:
        file = os.path.join(d, f"{name}.npy")
        buf = io.BytesIO()
        np.save(buf, arr.view(np.uint16))
        assert open(file, "rb").read() == buf.getvalue()
        loaded = np.load(file, allow_pickle=False)
        assert loaded.dtype == np.uint16
        assert np.array_equal(loaded.view(ml_dtypes.bfloat16).view(np.uint16), arr.view(np.uint16))
    f = {f["name"]: f for f in desc["files"]}["golden_dx.npy"]
    assert f["dtype"] == "bfloat16" and f["output_file"] == "dx.npy"
    assert f["byte_size"] == os.path.getsize(os.path.join(d, "golden_dx.npy")) > f["data_bytes"]


def test_negative_case_exports_inputs_and_the_error(golden, tmp_path):
    path, _, neg = golden
    (d,) = export(path, tmp_path, [NEG_ID])
    assert sorted(os.listdir(d)) == ["case.json", "cos.bin", "dy.bin", "sin.bin", "x.bin"]
    desc = json.load(open(os.path.join(d, "case.json")))
    assert desc["expected_error"] == {"code": 561002, "status": "ACLNN_ERR_INNER_TILING_ERROR",
                                      "message": "dy: D=31 must be even"}
    assert desc["soc"] == "A2"
    assert open(os.path.join(d, "dy.bin"), "rb").read() == le_bytes(neg.inputs["dy"])


def test_existing_files_need_force_and_nothing_is_written_before(golden, tmp_path):
    path, _, _ = golden
    nrc_dir = os.path.join(tmp_path, *NRC_ID.split("/"))
    os.makedirs(nrc_dir)
    with open(os.path.join(nrc_dir, "query.bin"), "wb") as fh:
        fh.write(b"old")
    with pytest.raises(ExportError, match="query.bin exists; use --force"):
        export(path, tmp_path, [ROPE_ID, NRC_ID])
    assert not os.path.exists(os.path.join(tmp_path, "rope_grad"))    # nothing half-exported
    export(path, tmp_path, [ROPE_ID, NRC_ID], force=True)
    assert os.path.getsize(os.path.join(nrc_dir, "query.bin")) > 3


def test_selection_by_pattern_and_unknown_ids(golden, tmp_path):
    path, _, _ = golden
    dirs = export(path, tmp_path, ["rope_grad/*"])
    assert [os.path.relpath(d, tmp_path) for d in dirs] == [os.path.join(*ROPE_ID.split("/")),
                                                           os.path.join(*NEG_ID.split("/"))]
    with pytest.raises(KeyError, match="is not in"):
        export(path, tmp_path / "x", ["rope_grad/nope"])
    with pytest.raises(KeyError, match="matches"):
        export(path, tmp_path / "x", ["zzz*"])
    with pytest.raises(ExportError, match="format"):
        export(path, tmp_path / "x", fmt="pt")
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ExportError, match="not a directory"):
        export(path, afile)


def test_force_removes_what_an_earlier_export_and_run_left_and_refuses_without_it(golden, tmp_path):
    """A kernel's outputs and status.json of an earlier run are never judged against new
    goldens: --force removes them (and the other format's files and stale temporaries); without
    --force their presence alone refuses the export, naming them."""
    path, _, _ = golden
    export(path, tmp_path, [ROPE_ID], fmt="npy")
    d = os.path.join(tmp_path, *ROPE_ID.split("/"))
    left = {"dx.bin": b"old output", "dcos.npy": b"old", "status.json": b'{"code": 0}',
            ".dy.bin.4242.tmp": b"half"}
    for name, data in left.items():
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
    with pytest.raises(ExportError, match="exists.*--force.*status.json"):
        export(path, tmp_path, [ROPE_ID])
    export(path, tmp_path, [ROPE_ID], force=True)
    names = sorted(os.listdir(d))
    assert not set(left) & set(names) and not [n for n in names if n.endswith(".npy")], names
    assert "golden_dx.bin" in names and "case.json" in names
    fresh = tmp_path / "fresh"
    os.makedirs(fresh / os.path.dirname(ROPE_ID.replace("/", os.sep)), exist_ok=True)
    os.makedirs(os.path.join(fresh, *ROPE_ID.split("/")))
    with open(os.path.join(fresh, *ROPE_ID.split("/"), "status.json"), "w") as fh:
        fh.write('{"code": 0}')
    with pytest.raises(ExportError, match="status.json exists"):
        export(path, fresh, [ROPE_ID])


def test_export_trusts_the_data_not_the_index(golden, tmp_path):
    """An index that says more than the data holds is refused, naming case and dataset."""
    import shutil
    import h5py
    from hostile_goldens import _describe
    path, _, _ = golden
    bad = tmp_path / "bad.h5"
    shutil.copyfile(path, bad)
    with h5py.File(bad, "r+") as f:
        shape = list(f[f"cases/{ROPE_ID}/inputs/dy"].shape)
        _describe(f, ROPE_ID, "inputs", "dy", shape=[2 * shape[0]] + shape[1:])
    with pytest.raises(goldens.CorruptGoldenError, match=f"case {ROPE_ID}: inputs/dy: has shape"):
        export(bad, tmp_path / "out", [ROPE_ID])
    assert not os.path.exists(os.path.join(tmp_path, "out", *ROPE_ID.split("/"), "dy.bin"))
