"""GoldenWriter: writes a golden HDF5 file (schema v1) atomically, resumably.

Semantics (docs/goldens.md, "Writing, resuming, merging"):

- Everything is written to ``<path>.part``; a successful ``close()`` sets the root attribute
  ``complete=True`` and renames the file to ``<path>``. An exception or a killed process leaves
  only the ``.part`` file, whose ``complete`` is False: never a file that looks complete.
- A case counts as written once all its datasets exist, its group carries ``written=True`` and
  its id and summary row are appended to ``/index`` and ``/summary`` (``.index``; in that
  order, at the next flush, at least once a second). A case interrupted
  half-way is deleted and rewritten when it is written again on resume.
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
from h5py import h5a, h5d, h5g, h5p, h5s, h5t, h5z

from .._version import __version__
from ..spec.dtypes import dtype_name
from ..spec.errors import AclnnError
from ..spec.terms import CLASSES
from . import index
from .format import (CASES_GROUP, CHUNK_BYTES, INDEX_DATASET, LIBVER, MIN_CHUNKED_BYTES,
                     SCHEMA_VERSION, DEFAULT_COMPRESSION,
                     GoldenFileDamagedError, GoldenFileError, GoldenFileExistsError, atomic_replace, attr_value,
                     case_path, check_case_id, chunk_shape, compression_filters, dumps_params,
                     encode_array, fsync_path, part_path, to_jsonable)

__all__ = ["GoldenWriter", "SWEEP_ATTRS"]

#: root attributes that identify a sweep: resume and merge require them to match
SWEEP_ATTRS = ("sweep_name", "sweep_definition", "sweep_seed")
_RESERVED_CASE_ATTRS = ("case_id", "op", "params", "seed", "soc", "distribution",
                        "expected_error_code", "expected_error_status", "expected_error_message",
                        "regenerate", "written")


#: the file is flushed after a case once this many seconds have passed since the last flush
FLUSH_SECONDS = 1.0
_ORDER = h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED


def _attr_types(dtype) -> tuple:
    dtype = np.dtype(dtype)
    return h5t.py_create(dtype, logical=True), h5t.py_create(dtype), dtype


#: scalar attribute types by Python type: the types h5py's ``attrs[k] = v`` gives them
_ATTR_TYPES = {bool: _attr_types(np.bool_), int: _attr_types(np.int64),
               float: _attr_types(np.float64), str: _attr_types(h5py.string_dtype("utf-8"))}
_SCALAR_SPACE = h5s.create(h5s.SCALAR)


def _subgroup_plists() -> tuple:
    """(lcpl, gcpl) of ``group.create_group(name, track_order=True)`` for an ASCII name."""
    lcpl = h5p.create(h5p.LINK_CREATE)
    lcpl.set_create_intermediate_group(True)
    lcpl.set_char_encoding(h5t.CSET_ASCII)
    gcpl = h5p.create(h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(_ORDER)
    gcpl.set_attr_creation_order(_ORDER)
    gcpl.set_obj_track_times(False)
    return lcpl, gcpl


_SUBGROUP_LCPL, _SUBGROUP_GCPL = _subgroup_plists()


def _dataset_plist(chunks, filters: dict) -> h5p.PropDCID:
    """The dataset creation property list h5py's ``create_dataset`` builds for ``chunks``
    (None: contiguous) and the keywords of ``refspec.goldens.format.compression_filters``
    (shuffle before compression), without modification times, attributes in creation order."""
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if chunks is not None:
        dcpl.set_chunk(chunks)
        if filters.get("shuffle"):
            dcpl.set_shuffle()
        if filters.get("compression") == "gzip":
            dcpl.set_deflate(filters["compression_opts"])
        elif filters.get("compression") == "lzf":
            dcpl.set_filter(h5z.FILTER_LZF, h5z.FLAG_OPTIONAL)
    dcpl.set_obj_track_times(False)
    dcpl.set_attr_creation_order(_ORDER)
    return dcpl


def set_attrs(obj, attrs: dict) -> None:
    """Create new attributes on a freshly created object (an h5py object or its low-level id):
    what ``obj.attrs[k] = v`` stores for bool, int, float and str values (the same HDF5
    types), through HDF5's own calls (h5py's per-attribute dtype guessing and existence checks
    cost as much again). Other values go through h5py's ``attrs``."""
    oid = obj.id if hasattr(obj, "attrs") else obj
    for k, v in attrs.items():
        types = _ATTR_TYPES.get(type(v))
        if types is None or (type(v) is int and not -2 ** 63 <= v < 2 ** 63):
            h5py.AttributeManager(h5py.Group(oid) if isinstance(oid, h5py.h5g.GroupID)
                                  else h5py.Dataset(oid))[k] = v
            continue
        htype, mtype, dtype = types
        attr = h5a.create(oid, k.encode("utf-8"), htype, _SCALAR_SPACE)
        try:
            attr.write(np.array(v, dtype=dtype), mtype=mtype)
        finally:
            attr.close()


