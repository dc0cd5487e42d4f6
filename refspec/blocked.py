"""Blocked evaluation of large cases: the spec's own formula blocks applied to cache-sized
blocks of the leading axes, bit-identical to the unblocked public functions.

Why it is bit-identical:

- elementwise results (dx, y) do not depend on how the array is cut;
- a reduction ``sum(t, dims)`` of the spec (:func:`refspec.reduce.sum_to_shape`) is, in NumPy,
  a sequential sum over the reduced indices in C order starting from +0 (D, the innermost
  axis, is never reduced, so NumPy's pairwise summation never applies; tests/test_blocked.py
  checks this on every layout and pattern). Blocks are visited in C order; inside a block the
  formula block is called with cos/sin broadcast to the block's shape, so it returns the
  unreduced terms; the running sum of the previous blocks is added to the block's first term
  and the block is summed with the same NumPy reduction. The additions therefore happen in
  exactly the unblocked order (the running sum is never -0, so the reduction's own +0 start
  changes nothing);
- tolerance terms (sum of |terms|) are obtained the same way from :mod:`refspec.terms`.

Validation is the spec's (check_rope_args with the case's profile) before any block runs.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

from .dtypes import to_float64
from .enums import RopeMode
from .reduce import broadcast_dims
from .rope import ROPE_BACKWARD, ROPE_FORWARD
from .rope_checks import check_rope_args
from .terms import OutputTerms, REDUCTION, rope_grad_terms, rope_terms

__all__ = ["BLOCK_ELEMENTS", "MIN_ELEMENTS", "evaluate", "rope_grad_blocked", "rope_blocked",
           "blocks"]

#: elements per block (the block's float64 temporaries stay in the caches)
BLOCK_ELEMENTS = 1 << 15
#: cases whose largest input has fewer elements are evaluated unblocked
MIN_ELEMENTS = 1 << 19


def blocks(shape: tuple, target: int = BLOCK_ELEMENTS):
    """Index tuples (of slices, rank preserved) cutting ``shape`` into C-ordered blocks of about
    ``target`` elements: single indices on the outer axes, a run along one axis, whole inner
    axes (the last axis always whole)."""
    shape = tuple(shape)
    if not shape:
        yield ()
        return
    a = 0                               # the last axis (D) is never cut
    while a < len(shape) - 2 and prod(shape[a + 1:]) > target:
        a += 1
    run = max(1, target // max(1, prod(shape[a + 1:])))
    for outer in itertools.product(*(range(n) for n in shape[:a])):
        for j in range(0, shape[a], run):
            yield (tuple(slice(i, i + 1) for i in outer) + (slice(j, min(j + run, shape[a])),)
                   + tuple(slice(None) for _ in shape[a + 1:]))


def _first_row(a: np.ndarray) -> np.ndarray:
    """A (1, ..., 1, D) slice: enough for the terms of an elementwise output, whose metadata
    does not depend on the values."""
    return a[(slice(0, 1),) * (a.ndim - 1)]


def _reduced_index(index: tuple, dims: tuple) -> tuple:
    """Where a block's reduction lands in the reduced (cos-shaped) output."""
    return tuple(slice(0, 1) if i in dims else s for i, s in enumerate(index))


class _Accumulator:
    """Sequential C-order accumulation of ``sum(t, dims)`` fed block by block."""

    def __init__(self, out: np.ndarray, dims: tuple):
        self.out = out
        self.dims = dims
        self.started: set = set()

    def add(self, index: tuple, terms: np.ndarray) -> None:
        if not self.dims:                # no reduction at all: the terms are the output
            self.out[index] = terms
            return
        inner = tuple(i for i in self.dims if terms.shape[i] > 1)
        target = _reduced_index(index, self.dims)
        key = tuple((s.start, s.stop) for s in target)
        if key in self.started and not inner:
            self.out[target] += terms    # running sum + this block's single term
            return
        if key in self.started:
            first = tuple(slice(0, 1) if i in inner else slice(None) for i in range(terms.ndim))
            terms[first] += self.out[target]
        elif not inner:
            terms = terms + 0.0          # NumPy's sum starts from +0: 0 + (-0) is +0
        self.started.add(key)
        self.out[target] = terms.sum(axis=inner, keepdims=True) if inner else terms


