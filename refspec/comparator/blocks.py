"""Blocks along the leading axes: how an output is streamed (bounded memory whatever its size).

A block is a run of consecutive C-order elements: fixed indices on the first axes, a slice of
one axis, and every trailing axis whole, so it is one slice for h5py and NumPy and one byte
range in a raw file. Runs are rounded to whole HDF5 chunks of the golden where possible, so no
chunk is decompressed twice.
"""

from __future__ import annotations

from itertools import product
from math import prod

__all__ = ["plan_blocks", "READ_ELEMENTS", "COMPUTE_ELEMENTS"]

#: elements per read (about 32 MiB of float64 golden per block)
READ_ELEMENTS = 1 << 22
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
