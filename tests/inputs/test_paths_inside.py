"""Paths read from an input stay inside the folder they came from (refspec.goldens.format.inside):
an msprobe data_name with ``..`` parts or an absolute path, a symbolic link out of a dump, a case
folder or a vendor UT folder is refused with one line, and `refspec export` never writes
through a symbolic link to outside its output folder."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from cli_helpers import assert_user_error, invoke
from msprobe_helpers import ROPE_MAP, DumpWriter, rope_calls
from test_golden_vendor_ut import write_ut_folder


def test_inside_resolves_links_and_refuses_what_leads_out(tmp_path):
    from refspec.goldens.format import OutsideError, inside
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (base / "out").symlink_to(tmp_path / "elsewhere")
    (base / "in").symlink_to(base / "sub")
    assert inside(base, "sub/x.bin") == str(base / "sub" / "x.bin")
    assert inside(base, "in/x.bin") == str(base / "sub" / "x.bin")
    assert inside(base, "not/yet/there") == str(base / "not" / "yet" / "there")
    for name in ("../x", "out/x.bin", "/etc/passwd", "sub/../../x", str(tmp_path)):
        with pytest.raises(OutsideError, match="outside"):
            inside(base, name)


def _outside_secret(tmp_path, name="secret_x.npy"):
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    np.save(outside / name, np.zeros((2, 16, 4, 32), np.float32))
    return outside / name


def _dump(tmp_path, rng):
    w = DumpWriter(tmp_path / "dump", "mindspore")
    rope_calls(w, rng, calls=1)
    w.close()
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2"))
    return w


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_an_msprobe_data_name_leading_out_of_the_dump_is_refused(tmp_path, rng, how):
    w = _dump(tmp_path, rng)
    secret = _outside_secret(tmp_path)
    doc = json.loads(open(os.path.join(w.dir, "dump.json")).read())
    record = next(r for r in doc["data"] if r.endswith(".forward"))
    entry = doc["data"][record]["input_args"][0]
    if how == "symlink":
        os.remove(os.path.join(w.data_dir, entry["data_name"]))
        os.symlink(secret, os.path.join(w.data_dir, entry["data_name"]))
    else:
        rel = os.path.relpath(secret, w.data_dir)       # ../../../../outside/secret_x.npy
        entry["data_name"] = rel if how == "dotdot" else str(secret)
        with open(os.path.join(w.dir, "dump.json"), "w") as fh:
            json.dump(doc, fh)
    result = invoke("golden", "--msprobe", tmp_path / "dump", "--map", tmp_path / "map.toml",
                    "-o", tmp_path / "g.h5")
    assert_user_error(result, "refused", "outside", str(tmp_path / "dump"))
    assert not (tmp_path / "g.h5").exists() and not (tmp_path / "g.h5.part").exists()


def test_a_dump_folder_linked_from_elsewhere_is_refused(tmp_path, rng):
    w = DumpWriter(tmp_path / "real", "mindspore")
    rope_calls(w, rng, calls=1)
    w.close()
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2"))
    (tmp_path / "dump").mkdir()
    os.symlink(tmp_path / "real" / "step0", tmp_path / "dump" / "step0")
    result = invoke("golden", "--msprobe", tmp_path / "dump", "--map", tmp_path / "map.toml",
                    "-o", tmp_path / "g.h5")
    assert_user_error(result, "dump.json: refused", "outside")


def test_a_case_folder_file_linking_out_is_refused(tmp_path, rng):
    folder = tmp_path / "case"
    folder.mkdir()
    secret = _outside_secret(tmp_path, "dy.npy")
    for name, shape in (("cos", (1, 1, 4, 32)), ("sin", (1, 1, 4, 32)),
                        ("x", (2, 16, 4, 32))):
        np.save(folder / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
    os.symlink(secret, folder / "dy.npy")
    (folder / "case.json").write_text(json.dumps(
        {"operator": "rope_grad", "soc": "A2", "attributes": {"mode": 0}}))
    result = invoke("golden", folder, "-o", tmp_path / "g.h5")
    assert_user_error(result, "dy.npy: refused", "outside")
    os.remove(folder / "case.json")                   # case.json itself linking out
    (tmp_path / "outside" / "case.json").write_text(json.dumps(
        {"operator": "rope_grad", "soc": "A2", "attributes": {"mode": 0}}))
    os.symlink(tmp_path / "outside" / "case.json", folder / "case.json")
    assert_user_error(invoke("golden", folder, "-o", tmp_path / "g.h5"),
                      "case.json: refused", "outside")


def test_a_vendor_ut_file_linking_out_is_refused(tmp_path, rng):
    args, _ = write_ut_folder(tmp_path / "ut", rng)
    target = tmp_path / "ut" / "query.bin"
    moved = tmp_path / "outside_query.bin"
    os.replace(target, moved)
    os.symlink(moved, target)
    result = invoke("golden", "--vendor-ut", tmp_path / "ut", "--ut-args", args,
                    "-o", tmp_path / "g.h5")
    assert_user_error(result, "query.bin: refused", "outside")


def test_export_never_writes_through_a_link_out_of_its_folder(tmp_path):
    golden = tmp_path / "g.h5"
    assert invoke("generate", "--op", "rope_grad", "--dtype", "float32", "--layout", "BNSD",
                  "-o", golden).exit_code == 0
    out = tmp_path / "exp"
    (out).mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", out / "rope_grad")
    result = invoke("export", golden, "-o", out, "--force")
    assert_user_error(result, "its folder", "outside", "refused")
    assert os.listdir(tmp_path / "elsewhere") == []
