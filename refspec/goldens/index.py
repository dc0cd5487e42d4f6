"""The case index at a golden file's root (docs/goldens.md, "Layout").

``/index`` lists the case ids in file order; ``/summary`` holds one row per case, aligned with
it: operator, dtype, chip profile, whether the case is negative, the bytes of its arrays
(logical and as stored), and ``meta``, a JSON text with everything else a reader needs before
it reads data (the case's parameters, seed, expected error, regenerate command, and each
dataset's dtype, shape and, for the expected outputs, comparison class, reduced terms and
axes). This is the one place a case's metadata is written (schema 2): its group holds its
arrays only. The writer appends both together; whole-file questions (``refspec show FILE``) are
answered from them without opening a single case, and a reader opens a case's group only when
it reads the case's arrays.

The columns of numbers carry HDF5's Fletcher32 checksum; the texts (case ids, operator, dtype,
soc, meta: variable-length strings, which HDF5 filters cannot cover) are covered by
``/summary/crc32``, the CRC-32 of a row's texts, checked when the rows are read. A file written before these checks has neither;
its rows are read as they are.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import h5py
import numpy as np

from .format import INDEX_DATASET, CorruptGoldenError

__all__ = ["SUMMARY_GROUP", "CRC_COLUMN", "Row", "create", "append", "read_ids", "read_rows",
           "rewrite", "row_crc32"]

SUMMARY_GROUP = "summary"
_STR = h5py.string_dtype("utf-8")
#: the columns of /summary and their dtypes
COLUMNS = (("op", _STR), ("dtype", _STR), ("soc", _STR), ("negative", np.bool_),
           ("data_bytes", np.int64), ("stored_bytes", np.int64), ("meta", _STR))
#: the column of each row's checksum (``row_crc32``)
CRC_COLUMN = "crc32"


class Row(NamedTuple):
    """One case in the index."""

    case_id: str
    op: str
    dtype: str
    soc: str
    negative: bool
    data_bytes: int
    stored_bytes: int
    meta: str = ""               # JSON (see the module docstring); "" when not known


def row_crc32(row: Row) -> int:
    """The CRC-32 of a row's texts (case id, operator, dtype, soc, meta), UTF-8, each ended by
    a zero byte: what the ``crc32`` column holds."""
    text = "".join(f"{v}\0" for v in (row.case_id, row.op, row.dtype, row.soc, row.meta))
    return zlib.crc32(text.encode("utf-8", "surrogateescape"))


def _column_dataset(parent, name: str, dtype) -> None:
    """A resizable column; numbers under Fletcher32 (HDF5 filters no variable-length text)."""
    parent.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(1024,), dtype=dtype,
                          fletcher32=dtype is not _STR)


def create(f: h5py.File) -> None:
    """An empty /index and /summary in a new file."""
    _column_dataset(f, INDEX_DATASET, _STR)
    group = f.create_group(SUMMARY_GROUP, track_order=True)
    for name, dtype in COLUMNS + ((CRC_COLUMN, np.uint32),):
        _column_dataset(group, name, dtype)


def append(f: h5py.File, rows: list[Row]) -> None:
    """Append rows to /index and /summary (files without /summary get their index only)."""
    if not rows:
        return
    index = f[INDEX_DATASET]
    n = index.shape[0]
    index.resize((n + len(rows),))
    index[n:] = [r.case_id for r in rows]
    if SUMMARY_GROUP not in f:
        return
    group = f[SUMMARY_GROUP]
    columns = [(name, dtype, [r[i] for r in rows]) for i, (name, dtype) in enumerate(COLUMNS, 1)]
    if CRC_COLUMN in group:
        columns.append((CRC_COLUMN, np.uint32, [row_crc32(r) for r in rows]))
    for name, dtype, values in columns:
        ds = group[name]
        m = ds.shape[0]
        ds.resize((m + len(rows),))
        ds[m:] = np.array(values, dtype=dtype)


def _column(ds: h5py.Dataset) -> list:
    """A whole 1-D dataset as Python values (str for strings), decoded in one call."""
    if h5py.check_string_dtype(ds.dtype) is not None:
        return ds.asstr()[()].tolist()
    return ds[()].tolist()


def read_ids(f: h5py.File) -> list[str]:
    return _column(f[INDEX_DATASET])


def read_rows(f: h5py.File, ids: list[str], strict: bool = True) -> list[Row | None]:
    """The stored summary rows of ``ids`` (the file's index order); None for cases without one.
    A row whose texts do not match its checksum is a ``CorruptGoldenError`` (``strict``) or
    None."""
    if SUMMARY_GROUP not in f:
        return [None] * len(ids)
    group = f[SUMMARY_GROUP]
    columns = [_column(group[name]) if name in group else [""] * len(ids) for name, _ in COLUMNS]
    crcs = _column(group[CRC_COLUMN]) if CRC_COLUMN in group else None
    n = min(len(c) for c in columns)
    out: list[Row | None] = []
    for i, case_id in enumerate(ids):
        if i >= n:
            out.append(None)
            continue
        values = [c[i] for c in columns]
        row = Row(case_id, *values[:3], bool(values[3]), int(values[4]), int(values[5]),
                  values[6])
        if crcs is not None and (i >= len(crcs) or crcs[i] != row_crc32(row)):
            if not strict:
                row = None
            else:
                raise CorruptGoldenError(f"row {i} does not match its checksum (the file was "
                                         "damaged after it was written)", f.filename, case_id,
                                         f"/{SUMMARY_GROUP}")
        out.append(row)
    return out


def rewrite(f: h5py.File, rows: list[Row]) -> None:
    """Replace /index and /summary by ``rows`` (used when a resumed file is repaired)."""
    for name in (INDEX_DATASET, SUMMARY_GROUP):
        if name in f:
            del f[name]
    create(f)
    append(f, rows)