def rope_grad_blocked(dy, cos, sin, x=None, mode=0, *, soc=None, with_terms=True,
                      target: int = BLOCK_ELEMENTS):
    """RotaryPositionEmbeddingGrad exact (float64) outputs and, with ``with_terms``, their
    :func:`refspec.terms.rope_grad_terms`, evaluated blockwise. Returns (exact, terms) dicts;
    equal bit for bit to ``rotary_position_embedding_grad(..., out_dtype=np.float64)``."""
    args = check_rope_args("rotary_position_embedding_grad", "dy", dy, cos, sin, x, mode, soc)
    d, c, s, xo = args.primary, args.cos, args.sin, args.x
    formula = ROPE_BACKWARD[RopeMode(args.mode)]
    full, cshape = d.shape, c.shape
    dims = broadcast_dims(full, cshape)
    dx = np.empty(full)
    exact = {"dx": dx}
    accs = {}
    if xo is not None:
        for name in ("dcos", "dsin"):
            exact[name] = np.empty(cshape)
            accs[name] = _Accumulator(exact[name], dims)
        if with_terms:
            abs_c, abs_s = np.empty(cshape), np.empty(cshape)
            accs["abs_dcos"], accs["abs_dsin"] = _Accumulator(abs_c, dims), _Accumulator(abs_s, dims)
    c64, s64 = to_float64(c), to_float64(s)          # shared by the blocks (cos's shape)
    for index in blocks(full, target):
        cidx = _reduced_index(index, dims)
        d_b = to_float64(d[index])
        c_b = np.broadcast_to(c64[cidx], d_b.shape)
        s_b = np.broadcast_to(s64[cidx], d_b.shape)
        x_b = None if xo is None else to_float64(xo[index])
        dx_b, dc_b, ds_b = formula(d_b, c_b, s_b, x_b)
        dx[index] = dx_b
        if xo is None:
            continue
        accs["dcos"].add(index, dc_b)
        accs["dsin"].add(index, ds_b)
        if with_terms:
            t = rope_grad_terms(d_b, c_b, s_b, x_b, args.mode, None)
            accs["abs_dcos"].add(index, t["dcos"].sum_abs)
            accs["abs_dsin"].add(index, t["dsin"].sum_abs)
    terms = None
    if with_terms:
        terms = {"dx": rope_grad_terms(_first_row(d), _first_row(c), _first_row(s), None,
                                       args.mode, None)["dx"]}
        if xo is not None:
            K = prod(full[i] for i in dims)
            terms["dcos"] = OutputTerms(REDUCTION, K, abs_c)
            terms["dsin"] = OutputTerms(REDUCTION, K, abs_s)
    return exact, terms


def rope_blocked(x, cos, sin, mode=0, *, soc=None, target: int = BLOCK_ELEMENTS):
    """RotaryPositionEmbedding exact output ``y`` blockwise (elementwise: trivially the same
    bits); returns (exact, terms)."""
    args = check_rope_args("rotary_position_embedding", "x", x, cos, sin, None, mode, soc)
    p, c, s = args.primary, args.cos, args.sin
    formula = ROPE_FORWARD[RopeMode(args.mode)]
    dims = broadcast_dims(p.shape, c.shape)
    y = np.empty(p.shape)
    c64, s64 = to_float64(c), to_float64(s)
    for index in blocks(p.shape, target):
        cidx = _reduced_index(index, dims)
        y[index] = formula(to_float64(p[index]), c64[cidx], s64[cidx])
    terms = rope_terms(_first_row(p), _first_row(c), _first_row(s), args.mode, None)
    return {"y": y}, terms


def evaluate(params: dict, inputs: dict, min_elements: int | None = None):
    """(exact, terms) of a large RoPE case by blocks, or None when the case is small or has no
    blocked evaluation (then the caller uses the public spec functions)."""
    op = params["op"]
    sizes = [np.size(v) for v in inputs.values() if v is not None]
    if not sizes or max(sizes) < (MIN_ELEMENTS if min_elements is None else min_elements):
        return None
    if op == "rope_grad" and "cos" in inputs and "sin" in inputs:
        return rope_grad_blocked(inputs["dy"], inputs["cos"], inputs["sin"], inputs.get("x"),
                                 params["mode"], soc=params["soc"])
    if op == "rope" and "cos" in inputs and "sin" in inputs:
        return rope_blocked(inputs["x"], inputs["cos"], inputs["sin"], params["mode"],
                            soc=params["soc"])
    return None
