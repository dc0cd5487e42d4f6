"""HDF5 objects of a golden file, made through HDF5's own calls (h5py's low-level API).

Creating a group or a dataset through h5py's high-level API costs a dtype guess, an existence
check and a property list per object; a golden file has tens of thousands of small ones. These
helpers make the same objects (creation order tracked, no modification times) with property
lists made once: ``CaseGroups`` the groups along case ids, ``DatasetMaker`` the datasets, and
``write_arrays`` one subgroup of a case (inputs, expected, exact, sum_abs).

Every dataset carries a checksum (docs/goldens.md, "Checksums"): a chunked one HDF5's
Fletcher32 filter, which HDF5 checks on every read of a chunk; a contiguous one (at most
``CHUNK_BYTES`` unfiltered, kept contiguous because a chunk index in the HDF5 1.8 format costs
about 4 KiB per dataset) the CRC-32 of its bytes, in its description in the index, which
refspec's reader checks when it first reads the dataset.
"""

from __future__ import annotations

import zlib

import h5py
import numpy as np
from h5py import h5d, h5g, h5p, h5s, h5t, h5z

from .format import CASES_GROUP, CHUNK_BYTES, MIN_CHUNKED_BYTES, chunk_shape, encode_array

__all__ = ["CaseGroups", "DatasetMaker", "write_arrays", "bytes_crc32", "copy_cases"]

_ORDER = h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED
_SCALAR_SPACE = h5s.create(h5s.SCALAR)


def bytes_crc32(arr: np.ndarray, crc: int = 0) -> int:
    """The CRC-32 (zlib's) of an array's bytes as stored: C order, little-endian, continuing
    ``crc`` (so blocks in C order give the CRC of the whole)."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return zlib.crc32(arr.reshape(-1).view(np.uint8), crc)


def _group_plists() -> tuple:
    """(lcpl, gcpl) of ``group.create_group(name, track_order=True)`` for an ASCII name."""
    lcpl = h5p.create(h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    lcpl.set_char_encoding(h5t.CSET_ASCII)
    gcpl = h5p.create(h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(_ORDER)
    gcpl.set_attr_creation_order(_ORDER)
    gcpl.set_obj_track_times(False)
    return lcpl, gcpl


_LCPL, _GCPL = _group_plists()


def _group(parent: h5py.Group, name: str) -> h5py.Group:
    """A new ordered group ``name`` in ``parent``."""
    if not name.isascii():
        return parent.create_group(name, track_order=True)
    return h5py.Group(h5g.create(parent.id, name.encode("ascii"), lcpl=_LCPL, gcpl=_GCPL))


class CaseGroups:
    """The groups of a golden file along case ids: ``parent(case_id)`` is the group that holds a
    case's group, made (ordered) where missing, remembered by path; ``case(case_id)`` makes the
    case's own group. ``cases`` are the ids the file holds already: no case id may nest inside
    another or hold others inside it. ``made(path)`` says whether this object made the group
    at a parent path (then nothing else can be in it)."""

    def __init__(self, f: h5py.File, cases=()):
        self._file = f
        self._groups: dict = {}
        self._made: set = set()
        self._cases: set = set()
        self._inner: set = set()            # the parent paths of the cases
        self._started: set = set()          # the cases whose groups this object made
        for c in cases:
            self.add(c)

    def add(self, case_id: str) -> None:
        """Record a case of the file."""
        self._cases.add(case_id)
        parts = case_id.split("/")
        self._inner.update("/".join(parts[:k]) for k in range(1, len(parts)))

    def made(self, path: str) -> bool:
        return path in self._made

    def _at(self, path: str, case_id: str) -> h5py.Group:
        group = self._groups.get(path)
        if group is not None:
            return group
        if path in self._cases:
            raise ValueError(f"case id {case_id!r} would nest inside case {path!r}")
        if not path:
            group = self._file[CASES_GROUP]
        else:
            up_path, _, name = path.rpartition("/")
            up = self._at(up_path, case_id)
            if up_path not in self._made and name in up:
                group = up[name]
            else:
                group = _group(up, name)
                self._made.add(path)
        self._groups[path] = group
        return group

    def parent(self, case_id: str) -> h5py.Group:
        if case_id in self._inner:
            raise ValueError(f"case id {case_id!r} would hold other cases inside it")
        return self._at(case_id.rpartition("/")[0], case_id)

    def case(self, case_id: str) -> h5py.Group:
        """A new, empty group for a case (what a run that stopped half-way left under that
        name is replaced)."""
        parent_path, _, leaf = case_id.rpartition("/")
        parent = self.parent(case_id)
        if (not self.made(parent_path) or case_id in self._started) and leaf in parent:
            del parent[leaf]
        self._started.add(case_id)
        return _group(parent, leaf)

    def reopen(self, f: h5py.File) -> None:
        """The file was closed and opened again: forget the groups, keep the cases."""
        self._file = f
        self._groups.clear()
        self._made.clear()


def _dataset_plist(chunks, filters: dict) -> h5p.PropDCID:
    """The dataset creation property list h5py's ``create_dataset`` builds for ``chunks``
    (None: contiguous) and the keywords of ``refspec.goldens.format.compression_filters``
    (shuffle before compression, Fletcher32 checksums on chunked data), without modification
    times, attributes in creation order."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if chunks is not None:
        dcpl.set_chunk(chunks)
        if filters.get("shuffle"):
            dcpl.set_shuffle()
        if filters.get("compression") == "gzip":
            dcpl.set_deflate(filters["compression_opts"])
        elif filters.get("compression") == "lzf":
            dcpl.set_filter(h5z.FILTER_LZF, h5z.FLAG_OPTIONAL)
        dcpl.set_fletcher32()           # last, as h5py orders it: the checksum of what is stored
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(_ORDER)
    return dcpl


