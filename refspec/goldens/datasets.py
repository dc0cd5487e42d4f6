"""One dataset of a golden file, checked and read on demand: ``LazyArray`` (docs/goldens.md,
"Reading").

A ``LazyArray`` knows its dtype and shape from the file's index, opens its dataset when data
are first asked for, checks it against that description (stored in the file, numbers of that
dtype and shape, under its checksum: ``refspec.goldens.integrity.storage_problem``) and reads
the slices it is indexed with, decoding bfloat16 bit patterns to ``ml_dtypes.bfloat16``. A
chunked dataset's Fletcher32 checksum is checked by HDF5 on every read of a chunk; a contiguous
dataset is read whole once, in blocks, and compared with the CRC-32 the index holds before
anything of it is returned. A problem is a ``CorruptGoldenError`` naming the file, the case
and the dataset.
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

import h5py
import numpy as np

from ..spec.errors import one_line
from .format import (BF16_ENCODING, CODES_ENCODINGS, CorruptGoldenError, GoldenFileError,
                     decode_array, real_dtype, stored_dtype)
from .h5_objects import bytes_crc32
from .integrity import raw_extents, storage_problem

__all__ = ["LazyArray", "Source", "READ_ERRORS"]

#: bytes read at a time when a dataset's CRC-32 is checked
_CRC_BLOCK = 16 << 20
#: what HDF5 raises when a file's bytes are not what it wrote (besides OSError)
READ_ERRORS = (OSError, KeyError, RuntimeError)


class Source(NamedTuple):
    """Where a case's arrays come from, for their checks and messages: the golden file's
    ``path``, the ``case_id``, and whether the file says every dataset carries a checksum."""

    path: str | None = None
    case_id: str | None = None
    checksums: bool = False

class LazyArray:
    """One dataset of a golden file, read on demand and decoded to its real dtype.

    ``arr[index]`` follows h5py's indexing rules (slices with positive steps, integers,
    increasing index lists) and returns a NumPy array; ``arr.read()`` and ``np.asarray(arr)``
    read it whole. The dataset is checked against its description when it is opened
    (``refspec.goldens.integrity.storage_problem``) and against its checksum when it is read
    (HDF5's Fletcher32 chunk by chunk; the CRC-32 of a contiguous dataset once, before its
    first read); ``CorruptGoldenError`` otherwise.
    """

    def __init__(self, opener, name: str, described: dict, source: Source | None = None,
                 sub: str = ""):
        """``opener()`` opens the dataset (its low-level ``h5py.h5d.DatasetID``) when data are
        first read; ``described``: its attributes and shape as the file's index gives them."""
        self._ds = None
        self._id = None
        self._open = opener
        self._source = source or Source()
        self.name = name
        self.label = f"{sub}/{name}" if sub else name
        try:
            self._attrs = {k: v for k, v in described.items() if k != "shape"}
            self.encoding = self._attrs.get("encoding")
            self.dtype = real_dtype(self._attrs)
            if self.encoding not in (BF16_ENCODING, *CODES_ENCODINGS):
                self.dtype = _number_dtype(self.dtype)
            self.shape = _shape(described["shape"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise self.corrupt(f"its description in the index is not usable "
                               f"({one_line(exc)})") from None
        self._crc = self._attrs.get("crc32")
        self._crc_checked = self._crc is None

    def corrupt(self, what: str) -> CorruptGoldenError:
        """The error of this dataset being ``what``."""
        return CorruptGoldenError(what, self._source.path, self._source.case_id, self.label)

    @property
    def _dsid(self) -> h5py.h5d.DatasetID:
        """The low-level dataset (opened and checked on first use; cheaper than an h5py
        Dataset)."""
        if self._id is None:
            try:
                dsid = self._open()
            except GoldenFileError:
                raise
            except (*READ_ERRORS, ValueError) as exc:
                raise self.corrupt(f"missing: the index lists it, but it cannot be opened "
                                   f"({one_line(exc)})") from None
            stored = stored_dtype(self.dtype)
            checksum = "crc32" if self._crc is not None else (
                "required" if self._source.checksums else None)
            try:
                problem = storage_problem(dsid, self.shape, stored, checksum)
            except READ_ERRORS as exc:
                problem = f"cannot be read ({one_line(exc)})"
            if problem:
                raise self.corrupt(problem)
            self._id = dsid
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
        big-endian storage, a user block, or an HDF5 library that cannot tell. The bytes are
        checked against their CRC-32 first, so what is copied from there is what was written.
        """
        self._check_crc()
        try:
            return raw_extents(self._dsid, self.shape)
        except Exception:  # an HDF5 build without the chunk queries, and the like
            return None

    def check(self) -> None:
        """Open the dataset and check it against its description in the index, and a
        contiguous dataset's bytes against their CRC-32 (read once, whole); a chunked
        dataset's chunks are checked as they are read. ``CorruptGoldenError`` otherwise."""
        if self._dsid is not None and self.size:
            self._check_crc()

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def _check_open(self):
        if not self._dataset.id.valid:
            raise GoldenFileError(f"dataset {self.name} read after its file was closed")

    def _read_stored(self, index):
        """The stored values at ``index`` (bfloat16 as uint16 bits); a read HDF5 cannot do
        (a chunk whose Fletcher32 checksum does not match, bytes past the file's end) is a
        ``CorruptGoldenError``."""
        dataset = self._dataset
        try:
            return dataset[index]
        except GoldenFileError:
            raise
        except READ_ERRORS as exc:
            detail = one_line(exc)
            if "filter returned failure" in detail:
                raise self.corrupt("its bytes do not match their Fletcher32 checksum (the file "
                                   "was damaged after it was written)") from None
            raise self.corrupt(f"cannot be read: {detail}") from None

    def _check_crc(self) -> None:
        """Read a contiguous dataset whole once, in blocks, and compare its CRC-32 with the
        index's."""
        if self._crc_checked:
            return
        crc = 0
        for key in self._block_keys(_CRC_BLOCK):
            crc = bytes_crc32(np.asarray(self._read_stored(key)), crc)
        if crc != self._crc:
            raise self.corrupt("its bytes do not match their CRC-32 in the index (the file was "
                               "damaged after it was written)")
        self._crc_checked = True

    def __getitem__(self, index) -> np.ndarray:
        self._check_open()
        if self.size == 0:
            return decode_array(np.empty(self.shape, self._dataset.dtype)[index], self.encoding)
        self._check_crc()
        return decode_array(self._read_stored(index), self.encoding)

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
        for index in self._block_keys(max_bytes):
            yield index, self[index]

    def _block_keys(self, max_bytes: int, prefix: tuple = ()):
        if self.ndim == 0 or self.size == 0:
            yield ()
            return
        axis = len(prefix)
        inner = prod(self.shape[axis + 1:]) * self.dtype.itemsize
        if inner > max_bytes and axis + 1 < self.ndim:
            for i in range(self.shape[axis]):
                yield from self._block_keys(max_bytes, prefix + (i,))
            return
        step = max(1, max_bytes // max(inner, 1))
        for start in range(0, self.shape[axis], step):
            yield prefix + (slice(start, min(start + step, self.shape[axis])),)

    def __repr__(self):
        return f"<LazyArray {self.name} shape={self.shape} dtype={self.dtype.name}>"


def _number_dtype(name) -> np.dtype:
    """The dtype an index names for an array of numbers (ValueError for anything else)."""
    dt = np.dtype(name)
    if dt.kind not in "fiub" or dt.hasobject:
        raise ValueError(f"dtype {name!r} is not a dtype of numbers")
    return dt


def _shape(value) -> tuple:
    """A shape as the index gives it: a list of sizes >= 0 (ValueError otherwise)."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value):
        raise ValueError(f"shape {value!r} is not a list of sizes >= 0")
    return tuple(value)
