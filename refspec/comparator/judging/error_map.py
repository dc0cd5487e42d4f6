"""The 2-D error map of the HTML report (docs/compare.md, "Reports"): the largest badness
(capped at 1e300) of the elements of each cell, the cells along two axes of an output (one row
for one axis), the other axes folded in.

A cell repeats every ``period`` flat indices (the elements of the axes from the first of the
two on), so a step of the NumPy pass that spans a period is folded by whole periods in one
vectorised maximum; a shorter one goes element by element (``np.maximum.at``). The compiled
pass fills ``cells`` itself (``geometry``). Both give the same map: a maximum is exact in any
order.
"""

from __future__ import annotations

from math import prod

import numpy as np

__all__ = ["ErrorMap"]


class ErrorMap:
    """The map of an output of ``shape`` over its axes ``i`` and ``j`` (None: one axis)."""

    def __init__(self, shape: tuple, i: int, j: int | None):
        self.shape, self.i, self.j = tuple(shape), i, j
        self.cells = np.zeros((shape[i], shape[j]) if j is not None else (1, shape[i]))
        self.first = i if j is None else min(i, j)
        self.period = prod(self.shape[self.first:])

    def geometry(self) -> tuple:
        """(cells, row stride, rows, column stride, columns): how a flat index finds its cell,
        rows along axis i and columns along axis j."""
        shape, i, j = self.shape, self.i, self.j
        strides = [prod(shape[k + 1:]) for k in range(len(shape))]
        if j is None:
            return (self.cells, 1, 1, strides[i], shape[i])
        return (self.cells, strides[i], shape[i], strides[j], shape[j])

    def add(self, flat0: int, where: np.ndarray | None, values: np.ndarray) -> None:
        """``values`` of the elements at positions ``where`` (None: all, in order; else
        ascending) from flat index ``flat0``."""
        if values.size == 0:
            return
        values = np.minimum(values, 1e300)
        span = values.size if where is None else int(where[-1]) + 1
        if self.period > span:
            _, rs, rows, cs, cols = self.geometry()
            flat = flat0 + (np.arange(values.size) if where is None else where)
            np.maximum.at(self.cells.reshape(-1), (flat // rs % rows) * cols + flat // cs % cols,
                          values)
            return
        if where is not None:
            dense = np.zeros(span)
            dense[where] = values
            values = dense
        self._fold(flat0, values)

    def _fold(self, flat0: int, values: np.ndarray) -> None:
        """Contiguous values from ``flat0``, padded with zeros (no badness is below 0) to whole
        periods, folded: the largest per position of a period, then over the other axes."""
        lead = flat0 % self.period
        count = -(-(lead + values.size) // self.period)
        buf = np.zeros(count * self.period)
        buf[lead:lead + values.size] = values
        block = buf.reshape((count,) + self.shape[self.first:]).max(axis=0)
        keep = [self.i - self.first] + ([] if self.j is None else [self.j - self.first])
        other = tuple(a for a in range(block.ndim) if a not in keep)
        block = block.max(axis=other) if other else block
        if self.j is None:
            block = block.reshape(1, -1)
        elif self.i > self.j:
            block = block.T
        np.maximum(self.cells, block, out=self.cells)
