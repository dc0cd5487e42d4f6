"""GoldenWriter: writes a golden HDF5 file (schema 2) atomically, resumably.

Semantics (docs/goldens.md, "Writing, resuming, merging"):

- One writer per output: the writer takes ``<path>.lock`` (``refspec.goldens.atomic.OutputLock``)
  before it creates, renames or removes anything, and holds it until it is closed; a second
  writer is refused at once (``GoldenFileLockedError``) and changes nothing.
- Everything is written to ``<path>.part``; a successful ``close()`` sets the root attribute
  ``complete=True`` and renames the file to ``<path>``. An exception or a killed process leaves
  only the ``.part`` file, whose ``complete`` is False: never a file that looks complete. A
  complete ``<path>`` is never opened for writing, renamed or truncated: it is replaced by the
  rename of a complete new file, or not at all. Files are never truncated: an old ``.part`` is
  removed and a new one created, so a process reading it keeps what it reads.
- A case's metadata (its parameters, seed, expected error, regenerate command and the
  description of every array) is written once, in its row of the file's index
  (``refspec.goldens.index``); its group holds its arrays only. A case counts as written
  once its row is in the index (rows are appended at the next flush, at least once a second);
  a case group without a row, left by an interrupted run, is replaced when the case is written
  again on resume.
- ``resume=True`` trusts nothing it finds: it reads every case of ``<path>.part`` (or of a
  complete ``<path>``) and checks each dataset against its checksum and its description
  (``survey``). A ``.part`` closed cleanly (the root attribute ``writing`` False: Ctrl-C, an
  exception) whose cases are all sound is continued in place; otherwise (a killed process, a
  full disk: ``writing`` still True; a damaged case) the sound cases are copied into a new
  file (``<path>.part.new``, renamed to ``<path>.part`` when done) and the others are written
  again. A complete ``<path>`` is copied so only when a new case is actually written.
  ``has_case`` tells which cases to skip. A file HDF5 cannot open at all is started over.
- An existing ``<path>`` or ``<path>.part`` without ``force``/``resume`` is an error;
  ``force=True`` starts a new ``.part`` and replaces ``<path>`` only when the new file is complete.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
from datetime import datetime, timezone
from typing import NamedTuple

import h5py
import numpy as np

from .._version import __version__
from ..spec.dtypes import dtype_name
from ..spec.errors import AclnnError
from ..spec.terms import CLASSES
from . import index
from .atomic import OutputLock, ensure_space
from .cases import CaseData
from .datasets import Source
from .format import (CASES_GROUP, CHECKSUMS, DEFAULT_COMPRESSION, INDEX_DATASET, LIBVER,
                     SCHEMA_VERSION, GoldenFileError, GoldenFileExistsError,
                     atomic_replace, attr_value, case_path, check_case_id, compression_filters,
                     describe_compression, fsync_path, part_path, to_jsonable)
from .h5_objects import CaseGroups, DatasetMaker, copy_cases, write_arrays
from .integrity import verify_case
from .read import GoldenCase

__all__ = ["GoldenWriter", "SWEEP_ATTRS", "create_golden_file", "check_case", "case_meta",
           "utc_now", "survey", "Survey"]

_LOG = logging.getLogger("refspec")

#: root attributes that identify a sweep: resume and merge require them to match
SWEEP_ATTRS = ("sweep_name", "sweep_definition", "sweep_seed")
#: the file is flushed after a case once this many seconds have passed since the last flush
FLUSH_SECONDS = 1.0


def utc_now() -> str:
    """The current UTC time as the ``created`` attribute spells it (2026-12-01T21:42:19Z)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def create_golden_file(path, root_attrs: dict) -> h5py.File:
    """A new, empty golden file (root attributes, ``/cases``, an empty index). A file of that
    name is removed first, never truncated: a process reading it keeps reading it."""
    if os.path.lexists(path):
        os.remove(path)
    f = h5py.File(path, "x", libver=LIBVER, track_order=True)
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
        written = getattr(terms[name], "written", None)          # a cache: one per offset
        shape = np.shape(arr if written is None else written)
        if np.shape(exact[name]) != shape:
            raise ValueError(f"{where}: exact {name!r} shape {np.shape(exact[name])} != "
                             f"expected shape {shape}")
        s = terms[name].sum_abs
        if s is not None and np.shape(s) != shape:
            raise ValueError(f"{where}: sum_abs {name!r} shape {np.shape(s)} != {shape}")


def case_meta(data: CaseData, arrays: dict) -> str:
    """The JSON of a case's index row (docs/goldens.md, "Layout"): parameters, seed, expected
    error, regenerate command, and each array's dtype, shape and, for the expected outputs,
    comparison class, K, axis letters and a cache's ``written_class``."""
    for name, described in arrays.get("expected", {}).items():
        t = data.terms[name]
        described.update(comparison_class=str(t.comparison_class),
                         reduced_terms=-1 if t.reduced_terms is None else int(t.reduced_terms),
                         axes=str(data.axes[name]), **({"written_class": str(t.written_class)}
                                                       if hasattr(t, "written_class") else {}))
    e = data.error
    error = None if e is None else [int(e.code), str(e.status), str(getattr(e, "message", e))]
    return json.dumps({"params": to_jsonable(data.params), "seed": int(data.seed),
                       "error": error, "regenerate": str(data.regenerate), "arrays": arrays},
                      separators=(",", ":"), allow_nan=True)


