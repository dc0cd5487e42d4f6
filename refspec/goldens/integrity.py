"""What a golden file's datasets must be before refspec trusts them (docs/goldens.md,
"Checksums and checks").

- ``storage_problem``: a dataset is stored inside its file (no external storage, not virtual),
  holds numbers of the dtype and shape its description in the index gives, and carries its
  checksum (HDF5's Fletcher32 on a chunked dataset, the CRC-32 of its bytes in the index for a
  contiguous one) when the file says every dataset has one;
- ``raw_extents``: where a dataset stored raw (unfiltered) lies in its file, for the readers
  that copy its bytes with plain reads;
- ``rounding_mismatch``, ``verify_output``, ``verify_case``: an expected output is its exact
  value rounded once (``refspec.spec.dtypes.round_to``), bit for bit, checked block by block.

Every failure is a ``refspec.goldens.format.CorruptGoldenError`` naming the file, the case
and the dataset.
"""

from __future__ import annotations

from math import prod

import h5py
import numpy as np
from h5py import h5d, h5t, h5z

from ..spec.dtypes import bfloat16, dtype_name, round_to
from .format import CASE_SUBGROUPS, CorruptGoldenError

__all__ = ["storage_problem", "raw_extents", "rounding_mismatch", "verify_output",
           "verify_case", "VERIFY_BYTES"]

#: bytes of exact values read at a time by ``verify_output`` and ``verify_case``
VERIFY_BYTES = 32 << 20
_NUMBERS = (h5t.FLOAT, h5t.INTEGER)


def storage_problem(dsid: h5d.DatasetID, shape: tuple, stored: np.dtype,
                    checksum: str | None) -> str:
    """What is wrong with a dataset opened for reading ("" when nothing): ``shape`` and
    ``stored`` (the dtype its bytes must have: uint16 for bfloat16 bits) are what the index
    says; ``checksum`` is "required" when the file says every dataset carries one, "crc32"
    when the index holds the dataset's CRC-32, None when neither."""
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5d.VIRTUAL:
        return "a virtual dataset (its elements come from other datasets or files): refused"
    if dcpl.get_external_count():
        return ("stored in external files (its bytes are outside the golden file): refused")
    htype = dsid.get_type()
    bool_enum = htype.get_class() == h5t.ENUM and stored == np.bool_
    if htype.get_class() not in _NUMBERS and not bool_enum:
        return f"holds {_type_name(dsid)}, not numbers"
    have = dsid.dtype
    if (have.kind, have.itemsize) != (stored.kind, stored.itemsize) and not bool_enum:
        return f"holds {dtype_name(have)} values, but the index describes {dtype_name(stored)}"
    if tuple(dsid.shape) != tuple(shape):
        return f"has shape {tuple(dsid.shape)}, but the index says {tuple(shape)}"
    if checksum == "required":
        if layout == h5d.CHUNKED:
            filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
            if h5z.FILTER_FLETCHER32 not in filters:
                return "chunked without its Fletcher32 checksum (the file says every dataset has one)"
        else:
            return "has no CRC-32 in the index (the file says every dataset has a checksum)"
    return ""


def _type_name(dsid) -> str:
    try:
        return f"values of {dsid.dtype}"
    except Exception:                 # a type NumPy has no name for
        return "values of an HDF5 type NumPy cannot read"


def raw_extents(dsid: h5d.DatasetID, shape: tuple):
    """``LazyArray.raw_extents``: ``(flat_start, count, byte_offset)`` runs covering a raw
    dataset in C order, or None (see there). The low-level calls only: each of h5py's
    properties costs 10-40 us, per dataset."""
    n = prod(shape)
    if n == 0:
        return None
    htype = dsid.get_type()
    if htype.get_class() not in _NUMBERS or (
            htype.get_size() > 1 and htype.get_order() != h5t.ORDER_LE):
        return None
    dcpl = dsid.get_create_plist()
    if dcpl.get_layout() not in (h5d.CONTIGUOUS, h5d.CHUNKED) or dcpl.get_external_count():
        return None
    off = dsid.get_offset()
    if off is not None:
        # contiguous and allocated (HDF5 filters only chunked data); the offset counts from the
        # start of the file, a user block included
        return [(0, n, int(off))]
    if h5py.h5i.get_file_id(dsid).get_create_plist().get_userblock():
        return None                       # chunk addresses count from the end of a user block
    if dcpl.get_nfilters() or dcpl.get_layout() != h5d.CHUNKED:
        return None
    return _chunk_extents(dsid, shape, dcpl.get_chunk(), htype.get_size())


