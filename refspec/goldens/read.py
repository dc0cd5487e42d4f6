"""Reading golden HDF5 files: GoldenFile, GoldenCase, LazyArray.

Everything but the arrays' data comes from the file's index (``refspec.goldens.index``),
read once; files of schema 1 are read as schema 2 (``refspec.goldens.legacy``). Nothing is
read before it is asked for: a LazyArray reads the slices it is indexed with (or
whole, with ``read()``), decoding bfloat16 bit patterns to ``ml_dtypes.bfloat16``, so a
comparator can stream a 4 GiB file in blocks (``LazyArray.blocks``).

Nothing is trusted blindly (``refspec.goldens.integrity``): a file not marked complete is
refused unless asked for (``allow_incomplete``); a dataset is checked against its description
in the index when it is opened (stored in the file, its dtype and shape) and against its
checksum when it is read; every problem of the file is a ``CorruptGoldenError`` (a
``GoldenFileError``) naming the file, the case and the dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping

import h5py
import numpy as np

from ..spec.errors import one_line
from . import index, legacy
from .format import (CASE_SUBGROUPS, CASES_GROUP, CHECKSUMS, INDEX_DATASET, SCHEMA_VERSION,
                     CorruptGoldenError, GoldenFileError, IncompleteGoldenError,
                     UnknownCaseError, case_path, interrupted_run, read_attrs)
from .datasets import READ_ERRORS, LazyArray, Source

__all__ = ["open", "GoldenFile", "GoldenCase", "LazyArray", "ArrayGroup", "Source"]

class ArrayGroup(Mapping):
    """Name -> array for one subgroup of a case (empty when the subgroup is absent): a
    LazyArray for each dataset the index describes (``opener(name)`` opens it), and for a
    file of schema 1 the sums of absolute terms it lacks, computed on first use
    (``computed``: name -> a function giving the array)."""

    def __init__(self, described: dict, opener, where: str, computed: dict | None = None,
                 source: Source | None = None):
        self._described = described
        self._opener = opener
        self._where = where
        self._source = source
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
                                               self._described[name], self._source,
                                               self._where.rpartition("/")[2])
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
    (``refspec.goldens.legacy``). Metadata that is not what the writer writes is a
    ``CorruptGoldenError``."""

    def __init__(self, case_id: str, op: str, meta: dict, open_group, sums: dict | None = None,
                 source: Source | None = None):
        self._open = open_group
        self._group = None
        self._input_arrays = None
        self._source = (source or Source())._replace(case_id=case_id)
        self.case_id, self.op, self.meta = case_id, op, meta
        try:
            self.params: dict = dict(meta["params"])
            self.seed: int = int(meta["seed"])
            self.regenerate: str = str(meta.get("regenerate", ""))
            error = tuple(meta["error"]) if meta.get("error") else (0, None, None)
            code, status, message = error
            self.expected_error: int | None = int(code) or None
            arrays = dict(meta.get("arrays", {}))
            described = {sub: dict(arrays.get(sub, {})) for sub in CASE_SUBGROUPS}
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptGoldenError(f"its metadata is not what a golden file holds "
                                     f"({one_line(exc)})", self._source.path, case_id,
                                     "/summary/meta") from None
        self.expected_error_status: str | None = status or None
        self.expected_error_message: str | None = message or None
        for sub in CASE_SUBGROUPS:
            setattr(self, sub, ArrayGroup(described[sub], self._opener(sub), f"{case_id}/{sub}",
                                          sums if sub == "sum_abs" else None, self._source))

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
            try:
                self._group = self._open()
            except GoldenFileError:
                raise
            except (*READ_ERRORS, ValueError) as exc:
                raise CorruptGoldenError(f"its group cannot be opened ({one_line(exc)})",
                                         self._source.path, self.case_id) from None
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
        """comparison_class, reduced_terms (int or None), axes, dtype of one expected output
        (and, for a cache updated in place, the class of its written values, written_class)."""
        arr = self.expected[name]
        a = arr.attrs
        try:
            k = int(a.get("reduced_terms", -1))
        except (TypeError, ValueError):
            raise arr.corrupt(f"reduced_terms {a.get('reduced_terms')!r} in the index is not a "
                              "number") from None
        meta = {"comparison_class": a.get("comparison_class"),
                "reduced_terms": None if k < 0 else k,
                "axes": a.get("axes", ""), "dtype": a.get("dtype")}
        if a.get("written_class") is not None:
            meta["written_class"] = a["written_class"]
        return meta

    def __repr__(self):
        return f"<GoldenCase {self.case_id} op={self.op}>"