class DatasetMaker:
    """Datasets of one file's settings (``filters``: the keywords of ``compression_filters``):
    what ``group.create_dataset(name, data=data, chunks=chunk_shape(...), track_order=True,
    **filters)`` creates (no filters on contiguous datasets), with the creation property lists,
    types and dataspaces made once per chunk shape, dtype and shape; chunked datasets carry
    HDF5's Fletcher32 checksum (``fletcher32=True``)."""

    def __init__(self, filters: dict):
        self.filters = filters
        self._dcpls: dict = {}
        self._types: dict = {}
        self._spaces: dict = {}

    def create(self, group: h5g.GroupID, name: str, data: np.ndarray) -> tuple:
        """The dataset ``name`` holding ``data``, and whether it is chunked (then HDF5
        checksums it; a contiguous dataset's checksum is its caller's to keep)."""
        # unfiltered data are chunked only when they span several chunks: one chunk would only
        # add a chunk index (filters need chunks whatever the size)
        chunks = chunk_shape(data.shape, data.dtype.itemsize,
                             min_bytes=MIN_CHUNKED_BYTES if self.filters else CHUNK_BYTES + 1)
        key = (data.ndim, chunks, data.dtype.str)
        dcpl = self._dcpls.get(key)
        if dcpl is None:
            dcpl = self._dcpls[key] = _dataset_plist(chunks, self.filters if chunks else {})
        types = self._types.get(data.dtype.str)
        if types is None:
            types = self._types[data.dtype.str] = (h5t.py_create(data.dtype, logical=1),
                                                   h5t.py_create(data.dtype))
        space = self._spaces.get(data.shape)
        if space is None:               # H5Dcreate copies the dataspace: one per shape serves
            space = _SCALAR_SPACE if data.ndim == 0 else h5s.create_simple(data.shape)
            if len(self._spaces) < 4096:
                self._spaces[data.shape] = space
        dsid = h5d.create(group, name.encode("utf-8"), types[0], space, dcpl=dcpl)
        if data.size:
            dsid.write(h5s.ALL, h5s.ALL, data, mtype=types[1])
        return dsid, chunks is not None


def write_arrays(case_group: h5py.Group, sub: str, arrays: dict, maker: DatasetMaker,
                 wide: bool = False) -> tuple:
    """Write one subgroup of a case (``wide``: as float64, the exact values and the sums of
    absolute terms); returns (logical bytes, stored bytes, {name: {"dtype", "encoding"
    (bfloat16 bits), "shape", and for a contiguous dataset "crc32", the CRC-32 of its stored
    bytes}})."""
    if not arrays:
        return 0, 0, {}
    group = h5g.create(case_group.id, sub.encode("ascii"), lcpl=_LCPL, gcpl=_GCPL)
    nbytes = on_disk = 0
    described = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if wide:
            arr = arr.astype(np.float64, copy=False)
        stored, attrs = encode_array(arr)
        ds, chunked = maker.create(group, name, stored)
        nbytes += stored.nbytes
        on_disk += ds.get_storage_size()
        described[name] = {**attrs, "shape": list(stored.shape)}
        if not chunked:
            described[name]["crc32"] = bytes_crc32(stored)
    return nbytes, on_disk, described


def copy_cases(f: h5py.File, cases) -> None:
    """Copy ``(h5py.Group, case id)`` pairs into the golden file ``f`` with HDF5's object copy
    (bytes, chunks, filters and attributes as they are, nothing decoded); the caller appends
    their index rows."""
    groups = CaseGroups(f)
    for group, case_id in cases:
        group.file.copy(group, groups.parent(case_id), name=case_id.rsplit("/", 1)[-1])
        groups.add(case_id)
