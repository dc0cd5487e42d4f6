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
"""

from __future__ import annotations

from typing import NamedTuple

import h5py
import numpy as np

from .format import INDEX_DATASET

__all__ = ["SUMMARY_GROUP", "Row", "create", "append", "read_ids", "read_rows", "rewrite"]

SUMMARY_GROUP = "summary"
_STR = h5py.string_dtype("utf-8")
#: the columns of /summary and their dtypes
COLUMNS = (("op", _STR), ("dtype", _STR), ("soc", _STR), ("negative", np.bool_),
           ("data_bytes", np.int64), ("stored_bytes", np.int64), ("meta", _STR))


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


def create(f: h5py.File) -> None:
    """An empty /index and /summary in a new file."""
    f.create_dataset(INDEX_DATASET, shape=(0,), maxshape=(None,), chunks=(1024,), dtype=_STR)
    group = f.create_group(SUMMARY_GROUP, track_order=True)
    for name, dtype in COLUMNS:
        group.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(1024,), dtype=dtype)


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
    for i, (name, dtype) in enumerate(COLUMNS, start=1):
        ds = group[name]
        m = ds.shape[0]
        ds.resize((m + len(rows),))
        ds[m:] = np.array([r[i] for r in rows], dtype=dtype)


def _column(ds: h5py.Dataset) -> list:
    """A whole 1-D dataset as Python values (str for strings), decoded in one call."""
    if h5py.check_string_dtype(ds.dtype) is not None:
        return ds.asstr()[()].tolist()
    return ds[()].tolist()


def read_ids(f: h5py.File) -> list[str]:
    return _column(f[INDEX_DATASET])


def read_rows(f: h5py.File, ids: list[str]) -> list[Row | None]:
    """The stored summary rows of ``ids`` (the file's index order); None for cases without one."""
    if SUMMARY_GROUP not in f:
        return [None] * len(ids)
    group = f[SUMMARY_GROUP]
    columns = [_column(group[name]) if name in group else [""] * len(ids) for name, _ in COLUMNS]
    n = min(len(c) for c in columns)
    out: list[Row | None] = []
    for i, case_id in enumerate(ids):
        if i >= n:
            out.append(None)
            continue
        values = [c[i] for c in columns]
        out.append(Row(case_id, *values[:3], bool(values[3]), int(values[4]), int(values[5]),
                       values[6]))
    return out


def rewrite(f: h5py.File, rows: list[Row]) -> None:
    """Replace /index and /summary by ``rows`` (used when a resumed file is repaired)."""
    for name in (INDEX_DATASET, SUMMARY_GROUP):
        if name in f:
            del f[name]
    create(f)
    append(f, rows)
