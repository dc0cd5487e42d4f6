"""GoldenWriter: writes a golden HDF5 file (schema 2) atomically, resumably.

Semantics (docs/goldens.md, "Writing, resuming, merging"):

- Everything is written to ``<path>.part``; a successful ``close()`` sets the root attribute
  ``complete=True`` and renames the file to ``<path>``. An exception or a killed process leaves
  only the ``.part`` file, whose ``complete`` is False: never a file that looks complete.
- A case's metadata (its parameters, seed, expected error, regenerate command and the
  description of every array) is written once, in its row of the file's index
  (``refspec.goldens.index``); its group holds its arrays only. A case counts as written
  once its row is in the index (rows are appended at the next flush, at least once a second);
  a case group without a row, left by an interrupted run, is replaced when the case is written
  again on resume.
- ``resume=True`` continues ``<path>.part`` (or a complete ``<path>``: that file is moved back to
  ``.part`` only when a new case is actually written); ``has_case`` tells which cases to skip.
- An existing ``<path>`` or ``<path>.part`` without ``force``/``resume`` is an error;
  ``force=True`` starts a new ``.part`` and replaces ``<path>`` only when the new file is complete.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import h5py
import numpy as np

from .._version import __version__
from ..spec.dtypes import dtype_name
from ..spec.errors import AclnnError
from ..spec.terms import CLASSES
from . import index
from .cases import CaseData
from .format import (CASES_GROUP, DEFAULT_COMPRESSION, INDEX_DATASET, LIBVER, SCHEMA_VERSION,
                     GoldenFileDamagedError, GoldenFileError, GoldenFileExistsError, atomic_replace,
                     attr_value, case_path, check_case_id, compression_filters,
                     describe_compression, fsync_path, part_path, to_jsonable)
from .h5_objects import CaseGroups, DatasetMaker, write_arrays

__all__ = ["GoldenWriter", "SWEEP_ATTRS", "create_golden_file", "check_case", "case_meta",
           "utc_now"]

#: root attributes that identify a sweep: resume and merge require them to match
SWEEP_ATTRS = ("sweep_name", "sweep_definition", "sweep_seed")
#: the file is flushed after a case once this many seconds have passed since the last flush
FLUSH_SECONDS = 1.0


def utc_now() -> str:
    """The current UTC time as the ``created`` attribute spells it (2026-12-01T21:42:19Z)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def create_golden_file(path, root_attrs: dict) -> h5py.File:
    """A new, empty golden file (root attributes, ``/cases``, an empty index)."""
    f = h5py.File(path, "w", libver=LIBVER, track_order=True)
    try:
        for k, v in root_attrs.items():
            f.attrs[k] = v
        f.attrs["complete"] = False
        f.create_group(CASES_GROUP, track_order=True)
        index.create(f)
        f.flush()
    except BaseException:
        f.close()
        raise
    return f


def check_case(data: CaseData) -> None:
    """A case the writer can store: a negative case has inputs only; a positive one has the
    exact value, the tolerance terms and the axis letters of every expected output, shapes
    agreeing (ValueError / TypeError otherwise)."""
    where = f"case {data.case_id!r}"
    expected, exact, terms = data.present("expected"), data.present("exact"), data.terms
    if data.error is not None:
        if not isinstance(data.error, AclnnError):
            raise TypeError(f"{where}: error must be an AclnnError instance")
        if expected or exact:
            raise ValueError(f"{where}: a negative case has inputs only (no expected/exact)")
        return
    if set(exact) != set(expected):
        raise ValueError(f"{where}: exact outputs {sorted(exact)} must match expected "
                         f"{sorted(expected)}")
    for name, arr in expected.items():
        if name not in terms or name not in data.axes:
            raise ValueError(f"{where}: output {name!r} needs terms and axes")
        if terms[name].comparison_class not in CLASSES:
            raise ValueError(f"{where}: output {name!r}: comparison class "
                             f"{terms[name].comparison_class!r} not in {CLASSES}")
        written = getattr(terms[name], "written", None)
        shape = np.shape(arr) if written is None else np.shape(written)   # a cache: per offset
        if np.shape(exact[name]) != shape:
            raise ValueError(f"{where}: exact {name!r} shape {np.shape(exact[name])} != "
                             f"expected shape {shape}")
        s = terms[name].sum_abs
        if s is not None and np.shape(s) != shape:
            raise ValueError(f"{where}: sum_abs {name!r} shape {np.shape(s)} != {shape}")


