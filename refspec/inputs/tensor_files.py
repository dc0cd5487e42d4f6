"""Tensor files a user hands in: raw ``.bin`` and ``.npy`` (docs/real_runs.md).

``.bin`` is what ``ndarray.tofile`` writes: no header, little-endian, C order, bfloat16 as its
16-bit patterns; its dtype and shape must come from elsewhere, and its byte size must match
them. ``.npy`` is read with ``allow_pickle=False``; NumPy has no bfloat16, so a bfloat16 array
appears as uint16 bits (what ``refspec export`` writes) or as 2-byte voids (what ``np.save``
writes for an ml_dtypes array). Index tensors (RopeWithSinCosCache's positions) are integer
arrays: ``INDEX_DTYPES``; the float8 and HiFloat8 codes of quantised caches are their bytes
(``CODE_DTYPES``). ``npy_spec`` reads only the header, ``read_tensor`` the data. Every
problem is a ``TensorFileError`` naming the file and what was expected.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from math import prod

import numpy as np

from ..goldens.format import bits_to_bfloat16, stored_dtype
from ..spec.dtypes import MATH_DTYPES, bfloat16, dtype_name, resolve_dtype
from ..spec.errors import AclnnError
from ..spec.errors import one_line
from ..spec.quant_dtypes import QUANT_NAMES

__all__ = ["TensorFileError", "TensorFile", "INDEX_DTYPES", "CODE_DTYPES", "tensor_dtype", "read_npy_header",
           "npy_spec", "bin_spec", "read_tensor", "real_dtype_of", "sha256_of", "size_hint"]

#: the dtypes of index tensors (positions) a file may hold besides the four float dtypes
INDEX_DTYPES = tuple(np.dtype(t) for t in (np.int64, np.int32, np.int16, np.int8, np.uint8))
#: the 8-bit float dtypes of quantised caches, which files hold as their code bytes
CODE_DTYPES = tuple(d for d in QUANT_NAMES if d.kind not in "iu")
_CODE_NAMES = {QUANT_NAMES[d]: d for d in CODE_DTYPES}


class TensorFileError(ValueError):
    """A tensor file that cannot be used as described (one line)."""


def tensor_dtype(value) -> np.dtype:
    """The dtype a description names: a float dtype by any name ``resolve_dtype`` reads
    (``bf16``, ``float32``, ...), an integer dtype of ``INDEX_DTYPES`` (``int64``, ...) or an
    8-bit code dtype of ``CODE_DTYPES`` (``float8_e4m3fn``, ``hifloat8``, ...); ValueError
    naming the allowed ones otherwise."""
    try:
        return resolve_dtype(value)
    except AclnnError:
        pass
    if isinstance(value, str) and value in _CODE_NAMES:
        return _CODE_NAMES[value]
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt not in INDEX_DTYPES + CODE_DTYPES:
        allowed = [dtype_name(d) for d in MATH_DTYPES + INDEX_DTYPES + CODE_DTYPES]
        raise ValueError(f"dtype {value!r} is not allowed; allowed: {', '.join(allowed)}")
    return dt


def read_npy_header(path: str):
    """(shape, fortran_order, stored dtype, data offset) of a .npy file."""
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, stored = read(fh)
            offset = fh.tell()
    except Exception as exc:  # a corrupt header in any way
        raise TensorFileError(f"{path}: not a readable .npy file "
                              f"({one_line(exc)})") from None
    if stored.hasobject:
        raise TensorFileError(f"{path}: holds Python objects (pickles are never loaded)")
    return tuple(int(s) for s in shape), bool(fortran), stored, offset


def real_dtype_of(stored: np.dtype, declared: np.dtype | None) -> np.dtype | None:
    """The real dtype of a .npy's stored dtype: the declared one when the file can hold it
    (bfloat16 as bfloat16, uint16 or 2-byte void; an integer dtype as itself), else None;
    without a declaration uint16 and 2-byte voids are bfloat16 bits and floats and the other
    ``INDEX_DTYPES`` are themselves."""
    stored = np.dtype(stored)
    bits = stored.kind in "uV" and stored.itemsize == 2 and not stored.fields
    native = np.dtype(stored.newbyteorder("=")) if stored.kind in "fiu" else stored
    if declared is None:
        if bits:
            return bfloat16
        if stored.kind == "f" or stored == bfloat16 or native in INDEX_DTYPES:
            return native
        return None
    if np.dtype(declared).kind in "iu":
        return declared if native == np.dtype(declared) else None
    if declared in CODE_DTYPES:                   # as itself or as its code bytes
        return declared if stored == declared or stored == np.dtype(np.uint8) else None
    if declared == bfloat16:
        return bfloat16 if bits or stored == bfloat16 else None
    if stored.kind == "f" and stored.itemsize == declared.itemsize and stored != bfloat16:
        return declared
    return None


@dataclass(frozen=True)
class TensorFile:
    """A tensor file as described: ``path``, real ``dtype`` and ``shape``, data ``offset`` and
    ``stored`` dtype, ``fortran`` order (npy only)."""

    path: str
    dtype: np.dtype
    shape: tuple
    offset: int
    stored: np.dtype
    fortran: bool = False

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.stored.itemsize


def _shape_text(shape, dtype) -> str:
    return f"shape {tuple(shape)} {dtype_name(dtype)}"


def npy_spec(path: str, dtype: np.dtype | None = None, shape=None) -> TensorFile:
    """Describe a .npy file from its header, checked against the ``dtype`` and ``shape`` a
    description gives (None: take the file's)."""
    fshape, fortran, stored, offset = read_npy_header(path)
    real = real_dtype_of(stored, dtype)
    if real is None:
        name = dtype_name(dtype) if dtype is not None else None
        want = (f"{'an' if name[0] in 'aeiou' else 'a'} {name} array" if name is not None
                else "a floating or integer array")
        raise TensorFileError(f"{path}: holds {stored}, expected {want}"
                              + (" (or its uint16 bits)" if dtype == bfloat16 else ""))
    if shape is not None and tuple(shape) != fshape:
        raise TensorFileError(f"{path}: shape {fshape}, expected {tuple(shape)}")
    spec = TensorFile(path, real, fshape, offset, stored, fortran)
    have = os.path.getsize(path) - offset
    if have < spec.nbytes:
        raise TensorFileError(f"{path}: truncated: {have} bytes of data, expected {spec.nbytes} "
                              f"for {_shape_text(fshape, real)}")
    return spec


def size_hint(size: int, elements: int) -> str:
    """For a raw file of ``size`` bytes that should hold ``elements`` values of another
    width: what width it was written in, when that divides evenly ("" otherwise)."""
    if not (size and elements) or size % elements:
        return ""
    per = size // elements
    return f"; {per} bytes per element, as if written in a {per * 8}-bit dtype"


def bin_spec(path: str, dtype: np.dtype, shape) -> TensorFile:
    """Describe a raw .bin file of ``dtype`` and ``shape``, checking its byte size."""
    spec = TensorFile(path, np.dtype(dtype), tuple(int(s) for s in shape), 0, stored_dtype(dtype))
    size = os.path.getsize(path)
    if size != spec.nbytes:
        raise TensorFileError(f"{path}: {size} bytes, expected {spec.nbytes} for "
                              f"{_shape_text(spec.shape, dtype)}"
                              f"{size_hint(size, prod(spec.shape))}")
    return spec


def read_tensor(spec: TensorFile) -> np.ndarray:
    """The array of a described file, in its real dtype, C order."""
    if spec.fortran and len(spec.shape) > 1:
        raw = np.ascontiguousarray(np.load(spec.path, allow_pickle=False))
    else:
        with open(spec.path, "rb") as fh:
            fh.seek(spec.offset)
            raw = np.fromfile(fh, dtype=spec.stored, count=prod(spec.shape))
        if raw.size != prod(spec.shape):
            raise TensorFileError(f"{spec.path}: ended early while being read")
        raw = raw.reshape(spec.shape)
    if spec.dtype == bfloat16 and raw.dtype != bfloat16:
        return bits_to_bfloat16(raw)
    if spec.dtype in CODE_DTYPES:
        return np.ascontiguousarray(raw).view(spec.dtype)
    return raw.astype(spec.dtype, copy=False)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
