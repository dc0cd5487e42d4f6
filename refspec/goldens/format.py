"""Golden HDF5 schema: constants, errors and the encoding of arrays and attributes.

The layout itself is documented in docs/goldens.md. This module holds what the writer, the
reader, the merger and the exporter share: the schema version, the error types, the dtype
encoding (bfloat16 as uint16 bit patterns, the other float dtypes natively), chunk shapes,
compression settings, case-id paths and the atomic-rename helper.
"""

from __future__ import annotations

import json
import os
from math import prod

import numpy as np

from ..spec.dtypes import bfloat16, dtype_name
from ..spec.quant_dtypes import float8_e4m3fn, float8_e5m2, hifloat8

__all__ = [
    "SCHEMA_VERSION", "CASES_GROUP", "CHUNK_BYTES", "MIN_CHUNKED_BYTES", "INDEX_DATASET", "CASE_SUBGROUPS", "BF16_ENCODING",
    "COMPRESSIONS", "DEFAULT_COMPRESSION", "DEFAULT_GZIP_LEVEL", "LIBVER",
    "GoldenFileError", "GoldenFileExistsError", "GoldenFileDamagedError", "CorruptGoldenError",
    "IncompleteGoldenError", "GoldenFileLockedError", "UnknownCaseError", "CHECKSUMS",
    "CODES_ENCODINGS", "real_dtype",
    "part_path", "parts_dir", "interrupted_run", "encode_array", "decode_array", "stored_dtype",
    "bits_to_bfloat16", "chunk_shape",
    "compression_filters", "describe_compression", "case_path", "check_case_id", "to_jsonable", "attr_value",
    "read_attrs", "atomic_replace", "OutsideError", "inside",
]

#: 2: metadata in the index only, parameters under the axes' names, operators by record id
#: (files of schema 1 are read through ``refspec.goldens.legacy``)
SCHEMA_VERSION = 2
CASES_GROUP = "cases"
INDEX_DATASET = "index"
#: the subgroups of a case group, in the order they are written (``written``: the flat offsets
#: of the elements a call writes into a cache it updates in place)
CASE_SUBGROUPS = ("inputs", "expected", "exact", "sum_abs", "written")
BF16_ENCODING = "bfloat16-bits"
#: the 8-bit float dtypes of quantised caches, stored as their code bytes (uint8)
CODES_ENCODINGS = {f"{dtype_name(d)}-bits": d for d in (float8_e4m3fn, float8_e5m2, hifloat8)}
_CODES = {d: e for e, d in CODES_ENCODINGS.items()}
#: compression names accepted by the writer ("gzip" takes a level: "gzip", "gzip:1" ... "gzip:9")
COMPRESSIONS = ("none", "lzf", "gzip")
#: chosen from benchmarks/bench_compression.py (docs/goldens.md, "Compression"): random
#: mantissas leave gzip+shuffle 29 % and lzf 10 % to save, for 3-5x and 2.5-4x slower full reads
#: and about 10x and 5x slower writes (writing is the serial part of a parallel generate)
DEFAULT_COMPRESSION = "none"
#: gzip level when none is given: level 4 saves only 1 % more bytes than level 1
DEFAULT_GZIP_LEVEL = 1
#: HDF5 file format 1.8 at least (creation order, compact/dense attributes), 1.10 at most, so
#: HDF5 >= 1.10 libraries (h5dump, HDFView, MATLAB, Julia) read every file. Not 1.10 as the
#: lower bound: its superblock marks a file "open for writing" until closed, and a killed run's
#: .part could then not be reopened for --resume without h5clear.
LIBVER = ("v108", "v110")
#: the root attribute ``checksums`` of a file whose every dataset carries a checksum: HDF5's
#: Fletcher32 filter on chunked datasets (and the index's columns), the CRC-32 of its bytes in
#: the index for a contiguous one, the CRC-32 of each index row's texts
CHECKSUMS = "fletcher32+crc32"
#: target size of one chunk in bytes (C-order blocks of whole trailing rows)
CHUNK_BYTES = 1 << 20
#: smaller datasets are stored contiguous: a 1.8-format chunk index costs ~4 KiB per dataset
#: (a smoke sweep file was 9x its data when every tiny tensor was chunked)
MIN_CHUNKED_BYTES = 64 << 10


