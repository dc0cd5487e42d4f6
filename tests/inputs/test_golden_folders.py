"""Case folders in, goldens out (refspec.inputs.case_folders): the `refspec export` layout read back
bit for bit, minimal case.json files with .npy and .bin inputs, negative cases, and one clear
error for every missing or inconsistent piece."""

from __future__ import annotations

import json
import os

import h5py
import ml_dtypes
import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.goldens.engine import generate
from refspec.goldens.export import export_cases
from refspec.inputs.case_folders import describe_folders
from refspec.goldens.sweep import load_sweep
from refspec.inputs.user_cases import InputError, write_user_cases

import implementations as impl

BF16 = np.dtype(ml_dtypes.bfloat16)


def _attrs(obj) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in obj.attrs.items()}


def content(path) -> dict:
    """Every case's attributes and every dataset's dtype, shape, bytes and attributes (read
    with h5py itself, not refspec's reader)."""
    out = {}
    with h5py.File(path, "r") as f:
        for cid in f["index"].asstr()[()]:
            group = f["cases/" + cid]
            d = {"attrs": _attrs(group)}
            for sub in ("inputs", "expected", "exact", "sum_abs"):
                for name, ds in group.get(sub, {}).items():
                    a = ds[()]
                    d[f"{sub}/{name}"] = (a.dtype.str, a.shape, a.tobytes(), _attrs(ds))
            out[cid] = d
    return out


def build(paths, out):
    summary, negatives = write_user_cases(out, describe_folders(paths), sweep_name="folders",
                                          sweep_definition="", force=True)
    return summary, negatives


@pytest.fixture(scope="module")
def smoke_golden(tmp_path_factory):
    path = tmp_path_factory.mktemp("smoke") / "smoke.h5"
    sweep = load_sweep("smoke")
    generate(sweep, sweep.cases(), path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("fmt,every", [("bin", 1), ("npy", 4)])
def test_export_then_golden_reproduces_the_smoke_sweep_bit_for_bit(smoke_golden, tmp_path, fmt,
                                                                   every):
    """Every case of the smoke sweep as .bin; every 4th as .npy (the readers share the rest)."""
    with goldens.open(smoke_golden) as gf:
        ids = gf.case_ids()[::every]
    export_cases(smoke_golden, tmp_path / "exp", ids, fmt=fmt)
    summary, negatives = build([tmp_path / "exp"], tmp_path / "back.h5")
    original, back = content(smoke_golden), content(tmp_path / "back.h5")
    original = {cid: original[cid] for cid in ids}
    assert summary.cases == len(ids) and summary.negative == len(negatives) > 0
    assert {refspec.ops.get(c.split("/")[0]).id for c in ids} == set(refspec.ops.ids())
    assert set(back) == set(original)
    for cid, case in original.items():
        assert back[cid] == case, cid


def write_npy(folder, name, array):
    a = np.asarray(array)
    np.save(os.path.join(folder, name), a.view(np.uint16) if a.dtype == BF16 else a)


def case_json(folder, **doc):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "case.json"), "w") as fh:
        json.dump(doc, fh)


def rope_inputs(rng, dtype=BF16, B=2, S=8, N=3, D=16):
    x = rng.standard_normal((B, S, N, D)).astype(dtype)
    dy = rng.standard_normal((B, S, N, D)).astype(dtype)
    angle = rng.uniform(-3, 3, (1, S, 1, D))
    return dict(dy=dy, cos=np.cos(angle).astype(dtype), sin=np.sin(angle).astype(dtype), x=x)


def test_minimal_npy_folder_gives_the_spec_outputs_and_judges_a_float32_kernel(rng, tmp_path):
    folder = tmp_path / "customer" / "case_17"
    case_json(folder, operator="aclnnRotaryPositionEmbeddingGrad", soc="A2",
              attributes={"mode": 1})
    inputs = rope_inputs(rng)
    inputs["cos"] = np.repeat(inputs["cos"][..., ::2], 2, axis=-1)     # interleave pairs
    inputs["sin"] = np.repeat(inputs["sin"][..., ::2], 2, axis=-1)
    for name, a in inputs.items():
        write_npy(folder, f"{name}.npy", a)
    build([folder], tmp_path / "g.h5")
    want = refspec.rotary_position_embedding_grad(*(inputs[k] for k in ("dy", "cos", "sin", "x")),
                                                  mode=1, soc="A2", out_dtype=np.float64)
    with goldens.open(tmp_path / "g.h5") as gf:
        (cid,) = gf.case_ids()
        case = gf[cid]
        assert cid == "rope_grad/case_17"
        assert case.params["layout"] == "BSND" and case.params["cos"] == "1S1D"
        assert case.params["dtype"] == "bfloat16" and case.soc == "A2" and case.expected_error is None
        for name, w in zip(("dx", "dcos", "dsin"), want):
            np.testing.assert_array_equal(case.exact[name][()], w)
        for name, a in inputs.items():
            assert case.inputs[name][()].tobytes() == a.tobytes()
    kernel = impl.rope_grad(inputs["dy"], inputs["cos"], inputs["sin"], inputs["x"], mode=1)
    assert compare(tmp_path / "g.h5", {cid: kernel}).passed
    broken = impl.rope_grad(inputs["dy"], inputs["cos"], inputs["sin"], inputs["x"], mode=1,
                            bug="lost_minus")
    report = compare(tmp_path / "g.h5", {cid: broken})
    assert [r.output for r in report.failures] == ["dx"]
    assert report.failures[0].message.startswith("dx[b=")


