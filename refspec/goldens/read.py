"""Reading golden HDF5 files: GoldenFile, GoldenCase, LazyArray.

Everything but the arrays' data comes from the file's index (``refspec.goldens.index``),
read once; files of schema 1 are read as schema 2 (``refspec.goldens.legacy``). Nothing is
read before it is asked for: a LazyArray reads the slices it is indexed with (or
whole, with ``read()``), decoding bfloat16 bit patterns to ``ml_dtypes.bfloat16``, so a
comparator can stream a 4 GiB file in blocks (``LazyArray.blocks``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from math import prod

import h5py
import numpy as np

from ..spec.errors import one_line
from . import index, legacy
from .format import (CASE_SUBGROUPS, CASES_GROUP, INDEX_DATASET, SCHEMA_VERSION,
                     GoldenFileError, UnknownCaseError, case_path, decode_array, interrupted_run,
                     read_attrs, real_dtype)

__all__ = ["open", "GoldenFile", "GoldenCase", "LazyArray", "ArrayGroup"]

class LazyArray:
    """One dataset of a golden file, read on demand and decoded to its real dtype.

    ``arr[index]`` follows h5py's indexing rules (slices with positive steps, integers,
    increasing index lists) and returns a NumPy array; ``arr.read()`` and ``np.asarray(arr)``
    read it whole.
    """

    def __init__(self, opener, name: str, described: dict):
        """``opener()`` opens the dataset (its low-level ``h5py.h5d.DatasetID``) when data are
        first read; ``described``: its attributes and shape as the file's index gives them."""
        self._ds = None
        self._id = None
        self._open = opener
        self._attrs = {k: v for k, v in described.items() if k != "shape"}
        self.name = name
        self.encoding = self._attrs.get("encoding")
        self.dtype = real_dtype(self._attrs)
        self.shape = tuple(described["shape"])

    @property
    def _dsid(self) -> h5py.h5d.DatasetID:
        """The low-level dataset (opened on first use; cheaper than an h5py Dataset)."""
        if self._id is None:
            self._id = self._open()
        return self._id

    @property
    def _dataset(self) -> h5py.Dataset:
        if self._ds is None:
            self._ds = h5py.Dataset(self._dsid)
        return self._ds

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def chunks(self):
        return self._dataset.chunks

    @property
    def compression(self) -> str:
        """"none", "lzf", "gzip:N", with "+shuffle" when the shuffle filter is on."""
        ds = self._dataset
        name = ds.compression or "none"
        if name == "gzip":
            name = f"gzip:{ds.compression_opts}"
        return name + ("+shuffle" if ds.shuffle else "")

    @property
    def stored_nbytes(self) -> int:
        """Bytes the dataset occupies in the file (after compression)."""
        return int(self._dsid.get_storage_size())

    @property
    def attrs(self) -> dict:
        """What the file's index says of the dataset: dtype (and ``encoding`` for bfloat16
        bits), and for an expected output its comparison class, reduced terms and axes."""
        return dict(self._attrs)

    @property
    def file_path(self) -> str:
        """The file the dataset is stored in."""
        return h5py.h5f.get_name(self._dsid).decode("utf-8", "surrogateescape")

    def raw_extents(self):
        """Where the dataset's elements lie in its file when they are stored raw, or None.

        A list of ``(flat_start, count, byte_offset)`` in C order covering every element:
        ``count`` elements from flat index ``flat_start`` are the stored bytes at
        ``byte_offset`` of ``file_path`` (little-endian, as stored: bfloat16 as its bit
        patterns). None when they are not: filters (compression, shuffle, checksums),
        unallocated chunks (fill values), chunks that are not runs of whole trailing axes,
        big-endian storage, a user block, or an HDF5 library that cannot tell.
        """
        try:
            return _raw_extents(self._dsid, self.shape)
        except Exception:  # an HDF5 build without the chunk queries, and the like
            return None

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def _check_open(self):
        if not self._dataset.id.valid:
            raise GoldenFileError(f"dataset {self.name} read after its file was closed")

    def __getitem__(self, index) -> np.ndarray:
        self._check_open()
        if self.size == 0:
            return decode_array(np.empty(self.shape, self._dataset.dtype)[index], self.encoding)
        return decode_array(self._dataset[index], self.encoding)

    def read(self) -> np.ndarray:
        """The whole dataset as one array."""
        return self[()]

    def __array__(self, dtype=None, copy=None):
        arr = self.read()
        return arr if dtype is None else arr.astype(dtype)

    def blocks(self, max_bytes: int = 64 << 20):
        """Yield ``(index, array)`` for consecutive C-order blocks of at most about ``max_bytes``
        (whole runs of the first axes), so ``out[index] = array`` rebuilds the whole array."""
        if self.ndim == 0 or self.size == 0:
            yield (), self.read()
            return
        yield from self._blocks((), max_bytes)

    def _blocks(self, prefix: tuple, max_bytes: int):
        axis = len(prefix)
        inner = prod(self.shape[axis + 1:]) * self.dtype.itemsize
        if inner > max_bytes and axis + 1 < self.ndim:
            for i in range(self.shape[axis]):
                yield from self._blocks(prefix + (i,), max_bytes)
            return
        step = max(1, max_bytes // max(inner, 1))
        for start in range(0, self.shape[axis], step):
            index = prefix + (slice(start, min(start + step, self.shape[axis])),)
            yield index, self[index]

    def __repr__(self):
        return f"<LazyArray {self.name} shape={self.shape} dtype={self.dtype.name}>"


def _raw_extents(dsid: h5py.h5d.DatasetID, shape: tuple):
    # the low-level calls only: each of h5py's properties costs 10-40 us, per dataset
    n = prod(shape)
    if n == 0:
        return None
    htype = dsid.get_type()
    if htype.get_class() not in (h5py.h5t.FLOAT, h5py.h5t.INTEGER) or (
            htype.get_size() > 1 and htype.get_order() != h5py.h5t.ORDER_LE):
        return None
    off = dsid.get_offset()
    if off is not None:
        # contiguous and allocated (HDF5 filters only chunked data); the offset counts from the
        # start of the file, a user block included
        return [(0, n, int(off))]
    itemsize = htype.get_size()
    if h5py.h5i.get_file_id(dsid).get_create_plist().get_userblock():
        return None                       # chunk addresses count from the end of a user block
    dcpl = dsid.get_create_plist()
    if dcpl.get_nfilters():
        return None
    layout = dcpl.get_layout()
    if layout != h5py.h5d.CHUNKED:
        return None
    chunks = dcpl.get_chunk()
    ax = next((i for i, c in enumerate(chunks) if c != 1), len(shape) - 1)
    if any(c != 1 for c in chunks[:ax]) or tuple(chunks[ax + 1:]) != shape[ax + 1:]:
        return None                       # not a run of whole trailing axes
    tail = prod(shape[ax + 1:])
    chunk_bytes = prod(chunks) * itemsize
    strides = [prod(shape[i + 1:]) for i in range(len(shape))]
    found = []

    def one(offset, filter_mask, addr, size):
        if filter_mask or size != chunk_bytes or addr is None:
            raise ValueError("chunk not stored raw")
        start = sum(int(o) * st for o, st in zip(offset, strides))
        count = min(chunks[ax], shape[ax] - int(offset[ax])) * tail
        found.append((start, count, int(addr)))

    if hasattr(dsid, "chunk_iter"):
        dsid.chunk_iter(lambda info: one(info.chunk_offset, info.filter_mask, info.byte_offset,
                                         info.size))
    else:
        for i in range(dsid.get_num_chunks()):
            info = dsid.get_chunk_info(i)
            one(info.chunk_offset, info.filter_mask, info.byte_offset, info.size)
    found.sort()
    pos = 0
    for start, count, _ in found:
        if start != pos:
            return None                   # a chunk never written: its elements are fill values
        pos += count
    return found if pos == n else None


class ArrayGroup(Mapping):
    """Name -> array for one subgroup of a case (empty when the subgroup is absent): a
    LazyArray for each dataset the index describes (``opener(name)`` opens it), and for a
    file of schema 1 the sums of absolute terms it lacks, computed on first use
    (``computed``: name -> a function giving the array)."""

    def __init__(self, described: dict, opener, where: str, computed: dict | None = None):
        self._described = described
        self._opener = opener
        self._where = where
        self._computed = dict(computed or {})
        self._names = list(described) + [n for n in self._computed if n not in described]
        self._arrays: dict = {}

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(f"no dataset {name!r} in {self._where}; present: "
                           f"{', '.join(self._names) or 'none'}")
        if name not in self._arrays:
            if name in self._described:
                self._arrays[name] = LazyArray(lambda: self._opener(name), name,
                                               self._described[name])
            else:
                self._arrays[name] = self._computed[name]()
        return self._arrays[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __contains__(self, name):
        return name in self._names

    def __repr__(self):
        return f"<ArrayGroup {self._names}>"


class GoldenCase:
    """One case of a golden file: its metadata (``meta``, its row of the file's index) and
    lazily read arrays; ``open_group()`` opens the case's HDF5 group when data are first
    read. ``sums`` are sums of absolute terms computed for a file of schema 1 that lacks them
    (``refspec.goldens.legacy``)."""

    def __init__(self, case_id: str, op: str, meta: dict, open_group, sums: dict | None = None):
        self._open = open_group
        self._group = None
        self._input_arrays = None
        self.case_id, self.op, self.meta = case_id, op, meta
        self.params: dict = meta["params"]
        self.seed: int = int(meta["seed"])
        self.regenerate: str = meta.get("regenerate", "")
        error = tuple(meta["error"]) if meta.get("error") else (0, None, None)
        self.expected_error: int | None = int(error[0]) or None
        self.expected_error_status: str | None = error[1] or None
        self.expected_error_message: str | None = error[2] or None
        arrays = meta.get("arrays", {})
        for sub in CASE_SUBGROUPS:
            setattr(self, sub, ArrayGroup(arrays.get(sub, {}), self._opener(sub),
                                          f"{case_id}/{sub}", sums if sub == "sum_abs" else None))

    @property
    def soc(self) -> str:
        """The chip profile ("" for the math-only one)."""
        return self.params.get("soc") or ""

    @property
    def distribution(self) -> str:
        return self.params.get("dist", "")

    @property
    def group(self) -> h5py.Group:
        """The case's HDF5 group (opened on first use)."""
        if self._group is None:
            self._group = self._open()
        return self._group

    def _opener(self, sub: str):
        def open_dataset(name):
            return h5py.h5d.open(self.group.id, f"{sub}/{name}".encode("utf-8"))
        return open_dataset

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    def input_arrays(self) -> dict[str, np.ndarray]:
        """Every input read whole, by name; read once and kept with this case object."""
        if self._input_arrays is None:
            self._input_arrays = {n: self.inputs[n][()] for n in self.input_names}
        return self._input_arrays

    @property
    def output_names(self) -> list[str]:
        return list(self.expected)

    @property
    def is_negative(self) -> bool:
        return self.expected_error is not None

    def output_meta(self, name: str) -> dict:
        """comparison_class, reduced_terms (int or None), axes, dtype of one expected output."""
        a = self.expected[name].attrs
        k = int(a.get("reduced_terms", -1))
        return {"comparison_class": a.get("comparison_class"),
                "reduced_terms": None if k < 0 else k,
                "axes": a.get("axes", ""), "dtype": a.get("dtype")}

    def __repr__(self):
        return f"<GoldenCase {self.case_id} op={self.op}>"


class GoldenFile:
    """An open golden file; use as a context manager (see ``open``).

    A file written by ``refspec generate --jobs N`` is an index whose cases are HDF5 external
    links into its part files (``<file>.parts/``); its cases read like any other (the part files
    are opened once, when a case of theirs is first read).
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._file = _open_h5(self.path)
        self._parts: dict[str, h5py.File] | None = None
        self._row_of = None
        try:
            self.attrs = read_attrs(self._file)
            _check_schema(self.attrs, self.path)
            if INDEX_DATASET not in self._file or CASES_GROUP not in self._file:
                raise GoldenFileError("not a refspec golden file (no /index or /cases)", self.path)
            self._ids = index.read_ids(self._file)
            self._id_set = set(self._ids)
            base = os.path.dirname(os.path.abspath(self.path))
            self._part_files = [os.path.join(base, n) for n in json.loads(self.attrs.get("parts", "[]"))]
        except BaseException:
            self._file.close()
            raise

    @property
    def complete(self) -> bool:
        return bool(self.attrs.get("complete", False))

    @property
    def part_files(self) -> list[str]:
        """The part files a ``--jobs`` run's index links to (empty for a self-contained file)."""
        return list(self._part_files)

    @property
    def schema(self) -> int:
        return int(self.attrs["schema_version"])

    def summary(self) -> list[index.Row]:
        """One ``refspec.goldens.index.Row`` per case in file order, from the index at the
        file's root (a file of schema 1 read as schema 2: ``refspec.goldens.legacy``)."""
        rows = self._rows()
        return [rows[c] for c in self._ids]

    def case_group(self, case_id: str) -> h5py.Group:
        """The HDF5 group of a case (in its part file, for the index of a ``--jobs`` run: the
        part files' own indexes say which holds it, so no link is resolved per case)."""
        path = case_path(case_id).encode("utf-8")
        f = self._file if not self._part_files else self._part_of()[case_id]
        return h5py.Group(h5py.h5g.open(f.id, path))

    def _part_of(self) -> dict:
        """case id -> the open part file that holds it (the part files opened once)."""
        if self._parts is None:
            self._parts = {}
            for path in self.part_files:
                part = _open_h5(path)
                for case_id in index.read_ids(part):
                    self._parts[case_id] = part
        return self._parts

    @property
    def h5(self) -> h5py.File:
        """The underlying h5py file (read-only)."""
        return self._file

    def case_ids(self) -> list[str]:
        """Every case id in file order."""
        return list(self._ids)

    def __len__(self):
        return len(self._ids)

    def __contains__(self, case_id):
        return case_id in self._id_set

    def __getitem__(self, case_id: str) -> GoldenCase:
        if case_id not in self._id_set:
            raise UnknownCaseError(f"case {case_id!r} is not in {self.path} "
                                   f"({len(self._ids)} cases; `refspec show {self.path} --ids` "
                                   "lists them)")
        row = self._rows()[case_id]
        meta = json.loads(row.meta)
        case = GoldenCase(case_id, row.op, meta, lambda: self.case_group(case_id))
        if self.schema < SCHEMA_VERSION:
            case = legacy.with_sums(case)
        return case

    def _rows(self) -> dict:
        """The index rows by case id (read once; a file of schema 1 has them upgraded)."""
        if self._row_of is None:
            rows = index.read_rows(self._file, self._ids)
            if self.schema < SCHEMA_VERSION:
                rows = [legacy.upgrade_row(c, r, lambda c=c: self.case_group(c))
                        for c, r in zip(self._ids, rows)]
            self._row_of = {r.case_id: r for r in rows}
        return self._row_of

    def __iter__(self):
        for case_id in self._ids:
            yield self[case_id]

    def close(self) -> None:
        for part in set((self._parts or {}).values()):
            part.close()
        self._parts = None
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<GoldenFile {self.path} ({len(self._ids)} cases)>"


def _open_h5(path: str) -> h5py.File:
    if not os.path.exists(path):
        raise GoldenFileError("no such file" + interrupted_run(path), path)
    if os.path.isdir(path):
        raise GoldenFileError("is a directory, not a golden file", path)
    if not os.access(path, os.R_OK):
        raise GoldenFileError("permission denied", path)
    if not h5py.is_hdf5(path):
        raise GoldenFileError("not an HDF5 file (not a refspec golden file)", path)
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        detail = one_line(exc)
        if "truncated file" in detail:
            detail = (f"truncated: shorter than its header says (copied or written in part?): "
                      f"{detail}")
        elif re.search(r"\block(ed|ing)?\b", detail.lower()):
            detail = f"locked by another process (being written?): {detail}"
        raise GoldenFileError(f"cannot open the HDF5 file: {detail}", path) from None


def _check_schema(attrs: dict, path: str) -> None:
    version = attrs.get("schema_version")
    if version is None:
        raise GoldenFileError("not a refspec golden file (no schema_version attribute)", path)
    if not isinstance(version, int) or version < 1:
        raise GoldenFileError(f"not a refspec golden file (schema_version {version!r})", path)
    if version > SCHEMA_VERSION:
        raise GoldenFileError(f"written with golden schema {version}, newer than the schema "
                              f"{SCHEMA_VERSION} this refspec reads; upgrade refspec", path)


def open(path) -> GoldenFile:  # noqa: A001 - the documented name
    """Open a golden file for reading (a context manager); raises GoldenFileError if it is
    missing, unreadable, not a refspec golden file or of a newer schema."""
    return GoldenFile(path)