class GoldenFileError(OSError):
    """A golden file that is missing, unreadable, not a refspec golden file, of a newer schema,
    or that cannot be written as asked. ``str()`` is ``"<path>: <what is wrong>"``; the
    ``filename``/``strerror`` attributes let the CLI print the same one line."""

    def __init__(self, message: str, path=None):
        super().__init__(message)
        self.message = message
        self.filename = None if path is None else os.fspath(path)
        self.strerror = message

    def __str__(self):
        return f"{self.filename}: {self.message}" if self.filename else self.message

    def __reduce__(self):
        return (type(self), (self.message, self.filename))


class GoldenFileExistsError(GoldenFileError, FileExistsError):
    """The output exists and neither force nor resume was asked for."""


class GoldenFileDamagedError(GoldenFileError):
    """A file to resume that HDF5 cannot read (a process killed while HDF5 wrote its
    metadata, before its first flush, ...)."""


class CorruptGoldenError(GoldenFileError):
    """A golden file whose content fails its checks: a dataset whose checksum does not match
    its bytes, a dataset or attribute that is missing, a shape or dtype that contradicts the
    index, storage outside the file (external or virtual datasets), an index that is not
    readable JSON, an expected output that is not its exact value rounded once. ``case_id``
    and ``dataset`` (``"expected/dx"``, ``"/index"``) say where, when known; ``str()`` is one
    line ``"<path>: case <id>: <dataset>: <what>"``."""

    def __init__(self, message: str, path=None, case_id: str | None = None,
                 dataset: str | None = None):
        where = "".join(f"{w}: " for w in (f"case {case_id}" if case_id else None, dataset) if w)
        super().__init__(where + message, path)
        self.case_id, self.dataset, self.problem = case_id, dataset, message

    def __reduce__(self):
        return (type(self), (self.problem, self.filename, self.case_id, self.dataset))


class IncompleteGoldenError(GoldenFileError):
    """A golden file not marked complete (an interrupted run, a partial merge), opened without
    asking for what it holds (``allow_incomplete=True``, ``--allow-incomplete``)."""


class GoldenFileLockedError(GoldenFileError):
    """The file is being written (or read, for a writer) by another process."""


class UnknownCaseError(KeyError):
    """A case id that is not in the file (``str()`` is the plain message, not its repr)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def part_path(path) -> str:
    """The temporary name a file is written under until it is complete."""
    return os.fspath(path) + ".part"


def parts_dir(out) -> str:
    """Where a run in parts keeps its part files: ``OUT.h5.parts``."""
    return os.fspath(out) + ".parts"


def interrupted_run(path) -> str:
    """What an interrupted ``refspec generate -o PATH`` left beside a missing ``path`` (its
    ``.part`` file or ``.parts/`` folder), as the end of a message; "" when nothing."""
    part, parts = part_path(path), parts_dir(path)
    if os.path.isfile(part):
        return (f"; {part} beside it holds the cases an interrupted run wrote (`refspec show "
                f"--allow-incomplete {part}` shows them; the same generate command with --resume "
                "completes it)")
    if os.path.isdir(parts):
        return (f"; {parts}{os.sep} beside it holds the part files of an interrupted run (the "
                "same generate command with --resume completes it)")
    return ""


# --- arrays ---------------------------------------------------------------------------------

def encode_array(arr) -> tuple[np.ndarray, dict]:
    """The array as stored (C-contiguous, bfloat16 viewed as uint16) and its dataset attributes."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype == bfloat16:
        return arr.view(np.uint16), {"dtype": "bfloat16", "encoding": BF16_ENCODING}
    if arr.dtype in _CODES:
        return arr.view(np.uint8), {"dtype": dtype_name(arr.dtype), "encoding": _CODES[arr.dtype]}
    if arr.dtype.kind not in "fiub" or arr.dtype.byteorder == ">":
        raise TypeError(f"cannot store an array of dtype {arr.dtype} (allowed: float16, bfloat16, "
                        "float32, float64 and native integers)")
    return arr, {"dtype": dtype_name(arr.dtype)}