def test_bin_folder_with_files_entries_and_a_default_dtype(rng, tmp_path):
    folder = tmp_path / "nrc"
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float16)
    k = rng.standard_normal((1, 5, 2, 8)).astype(np.float16)
    inputs = dict(gradQueryOutput=rng.standard_normal((1, 2, 4, 8)).astype(np.float16),
                  gradKeyOutput=rng.standard_normal((1, 2, 5, 8)).astype(np.float16),
                  gradValueOutput=rng.standard_normal((1, 2, 5, 8)).astype(np.float16),
                  query=q, key=k)
    stats = {}
    for stream, prefix in ((q, "normQuery"), (k, "normKey")):
        x = stream.astype(np.float64)
        m = x.mean(-1, keepdims=True)
        stats[f"{prefix}Mean"] = m.astype(np.float32)
        stats[f"{prefix}Rstd"] = (1 / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)).astype(np.float32)
    os.makedirs(folder)
    files = []
    for name, a in {**inputs, **stats}.items():
        a.tofile(folder / f"{name}.bin")
        entry = {"name": f"{name}.bin", "shape": list(a.shape)}
        if a.dtype == np.float32:
            entry["dtype"] = "float32"
        files.append(entry)
    case_json(folder, operator="nrc_grad", soc="A3", dtype="float16", files=files,
              attributes={"normType": 1, "normAddedType": 0, "ropeType": 0, "concatOrder": 0})
    build([folder], tmp_path / "g.h5")
    py = {refspec.ops.get("nrc_grad").python_name(n): a for n, a in {**inputs, **stats}.items()}
    want = refspec.norm_rope_concat_backward(**py, norm_type=1, soc="A3", out_dtype=np.float64)
    with goldens.open(tmp_path / "g.h5") as gf:
        case = gf["nrc_grad/nrc"]
        assert case.params["norm_type"] == 1 and case.output_names == ["grad_query", "grad_key",
                                                                       "grad_value"]
        for name in case.output_names:
            np.testing.assert_array_equal(case.exact[name][()], getattr(want, name))
    kernel = impl.nrc_backward(py, dict(norm_type=1), np.float16)
    assert compare(tmp_path / "g.h5", {"nrc_grad/nrc": kernel}).passed


def test_rejected_inputs_become_negative_cases_with_their_code(rng, tmp_path):
    inputs = rope_inputs(rng, np.float32, D=15)                     # D odd
    odd = tmp_path / "odd"
    case_json(odd, operator="rope_grad", soc="A2", attributes={"mode": 0})
    for name, a in inputs.items():
        write_npy(odd, f"{name}.npy", a)
    no_sin = tmp_path / "nosin"
    case_json(no_sin, operator="rope_grad", soc="A2", attributes={"mode": 0})
    for name, a in rope_inputs(rng, np.float32).items():
        if name != "sin":
            write_npy(no_sin, f"{name}.npy", a)
    summary, negatives = build([odd, no_sin], tmp_path / "g.h5")
    assert summary.negative == 2
    assert {cid: err.code for cid, err in negatives} == {"rope_grad/odd": 561002,
                                                         "rope_grad/nosin": 161001}
    with goldens.open(tmp_path / "g.h5") as gf:
        assert gf["rope_grad/odd"].expected_error == 561002
        assert gf["rope_grad/nosin"].expected_error == 161001
        assert gf["rope_grad/nosin"].input_names == ["dy", "cos", "x"]


# --- one clear error per malformed folder ------------------------------------------------------

def good_folder(path, rng, doc=None, fmt="npy"):
    inputs = rope_inputs(rng, np.float32)
    base = dict(operator="rope_grad", soc="A2", attributes={"mode": 0})
    case_json(path, **(base if doc is None else doc))
    files = []
    for name, a in inputs.items():
        if fmt == "npy":
            write_npy(path, f"{name}.npy", a)
        else:
            a.tofile(os.path.join(path, f"{name}.bin"))
            files.append({"name": f"{name}.bin", "shape": list(a.shape), "dtype": "float32"})
    return inputs, files


