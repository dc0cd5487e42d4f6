"""Readers of a kernel's actual outputs (docs/compare.md, "Actual outputs").

A source answers ``lookup(case_id, op, output, golden dtype, golden shape)`` with an
``ActualArray`` (read in blocks, decoded to the real dtype) or a ``Problem`` (a
per-output status: missing, size_mismatch, dtype_mismatch, shape_mismatch, unreadable). Nothing
here raises for a bad file: the run goes on with the other outputs.

Forms: a directory tree ``<case_id>/<output>.bin|.npy`` (what ``refspec export`` lays out, the
kernel's files next to the inputs; aclnn camelCase or Python snake_case names), a ``.npz`` or
``.npy`` file, an HDF5 file in refspec's schema (another implementation's ``expected/``), an
msprobe dump directory (``refspec.compare.msprobe``), or Python arrays.
"""

from __future__ import annotations

import json
import os
import threading
from math import prod

import h5py
import numpy as np

from .. import goldens, ops
from ..goldens.format import BF16_ENCODING, INDEX_DATASET, bits_to_bfloat16, stored_dtype
from ..goldens.layout import STATUS_FILE, export_root
from ..inputs.tensor_files import TensorFileError, read_npy_header, real_dtype_of, size_hint
from ..spec.dtypes import bfloat16, dtype_name
from ..spec.errors import one_line
from .streaming import thread_buffer

__all__ = ["Problem", "ActualArray", "ArrayActual", "RawFileActual", "H5Actual", "ActualSource",
           "TreeSource", "NpzSource", "H5Source", "MemorySource", "decode_dtype", "file_names",
           "open_npy", "read_status", "STATUS_FILE"]


class Problem:
    """Why an output could not be judged: ``status`` and a one-line ``detail``."""

    def __init__(self, status: str, detail: str, source: str | None = None):
        self.status, self.detail, self.source = status, detail, source

    def __repr__(self):
        return f"<Problem {self.status}: {self.detail}>"


class ActualArray:
    """An actual output: ``shape``, real ``dtype``, ``source`` (where it came from) and
    ``read(key, flat_start, count)`` returning the block ``key`` as an array of that dtype."""

    def __init__(self, source: str, shape, dtype):
        self.source = source
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def read(self, key, flat_start: int, count: int) -> np.ndarray:
        raise NotImplementedError


class ArrayActual(ActualArray):
    """An array in memory (or a NumPy memmap)."""

    def __init__(self, source: str, array: np.ndarray, dtype=None):
        arr = np.asarray(array)
        super().__init__(source, arr.shape, arr.dtype if dtype is None else dtype)
        self._arr = arr

    def read(self, key, flat_start, count):
        return _decode(np.asarray(self._arr[key]), self.dtype)


class RawFileActual(ActualArray):
    """A raw C-order array at ``offset`` bytes into a file (``.bin`` or the data of a ``.npy``),
    read with explicit seeks so only one block is ever in memory."""

    def __init__(self, source: str, path: str, offset: int, stored: np.dtype, shape, dtype):
        super().__init__(source, shape, dtype)
        self.path, self.offset, self.stored = path, offset, np.dtype(stored)
        self._local = threading.local()

    def read(self, key, flat_start, count):
        """The block, read into this thread's buffer (valid until the thread's next read)."""
        raw = thread_buffer(self._local, self.stored, count)
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(self.offset + flat_start * self.stored.itemsize)
            got = fh.readinto(memoryview(raw.view(np.uint8))) if count else 0
        if got != count * self.stored.itemsize:
            raise OSError(f"{self.path}: file ended early (truncated while reading?)")
        shape = _key_shape(key, self.shape)
        return _decode(raw, self.dtype).reshape(shape)