class GoldenFile:
    """An open golden file; use as a context manager (see ``open``).

    A file written by ``refspec generate --jobs N`` is an index whose cases are HDF5 external
    links into its part files (``<file>.parts/``); its cases read like any other (the part files
    are opened once, when a case of theirs is first read).
    """

    def __init__(self, path, allow_incomplete: bool = False):
        self.path = os.fspath(path)
        self.allow_incomplete = bool(allow_incomplete)
        self._file = _open_h5(self.path)
        self._parts: dict[str, h5py.File] | None = None
        self._row_of = None
        self._digest = None
        try:
            self._read_root(allow_incomplete)
        except BaseException as exc:
            self._file.close()
            if isinstance(exc, Exception) and not isinstance(exc, GoldenFileError):
                raise CorruptGoldenError(f"not readable as a golden file ({one_line(exc)})",
                                         self.path) from None
            raise

    def _read_root(self, allow_incomplete: bool) -> None:
        """The root attributes, the case ids and the part files, checked."""
        self.attrs = read_attrs(self._file)
        _check_schema(self.attrs, self.path)
        if INDEX_DATASET not in self._file or CASES_GROUP not in self._file:
            raise GoldenFileError("not a refspec golden file (no /index or /cases)", self.path)
        try:
            self._ids = index.read_ids(self._file)
        except READ_ERRORS as exc:
            raise CorruptGoldenError(f"cannot be read ({one_line(exc)})", self.path,
                                     dataset=f"/{INDEX_DATASET}") from None
        self._id_set = set(self._ids)
        if len(self._id_set) != len(self._ids) or not all(isinstance(c, str) for c in self._ids):
            raise CorruptGoldenError("lists a case twice, or a case id that is not text",
                                     self.path, dataset=f"/{INDEX_DATASET}")
        self._source = Source(self.path, None, self.attrs.get("checksums") == CHECKSUMS)
        base = os.path.dirname(os.path.abspath(self.path))
        parts = json.loads(self.attrs.get("parts", "[]"))
        self._part_files = [os.path.join(base, str(n)) for n in parts]
        if not self.complete and not allow_incomplete:
            raise IncompleteGoldenError(_incomplete(self.attrs, len(self._ids)), self.path)

    @property
    def complete(self) -> bool:
        return bool(self.attrs.get("complete", False))

    @property
    def created(self) -> str:
        """When the file was made (its ``created`` attribute, ISO 8601 UTC: a resumed file
        keeps its first run's time, a merged one the merge's); "" when it does not say."""
        return str(self.attrs.get("created", ""))

    @property
    def digest(self) -> str:
        """``sha256:<hex>``: the SHA-256 of the file's root attributes and its index (every
        case's id, operator, dtype, chip profile and metadata, which hold each dataset's
        dtype, shape and, for a contiguous one, the CRC-32 of its bytes). The same for the
        file wherever it is copied; another for every file made anew (``created`` differs)
        or changed in what it describes. It reads no array: the arrays' bytes are covered by
        their own checksums, checked as they are read. Computed once."""
        if self._digest is None:
            h = hashlib.sha256()
            h.update(json.dumps(self.attrs, sort_keys=True, default=str).encode("utf-8"))
            for row in self.summary():
                h.update(json.dumps(list(row), default=str).encode("utf-8", "surrogateescape"))
            self._digest = f"sha256:{h.hexdigest()}"
        return self._digest

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
        f = self._file
        if self._part_files:
            f = self._part_of().get(case_id)
            if f is None:
                raise CorruptGoldenError("in none of the run's part files", self.path, case_id)
        return h5py.Group(h5py.h5g.open(f.id, path))

    def _part_of(self) -> dict:
        """case id -> the open part file that holds it (the part files opened once; each
        must be a complete golden file)."""
        if self._parts is None:
            self._parts = {}
            for path in self.part_files:
                part = GoldenFile(path)
                for case_id in part.case_ids():
                    self._parts[case_id] = part.h5
                self._parts.setdefault(("file", path), part)
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
        try:
            meta = json.loads(row.meta)
        except ValueError as exc:
            raise CorruptGoldenError(f"its metadata is not JSON ({one_line(exc)})", self.path,
                                     case_id, "/summary/meta") from None
        if not isinstance(meta, dict):
            raise CorruptGoldenError("its metadata is not a JSON object", self.path, case_id,
                                     "/summary/meta")
        case = GoldenCase(case_id, row.op, meta, lambda: self.case_group(case_id),
                          source=self._source)
        if self.schema < SCHEMA_VERSION:
            case = legacy.with_sums(case)
        return case

    def _rows(self) -> dict:
        """The index rows by case id (read once; a file of schema 1 has them upgraded)."""
        if self._row_of is None:
            try:
                rows = index.read_rows(self._file, self._ids)
                if self.schema < SCHEMA_VERSION:
                    rows = [legacy.upgrade_row(c, r, lambda c=c: self.case_group(c))
                            for c, r in zip(self._ids, rows)]
            except GoldenFileError:
                raise
            except (*READ_ERRORS, ValueError, TypeError) as exc:
                raise CorruptGoldenError(f"cannot be read ({one_line(exc)})", self.path,
                                         dataset="/summary") from None
            missing = [c for c, r in zip(self._ids, rows) if r is None]
            if missing:
                raise CorruptGoldenError(f"{len(missing)} of the {len(self._ids)} cases of "
                                         "/index have no row", self.path, missing[0], "/summary")
            self._row_of = {r.case_id: r for r in rows}
        return self._row_of

    def __iter__(self):
        for case_id in self._ids:
            yield self[case_id]

    def close(self) -> None:
        for key, part in (self._parts or {}).items():
            if isinstance(key, tuple):
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


def _incomplete(attrs: dict, cases: int) -> str:
    """Why a file is not complete, and what to do, as the end of a message."""
    if attrs.get("partial"):
        why = f"a partial merge ({attrs['partial']})"
    else:
        why = ("written by a run that was interrupted or is still running (the same generate "
               "command with --resume completes it)")
    return (f"incomplete: {why}; --allow-incomplete (allow_incomplete=True) reads the {cases} "
            "cases it holds")


def open(path, allow_incomplete: bool = False) -> GoldenFile:  # noqa: A001 - the documented name
    """Open a golden file for reading (a context manager); raises GoldenFileError if it is
    missing, unreadable, not a refspec golden file or of a newer schema, CorruptGoldenError
    if what it holds is damaged, and IncompleteGoldenError if it is not marked complete
    (an interrupted run, a partial merge) unless ``allow_incomplete``."""
    return GoldenFile(path, allow_incomplete)
