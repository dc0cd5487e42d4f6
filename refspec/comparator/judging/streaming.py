"""Blocks along the leading axes: how an output is streamed (bounded memory whatever its size).

A block is a run of consecutive C-order elements: fixed indices on the first axes, a slice of
one axis, and every trailing axis whole, so it is one slice for h5py and NumPy and one byte
range in a raw file. Runs are rounded to whole HDF5 chunks of the golden where possible, so no
chunk is decompressed twice. ``BlockReader`` reads a block of a golden dataset into a
reused buffer: straight from the file (``os.preadv``) where HDF5 stores the dataset raw, as it
does by default (``refspec.goldens.read.LazyArray.raw_extents``), through h5py otherwise.
"""

from __future__ import annotations

import bisect
import os
import threading
from itertools import product
from math import prod

import numpy as np

from ..sources.arrays import thread_buffer

__all__ = ["plan_blocks", "BlockReader", "READ_ELEMENTS", "COMPUTE_ELEMENTS"]

#: elements per read: 1 MiB of float64 golden per block, so a block read into a reused buffer
#: is still in the core's second-level cache when it is judged
READ_ELEMENTS = 1 << 17
#: smaller datasets are read through h5py (finding their raw extents costs more than it saves)
RAW_MIN_ELEMENTS = 1 << 16
#: elements per compute step inside a block (cache-sized temporaries)
COMPUTE_ELEMENTS = 1 << 16


def plan_blocks(shape: tuple[int, ...], max_elements: int = READ_ELEMENTS, chunks=None):
    """Yield ``(key, flat_start, count)`` covering ``shape`` in C order."""
    shape = tuple(int(s) for s in shape)
    n = prod(shape)
    if n == 0:
        return
    if not shape:
        yield (), 0, 1
        return
    tails = [prod(shape[i:]) for i in range(len(shape) + 1)]
    axis = next(i for i in range(len(shape)) if tails[i + 1] <= max_elements)
    step = max(1, max_elements // tails[axis + 1])
    if chunks and chunks[axis] and step > chunks[axis]:
        step -= step % chunks[axis]
    step = min(step, shape[axis])
    for prefix in product(*(range(s) for s in shape[:axis])):
        base = sum(i * tails[k + 1] for k, i in enumerate(prefix))
        for start in range(0, shape[axis], step):
            stop = min(start + step, shape[axis])
            key = prefix + (slice(start, stop),)
            yield key, base + start * tails[axis + 1], (stop - start) * tails[axis + 1]


class BlockReader:
    """Blocks of one array (a golden file's LazyArray or an array in memory) as flat C-order
    arrays of ``dtype``: ``read(key, flat_start, count, out)`` fills ``out`` (a buffer of at
    least ``count`` elements, or None) where the dataset's bytes can be read in place, else
    returns what h5py or NumPy gives. ``dtype`` None keeps the array's stored dtype (bfloat16
    as ``uint16`` bits when read raw). Thread-safe: reads are positioned (``os.preadv``)."""

    def __init__(self, arr, dtype=None):
        self.arr = arr
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._fd = None
        self._runs = None
        self._local = threading.local()
        extents = None
        if hasattr(arr, "raw_extents") and (self.dtype is None or self.dtype == arr.dtype) \
                and arr.size >= RAW_MIN_ELEMENTS:
            extents = arr.raw_extents()
        if extents:
            itemsize = np.dtype(arr.dtype).itemsize
            runs = []                       # (flat start, count, byte offset), adjacent merged
            for start, count, offset in extents:
                if runs and runs[-1][0] + runs[-1][1] == start and \
                        runs[-1][2] + runs[-1][1] * itemsize == offset:
                    runs[-1][1] += count
                else:
                    runs.append([start, count, offset])
            try:
                self._fd = os.open(arr.file_path, os.O_RDONLY)
            except OSError:
                runs = None
            self._runs = runs
            self._starts = [r[0] for r in runs] if runs else None
            self._itemsize = itemsize
            self._raw_dtype = np.dtype(f"<u{itemsize}") if arr.dtype.kind != "f" or \
                arr.dtype.itemsize == 2 else np.dtype(arr.dtype).newbyteorder("<")

    def read(self, key, flat_start: int, count: int) -> np.ndarray:
        """The block; read raw, it lives in this thread's buffer until the thread's next read."""
        if self._fd is None:
            block = np.asarray(self.arr[key])
            if self.dtype is not None:
                block = block.astype(self.dtype, copy=False)
            return np.ascontiguousarray(block).reshape(-1)
        view = thread_buffer(self._local, self._raw_dtype, count)
        data = memoryview(view.view(np.uint8))
        k = bisect.bisect_right(self._starts, flat_start) - 1
        pos, done = flat_start, 0
        while done < count:
            start, n, offset = self._runs[k]
            take = min(start + n - pos, count - done)
            nbytes = take * self._itemsize
            at = done * self._itemsize
            got = os.preadv(self._fd, [data[at:at + nbytes]], offset + (pos - start) * self._itemsize)
            if got != nbytes:
                raise OSError(f"{self.arr.file_path}: {got} of {nbytes} bytes read (file truncated?)")
            pos += take
            done += take
            k += 1
        return view

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
