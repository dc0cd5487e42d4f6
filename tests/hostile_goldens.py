"""A catalogue of hostile golden files: a sound file, then one thing wrong with it per entry
(flipped bytes in an input, an expected and an exact output, an index that contradicts the
data, missing pieces, storage outside the file, objects where numbers belong, a cut file, index
text that is not JSON, a file marked incomplete). Used by tests/goldens/test_hostile_files.py,
tests/comparator/test_hostile_compare.py and benchmarks/bench_faults.py.

Each entry edits a copy with h5py as a hostile or careless tool would, keeping every checksum it
does not mean to break consistent (the index rows' CRC-32 and the datasets' own), so the check
that must catch it is the one under test."""

from __future__ import annotations

import json
import os
import shutil
import zlib
from dataclasses import replace
from typing import NamedTuple

import h5py
import numpy as np

import refspec.goldens as goldens
from refspec.goldens.example import rope_grad_case

BIG = "rope_grad/big"          # datasets of several chunks (Fletcher32)
SMALL = "rope_grad/small"      # contiguous datasets (CRC-32 in the index)


def sound_file(path) -> str:
    """A golden file of two cases: BIG (float32, chunked) and SMALL (bfloat16, contiguous)."""
    with goldens.GoldenWriter(path, sweep_name="hostile", sweep_definition="", sweep_seed=0,
                              force=True) as w:
        w.write_case(replace(rope_grad_case(shape=(2, 8, 256, 128), dtype="float32", seed=1),
                             case_id=BIG))
        w.write_case(replace(rope_grad_case(shape=(2, 2, 8, 16), dtype="bfloat16", seed=2),
                             case_id=SMALL))
    return os.fspath(path)


class Hostile(NamedTuple):
    """One entry: its name, the edit, and what the one-line error must hold; ``commands`` are
    the `refspec` argument lists (FILE and OUT filled in) that must each end in that line."""

    name: str
    edit: object
    fragments: tuple
    commands: tuple


def _rows(f) -> tuple:
    ids = f["index"].asstr()[()].tolist()
    return ids, f["summary/meta"].asstr()[()].tolist()


def _set_meta(f, case_id: str, change) -> None:
    """Change one index row's meta JSON and keep its row checksum consistent."""
    ids, metas = _rows(f)
    i = ids.index(case_id)
    metas[i] = change(metas[i])
    f["summary/meta"][i] = metas[i]
    if "summary/crc32" not in f:                      # a file written before checksums
        return
    text = "".join(f"{v}\0" for v in (case_id, f["summary/op"].asstr()[i], f["summary/dtype"].asstr()[i],
                                       f["summary/soc"].asstr()[i], metas[i]))
    f["summary/crc32"][i] = zlib.crc32(text.encode())


def _describe(f, case_id: str, sub: str, name: str, **values) -> None:
    def change(text):
        meta = json.loads(text)
        meta["arrays"][sub][name].update(values)
        return json.dumps(meta)
    _set_meta(f, case_id, change)


def _replace(f, case_id: str, sub: str, name: str, data=None, **kw) -> None:
    """Replace a dataset (its CRC-32 in the index follows the new bytes when it has one)."""
    path = f"cases/{case_id}/{sub}/{name}"
    del f[path]
    ds = f.create_dataset(path, data=data, **kw)
    described = json.loads(_rows(f)[1][_rows(f)[0].index(case_id)])["arrays"][sub][name]
    if data is not None and ds.chunks is None and ds.dtype.kind in "fiu" and "crc32" in described:
        raw = np.ascontiguousarray(ds[()])
        _describe(f, case_id, sub, name, crc32=zlib.crc32(raw.reshape(-1).view(np.uint8)))


def _flip(path: str, dataset: str) -> None:
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        at = ds.id.get_offset()
        at = ds.id.get_chunk_info(0).byte_offset if at is None else at
    with open(path, "r+b") as fh:
        fh.seek(at + 37)
        byte = fh.read(1)
        fh.seek(at + 37)
        fh.write(bytes([byte[0] ^ 0x10]))


def flip_chunked(path):
    _flip(path, f"cases/{BIG}/expected/dx")


def flip_exact(path):
    _flip(path, f"cases/{BIG}/exact/dx")


def flip_contiguous(path):
    _flip(path, f"cases/{SMALL}/inputs/dy")


def index_shape_twice(path):
    with h5py.File(path, "r+") as f:
        _describe(f, BIG, "inputs", "dy", shape=[4, 8, 256, 128])


def negative_shape(path):
    with h5py.File(path, "r+") as f:
        _describe(f, SMALL, "inputs", "dy", shape=[2, 2, -8, 16])


def float16_under_float32(path):
    with h5py.File(path, "r+") as f:
        old = f[f"cases/{BIG}/inputs/dy"][()]
        _replace(f, BIG, "inputs", "dy", old.astype(np.float16), chunks=(1, 8, 256, 128),
                 fletcher32=True)


def int32_under_float32(path):
    with h5py.File(path, "r+") as f:
        old = f[f"cases/{BIG}/inputs/dy"][()]
        _replace(f, BIG, "inputs", "dy", old.view(np.int32), chunks=(1, 8, 256, 128),
                 fletcher32=True)


def missing_dataset(path):
    with h5py.File(path, "r+") as f:
        del f[f"cases/{SMALL}/expected/dx"]


def missing_root_attribute(path):
    with h5py.File(path, "r+") as f:
        del f.attrs["schema_version"]


def missing_meta_key(path):
    with h5py.File(path, "r+") as f:
        _set_meta(f, SMALL, lambda t: json.dumps({k: v for k, v in json.loads(t).items()
                                                  if k != "params"}))


