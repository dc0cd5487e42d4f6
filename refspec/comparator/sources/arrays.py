"""One actual output (docs/compare.md, "Actual outputs"): an ``ActualArray`` read in blocks and
decoded to its real dtype, or a ``Problem`` saying why it cannot be judged (a per-output status:
missing, size_mismatch, dtype_mismatch, shape_mismatch, unreadable, not_recorded). Nothing here
raises for a bad file: the run goes on with the other outputs.
"""

from __future__ import annotations

import os
import threading
from math import prod

import numpy as np

from ...goldens.format import bits_to_bfloat16, stored_dtype
from ...inputs.tensor_files import (CODE_DTYPES, TensorFileError, read_npy_header, real_dtype_of,
                                     size_hint)
from ...spec.dtypes import bfloat16, dtype_name
from ...spec.errors import one_line

__all__ = ["Problem", "NOT_RECORDED", "ActualArray", "ArrayActual", "RawFileActual", "H5Actual",
           "decode_dtype", "open_npy", "open_bin", "check_array", "mismatch", "thread_buffer"]

#: the status of an output the source did not record (an msprobe dump's null entry, statistics
#: a Python function does not return): nothing to judge, not a failure
NOT_RECORDED = "not_recorded"


def thread_buffer(local: threading.local, dtype: np.dtype, count: int) -> np.ndarray:
    """``count`` elements of a buffer kept in ``local`` for the calling thread (grown when too
    small), so streaming allocates nothing per block."""
    buf = getattr(local, "buf", None)
    if buf is None or buf.dtype != dtype or buf.size < count:
        buf = local.buf = np.empty(count, dtype)
    return buf[:count]


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
    """Stored values -> the real dtype (bfloat16 from uint16/V2 bits; the 8-bit float codes from
    their bytes; byte order to native)."""
    if raw.dtype == dtype:
        return raw
    if dtype == bfloat16 and raw.dtype.kind != "f":
        return bits_to_bfloat16(raw)
    if dtype in CODE_DTYPES:
        return np.ascontiguousarray(raw).view(dtype)
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


def open_npy(path: str, golden_dtype: np.dtype, golden_shape, source: str):
    """A ``.npy`` file as an ActualArray (data read in blocks) or a Problem."""
    try:
        shape, fortran, stored, offset = read_npy_header(path)
    except TensorFileError as exc:
        return Problem("unreadable", str(exc), source)
    problem = mismatch(source, stored, shape, golden_dtype, golden_shape, where=path)
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
    return (mismatch(source, arr.dtype, arr.shape, np.dtype(golden_dtype), golden_shape)
            or ArrayActual(source, arr, golden_dtype))


def mismatch(source, dtype, shape, golden_dtype, golden_shape, where=None):
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