def _describe(filters: dict) -> str:
    """"none", "lzf", "gzip:1", with "+shuffle" when the shuffle filter is on."""
    name = filters.get("compression", "none")
    if name == "gzip":
        name = f"gzip:{filters['compression_opts']}"
    return name + ("+shuffle" if filters.get("shuffle") else "")


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


def _case_plist() -> h5p.PropGCID:
    gcpl = h5p.create(h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(_ORDER)
    gcpl.set_attr_creation_order(_ORDER)
    gcpl.set_attr_phase_change(64, 48)
    return gcpl


_CASE_GCPL = _case_plist()


def create_case_group(parent: h5py.Group, name: str) -> h5py.Group:
    """A case group: creation-ordered, with its ~20 attributes kept in the object header
    (HDF5 moves more than 8 attributes to a fractal heap of ~3 KiB per group by default)."""
    return h5py.Group(h5py.h5g.create(parent.id, name.encode("utf-8"), gcpl=_CASE_GCPL))


def require_case_parent(f: h5py.File, case_id: str, cache: dict | None = None) -> h5py.Group:
    """The group that holds a case's group, creating the intermediate groups (ordered).
    ``cache`` (one dict per file) keeps the groups already found or made, by path."""
    cache = {} if cache is None else cache
    group, path = f[CASES_GROUP], ""
    for part in case_id.split("/")[:-1]:
        path = f"{path}/{part}"
        if path in cache:
            group = cache[path]
            continue
        if part in group:
            group = group[part]
            if "case_id" in group.attrs:
                raise ValueError(f"case id {case_id!r} would nest inside case "
                                 f"{attr_value(group.attrs['case_id'])!r}")
        else:
            group = group.create_group(part, track_order=True)
        cache[path] = group
    return group


class GoldenWriter:
    """Write cases into a golden file; see the module docstring for the file semantics.

    ``compression``: "none" (default, see docs/goldens.md "Compression"), "lzf", "gzip" or
    "gzip:N" (level N, default 1); ``shuffle``: HDF5's byte-shuffle filter (None: on for gzip).
    ``extra_attrs`` are further root attributes (for example a shard label).
    """

    def __init__(self, path, *, sweep_name: str, sweep_definition: str, sweep_seed: int,
                 compression: str = DEFAULT_COMPRESSION, shuffle: bool | None = None,
                 resume: bool = False, force: bool = False, extra_attrs: dict | None = None):
        self.path = os.fspath(path)
        self.part_path = part_path(self.path)
        self._filters = compression_filters(compression, shuffle)
        self._sweep = {"sweep_name": str(sweep_name), "sweep_definition": str(sweep_definition),
                       "sweep_seed": int(sweep_seed)}
        self._root_attrs = {
            "schema_version": SCHEMA_VERSION, "refspec_version": __version__,
            "numpy_version": np.__version__, "h5py_version": h5py.__version__,
            "hdf5_version": h5py.version.hdf5_version, "created": utc_now(), **self._sweep,
            "compression": _describe(self._filters), **(extra_attrs or {})}
        self._file: h5py.File | None = None
        self._reopen_complete = False     # resume of a complete file: moved to .part on first write
        self._written: list[str] = []
        self._done: set[str] = set()
        self._parents: dict = {}          # parent path of case ids -> its h5py Group
        self._created: set = set()        # those of them this writer created
        self._partial: set = set()        # cases whose writing by this writer failed half-way
        self._unindexed: list = []        # index rows of written cases, appended at the next flush
        self._dcpls: dict = {}            # dataset creation property lists by (rank, chunks, dtype)
        self._dtypes: dict = {}
        self._spaces: dict = {}           # dataspaces by shape
        self._flushed = time.monotonic()
        self.cases_written = 0            # cases written by this writer (not counting resumed ones)
        self.bytes_written = 0            # their logical (uncompressed) size in bytes
        self._open(resume=resume, force=force)

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
            found = {k: attr_value(f.attrs.get(k))
                     for k in ("schema_version", "refspec_version", *SWEEP_ATTRS)}
            if found["schema_version"] != SCHEMA_VERSION:
                raise GoldenFileError(f"cannot resume: schema_version {found['schema_version']} "
                                      f"is not {SCHEMA_VERSION}; use --force to start over", path)
            if found["refspec_version"] != __version__:   # one file, one version of the spec
                raise GoldenFileError(f"cannot resume: written by refspec "
                                      f"{found['refspec_version']}, this is {__version__}; use "
                                      "--force to start over", path)
            for key in SWEEP_ATTRS:
                if found[key] != self._sweep[key]:
                    raise GoldenFileError(f"cannot resume: it was written for another sweep "
                                          f"({key} differs: {found[key]!r:.60} vs "
                                          f"{self._sweep[key]!r:.60}); use --force to start over",
                                          path)
            self._load_index(f, repair=(mode == "r+"))
        except BaseException:
            f.close()
            raise
        return f

    def _load_index(self, f: h5py.File, repair: bool) -> None:
        if INDEX_DATASET not in f or CASES_GROUP not in f:
            raise GoldenFileError("cannot resume: not a refspec golden file (no /index or "
                                  "/cases); use --force to start over", f.filename)
        ids = index.read_ids(f)
        rows = index.read_rows(f, ids)
        kept = []                         # (case id, its index row or None, its group)
        for c, r in zip(ids, rows):
            g = f.get(case_path(c))
            if g is not None and g.attrs.get("written", False):
                kept.append((c, r, g))
        if repair and (len(kept) != len(ids) or any(r is None for _, r, _ in kept)):
            # entries whose group was lost are forgotten; missing summary rows are recomputed
            index.rewrite(f, [r or index.row_of_case(c, g) for c, r, g in kept])
        self._written = [c for c, _, _ in kept]
        self._done = set(self._written)

    def _make_writable(self) -> None:
        if self._reopen_complete:
            self._file.close()
            self._file = None
            os.replace(self.path, self.part_path)
            self._parents.clear()
            self._created.clear()
            self._file = h5py.File(self.part_path, "r+")
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

    def write_case(self, case_id: str, *, op: str, params: dict, seed: int, soc: str | None,
                   distribution: str, inputs: dict, expected: dict | None = None,
                   exact: dict | None = None, terms: dict | None = None,
                   axes: dict | None = None, expected_error: AclnnError | None = None,
                   regenerate: str = "") -> None:
        """Write one case (schema v1, docs/goldens.md). ``inputs``/``expected``/``exact`` map
        names to arrays (None values = absent tensors, skipped); ``terms`` maps each expected
        output to its ``refspec.spec.terms.OutputTerms``; ``axes`` to its axis letters.
        A negative case (``expected_error`` given) has inputs only."""
        if self._file is None:
            raise GoldenFileError("the writer is closed", self.path)
        check_case_id(case_id)
        if case_id in self._done:
            raise ValueError(f"case {case_id!r} is already written")
        inputs = {k: v for k, v in (inputs or {}).items() if v is not None}
        expected = {k: v for k, v in (expected or {}).items() if v is not None}
        exact = {k: v for k, v in (exact or {}).items() if v is not None}
        terms, axes = dict(terms or {}), dict(axes or {})
        self._check_outputs(case_id, expected, exact, terms, axes, expected_error)
        jsonable = to_jsonable(params)
        params_json = dumps_params(jsonable)

        self._make_writable()
        f = self._file
        parent_path, _, leaf = case_id.rpartition("/")
        parent = self._parent(f, parent_path, case_id)
        if (parent_path not in self._created or case_id in self._partial) and leaf in parent:
            del parent[leaf]            # left by an interrupted run: rewrite from scratch
            self._parents = {k: v for k, v in self._parents.items()
                             if not (k + "/").startswith(case_id + "/")}
        self._partial.add(case_id)      # until it is complete (a failed attempt is redone)
        g = create_case_group(parent, leaf)
        attrs = {}
        for k, v in jsonable.items():
            if isinstance(v, (str, int, float, bool)) and k not in _RESERVED_CASE_ATTRS:
                attrs[k] = v
        attrs.update(
            case_id=case_id, op=str(op), params=params_json, seed=int(seed),
            soc="" if soc is None else str(soc), distribution=str(distribution),
            expected_error_code=0 if expected_error is None else int(expected_error.code),
            expected_error_status="" if expected_error is None else str(expected_error.status),
            expected_error_message=("" if expected_error is None
                                    else str(getattr(expected_error, "message", expected_error))),
            regenerate=str(regenerate))
        set_attrs(g, attrs)

        groups = [("inputs", inputs, None, None)]
        if expected_error is None:
            groups += [("expected", expected, terms, axes), ("exact", exact, None, None),
                       ("sum_abs", {k: terms[k].sum_abs for k in expected
                                    if terms[k].sum_abs is not None}, None, None)]
        nbytes = stored = 0
        datasets = {}
        for sub, arrays, t, ax in groups:
            n, s, described = self._write_group(g, sub, arrays, t, ax)
            nbytes, stored = nbytes + n, stored + s
            if described:
                datasets[sub] = described
        set_attrs(g, {"written": True})
        self._partial.discard(case_id)
        dtype = params.get("dtype") or next((dtype_name(np.asarray(v).dtype) for v in inputs.values()), "")
        error = (None if expected_error is None else
                 [attrs["expected_error_code"], attrs["expected_error_status"], attrs["expected_error_message"]])
        meta = json.dumps({"params": jsonable, "seed": int(seed),
                           "distribution": str(distribution), "error": error,
                           "regenerate": str(regenerate), "arrays": datasets},
                          separators=(",", ":"), allow_nan=True)
        self._unindexed.append(index.Row(case_id, str(op), str(dtype), "" if soc is None else str(soc),
                                         expected_error is not None, nbytes, stored, meta))
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()
        self._written.append(case_id)
        self._done.add(case_id)
        self.cases_written += 1
        self.bytes_written += nbytes

    def _parent(self, f: h5py.File, path: str, case_id: str) -> h5py.Group:
        """The group at ``/cases/<path>``, created (ordered) if absent, as
        ``require_case_parent`` does, remembering every group on the way."""
        group = self._parents.get(path)
        if group is not None:
            return group
        if not path:
            group = f[CASES_GROUP]
        else:
            up_path, _, name = path.rpartition("/")
            up = self._parent(f, up_path, case_id)
            if path in self._done:
                raise ValueError(f"case id {case_id!r} would nest inside case {path!r}")
            if up_path not in self._created and name in up:
                group = up[name]
                if "case_id" in group.attrs:
                    raise ValueError(f"case id {case_id!r} would nest inside case "
                                     f"{attr_value(group.attrs['case_id'])!r}")
            elif name.isascii():
                group = h5py.Group(h5g.create(up.id, name.encode("ascii"), lcpl=_SUBGROUP_LCPL,
                                              gcpl=_SUBGROUP_GCPL))
                self._created.add(path)
            else:
                group = up.create_group(name, track_order=True)
                self._created.add(path)
        self._parents[path] = group
        return group

    @staticmethod
    def _check_outputs(case_id, expected, exact, terms, axes, expected_error) -> None:
        where = f"case {case_id!r}"
        if expected_error is not None:
            if not isinstance(expected_error, AclnnError):
                raise TypeError(f"{where}: expected_error must be an AclnnError instance")
            if expected or exact:
                raise ValueError(f"{where}: a negative case has inputs only (no expected/exact)")
            return
        if set(exact) != set(expected):
            raise ValueError(f"{where}: exact outputs {sorted(exact)} must match expected "
                             f"{sorted(expected)}")
        for name, arr in expected.items():
            if name not in terms or name not in axes:
                raise ValueError(f"{where}: output {name!r} needs terms and axes")
            if terms[name].comparison_class not in CLASSES:
                raise ValueError(f"{where}: output {name!r}: comparison class "
                                 f"{terms[name].comparison_class!r} not in {CLASSES}")
            shape = np.shape(arr)
            if np.shape(exact[name]) != shape:
                raise ValueError(f"{where}: exact {name!r} shape {np.shape(exact[name])} != "
                                 f"expected shape {shape}")
            s = terms[name].sum_abs
            if s is not None and np.shape(s) != shape:
                raise ValueError(f"{where}: sum_abs {name!r} shape {np.shape(s)} != {shape}")

    def _write_group(self, case_group, sub: str, arrays: dict, terms=None, axes=None) -> tuple:
        """Write one subgroup; returns (logical bytes, stored bytes, {name: its attributes and
        shape})."""
        if not arrays:
            return 0, 0, {}
        group = h5g.create(case_group.id, sub.encode("ascii"), lcpl=_SUBGROUP_LCPL,
                           gcpl=_SUBGROUP_GCPL)
        nbytes = on_disk = 0
        described = {}
        for name, value in arrays.items():
            arr = np.asarray(value)
            if sub in ("exact", "sum_abs"):
                arr = arr.astype(np.float64, copy=False)
            stored, attrs = encode_array(arr)
            ds = self._create_dataset(group, name, stored)
            if terms is not None:
                t = terms[name]
                attrs["comparison_class"] = str(t.comparison_class)
                attrs["reduced_terms"] = -1 if t.reduced_terms is None else int(t.reduced_terms)
                attrs["axes"] = str(axes[name])
            set_attrs(ds, attrs)
            nbytes += stored.nbytes
            on_disk += ds.get_storage_size()
            described[name] = {**attrs, "shape": list(stored.shape)}
        return nbytes, on_disk, described

    def _create_dataset(self, group: h5g.GroupID, name: str, data: np.ndarray) -> h5d.DatasetID:
        """What ``group.create_dataset(name, data=data, chunks=chunk_shape(...),
        track_order=True, **filters)`` creates (no filters on contiguous datasets), through
        HDF5's own calls with the creation property lists made once per chunk shape and dtype."""
        # unfiltered data are chunked only when they span several chunks: one chunk would only
        # add a chunk index (filters need chunks whatever the size)
        chunks = chunk_shape(data.shape, data.dtype.itemsize,
                             min_bytes=MIN_CHUNKED_BYTES if self._filters else CHUNK_BYTES + 1)
        key = (data.ndim, chunks, data.dtype.str)
        dcpl = self._dcpls.get(key)
        if dcpl is None:
            dcpl = _dataset_plist(chunks, self._filters if chunks is not None else {})
            self._dcpls[key] = dcpl
        types = self._dtypes.get(data.dtype.str)
        if types is None:
            types = self._dtypes[data.dtype.str] = (h5t.py_create(data.dtype, logical=1),
                                                    h5t.py_create(data.dtype))
        space = self._spaces.get(data.shape)
        if space is None:               # H5Dcreate copies the dataspace: one per shape serves
            space = _SCALAR_SPACE if data.ndim == 0 else h5s.create_simple(data.shape)
            if len(self._spaces) < 4096:
                self._spaces[data.shape] = space
        dsid = h5d.create(group, name.encode("utf-8"), types[0], space, dcpl=dcpl)
        if data.size:
            dsid.write(h5s.ALL, h5s.ALL, data, mtype=types[1])
        return dsid

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
