"""LazyArray.raw_extents: where a dataset's elements lie in its file when HDF5 stores them raw,
and None whenever reading those bytes directly would not give the array (the export and the
comparator copy raw datasets by their byte ranges)."""

import os

import h5py
import numpy as np
import pytest

from refspec.goldens.read import LazyArray


def _bytes_at(path, extents, itemsize):
    out = bytearray()
    with open(path, "rb") as fh:
        for _, count, offset in extents:
            fh.seek(offset)
            out += fh.read(count * itemsize)
    return bytes(out)


def _check(path, name, expect):
    with h5py.File(path, "r") as f:
        ds = f[name]
        arr = LazyArray(lambda: ds.id, name, {"dtype": ds.dtype.str, "shape": list(ds.shape)})
        extents = arr.raw_extents()
        if expect is None:
            assert extents is None
            return
        assert extents is not None
        starts = [s for s, _, _ in extents]
        assert starts == sorted(starts) and sum(c for _, c, _ in extents) == expect.size
        assert _bytes_at(path, extents, expect.dtype.itemsize) == np.ascontiguousarray(expect).tobytes()


@pytest.fixture
def data():
    return np.arange(6 * 5 * 8, dtype="<f4").reshape(6, 5, 8) * 0.5 - 7


@pytest.mark.parametrize("userblock", [0, 512, 4096])
def test_contiguous_with_and_without_a_user_block(tmp_path, data, userblock):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f.create_dataset("a", data=data)
        f.create_dataset("u16", data=data.astype("<u2"))
    _check(path, "a", data)
    _check(path, "u16", data.astype("<u2"))


def test_chunks_that_are_runs_of_whole_trailing_axes(tmp_path, data):
    path = tmp_path / "k.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("rows", data=data, chunks=(4, 5, 8))      # the last chunk is partial
        f.create_dataset("inner", data=data, chunks=(1, 2, 8))     # runs along axis 1
        f.create_dataset("tiles", data=data, chunks=(2, 5, 4))     # not whole trailing axes
    _check(path, "rows", data)
    _check(path, "inner", data)
    _check(path, "tiles", None)


def test_none_when_the_bytes_are_not_the_array(tmp_path, data):
    path = tmp_path / "n.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("chunked_in_userblock_file", data=data, chunks=(2, 5, 8))
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("gzip", data=data, chunks=(2, 5, 8), compression="gzip")
        f.create_dataset("shuffle", data=data, chunks=(2, 5, 8), shuffle=True)
        f.create_dataset("big_endian", data=data.astype(">f4"))
        f.create_dataset("compact", data=data[:1, :1], dtype="<f4",
                         dcpl=_compact_dcpl())
        part = f.create_dataset("partly_written", shape=data.shape, dtype="<f4", chunks=(2, 5, 8))
        part[:2] = data[:2]
        f.create_dataset("never_written", shape=data.shape, dtype="<f4")
        f.create_dataset("empty", shape=(0, 8), dtype="<f4")
        f.create_dataset("external", data=data, external=[(os.fspath(tmp_path / "ext.bin"), 0,
                                                            h5py.h5f.UNLIMITED)])
    _check(path, "chunked_in_userblock_file", None)
    for name in ("gzip", "shuffle", "big_endian", "compact", "partly_written", "never_written",
                 "empty", "external"):
        _check(tmp_path / "m.h5", name, None)


def _compact_dcpl():
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    return dcpl