def external_storage(path):
    outside = os.path.join(os.path.dirname(os.path.abspath(path)), "elsewhere.bin")
    with h5py.File(path, "r+") as f:
        old = f[f"cases/{SMALL}/inputs/dy"][()]
        old.tofile(outside)
        _replace(f, SMALL, "inputs", "dy", None, shape=old.shape, dtype=old.dtype,
                 external=[(outside, 0, old.nbytes)])


def virtual_dataset(path):
    with h5py.File(path, "r+") as f:
        old = f[f"cases/{SMALL}/inputs/dy"]
        layout = h5py.VirtualLayout(shape=old.shape, dtype=old.dtype)
        layout[...] = h5py.VirtualSource(".", f"cases/{SMALL}/inputs/x", shape=old.shape)
        del f[f"cases/{SMALL}/inputs/dy"]
        f.create_virtual_dataset(f"cases/{SMALL}/inputs/dy", layout)


def object_array(path):
    with h5py.File(path, "r+") as f:
        shape = f[f"cases/{SMALL}/inputs/dy"].shape
        _replace(f, SMALL, "inputs", "dy", np.full(shape, "x", dtype=object),
                 dtype=h5py.string_dtype())


def truncated(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


def index_not_json(path):
    with h5py.File(path, "r+") as f:
        _set_meta(f, SMALL, lambda t: t[: len(t) // 2])


def index_row_changed(path):
    with h5py.File(path, "r+") as f:
        ids, metas = _rows(f)
        f["summary/meta"][ids.index(SMALL)] = metas[ids.index(SMALL)].replace('"seed":2', '"seed":3')


def marked_incomplete(path):
    with h5py.File(path, "r+") as f:
        f.attrs["complete"] = False


def expected_nan(path):
    with h5py.File(path, "r+") as f:
        ds = f[f"cases/{BIG}/expected/dx"]
        ds[0, 0, 0, :4] = np.nan                      # HDF5 computes the new chunk's checksum


SHOW_CASE, VERIFY, EXPORT = ("show", "FILE", "CASE"), ("show", "--verify", "FILE"), (
    "export", "FILE", "-o", "OUT", "--force")
#: the file judged against itself: its own expected outputs as the actual ones
COMPARE = ("compare", "FILE", "FILE")

CATALOGUE = (
    Hostile("flipped byte, chunked", flip_chunked, ("expected/dx", "Fletcher32"),
            (VERIFY, EXPORT, COMPARE)),
    Hostile("flipped byte in exact, chunked", flip_exact, ("exact/dx", "Fletcher32"),
            (VERIFY, COMPARE)),
    Hostile("flipped byte, contiguous", flip_contiguous, ("inputs/dy", "CRC-32"),
            (VERIFY, EXPORT, COMPARE)),
    Hostile("index shape twice the data's", index_shape_twice, ("inputs/dy", "shape"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("negative shape in the index", negative_shape, ("inputs/dy", "shape"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("float16 data under a float32 label", float16_under_float32, ("inputs/dy", "float16"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("int32 data under a float32 label", int32_under_float32, ("inputs/dy", "int32"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("missing dataset", missing_dataset, ("expected/dx", "missing"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("missing root attribute", missing_root_attribute, ("schema_version",),
            (("show", "FILE"), VERIFY, EXPORT, COMPARE)),
    Hostile("missing index key", missing_meta_key, ("/summary/meta", "params"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("external storage", external_storage, ("inputs/dy", "external"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("virtual dataset", virtual_dataset, ("inputs/dy", "virtual"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("object array", object_array, ("inputs/dy", "not numbers"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("truncated file", truncated, ("truncated",),
            (("show", "FILE"), VERIFY, EXPORT, COMPARE)),
    Hostile("index text that is not JSON", index_not_json, ("/summary/meta", "JSON"),
            (SHOW_CASE, VERIFY, EXPORT, COMPARE)),
    Hostile("index row changed", index_row_changed, ("/summary", "checksum"),
            (("show", "FILE"), VERIFY, EXPORT, COMPARE)),
    Hostile("file marked incomplete", marked_incomplete, ("incomplete", "--allow-incomplete"),
            (("show", "FILE"), VERIFY, EXPORT, COMPARE)),
    Hostile("expected set to NaN", expected_nan, ("expected/dx", "rounded once"),
            (VERIFY, COMPARE)),
)

#: the case each entry damages (what `show FILE CASE` asks for)
CASE_OF = {"flipped byte, contiguous": SMALL, "negative shape in the index": SMALL,
           "missing dataset": SMALL, "missing index key": SMALL, "external storage": SMALL,
           "virtual dataset": SMALL, "object array": SMALL, "index text that is not JSON": SMALL,
           "index row changed": SMALL}


def hostile_file(sound: str, entry: Hostile, directory) -> str:
    """A copy of the sound file with ``entry``'s damage, in ``directory``."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(os.fspath(directory), entry.name.replace(" ", "_").replace(",", "") + ".h5")
    shutil.copyfile(sound, path)
    entry.edit(path)
    return path


def command_args(command: tuple, path: str, entry: Hostile, out) -> list:
    """A catalogue command with FILE, CASE and OUT filled in."""
    fill = {"FILE": path, "CASE": CASE_OF.get(entry.name, BIG), "OUT": os.fspath(out)}
    return [fill.get(a, a) for a in command]


def read_everything(path) -> None:
    """Reading through refspec.goldens: every case's every dataset, and the expected outputs
    against their exact values."""
    with goldens.open(path) as gf:
        for case in gf:
            goldens.verify_case(case)