def case_meta(data: CaseData, arrays: dict) -> str:
    """The JSON of a case's index row (docs/goldens.md, "Layout"): parameters, seed, expected
    error, regenerate command, and each array's dtype, shape and, for the expected outputs,
    comparison class, number of reduced terms and axis letters (a cache updated in place: the
    class of the values written, ``written_class``)."""
    for name, described in arrays.get("expected", {}).items():
        t = data.terms[name]
        described.update(comparison_class=str(t.comparison_class),
                         reduced_terms=-1 if t.reduced_terms is None else int(t.reduced_terms),
                         axes=str(data.axes[name]))
        if getattr(t, "written_class", None) is not None:
            described.update(written_class=str(t.written_class))
    e = data.error
    error = None if e is None else [int(e.code), str(e.status), str(getattr(e, "message", e))]
    return json.dumps({"params": to_jsonable(data.params), "seed": int(data.seed),
                       "error": error, "regenerate": str(data.regenerate), "arrays": arrays},
                      separators=(",", ":"), allow_nan=True)


class GoldenWriter:
    """Write cases into a golden file; see the module docstring for the file semantics.

    ``compression``: "none" (default, see docs/goldens.md "Compression"), "lzf", "gzip" or
    "gzip:N" (level N, default 1), optionally with "+shuffle"/"-shuffle" (HDF5's byte-shuffle
    filter; default: on for gzip). ``extra_attrs`` are further root attributes (a shard label).
    """

    def __init__(self, path, *, sweep_name: str, sweep_definition: str, sweep_seed: int,
                 compression: str = DEFAULT_COMPRESSION, resume: bool = False,
                 force: bool = False, extra_attrs: dict | None = None):
        self.path = os.fspath(path)
        self.part_path = part_path(self.path)
        self._maker = DatasetMaker(compression_filters(compression))
        self._sweep = {"sweep_name": str(sweep_name), "sweep_definition": str(sweep_definition),
                       "sweep_seed": int(sweep_seed)}
        self._root_attrs = {
            "schema_version": SCHEMA_VERSION, "refspec_version": __version__,
            "numpy_version": np.__version__, "h5py_version": h5py.__version__,
            "hdf5_version": h5py.version.hdf5_version, "created": utc_now(), **self._sweep,
            "compression": describe_compression(self._maker.filters), **(extra_attrs or {})}
        self._file: h5py.File | None = None
        self._reopen_complete = False     # resume of a complete file: moved to .part on first write
        self._written: list[str] = []
        self._unindexed: list = []        # index rows of written cases, appended at the next flush
        self._flushed = time.monotonic()
        self.cases_written = 0            # cases written by this writer (not counting resumed ones)
        self.bytes_written = 0            # their logical (uncompressed) size in bytes
        self._open(resume=resume, force=force)
        self._groups = CaseGroups(self._file, self._written)
        self._done = set(self._written)

    # --- opening ----------------------------------------------------------------------------
    def _open(self, resume: bool, force: bool) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise GoldenFileError(f"cannot write: directory {directory} does not exist", self.path)
        if os.path.isdir(self.path):
            raise GoldenFileError("cannot write: is a directory", self.path)
        if resume and os.path.exists(self.part_path):
            self._file = self._open_existing(self.part_path)
            self._file.attrs["complete"] = False
        elif resume and os.path.exists(self.path):
            self._file = self._open_existing(self.path, mode="r")
            self._reopen_complete = True
        elif not force and os.path.exists(self.path):
            raise GoldenFileExistsError("output exists; use --force to replace it or --resume to "
                                        "continue it", self.path)
        elif not force and os.path.exists(self.part_path):
            raise GoldenFileExistsError(f"{os.path.basename(self.part_path)} exists (an "
                                        "interrupted run); use --resume to continue it or --force "
                                        "to start over", self.path)
        else:
            try:
                self._file = create_golden_file(self.part_path, self._root_attrs)
            except OSError as exc:
                raise GoldenFileError(f"cannot create {self.part_path}: {exc}", self.path) from None

    def _open_existing(self, path: str, mode: str = "r+") -> h5py.File:
        try:
            f = h5py.File(path, mode)
        except OSError as exc:
            raise GoldenFileDamagedError(f"cannot resume: not a readable HDF5 file ({exc}); use "
                                         "--force to start over", path) from None
        try:
            self._check_resumable(f, path)
            self._load_index(f, repair=(mode == "r+"))
        except BaseException:
            f.close()
            raise
        return f

    def _check_resumable(self, f: h5py.File, path: str) -> None:
        found = {k: attr_value(f.attrs.get(k))
                 for k in ("schema_version", "refspec_version", *SWEEP_ATTRS)}
        if all(v is None for v in found.values()):
            raise GoldenFileDamagedError("cannot resume: the file has none of a golden file's "
                                         "attributes (stopped before its first flush?); use "
                                         "--force to start over", path)
        if found["schema_version"] != SCHEMA_VERSION:
            raise GoldenFileError(f"cannot resume: schema_version {found['schema_version']} "
                                  f"is not {SCHEMA_VERSION}; use --force to start over", path)
        if found["refspec_version"] != __version__:   # one file, one version of the spec
            raise GoldenFileError(f"cannot resume: written by refspec {found['refspec_version']}, "
                                  f"this is {__version__}; use --force to start over", path)
        for key in SWEEP_ATTRS:
            if found[key] != self._sweep[key]:
                raise GoldenFileError(f"cannot resume: it was written for another sweep "
                                      f"({key} differs: {found[key]!r:.60} vs "
                                      f"{self._sweep[key]!r:.60}); use --force to start over",
                                      path)
        if INDEX_DATASET not in f or CASES_GROUP not in f:
            raise GoldenFileError("cannot resume: not a refspec golden file (no /index or "
                                  "/cases); use --force to start over", path)

    def _load_index(self, f: h5py.File, repair: bool) -> None:
        """The cases of the index whose groups exist (an index repaired when some were lost)."""
        ids = index.read_ids(f)
        rows = index.read_rows(f, ids)
        kept = [r for c, r in zip(ids, rows) if r is not None and case_path(c) in f]
        if repair and len(kept) != len(ids):
            index.rewrite(f, kept)
        self._written = [r.case_id for r in kept]

    def _make_writable(self) -> None:
        if self._reopen_complete:
            self._file.close()
            self._file = None
            os.replace(self.path, self.part_path)
            self._file = h5py.File(self.part_path, "r+")
            self._groups.reopen(self._file)
            self._file.attrs["complete"] = False
            self._file.flush()
            self._reopen_complete = False

    # --- writing ----------------------------------------------------------------------------
    def has_case(self, case_id: str) -> bool:
        """True when the case is completely written (in the file being resumed or by this run)."""
        return case_id in self._done

    def case_ids(self) -> list[str]:
        """Ids of the completely written cases, in file order."""
        return list(self._written)

    def write_case(self, data: CaseData) -> None:
        """Write one case (schema 2, docs/goldens.md): its arrays in its group, everything else
        in its index row. A negative case (``data.error`` set) has inputs only."""
        if self._file is None:
            raise GoldenFileError("the writer is closed", self.path)
        case_id = check_case_id(data.case_id)
        if case_id in self._done:
            raise ValueError(f"case {case_id!r} is already written")
        check_case(data)
        self._make_writable()
        g = self._groups.case(case_id)
        groups = [("inputs", data.present("inputs"), False)]
        if data.error is None:
            groups += [("expected", data.present("expected"), False),
                       ("exact", data.present("exact"), True), ("sum_abs", data.sums(), True),
                       ("written", data.written(), False)]
        nbytes = stored = 0
        arrays = {}
        for sub, values, wide in groups:
            n, s, described = write_arrays(g, sub, values, self._maker, wide)
            nbytes, stored = nbytes + n, stored + s
            if described:
                arrays[sub] = described
        params = data.params
        inputs = data.present("inputs")
        dtype = params.get("dtype") or next((dtype_name(np.asarray(v).dtype)
                                             for v in inputs.values()), "")
        self._unindexed.append(index.Row(case_id, str(data.op), str(dtype),
                                         params.get("soc") or "", data.error is not None, nbytes,
                                         stored, case_meta(data, arrays)))
        self._groups.add(case_id)
        self._written.append(case_id)
        self._done.add(case_id)
        self.cases_written += 1
        self.bytes_written += nbytes
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    # --- closing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything so far to the disk (done at least every ``FLUSH_SECONDS`` while
        cases are written, and on closing)."""
        if self._file is not None and self._file.mode != "r":
            self._index_written(self._file)
            self._file.flush()
        self._flushed = time.monotonic()

    def _index_written(self, f: h5py.File) -> None:
        """Append the cases written since the last flush to ``/index`` and ``/summary``."""
        index.append(f, self._unindexed)
        self._unindexed = []

    def close(self) -> str:
        """Mark the file complete and rename it to its final name; returns that path."""
        if self._file is None:
            return self.path
        if self._reopen_complete:       # resumed a complete file and wrote nothing new
            self._file.close()
            self._file = None
            return self.path
        self._index_written(self._file)
        f, self._file = self._file, None
        try:
            f.attrs["complete"] = True
            f.flush()
        finally:
            f.close()
        atomic_replace(self.part_path, self.path)
        return self.path

    def abort(self) -> None:
        """Close without completing: the ``.part`` file stays for a later resume."""
        if self._file is None:
            return
        f, self._file = self._file, None
        try:
            if f.mode != "r":
                self._index_written(f)
                f.flush()
        finally:
            f.close()
        if not self._reopen_complete:
            fsync_path(self.part_path)

    def discard(self) -> None:
        """Close without completing and remove this run's ``.part`` file: nothing is kept
        (for a run that cannot be resumed, such as one made from the user's own inputs)."""
        if self._file is not None:
            f, self._file = self._file, None
            f.close()
        if os.path.exists(self.part_path):
            os.remove(self.part_path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def __del__(self):
        try:
            self.abort()
        except Exception:
            pass