class H5Actual(ActualArray):
    """An HDF5 dataset, bfloat16 stored as uint16 bits decoded."""

    def __init__(self, source: str, ds, dtype):
        super().__init__(source, ds.shape, dtype)
        self._ds = ds

    def read(self, key, flat_start, count):
        return _decode(np.asarray(self._ds[key]), self.dtype)


def _key_shape(key, shape):
    out = []
    for k, s in zip(key, shape):
        if isinstance(k, slice):
            out.append(len(range(*k.indices(s))))
    out.extend(shape[len(key):])
    return tuple(out)


def _decode(raw: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Stored values -> the real dtype (bfloat16 from uint16/V2 bits; byte order to native)."""
    if raw.dtype == dtype:
        return raw
    if dtype == bfloat16 and raw.dtype.kind != "f":
        return bits_to_bfloat16(raw)
    return raw.astype(dtype)


def decode_dtype(stored: np.dtype, golden: np.dtype) -> str | None:
    """None when ``stored`` is an acceptable encoding of ``golden``, else why not: bfloat16 may
    be stored as bfloat16, uint16 bits or 2-byte void; other dtypes as themselves in either byte
    order."""
    stored = np.dtype(stored)
    if real_dtype_of(stored, golden) is not None:
        return None
    if golden == bfloat16:
        hint = ("; float16 and bfloat16 are both 2 bytes: was float16 written where bfloat16 "
                "is expected?" if stored.kind == "f" and stored.itemsize == 2 else "")
        return (f"dtype {_name(stored)} but the golden output is bfloat16 "
                f"(accepted: bfloat16, uint16 bits, 2-byte void){hint}")
    hint = ""
    if golden == np.dtype(np.float16) and stored.itemsize == 2:
        hint = ("; bfloat16 is saved as uint16 bits or a 2-byte void, and float16 and bfloat16 "
                "are both 2 bytes: was bfloat16 written where float16 is expected?")
    return f"dtype {_name(stored)} but the golden output is {dtype_name(golden)}{hint}"


def _name(dt: np.dtype) -> str:
    if dt == bfloat16:
        return "bfloat16"
    if dt.kind == "V":
        return f"void{dt.itemsize * 8} (V{dt.itemsize})"
    return dtype_name(dt.newbyteorder("=")) + (" big-endian" if dt.byteorder == ">" else "")


def file_names(output: str, op: str | None) -> list[str]:
    """File stems an output may be written under: aclnn camelCase (``gradQuery``), the Python
    name (``grad_query``) and aclnn spellings with suffixes (``dxOut``), as the operator's
    record names them (camelCase and the Python name for an operator without a record)."""
    record = None if op is None else ops.find(op)
    if record is None:
        return list(dict.fromkeys((ops.camel_case(output), output)))
    return record.file_stems(output)


def open_npy(path: str, golden_dtype: np.dtype, golden_shape, source: str):
    """A ``.npy`` file as an ActualArray (data read in blocks) or a Problem."""
    try:
        shape, fortran, stored, offset = read_npy_header(path)
    except TensorFileError as exc:
        return Problem("unreadable", str(exc), source)
    problem = _mismatch(source, stored, shape, golden_dtype, golden_shape, where=path)
    if problem is not None:
        return problem
    need = prod(shape) * stored.itemsize
    have = os.path.getsize(path) - offset
    if have < need:
        return Problem("unreadable", f"{path}: truncated: {have} bytes of data, expected {need} "
                                     f"for shape {tuple(shape)} {_name(stored)}", source)
    if fortran and len(shape) > 1:
        try:
            arr = np.load(path, allow_pickle=False)
        except Exception as exc:
            return Problem("unreadable", f"{path}: {one_line(exc)}", source)
        return ArrayActual(source, np.ascontiguousarray(arr), golden_dtype)
    return RawFileActual(source, path, offset, stored, shape, golden_dtype)


def open_bin(path: str, golden_dtype: np.dtype, golden_shape, source: str):
    """A raw ``.bin`` (dtype and shape from the golden) as an ActualArray or a Problem."""
    stored = stored_dtype(golden_dtype)
    try:
        size = os.path.getsize(path)
        with open(path, "rb"):
            pass
    except OSError as exc:
        return Problem("unreadable", f"{path}: {exc.strerror or one_line(exc)}", source)
    need = prod(golden_shape) * stored.itemsize
    if size != need:
        return Problem("size_mismatch",
                       f"{path}: {size} bytes, expected {need} bytes for shape "
                       f"{tuple(golden_shape)} {dtype_name(golden_dtype)}"
                       f"{size_hint(size, prod(golden_shape))}", source)
    return RawFileActual(source, path, 0, stored, golden_shape, golden_dtype)



def check_array(arr: np.ndarray, golden_dtype, golden_shape, source: str):
    """An in-memory array as an ActualArray or a Problem (dtype/shape checks)."""
    try:
        arr = np.asarray(arr)
    except Exception as exc:
        return Problem("unreadable", f"{source}: not an array ({one_line(exc)})", source)
    if arr.dtype.hasobject:
        return Problem("unreadable", f"{source}: holds Python objects", source)
    return (_mismatch(source, arr.dtype, arr.shape, np.dtype(golden_dtype), golden_shape)
            or ArrayActual(source, arr, golden_dtype))


def _mismatch(source, dtype, shape, golden_dtype, golden_shape, where=None):
    """A dtype_mismatch or shape_mismatch Problem, or None when the array fits the golden;
    the message starts with ``where`` (a file path), by default the source."""
    where = source if where is None else where
    why = decode_dtype(dtype, golden_dtype)
    if why:
        return Problem("dtype_mismatch", f"{where}: {why}", source)
    if tuple(shape) != tuple(golden_shape):
        return Problem("shape_mismatch", f"{where}: shape {tuple(shape)} but the golden output "
                                         f"has shape {tuple(golden_shape)}", source)
    return None


def read_status(path: str):
    """``(code, None)`` from a status file ``{"code": N}`` (0: the kernel accepted the input),
    ``(None, None)`` when there is none, ``(None, why)`` when it cannot be read."""
    if not os.path.lexists(path):
        return None, None
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"{path}: not a readable JSON status file ({one_line(exc)})"
    code = doc.get("code") if isinstance(doc, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return None, (f"{path}: expected {{\"code\": <integer>}} (0 when the kernel accepted the "
                      f"input, else the aclnn status it returned), got {one_line(doc)[:80]}")
    return code, None


class ActualSource:
    """Base class: ``lookup(case_id, op, output, dtype, shape)`` and ``status(case_id)``;
    ``single_case`` is set by the comparator when only one case is judged (then bare output
    names are accepted)."""

    kind = "?"
    single_case: str | None = None

    def __init__(self, path: str):
        self.path = path

    def lookup(self, case_id: str, op: str, output: str, dtype: np.dtype, shape):
        raise NotImplementedError

    def status(self, case_id: str):
        """The status the kernel returned for a case, as ``read_status`` gives it;
        ``(None, None)`` for sources that hold none."""
        return None, None

    def reference(self, case):
        """The golden case the source's outputs are judged against: ``case`` itself, unless
        the source ran an implementation whose own saved values the reference must use."""
        return case

    def rejection(self, case_id: str) -> str:
        """What the kernel said when it rejected a case ("" when the source does not know)."""
        return ""

    def not_run_reason(self, case_id: str) -> str:
        """Why a case with nothing to judge was not run ("": the comparator says it)."""
        return ""

    @property
    def timings(self) -> dict:
        """Seconds per case id, for sources that ran the implementation themselves."""
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class TreeSource(ActualSource):
    """``ROOT/<case_id>/<output>.bin|.npy`` (the case id's '/' parts are directories)."""

    kind = "directory"

    def status(self, case_id):
        d = os.path.join(self.path, *case_id.split("/"))
        if not os.path.isdir(d) and self.single_case == case_id:
            d = self.path
        return read_status(os.path.join(d, STATUS_FILE))

    def lookup(self, case_id, op, output, dtype, shape):
        d = os.path.join(self.path, *case_id.split("/"))
        if not os.path.isdir(d):
            if self.single_case == case_id and self._has_files(self.path, output, op):
                d = self.path
            else:
                return Problem("missing", f"no directory {d} for this case")
        tried = []
        for stem in file_names(output, op):
            for ext in (".bin", ".npy"):
                p = os.path.join(d, stem + ext)
                tried.append(stem + ext)
                if os.path.lexists(p):
                    src = p
                    if os.path.isdir(p):
                        return Problem("unreadable", f"{p}: is a directory", src)
                    if ext == ".bin":
                        return open_bin(p, dtype, shape, src)
                    return open_npy(p, dtype, shape, src)
        return Problem("missing", f"none of {', '.join(tried)} in {d}")

    def not_run_reason(self, case_id: str) -> str:
        """Where the case folders are when ACTUAL holds none of them: a folder below it (a
        parent of the export was given) or above it (a folder inside the export)."""
        parts = case_id.split("/")
        if os.path.isdir(os.path.join(self.path, *parts)):
            return ""
        root = getattr(self, "_root", None)           # searched once unless it moves
        if root is None or (root and not os.path.isdir(os.path.join(root, *parts))):
            root = self._root = export_root(self.path, case_id)
        if not root:
            return ""
        return (f"{self.path} holds no case folders; they are under {root} (compare against "
                "that folder)")

    @staticmethod
    def _has_files(d, output, op):
        return any(os.path.exists(os.path.join(d, s + e)) for s in file_names(output, op)
                   for e in (".bin", ".npy"))


class NpzSource(ActualSource):
    """A ``.npz`` (keys ``<case_id>/<output>``, bare ``<output>`` when one case is judged, or a
    mapping file's ``key`` entries) or a single ``.npy`` (its file stem is the output name)."""

    kind = "npz"

    def __init__(self, path: str, mapping=None):
        super().__init__(path)
        self.mapping = mapping
        self._npz = None
        self._error = None
        if path.lower().endswith(".npy"):
            self._keys = [os.path.splitext(os.path.basename(path))[0]]
        else:
            try:
                self._npz = np.load(path, allow_pickle=False)
                self._keys = list(self._npz.files)
            except Exception as exc:
                self._error = f"{path}: not a readable .npz file ({one_line(exc)})"
                self._keys = []

    def _candidates(self, case_id, op, output):
        keys = []
        if self.mapping is not None:
            k = self.mapping.key_for(case_id, output)
            if k is not None:
                return [k]
        for stem in file_names(output, op):
            keys.append(f"{case_id}/{stem}")
        if self.single_case == case_id:
            keys.extend(file_names(output, op))
        return keys

    def lookup(self, case_id, op, output, dtype, shape):
        if self._error:
            return Problem("unreadable", self._error, self.path)
        for k in self._candidates(case_id, op, output):
            if k in self._keys:
                src = f"{self.path}[{k}]" if self._npz is not None else self.path
                if self._npz is None:
                    return open_npy(self.path, dtype, shape, src)
                try:
                    arr = self._npz[k]
                except Exception as exc:
                    return Problem("unreadable", f"{src}: {one_line(exc)}", src)
                return check_array(arr, dtype, shape, src)
        if self._npz is None:
            stem = self._keys[0]
            return Problem("missing", f"{self.path} is one array, read as output {stem!r} (its "
                                      f"file name); output {output!r} is not in it (a directory "
                                      "or an .npz holds several outputs)")
        tried = self._candidates(case_id, op, output)
        return Problem("missing", f"no key {' or '.join(repr(t) for t in tried)} in {self.path}")

    def close(self):
        if self._npz is not None:
            self._npz.close()


class H5Source(ActualSource):
    """An HDF5 file. A refspec golden file (another implementation's, or a golden file itself)
    is read through ``refspec.goldens.open``: its ``expected/`` outputs decoded as the reader
    decodes them, and the status each case was made with (0, or a negative case's expected
    code). Plain HDF5 files with ``/<case_id>/<output>`` datasets are read too."""

    kind = "hdf5"

    def __init__(self, path: str):
        super().__init__(path)
        self._file = self._golden = self._error = None
        try:
            self._file = h5py.File(path, "r")
            if "schema_version" in self._file.attrs and INDEX_DATASET in self._file:
                self._file.close()
                self._file, self._golden = None, goldens.open(path)
        except Exception as exc:
            self._error = f"{path}: cannot open as HDF5 ({one_line(exc)})"

    def _case(self, case_id):
        """The golden file's case (the last one kept: its outputs are looked up one by one)."""
        if getattr(self, "_last", (None,))[0] != case_id:
            self._last = (case_id, self._golden[case_id])
        return self._last[1]

    def status(self, case_id):
        if self._golden is None or case_id not in self._golden:
            return None, None
        return self._case(case_id).expected_error or 0, None

    def lookup(self, case_id, op, output, dtype, shape):
        if self._error:
            return Problem("unreadable", self._error, self.path)
        if self._golden is not None:
            return self._golden_lookup(case_id, output, dtype, shape)
        f = self._file
        paths = []
        for stem in file_names(output, op):
            paths += [f"{case_id}/expected/{stem}", f"{case_id}/{stem}"]
            if self.single_case == case_id:
                paths.append(stem)
        for p in paths:
            try:
                obj = f.get(p)
            except Exception:
                obj = None
            if isinstance(obj, h5py.Dataset):
                src = f"{self.path}:/{p}"
                stored = obj.dtype
                declared = obj.attrs.get("dtype")
                if isinstance(declared, bytes):
                    declared = declared.decode()
                if obj.attrs.get("encoding") in (BF16_ENCODING, BF16_ENCODING.encode()) or (
                        declared == "bfloat16" and stored.itemsize == 2):
                    stored = bfloat16
                return (_mismatch(src, stored, obj.shape, dtype, shape)
                        or H5Actual(src, obj, dtype))
        return Problem("missing", f"no dataset {paths[0]} in {self.path}")

    def _golden_lookup(self, case_id, output, dtype, shape):
        gf = self._golden
        if case_id not in gf:
            return Problem("missing", f"no case {case_id} in {self.path}")
        expected = self._case(case_id).expected
        if output not in expected:
            return Problem("missing", f"case {case_id} of {self.path} has no expected {output}")
        arr = expected[output]
        src = f"{self.path}:{case_id}/expected/{output}"
        return _mismatch(src, arr.dtype, arr.shape, dtype, shape) or H5Actual(src, arr, dtype)

    def close(self):
        for f in (self._file, self._golden):
            if f is not None:
                f.close()


class MemorySource(ActualSource):
    """Python arrays: ``{case_id: {output: array}}`` or, for one case, ``{output: array}``."""

    kind = "arrays"

    def __init__(self, arrays: dict, label: str = "<arrays>"):
        super().__init__(label)
        self.arrays = arrays

    def lookup(self, case_id, op, output, dtype, shape):
        table = self.arrays.get(case_id)
        if not isinstance(table, dict):
            table = self.arrays if self.single_case == case_id else None
        if table is None:
            return Problem("missing", f"no arrays for case {case_id}")
        for stem in file_names(output, op):
            if stem in table:
                if table[stem] is None:
                    return Problem("missing", f"{stem} is None")
                return check_array(table[stem], dtype, shape, f"{self.path}[{stem}]")
        return Problem("missing", f"no array named {output} (have: {', '.join(map(str, table)) or 'none'})")