def stored_dtype(real: np.dtype) -> np.dtype:
    """The little-endian dtype a ``.bin`` stores ``real`` in (uint16 bits for bfloat16, the code
    bytes for the 8-bit float dtypes)."""
    dt = np.dtype(np.uint16) if real == bfloat16 else np.dtype(np.uint8) if real in _CODES else np.dtype(real)
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


def bits_to_bfloat16(raw: np.ndarray) -> np.ndarray:
    """bfloat16 from its 16-bit patterns held as uint16 or 2-byte voids (no rounding)."""
    raw = np.ascontiguousarray(raw)
    bits = raw.view("<u2") if raw.dtype.kind == "V" else raw.astype(np.uint16, copy=False)
    return np.ascontiguousarray(bits, dtype=np.uint16).view(bfloat16)


def decode_array(raw, encoding) -> np.ndarray:
    """Undo ``encode_array`` on data read from a dataset (0-d arrays stay 0-d)."""
    raw = np.asarray(raw)
    if encoding == BF16_ENCODING:
        return raw.view(bfloat16)
    if encoding in CODES_ENCODINGS:
        return raw.view(CODES_ENCODINGS[encoding])
    return raw


def real_dtype(attrs: dict) -> np.dtype:
    """The dtype a dataset with these attributes decodes to."""
    encoding = attrs.get("encoding")
    if encoding == BF16_ENCODING:
        return bfloat16
    return CODES_ENCODINGS.get(encoding) or np.dtype(attrs["dtype"])