def _chunk_extents(dsid, shape: tuple, chunks: tuple, itemsize: int):
    n = prod(shape)
    ax = next((i for i, c in enumerate(chunks) if c != 1), len(shape) - 1)
    if any(c != 1 for c in chunks[:ax]) or tuple(chunks[ax + 1:]) != shape[ax + 1:]:
        return None                       # not a run of whole trailing axes
    tail = prod(shape[ax + 1:])
    chunk_bytes = prod(chunks) * itemsize
    strides = [prod(shape[i + 1:]) for i in range(len(shape))]
    found = []

    def one(offset, filter_mask, addr, size):
        if filter_mask or size != chunk_bytes or addr is None:
            raise ValueError("chunk not stored raw")
        start = sum(int(o) * st for o, st in zip(offset, strides))
        count = min(chunks[ax], shape[ax] - int(offset[ax])) * tail
        found.append((start, count, int(addr)))

    if hasattr(dsid, "chunk_iter"):
        dsid.chunk_iter(lambda info: one(info.chunk_offset, info.filter_mask, info.byte_offset,
                                         info.size))
    else:
        for i in range(dsid.get_num_chunks()):
            info = dsid.get_chunk_info(i)
            one(info.chunk_offset, info.filter_mask, info.byte_offset, info.size)
    found.sort()
    pos = 0
    for start, count, _ in found:
        if start != pos:
            return None                   # a chunk never written: its elements are fill values
        pos += count
    return found if pos == n else None


# --- expected against exact -----------------------------------------------------------------

def rounding_mismatch(expected: np.ndarray, exact: np.ndarray) -> int | None:
    """The first flat index (C order) where ``expected`` is not ``exact`` rounded once to
    ``expected``'s dtype, bit for bit (NaN payloads and signed zeros included); None when it
    is everywhere. Blocks of one output checked one after the other check the whole."""
    expected = np.ascontiguousarray(expected)
    rounded = np.ascontiguousarray(round_to(np.asarray(exact, dtype=np.float64),
                                            bfloat16 if expected.dtype == bfloat16
                                            else expected.dtype))
    if expected.shape != rounded.shape:
        return 0
    bits = np.dtype(f"u{expected.dtype.itemsize}")
    differ = np.flatnonzero(expected.reshape(-1).view(bits) != rounded.reshape(-1).view(bits))
    return int(differ[0]) if differ.size else None


def verify_output(case, name: str, max_bytes: int = VERIFY_BYTES) -> None:
    """``CorruptGoldenError`` unless the expected output ``name`` of ``case`` (a
    ``GoldenCase``) is its exact value rounded once, everywhere; reads both in blocks of about
    ``max_bytes`` of exact values (every chunk's checksum is checked on the way)."""
    expected, exact = case.expected[name], case.exact[name]
    written = getattr(case, "written", None)
    if written is not None and name in written:
        _verify_written(expected, exact, np.asarray(written[name].read()), max_bytes)
        return
    if expected.shape != exact.shape:
        raise expected.corrupt(f"has shape {expected.shape}, but exact/{name} has {exact.shape}")
    for key, exact_block in exact.blocks(max_bytes):
        at = rounding_mismatch(expected[key], exact_block)
        if at is not None:
            raise expected.corrupt(f"element {_element(key, at, exact_block.shape)} is not "
                                   f"exact/{name} rounded once to {dtype_name(expected.dtype)} "
                                   "(the golden was changed after it was computed)")


def _verify_written(expected, exact, offsets: np.ndarray, max_bytes: int) -> None:
    """A cache updated in place: its exact values are those of the elements at ``offsets``
    (flat, C order; ``written/``), each of which the expected cache holds rounded once. The
    expected cache is read in blocks of about ``max_bytes``; its other elements are the input
    cache's, with nothing to check them against."""
    name = exact.name
    if exact.shape != offsets.shape:
        raise expected.corrupt(f"exact/{name} has shape {exact.shape}, but written/{name} "
                               f"names {offsets.size} elements")
    order = np.argsort(offsets, kind="stable")
    ordered, values = offsets[order], np.asarray(exact.read())
    start = 0
    for _, block in expected.blocks(max_bytes):
        flat = block.reshape(-1)
        lo, hi = np.searchsorted(ordered, [start, start + flat.size])
        picked = order[lo:hi]
        at = rounding_mismatch(flat[offsets[picked] - start], values[picked])
        if at is not None:
            raise expected.corrupt(f"the element at flat offset {int(offsets[picked][at])} is "
                                   f"not exact/{name} rounded once to "
                                   f"{dtype_name(expected.dtype)} (the golden was changed after "
                                   "it was computed)")
        start += flat.size


def _element(key: tuple, at: int, block_shape: tuple) -> tuple:
    """The index in the whole array of element ``at`` (flat) of the block ``key`` (integers
    on the first axes, then a slice, as ``LazyArray.blocks`` gives them)."""
    inner = [int(i) for i in np.unravel_index(at, block_shape)] if block_shape else []
    fixed = [int(k) for k in key if not isinstance(k, slice)]
    if key and isinstance(key[-1], slice) and inner:
        inner[0] += key[-1].start or 0
    return tuple(fixed + inner)


def verify_case(case, rounding: bool = True, max_bytes: int = VERIFY_BYTES) -> None:
    """Read every dataset of ``case`` whole, block by block (each dataset's checksum is
    checked), and with ``rounding`` check each expected output against its exact value
    (``verify_output``); ``CorruptGoldenError`` at the first problem."""
    for sub in CASE_SUBGROUPS:
        arrays = getattr(case, sub, None) or {}
        for name in arrays:
            arr = arrays[name]
            if hasattr(arr, "blocks"):
                for _ in arr.blocks(max_bytes):
                    pass
    if rounding:
        for name in case.output_names:
            if name in case.exact:
                verify_output(case, name, max_bytes)
