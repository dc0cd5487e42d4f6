"""Evaluating formulas block by block, with exactly the bits of the whole-array call.

The formulas act on the last axis (D) and reduce only with ``sum(t, dims)``, whose order of
additions ``refspec.spec.reduce`` states. The operator functions therefore apply their
formula blocks to cache-sized blocks of the leading axes (a whole-array NumPy expression streams
every temporary through main memory; a block's temporaries stay in the caches) and get the same
bits as the formula applied to the whole arrays (tested in tests/spec/test_blocks.py):

- elementwise results do not depend on how the arrays are cut;
- a block holds every reduced axis whole when that fits, and then its sums are final;
- otherwise a block is one index of every outer axis, an aligned run of 2^k indices of one
  reduced axis and the inner axes whole: its sums are subtrees of the whole-array sums, and the
  blocks' partial sums, laid out by block position, are summed with the same
  ``refspec.spec.reduce.sum_to_shape`` (``Reduction``).

A plan depends only on the shapes, never on the values.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from .dtypes import round_to, to_float64
from .reduce import broadcast_dims, sum_to_shape

__all__ = ["BLOCK_ELEMENTS", "Plan", "plan", "Reduction", "by_blocks"]

#: elements of a block: its float64 temporaries (256 KiB each) stay in the caches
BLOCK_ELEMENTS = 1 << 15


class Plan:
    """The blocks of an array of ``shape`` whose sums run over the axes ``dims``.

    ``blocks``: index tuples (slices, rank kept) covering the array once, in C order.
    ``cut``: None when every block holds the reduced axes whole, else ``(axis, run)``: the
    reduced axis cut into aligned runs of ``run`` (a power of two) indices.
    """

    def __init__(self, shape, dims, target: int = BLOCK_ELEMENTS):
        self.shape = tuple(int(s) for s in shape)
        self.dims = tuple(dims)
        self.cut = None
        lead = range(len(self.shape) - 1)               # the last axis is never cut
        free = [a for a in lead if a not in self.dims]
        red = [a for a in lead if a in self.dims]
        whole = [slice(None)] * len(self.shape)
        if not self.shape or prod(self.shape) <= target:
            self.blocks = [tuple(whole)]
            return
        row = self.shape[-1]
        reduced = prod(self.shape[a] for a in red) * row
        if reduced <= target or not red:                # reduced axes whole, free axes cut
            self.blocks = list(_boxes(self.shape, free, max(1, target // reduced)))
            return
        k = next((i for i, a in enumerate(red)
                  if prod(self.shape[b] for b in red[i + 1:]) * row <= target), len(red) - 1)
        inner = prod(self.shape[b] for b in red[k + 1:]) * row
        run = 1 << max(0, (target // inner).bit_length() - 1)   # a power of two
        self.cut = (red[k], run)
        outer = free + red[:k]                          # single indices
        self.blocks = []
        for at in itertools.product(*(range(self.shape[a]) for a in outer)):
            index = list(whole)
            for a, i in zip(outer, at):
                index[a] = slice(i, i + 1)
            n = self.shape[red[k]]
            for j in range(0, n, run):
                index[red[k]] = slice(j, min(j + run, n))
                self.blocks.append(tuple(index))
        self.blocks.sort(key=lambda ix: tuple(s.start or 0 for s in ix))

    @property
    def reduced_shape(self) -> tuple[int, ...]:
        """The shape of ``sum(t, dims)`` over the whole array."""
        return tuple(1 if a in self.dims else s for a, s in enumerate(self.shape))

    @property
    def partial_shape(self) -> tuple[int, ...]:
        """The shape of the array of the blocks' partial sums (the reduced shape when the
        blocks hold the reduced axes whole)."""
        shape = list(self.reduced_shape)
        if self.cut is not None:
            axis, run = self.cut
            for a in self.dims:
                if a < axis:
                    shape[a] = self.shape[a]
            shape[axis] = -(-self.shape[axis] // run)
        return tuple(shape)

    def reduced_index(self, index: tuple) -> tuple:
        """Where a block's sums go in the array of ``partial_shape``."""
        out = []
        for a, s in enumerate(index):
            if a not in self.dims:
                out.append(s)
            elif self.cut is not None and a == self.cut[0]:
                j = (s.start or 0) // self.cut[1]
                out.append(slice(j, j + 1))
            elif self.cut is not None and a < self.cut[0]:
                out.append(s)
            else:
                out.append(slice(0, 1))
        return tuple(out)