def chunk_shape(shape: tuple[int, ...], itemsize: int, target: int = CHUNK_BYTES,
                min_bytes: int = MIN_CHUNKED_BYTES):
    """C-order block chunks of about ``target`` bytes: whole trailing axes, an evenly split run
    of the first axis that does not fit whole. None (stored contiguous, unfiltered) for scalars,
    empty arrays and arrays under ``min_bytes``."""
    if len(shape) == 0 or prod(shape) == 0 or prod(shape) * itemsize < min_bytes:
        return None
    chunk = list(shape)
    for i in range(len(shape)):
        inner = prod(shape[i + 1:]) * itemsize
        if inner * shape[i] <= target:
            break
        if inner <= target:
            step = max(1, target // inner)
            chunk[i] = -(-shape[i] // -(-shape[i] // step))     # even split: no padded last chunk
            break
        chunk[i] = 1
    return tuple(chunk)


def compression_filters(compression: str | None) -> dict:
    """h5py ``create_dataset`` keywords for a compression spelled ``NAME[:LEVEL][+shuffle|
    -shuffle]``: ``"none"``, ``"lzf"``, ``"gzip"`` or ``"gzip:N"`` (N = 1..9, default 1), with
    HDF5's byte-shuffle filter on (``+shuffle``) or off (``-shuffle``); by default it is on for
    gzip, where it makes files both smaller and faster to read, and off otherwise."""
    text = (compression or "none").lower()
    name, shuffle = text, None
    for suffix, on in (("+shuffle", True), ("-shuffle", False)):
        if text.endswith(suffix):
            name, shuffle = text[:-len(suffix)], on
    level = None
    if name.startswith("gzip:") or name.startswith("gzip-"):
        name, _, lvl = name.partition(name[4])
        if not (lvl.isdigit() and 1 <= int(lvl) <= 9):
            raise ValueError(f"compression {compression!r}: gzip level must be 1..9")
        level = int(lvl)
    if name not in COMPRESSIONS:
        raise ValueError(f"compression {compression!r} is not supported; allowed: none, lzf, "
                         "gzip, gzip:N (N = 1..9), each with +shuffle or -shuffle")
    if shuffle is None:
        shuffle = name == "gzip"
    if name == "none":
        return {"shuffle": True} if shuffle else {}
    kw = {"compression": name, "shuffle": bool(shuffle)}
    if name == "gzip":
        kw["compression_opts"] = DEFAULT_GZIP_LEVEL if level is None else level
    return kw


def describe_compression(filters: dict) -> str:
    """"none", "lzf", "gzip:1", with "+shuffle" when the shuffle filter is on: the spelling
    ``compression_filters`` reads back."""
    name = filters.get("compression", "none")
    if name == "gzip":
        name = f"gzip:{filters['compression_opts']}"
    return name + ("+shuffle" if filters.get("shuffle") else "")


# --- case ids -------------------------------------------------------------------------------

def check_case_id(case_id) -> str:
    """A case id is '/'-separated, with no empty, '.' or '..' parts (it becomes nested HDF5
    groups and, on export, nested directories)."""
    if not isinstance(case_id, str) or not case_id:
        raise ValueError(f"case id {case_id!r} must be a non-empty string")
    parts = case_id.split("/")
    bad = [p for p in parts if p in ("", ".", "..") or p in CASE_SUBGROUPS]
    if bad or "\\" in case_id or "\0" in case_id:
        raise ValueError(f"case id {case_id!r} is not allowed: '/'-separated parts must be "
                         f"non-empty, not '.', '..' or {', '.join(CASE_SUBGROUPS)}, without "
                         "backslashes")
    return case_id


def case_path(case_id: str) -> str:
    """The HDF5 path of a case group."""
    return f"/{CASES_GROUP}/{check_case_id(case_id)}"


# --- attributes -----------------------------------------------------------------------------

def to_jsonable(value):
    """JSON-ready copy of a parameter value (NumPy scalars and arrays, tuples, enums, dtypes)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.dtype):
        return dtype_name(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)            # IntEnum -> its number
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"parameter value {value!r} of type {type(value).__name__} is not JSON-able")


def attr_value(value):
    """An HDF5 attribute read back as a plain Python value (str, int, float, bool, list)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [attr_value(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def read_attrs(obj) -> dict:
    """All attributes of an HDF5 object as plain Python values, in creation order."""
    return {k: attr_value(v) for k, v in obj.attrs.items()}


def dumps_params(params: dict) -> str:
    return json.dumps(to_jsonable(params), sort_keys=False, allow_nan=True)


# --- files ----------------------------------------------------------------------------------

def fsync_path(path) -> None:
    """Flush a file's (or directory's) data to disk; ignored where the OS refuses."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_replace(tmp, final) -> None:
    """Rename a finished temporary file onto its final name (same directory), durably."""
    fsync_path(tmp)
    os.replace(tmp, final)
    fsync_path(os.path.dirname(os.path.abspath(final)) or ".")


class OutsideError(ValueError):
    """A path read from an input that leads outside the folder it came from."""


def inside(base, name) -> str:
    """The path of ``name`` (relative to the folder ``base``, as an input names it) with every
    symbolic link resolved, when it lies inside ``base`` (resolved too); ``OutsideError``
    naming both otherwise: an absolute ``name``, ``..`` parts or a symbolic link that lead
    elsewhere. Parts that do not exist yet are taken as they are. The one rule for every file
    name refspec reads from an input or writes under an output folder."""
    root = os.path.realpath(os.fspath(base))
    name = os.fspath(name)
    full = os.path.realpath(os.path.join(root, name))
    if full != root and os.path.commonpath([root, full]) != root:
        raise OutsideError(f"{name!r} leads to {full}, outside {root} (files are read and "
                           "written only inside the folder they were given in)")
    return full