def _reject(folder, *needles):
    with pytest.raises(InputError) as info:
        describe_folders([folder])[0].load()
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_every_malformed_folder_is_one_clear_error(rng, tmp_path):
    def fresh(name, **kw):
        d = tmp_path / name
        inputs, files = good_folder(d, rng, **kw)
        return d, inputs, files

    d, _, _ = fresh("no_op", doc=dict(soc="A2", attributes={"mode": 0}))
    _reject(d, str(d), "case.json", 'no "operator"', "rope_grad")
    d, _, _ = fresh("bad_op", doc=dict(operator="rope_gard", soc="A2", attributes={}))
    _reject(d, "case.json", "'rope_gard' is unknown", "nrc_grad")
    d, _, _ = fresh("no_soc", doc=dict(operator="rope_grad", attributes={"mode": 0}))
    _reject(d, 'no "soc"', "A2", "null for math only")
    d, _, _ = fresh("no_attrs", doc=dict(operator="rope_grad", soc="A2"))
    _reject(d, 'no "attributes"', "mode")
    d, _, _ = fresh("bad_attr", doc=dict(operator="rope_grad", soc="A2", attributes={"mdoe": 0}))
    _reject(d, "attribute 'mdoe'", "(mode)")
    d, _, _ = fresh("str_attr", doc=dict(operator="rope_grad", soc="A2",
                                         attributes={"mode": "spiral"}))
    _reject(d, "attribute mode", "'spiral'", "allowed: half, interleave")
    d, _, _ = fresh("list_attr", doc=dict(operator="rope_grad", soc="A2", attributes={"mode": [0]}))
    _reject(d, "attribute mode: unknown value [0]", "allowed: half")
    d, _, _ = fresh("dict_attr", doc=dict(operator="rope_grad", soc="A2",
                                          attributes={"mode": {"value": 0}}))
    _reject(d, "attribute 'mode' = {'value': 0}", "must be a number, a boolean, a label or a list")
    d, _, _ = fresh("extra", doc=dict(operator="rope_grad", soc="A2", attributes={}, shapes={}))
    _reject(d, "unknown field(s) shapes")

    d, _, files = fresh("bin_no_shape", fmt="bin")            # raw .bin without a description
    _reject(d, "dy.bin", "no header", "shape and dtype")
    d, inputs, files = fresh("bin_size", fmt="bin")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0}, files=files)
    inputs["x"][:, :4].tofile(d / "x.bin")
    _reject(d, str(d / "x.bin"), f"{inputs['x'].nbytes // 2} bytes, expected {inputs['x'].nbytes}",
            "(2, 8, 3, 16) float32")
    d, inputs, files = fresh("bin_dtype", fmt="bin")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0},
              files=[dict(f, dtype="float16") for f in files])
    _reject(d, "dy.bin", "expected", "float16", "as if written in a 32-bit dtype")

    d, _, _ = fresh("npy_shape")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0},
              files=[{"name": "dy.npy", "shape": [2, 8, 3, 15]}])
    _reject(d, str(d / "dy.npy"), "shape (2, 8, 3, 16), expected (2, 8, 3, 15)")
    d, _, _ = fresh("npy_dtype")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0},
              files=[{"name": "dy.npy", "dtype": "bfloat16"}])
    _reject(d, "dy.npy", "holds float32, expected a bfloat16 array")
    d, _, _ = fresh("listed_missing")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0},
              files=[{"name": "sin.bin", "shape": [1, 8, 1, 16], "dtype": "float32"}])
    _reject(d, "sin.bin is listed in case.json but is not in the folder")
    d, _, _ = fresh("typo")
    os.rename(d / "dy.npy", d / "dY.npy")
    _reject(d, "dY.npy", "not an input of RotaryPositionEmbeddingGrad", "dy.bin, cos.bin")
    d, inputs, _ = fresh("twice")
    inputs["dy"].tofile(d / "dy.bin")
    _reject(d, "two files for input 'dy'", "dy.bin", "dy.npy")
    d, _, _ = fresh("empty")
    for name in os.listdir(d):
        if name != "case.json":
            os.remove(d / name)
    _reject(d, "no input file")
    d, _, _ = fresh("bad_json")
    (d / "case.json").write_text("{operator: rope_grad")
    _reject(d, "case.json", "not readable JSON")
    d, _, _ = fresh("params")
    case_json(d, operator="rope_grad", soc="A2", attributes={"mode": 0},
              parameters={"op": "rope_grad", "mode": 1, "dtype": "float32"})
    _reject(d, "attribute 'mode' is 0 but parameters say 1")
    d, _, _ = fresh("params_dtype")
    case_json(d, operator="rope_grad", soc="A2", parameters={"op": "rope_grad", "mode": 0,
                                                             "dtype": "bfloat16"})
    _reject(d, "parameters say dtype 'bfloat16' but the files give 'float32'")
    with pytest.raises(InputError, match="not a directory"):
        describe_folders([tmp_path / "nothere"])
    (tmp_path / "nothing").mkdir()
    with pytest.raises(InputError, match="no case.json in it or in its subfolders"):
        describe_folders([tmp_path / "nothing"])