def _boxes(shape, axes, budget: int):
    """Blocks over ``axes`` (the others whole) of at most ``budget`` index combinations: single
    indices on the outer ones, a run along one, the inner ones whole."""
    whole = [slice(None)] * len(shape)
    k = 0
    while k < len(axes) and prod(shape[a] for a in axes[k:]) > budget:
        k += 1
    if k == 0:
        yield tuple(whole)
        return
    axis = axes[k - 1]
    run = max(1, budget // prod(shape[a] for a in axes[k:]))
    for at in itertools.product(*(range(shape[a]) for a in axes[:k - 1])):
        index = list(whole)
        for a, i in zip(axes[:k - 1], at):
            index[a] = slice(i, i + 1)
        for j in range(0, shape[axis], run):
            index[axis] = slice(j, min(j + run, shape[axis]))
            yield tuple(index)


def plan(shape, dims, target: int = BLOCK_ELEMENTS) -> Plan:
    """The ``Plan`` for an array of ``shape`` reduced over ``dims``."""
    return Plan(shape, dims, target)


class Reduction:
    """One ``sum(t, dims)`` output assembled from the blocks of a ``Plan``."""

    def __init__(self, p: Plan, dtype=np.float64, sum_dtype=None):
        self.plan = p
        self.out = np.empty(p.partial_shape, dtype)
        self.sum_dtype = sum_dtype

    def put(self, index: tuple, value: np.ndarray) -> None:
        """Store the sums (kept dimensions) that the formula returned for block ``index``."""
        self.out[self.plan.reduced_index(index)] = value

    def result(self) -> np.ndarray:
        if self.plan.cut is None:
            return self.out
        return sum_to_shape(self.out, self.plan.reduced_shape, self.sum_dtype)


def table_index(index: tuple, dims: tuple) -> tuple:
    """The part of a broadcast input (size 1 on ``dims``) that a block of the full array uses."""
    return tuple(slice(0, 1) if a in dims else s for a, s in enumerate(index))


def by_blocks(formula, primary, tables, extra=None, reduced=(False,), target: int = BLOCK_ELEMENTS,
              dtypes=None, sum_dtype=None):
    """``formula(primary, *tables[, extra])`` on float64 blocks, bit for bit the same as on the
    whole arrays.

    ``primary`` and ``extra`` (None or an array of primary's shape) have the full shape,
    ``tables`` (cos, sin) the broadcast shape; the formula returns one output or a tuple, whose
    entries have the full shape (``reduced[i]`` False), or the tables' shape as sums over the
    broadcast axes (True), or are None. Returns the outputs as a tuple (float64 unless
    ``dtypes`` says otherwise).

    ``dtypes`` (one per output, full-shape outputs only) rounds each block's values once with
    ``round_to`` into an output of that dtype: rounding is elementwise, so these are the bits of
    the whole float64 result rounded, without holding that result in memory.

    ``sum_dtype`` (``refspec.spec.reduce``: every partial sum rounded to that dtype) is passed
    to the formula as its keyword ``sum_dtype`` and rounds the blocks' partial sums the same way.
    """
    full = tuple(primary.shape)
    dims = broadcast_dims(full, tuple(tables[0].shape))
    p = plan(full, dims, target)
    wide = [to_float64(t) for t in tables]
    outs = None
    for index in p.blocks:
        tix = table_index(index, dims)
        args = [to_float64(primary[index])] + [t[tix] for t in wide]
        if extra is not None:
            args.append(to_float64(extra[index]))
        res = formula(*args) if sum_dtype is None else formula(*args, sum_dtype=sum_dtype)
        res = res if isinstance(res, tuple) else (res,)
        if outs is None:
            kinds = (np.float64,) * len(res) if dtypes is None else dtypes
            outs = [None if r is None else (Reduction(p, sum_dtype=sum_dtype) if red
                                            else np.empty(full, dt))
                    for r, red, dt in zip(res, reduced, kinds)]
        for o, r, red in zip(outs, res, reduced):
            if o is None:
                continue
            if red:
                o.put(index, r)
            else:
                o[index] = r if dtypes is None else round_to(r, o.dtype)
    return tuple(o.result() if isinstance(o, Reduction) else o for o in outs)