def _write_failed(exc: Exception) -> bool:
    """Whether HDF5 failed to write to its file (a full disk, an I/O error): HDF5 then cannot
    flush that file again without failing, or crashing."""
    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EIO, errno.EDQUOT) or \
        "write failed" in str(exc)


def _case_bytes(data: CaseData) -> int:
    """The bytes a case's datasets take as stored (exact values and sums in float64)."""
    wide = [getattr(v, "size", 0) * 8 for v in (*data.present("exact").values(),
                                                *data.sums().values())]
    narrow = [getattr(v, "nbytes", 0) for v in (*data.present("inputs").values(),
                                                *data.present("expected").values())]
    return sum(wide) + sum(narrow)


class Survey(NamedTuple):
    """What ``survey`` found in a file: its root ``attrs``, the index ``rows`` of its cases up
    to the first that is not sound (so cases written again come in the order an uninterrupted
    run writes them), whether that is every indexed case (``whole``) and whether its writer
    closed it (``clean``: the root attribute ``writing`` is False)."""

    attrs: dict
    rows: list
    whole: bool
    clean: bool


def survey(path) -> Survey | None:
    """Read a golden file to resume it: every indexed case's datasets are read whole and
    checked (checksums, descriptions); None when HDF5 cannot open the file or it has none of a
    golden file's attributes (a process killed before its first flush)."""
    try:
        f = h5py.File(path, "r")
    except OSError:
        return None
    try:
        attrs = {k: attr_value(v) for k, v in f.attrs.items()}
        if INDEX_DATASET not in f or CASES_GROUP not in f or "sweep_name" not in attrs:
            return None
        ids = index.read_ids(f)
        rows = index.read_rows(f, ids, strict=False)
        source = Source(os.fspath(path), None, attrs.get("checksums") == CHECKSUMS)
        sound = []
        for row in rows:
            if row is None or not _sound(f, row, source):
                break
            sound.append(row)
        return Survey(attrs, sound, len(sound) == len(ids), attrs.get("writing") is False)
    except Exception:             # an index HDF5 cannot read: the file is started over
        return None
    finally:
        f.close()