def test_an_exported_file_that_changed_or_a_wrong_claim_is_an_error(smoke_golden, tmp_path):
    with goldens.open(smoke_golden) as gf:
        pos = next(c for c in gf.case_ids() if gf[c].expected_error is None
                   and gf[c].op == "rope_grad")
    (d,) = export_cases(smoke_golden, tmp_path / "e", [pos], fmt="bin")
    doc = json.load(open(os.path.join(d, "case.json")))
    raw = bytearray(open(os.path.join(d, "dy.bin"), "rb").read())
    raw[0] ^= 1
    open(os.path.join(d, "dy.bin"), "wb").write(raw)
    _reject(d, "dy.bin changed since case.json was written")
    for f in doc["files"]:
        f.pop("sha256")
    doc["expected_error"] = {"code": 161002, "status": "", "message": ""}
    json.dump(doc, open(os.path.join(d, "case.json"), "w"))
    _reject(d, '"expected_code" 0 contradicts "expected_error" (code 161002)')
    doc["expected_code"] = 161002
    json.dump(doc, open(os.path.join(d, "case.json"), "w"))
    with pytest.raises(InputError, match="says the inputs are rejected with 161002, but the spec "
                                         "for profile .* accepts them"):
        build([d], tmp_path / "g.h5")
    assert not os.path.exists(tmp_path / "g.h5") and not os.path.exists(tmp_path / "g.h5.part")


def test_two_folders_with_one_case_id_are_an_error(rng, tmp_path):
    for name in ("a", "b"):
        good_folder(tmp_path / name, rng, doc=dict(operator="rope_grad", soc="A2",
                                                   attributes={"mode": 0}, case_id="same/id"))
    with pytest.raises(InputError, match="case id 'same/id' is also the id of"):
        build([tmp_path / "a", tmp_path / "b"], tmp_path / "g.h5")


def test_files_entries_may_name_the_tensor_and_bfloat16_may_be_2_byte_voids(rng, tmp_path):
    folder = tmp_path / "named"
    inputs = rope_inputs(rng)
    os.makedirs(folder)
    files = []
    for name, a in inputs.items():
        np.save(folder / f"t_{name}.npy", a)                 # ml_dtypes bfloat16: saved as V2
        files.append({"name": f"t_{name}.npy", "python_name": name})
    assert np.load(folder / "t_dy.npy").dtype.kind == "V"
    case_json(folder, operator="rope_grad", soc="A2", attributes={"mode": 0}, files=files)
    (case,) = describe_folders([folder])
    got = case.load()
    assert {k: v.dtype for k, v in got.items()} == dict.fromkeys(inputs, BF16)
    assert all(got[k].tobytes() == inputs[k].tobytes() for k in inputs)


def test_index_tensors_are_read_in_their_integer_dtype(tmp_path):
    """Positions as .npy (the header's int64) and .bin (a files entry's int32); a float file
    declared int64, or an integer dtype no tensor has, is one clear error."""
    from refspec.inputs.tensor_files import (TensorFileError, bin_spec, npy_spec, read_tensor,
                                             tensor_dtype)
    pos = np.array([[0, 5, 2], [1, 1, 7]], dtype=np.int64)
    np.save(tmp_path / "p.npy", pos)
    got = read_tensor(npy_spec(str(tmp_path / "p.npy")))
    assert got.dtype == np.int64 and np.array_equal(got, pos)
    pos.astype(np.int32).tofile(tmp_path / "p.bin")
    got = read_tensor(bin_spec(str(tmp_path / "p.bin"), tensor_dtype("int32"), [2, 3]))
    assert got.dtype == np.int32 and np.array_equal(got, pos)
    np.save(tmp_path / "f.npy", pos.astype(np.float64))
    with pytest.raises(TensorFileError, match="holds float64, expected an int64 array"):
        npy_spec(str(tmp_path / "f.npy"), tensor_dtype("int64"))
    with pytest.raises(ValueError, match="'complex64' is not allowed; allowed: float16, "
                                         "bfloat16, float32, float64, int64, int32"):
        tensor_dtype("complex64")