def _sound(f: h5py.File, row: index.Row, source: Source) -> bool:
    """Whether a case of an open file reads back whole, every dataset as its index row says."""
    try:
        case = GoldenCase(row.case_id, row.op, json.loads(row.meta),
                          lambda: f[case_path(row.case_id)], source=source)
        verify_case(case, rounding=False)
    except (GoldenFileError, OSError, KeyError, ValueError, RuntimeError):
        return False
    return True


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
            "compression": describe_compression(self._maker.filters), "checksums": CHECKSUMS,
            **(extra_attrs or {})}
        self._file: h5py.File | None = None
        self._complete: Survey | None = None   # a complete file resumed: copied on first write
        self._written: list[str] = []
        self._unindexed: list = []        # index rows of written cases, appended at the next flush
        self._flushed = time.monotonic()
        self.cases_written = 0            # cases written by this writer (not counting resumed ones)
        self.bytes_written = 0            # their logical (uncompressed) size in bytes
        self.recovered = ""               # what resuming found damaged and writes again
        self._healthy = True              # False once HDF5 failed to write (a full disk)
        self._lock = None
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise GoldenFileError(f"cannot write: directory {directory} does not exist", self.path)
        if os.path.isdir(self.path):
            raise GoldenFileError("cannot write: is a directory", self.path)
        self._lock = OutputLock(self.path).acquire()
        try:
            self._open(resume=resume, force=force)
        except BaseException:
            self._close_file()
            self._lock.release()
            raise
        self._groups = CaseGroups(self._file, self._written) if self._file else None
        self._done = set(self._written)

    # --- opening ----------------------------------------------------------------------------
    def _open(self, resume: bool, force: bool) -> None:
        if os.path.lexists(self._new_path):          # a copy a killed resume left unfinished
            os.remove(self._new_path)
        if resume and os.path.exists(self.part_path):
            self._resume(self.part_path)
        elif resume and os.path.exists(self.path):
            self._resume(self.path)
        elif not force and os.path.exists(self.path):
            raise GoldenFileExistsError("output exists; use --force to replace it or --resume to "
                                        "continue it", self.path)
        elif not force and os.path.exists(self.part_path):
            raise GoldenFileExistsError(f"{os.path.basename(self.part_path)} exists (an "
                                        "interrupted run); use --resume to continue it or --force "
                                        "to start over", self.path)
        else:
            self._start(self._root_attrs)

    @property
    def _new_path(self) -> str:
        return self.part_path + ".new"

    def _start(self, root_attrs: dict, path: str | None = None) -> None:
        """A new, empty file at ``path`` (the ``.part``), open for writing."""
        path = path or self.part_path
        ensure_space(path, 0)
        try:
            self._file = create_golden_file(path, root_attrs)
            self._file.attrs["writing"] = True
            self._file.flush()
        except OSError as exc:
            self._close_file()
            raise GoldenFileError(f"cannot create {path}: {exc}", self.path) from None

    def _resume(self, path: str) -> None:
        """Continue ``path`` (the ``.part`` or the complete file), checked case by case."""
        found = survey(path)
        if found is None:
            self.recovered = f"{path} cannot be read; every case is written again"
            _LOG.warning(self.recovered)
            self._start(self._root_attrs)
            return
        self._check_resumable(found.attrs, path)
        self._written = [r.case_id for r in found.rows]
        if not found.whole:
            self.recovered = (f"{path}: {len(found.rows)} cases are sound; the others are "
                              "written again")
            _LOG.warning(self.recovered)
        if path == self.path:
            self._complete = found                   # copied to .part on the first new case
        elif found.clean and found.whole:
            self._file = h5py.File(path, "r+")
            self._file.attrs["writing"] = True
            self._file.flush()
        else:                                         # never written to again: copied
            self._copy_of(path, found)

    def _copy_of(self, path: str, found: Survey) -> None:
        """The sound cases of ``path`` copied into a new ``.part``, open for writing; ``path``
        is left as it is until the copy is complete."""
        root = {k: v for k, v in found.attrs.items() if k not in ("complete", "writing")}
        ensure_space(self._new_path, sum(r.stored_bytes for r in found.rows))
        self._start(root, self._new_path)
        with h5py.File(path, "r") as src:
            copy_cases(self._file, [(src[case_path(r.case_id)], r.case_id) for r in found.rows])
        index.append(self._file, found.rows)
        self._file.flush()
        self._file.close()
        self._file = None
        atomic_replace(self._new_path, self.part_path)
        self._file = h5py.File(self.part_path, "r+")

    def _check_resumable(self, attrs: dict, path: str) -> None:
        found = {k: attrs.get(k) for k in ("schema_version", "refspec_version", *SWEEP_ATTRS)}
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

    def _make_writable(self) -> None:
        if self._complete is not None:
            found, self._complete = self._complete, None
            self._copy_of(self.path, found)
            self._groups = CaseGroups(self._file, self._written)

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
        if self._file is None and self._complete is None:
            raise GoldenFileError("the writer is closed", self.path)
        case_id = check_case_id(data.case_id)
        if case_id in self._done:
            raise ValueError(f"case {case_id!r} is already written")
        check_case(data)
        ensure_space(self.part_path, 2 * _case_bytes(data))
        try:
            self._make_writable()
            nbytes, stored, arrays = self._write_arrays(case_id, data)
        except (OSError, RuntimeError) as exc:
            self._healthy = not _write_failed(exc)  # HDF5 could not write: no flush again
            raise
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

    def _write_arrays(self, case_id: str, data: CaseData) -> tuple:
        """The case's group and datasets; (logical bytes, stored bytes, their descriptions)."""
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
        return nbytes, stored, arrays

    # --- closing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything so far to the disk (done at least every ``FLUSH_SECONDS`` while
        cases are written, and on closing)."""
        if self._file is not None:
            try:
                self._index_written(self._file)
                self._file.flush()
            except (OSError, RuntimeError) as exc:
                self._healthy = not _write_failed(exc)
                raise
        self._flushed = time.monotonic()

    def _index_written(self, f: h5py.File) -> None:
        """Append the cases written since the last flush to ``/index`` and ``/summary``."""
        index.append(f, self._unindexed)
        self._unindexed = []

    def close(self) -> str:
        """Mark the file complete and rename it to its final name; returns that path."""
        try:
            if self._file is not None:
                self._index_written(self._file)
                self._file.flush()                  # everything, before it is marked complete
                f, self._file = self._file, None
                try:
                    f.attrs["complete"] = True
                    f.attrs["writing"] = False
                    f.flush()
                finally:
                    f.close()
                atomic_replace(self.part_path, self.path)
        finally:
            self._close_file()
            self._release()
        return self.path

    def abort(self) -> None:
        """Close without completing: the ``.part`` file stays for a later resume (marked
        ``writing`` False only when everything reached the disk)."""
        try:
            if self._file is not None and self._healthy:
                try:
                    self._index_written(self._file)
                    self._file.flush()
                    self._file.attrs["writing"] = False
                    self._file.flush()
                except Exception:          # the file stays marked as being written
                    self._healthy = False
            if self._file is not None:
                self._close_file()
                fsync_path(self.part_path)
        finally:
            self._close_file()
            self._release()

    def discard(self) -> None:
        """Close without completing and remove this run's ``.part`` file: nothing is kept
        (for a run that cannot be resumed, such as one made from the user's own inputs)."""
        try:
            self._close_file()
            if self._complete is None and os.path.exists(self.part_path):
                os.remove(self.part_path)
        finally:
            self._release()

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except Exception:              # what could not be written is lost; nothing else
                pass

    def _release(self) -> None:
        self._complete = None
        if self._lock is not None:
            self._lock.release()

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
