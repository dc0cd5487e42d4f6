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

Parts of a case whose outputs are disjoint (a cut along an axis that no reduction crosses,
or a cut of elementwise work) are computed side by side in forked processes
(:mod:`refspec.forked`); where no such cut exists, or forking is unavailable, blocks are
spread over threads instead.

Validation is the spec's (check_rope_args with the case's profile) before any block runs.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from math import prod

import numpy as np

from . import forked
from .dtypes import to_float64
from .enums import NormType, RopeMode, RopeType
from .norm_rope_concat import (ROPE_TYPE_TO_MODE, NormRopeConcatGrads, bnsd_to_bsnd,
                               layer_norm_backward, norm_rope_concat_backward, split_seq)
from .nrc_checks import STREAMS, check_nrc_args
from .reduce import broadcast_dims
from .rope import ROPE_BACKWARD, ROPE_FORWARD
from .rope_checks import check_rope_args
from .terms import (OutputTerms, REDUCTION, norm_rope_concat_backward_terms, rope_grad_terms,
                    rope_terms)

__all__ = ["BLOCK_ELEMENTS", "MIN_ELEMENTS", "evaluate", "rope_grad_blocked", "rope_blocked",
           "nrc_grad_blocked", "blocks"]

#: elements per block (the block's float64 temporaries stay in the caches)
BLOCK_ELEMENTS = 1 << 14
#: elements per block of NormRopeConcatBackward (its blocks also carry row statistics)
NRC_BLOCK_ELEMENTS = 1 << 15
#: threads that compute blocks (the engine sets 1 inside --jobs worker processes)
THREADS = min(2, os.cpu_count() or 1)
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


def reducing_blocks(shape: tuple, dims: tuple, target: int = BLOCK_ELEMENTS):
    """Index tuples of blocks that hold every reduced axis (``dims``) whole, so that a formula
    block given the un-broadcast cos/sin performs each ``sum(t, dims)`` of the spec itself, on
    exactly the terms the unblocked call adds for those output elements and in the same
    order; the other axes are cut as by :func:`blocks`. None when a block with the reduced
    axes whole would exceed ``target`` (or nothing is reduced)."""
    shape = tuple(shape)
    if not dims or not shape or prod(shape[i] for i in dims) * shape[-1] > target:
        return None
    free = [i for i in range(len(shape) - 1) if i not in dims]
    whole = [slice(None)] * len(shape)

    def inner(k):                       # elements of a block that is whole from free[k] on
        return prod(shape[i] for i in dims) * shape[-1] * prod(shape[i] for i in free[k:])

    if not free:
        return iter([tuple(whole)])
    k = 0
    while k < len(free) - 1 and inner(k + 1) > target:
        k += 1
    run = max(1, target // inner(k + 1))

    def plan():
        for outer in itertools.product(*(range(shape[i]) for i in free[:k])):
            for j in range(0, shape[free[k]], run):
                index = list(whole)
                for i, v in zip(free[:k], outer):
                    index[i] = slice(v, v + 1)
                index[free[k]] = slice(j, min(j + run, shape[free[k]]))
                yield tuple(index)
    return plan()


def single_threaded() -> None:
    """Block evaluation in one thread of one process (worker processes of ``--jobs`` share the
    CPUs)."""
    global THREADS
    THREADS = 1
    forked.single_process()


def _ordered(fn, items, threads: int):
    """``fn`` over ``items``, results in order; with ``threads`` > 1 computed by a thread pool
    (NumPy releases the GIL in its loops) with a bounded window of blocks in flight."""
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) > 2 * threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


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


def _parts(shape: tuple, dims: tuple) -> list:
    """Index tuples cutting ``shape`` into one part per process along its outermost axis that
    is neither reduced (``dims``) nor the last one (RoPE mixes the elements of D) and has room
    for every process: the parts' outputs, reductions included, are then disjoint, and each
    part adds its terms in the unblocked order. ``[(...)]`` (one part) when there is no such
    axis or no forking."""
    whole = tuple(slice(None) for _ in shape)
    n = forked.PROCESSES if forked.available() else 1
    for a in range(len(shape) - 1):
        if a not in dims and shape[a] >= n > 1:
            cuts = [shape[a] * k // n for k in range(n + 1)]
            return [whole[:a] + (slice(lo, hi),) + whole[a + 1:] for lo, hi in itertools.pairwise(cuts)]
    return [whole]


def _in_parts(parts: list, threads: int | None) -> int:
    """Threads per part: one when the parts run in processes of their own."""
    return 1 if len(parts) > 1 else (THREADS if threads is None else threads)


def rope_grad_blocked(dy, cos, sin, x=None, mode=0, *, soc=None, with_terms=True,
                      target: int = BLOCK_ELEMENTS, threads: int | None = None):
    """RotaryPositionEmbeddingGrad exact (float64) outputs and, with ``with_terms``, their
    :func:`refspec.terms.rope_grad_terms`, evaluated blockwise. Returns (exact, terms) dicts;
    equal bit for bit to ``rotary_position_embedding_grad(..., out_dtype=np.float64)``."""
    args = check_rope_args("rotary_position_embedding_grad", "dy", dy, cos, sin, x, mode, soc)
    d, c, s, xo = args.primary, args.cos, args.sin, args.x
    formula = ROPE_BACKWARD[RopeMode(args.mode)]
    full, cshape = d.shape, c.shape
    dims = broadcast_dims(full, cshape)
    exact = {"dx": forked.output_empty(full)}
    reduced = []                                     # the outputs summed over dims
    if xo is not None:
        reduced = ["dcos", "dsin"] + (["abs_dcos", "abs_dsin"] if with_terms else [])
    sums = {name: forked.output_empty(cshape) for name in reduced}
    c64, s64 = to_float64(c), to_float64(s)          # shared by the blocks (cos's shape)
    parts = _parts(full, dims)
    n_threads = _in_parts(parts, threads)

    def part(where):
        cwhere = _reduced_index(where, dims)
        d_p, c_p, s_p = d[where], c64[cwhere], s64[cwhere]
        x_p = None if xo is None else xo[where]
        dx = exact["dx"][where]
        sums_p = {name: sums[name][cwhere] for name in reduced}
        plan = reducing_blocks(d_p.shape, dims, target)
        # blocks holding the reduced axes whole: the formula block's own sums are final;
        # otherwise running sums carried from block to block
        accs = (None if plan is not None
                else {name: _Accumulator(sums_p[name], dims) for name in reduced})

        def work(index):
            cidx = _reduced_index(index, dims)
            d_b = to_float64(d_p[index])
            c_b, s_b = c_p[cidx], s_p[cidx]
            if plan is None and c_b.shape != d_b.shape:   # the unreduced terms, for the sums
                c_b, s_b = np.broadcast_to(c_b, d_b.shape), np.broadcast_to(s_b, d_b.shape)
            x_b = None if x_p is None else to_float64(x_p[index])
            dx_b, dc_b, ds_b = formula(d_b, c_b, s_b, x_b)
            dx[index] = dx_b                             # disjoint blocks: no race
            out = {"dcos": dc_b, "dsin": ds_b}
            if with_terms and x_b is not None:
                t = rope_grad_terms(d_b, c_b, s_b, x_b, args.mode, None)
                out["abs_dcos"], out["abs_dsin"] = t["dcos"].sum_abs, t["dsin"].sum_abs
            return index, cidx, out

        for index, cidx, out in _ordered(work, plan or blocks(d_p.shape, target), n_threads):
            for name in reduced:                         # in block order
                if accs is None:
                    sums_p[name][cidx] = out[name]
                else:
                    accs[name].add(index, out[name])

    forked.run_parts(part, parts, lambda where: [exact["dx"][where]] + [
        sums[name][_reduced_index(where, dims)] for name in reduced])
    if xo is not None:
        exact["dcos"], exact["dsin"] = sums["dcos"], sums["dsin"]
    terms = None
    if with_terms:
        terms = {"dx": rope_grad_terms(_first_row(d), _first_row(c), _first_row(s), None,
                                       args.mode, None)["dx"]}
        if xo is not None:
            K = prod(full[i] for i in dims)
            terms["dcos"] = OutputTerms(REDUCTION, K, sums["abs_dcos"])
            terms["dsin"] = OutputTerms(REDUCTION, K, sums["abs_dsin"])
    return exact, terms


def rope_blocked(x, cos, sin, mode=0, *, soc=None, target: int = BLOCK_ELEMENTS,
                 threads: int | None = None):
    """RotaryPositionEmbedding exact output ``y`` blockwise (elementwise: trivially the same
    bits); returns (exact, terms)."""
    args = check_rope_args("rotary_position_embedding", "x", x, cos, sin, None, mode, soc)
    p, c, s = args.primary, args.cos, args.sin
    formula = ROPE_FORWARD[RopeMode(args.mode)]
    dims = broadcast_dims(p.shape, c.shape)
    y = forked.output_empty(p.shape)
    c64, s64 = to_float64(c), to_float64(s)
    parts = _parts(p.shape, dims)
    n_threads = _in_parts(parts, threads)

    def part(where):
        cwhere = _reduced_index(where, dims)
        p_p, c_p, s_p, y_p = p[where], c64[cwhere], s64[cwhere], y[where]

        def work(index):
            cidx = _reduced_index(index, dims)
            y_p[index] = formula(to_float64(p_p[index]), c_p[cidx], s_p[cidx])

        for _ in _ordered(work, blocks(p_p.shape, target), n_threads):
            pass

    forked.run_parts(part, parts, lambda where: [y[where]])
    terms = rope_terms(_first_row(p), _first_row(c), _first_row(s), args.mode, None)
    return {"y": y}, terms


def _sum_rows(acc, rows: np.ndarray):
    """``acc + rows[0] + rows[1] + ...`` in order, as NumPy's sum over a leading axis adds them
    (from +0 when ``acc`` is None). ``rows`` (k, D) is modified."""
    if rows.shape[0] == 0:
        return acc
    if acc is not None:
        rows[0] += acc
    return rows.sum(axis=0)


def _nrc_rotated(grad_output, rope_type: int, cos64, sin64, target: int, threads: int) -> np.ndarray:
    """Step 2 of the backward, blockwise: the widened gradient with the RoPE backward formula
    block applied at positions p < Sr (the same element values as rope_positions_grad)."""
    B, N, L, D = grad_output.shape
    out = np.empty((B, N, L, D))
    formula = ROPE_BACKWARD[ROPE_TYPE_TO_MODE[RopeType(rope_type)]] if rope_type else None
    Sr = 0 if cos64 is None else cos64.shape[0]
    run = max(1, target // max(D, 1))

    def work(item):
        b, n, p0 = item
        p1 = min(L, p0 + run)
        blk = to_float64(grad_output[b:b + 1, n:n + 1, p0:p1])
        if formula is not None and p0 < Sr:
            m = min(p1, Sr) - p0
            rot = formula(blk[:, :, :m], cos64[None, None, p0:p0 + m],
                          sin64[None, None, p0:p0 + m])[0]
            out[b:b + 1, n:n + 1, p0:p0 + m] = rot
            out[b:b + 1, n:n + 1, p0 + m:p1] = blk[:, :, m:]
        else:
            out[b:b + 1, n:n + 1, p0:p1] = blk

    for _ in _ordered(work, itertools.product(range(B), range(N), range(0, L, run)), threads):
        pass
    return out


def nrc_grad_blocked(tensors: dict, attrs: dict, soc=None, target: int = NRC_BLOCK_ELEMENTS,
                     threads: int | None = None) -> dict:
    """NormRopeConcatBackward exact (float64) gradients by blocks, bit for bit those of
    ``norm_rope_concat_backward(..., out_dtype=np.float64)`` (None where not produced).

    Step 2 (RoPE backward) runs on (b, n, position-run) blocks of the concatenated gradients;
    step 3 calls the spec's :func:`layer_norm_backward` on (b, s-run) row blocks presented as
    (1, 1, 1, rows, D) arrays, so its sums over the three leading axes return the per-row terms
    of dweight, which are then added row by row in the spec's order. The spec's own sums run
    in two orders (checked in tests/test_generate_blocked.py): dbias = g'.sum over a BSND view
    of BNSD data adds rows in (b, n, s) order, dweight = (g'*xhat).sum in (b, s, n) order;
    dbias is therefore accumulated while walking the rotated gradient in BNSD order.

    The query side (grad_query_output -> query, encoder_query) and the key side
    (grad_key_output -> key, encoder_key) share no intermediate value, so they are the two
    parts computed side by side in forked processes (:func:`refspec.forked.run_parts`); with
    one process each part spreads its blocks over ``threads`` threads.
    """
    arrays, a, _ = check_nrc_args("norm_rope_concat_backward", "grad_query_output", tensors,
                                  attrs, soc, backward=True)
    threads = THREADS if threads is None else threads
    order, rt = a["concat_order"], a["rope_type"]
    B, Sq, N, D = arrays["query"].shape
    seq = {s: (0 if arrays.get(s) is None else arrays[s].shape[1]) for s in STREAMS}
    cos64 = None if not rt else to_float64(arrays["rope_cos"])
    sin64 = None if not rt else to_float64(arrays["rope_sin"])

    grads, written = {}, {}         # written: stream -> the output arrays its part fills
    for stream, (type_attr, weight, bias, _, _) in STREAMS.items():
        affine = a[type_attr] == NormType.AFFINE_LAYER_NORM
        if arrays.get(stream) is None:
            grads[f"grad_{stream}"] = None
            grads[f"grad_{weight}"] = grads[f"grad_{bias}"] = np.zeros(D) if affine else None
            continue
        out = [forked.output_empty((B, seq[stream], N, D))]
        grads[f"grad_{stream}"] = out[0]
        grads[f"grad_{weight}"] = grads[f"grad_{bias}"] = None
        if affine:
            out += [forked.output_empty((D,)), forked.output_empty((D,))]
            grads[f"grad_{weight}"], grads[f"grad_{bias}"] = out[1], out[2]
        written[stream] = out
    sides = (("grad_query_output", "query", "encoder_query"),
             ("grad_key_output", "key", "encoder_key"))
    part_threads = 1 if forked.available() else threads
    value = {}

    def side(item):
        out_name, stream, encoder = item
        if item == sides[0]:                # this process's part: grad_value's step 1 too
            value["gv"] = to_float64(arrays["grad_value_output"])
        R = _nrc_rotated(arrays[out_name], rt, cos64, sin64, target, part_threads)
        for s, P in zip((stream, encoder), split_seq(R, seq[stream], seq[encoder], order)):
            if s in written:                                     # P: a (B, N, S, D) view
                _nrc_norm_grad(P, arrays, a, s, written[s], target, part_threads)

    forked.run_parts(side, sides, lambda item: [v for s in item[1:] for v in written.get(s, ())])
    part_value, part_enc_value = split_seq(value["gv"], seq["key"], seq["encoder_key"], order)
    grads["grad_value"] = bnsd_to_bsnd(part_value)
    grads["grad_encoder_value"] = (bnsd_to_bsnd(part_enc_value)
                                   if arrays.get("encoder_key") is not None else None)
    return {k: grads[k] for k in NormRopeConcatGrads._fields}


def _nrc_norm_grad(P, arrays: dict, a: dict, stream: str, out: list, target: int,
                   threads: int) -> None:
    """Step 3 for one stream, from its part ``P`` (a (B, N, S, D) view) of the rotated
    gradient, into ``out``: [dx (B, S, N, D)] plus [dweight, dbias] for the affine LayerNorm."""
    type_attr, weight, _, mean, rstd = STREAMS[stream]
    norm = a[type_attr]
    dx = out[0]
    if norm == NormType.NONE:
        np.copyto(dx, bnsd_to_bsnd(P))                           # dx = g'
        return
    B, N, S, D = P.shape
    affine = norm == NormType.AFFINE_LAYER_NORM
    dbias = dweight = None
    if affine:                                                   # (b, n, s) order
        for b in range(B):
            for n in range(N):
                dbias = _sum_rows(dbias, np.array(P[b, n]))
    x, m, r = arrays[stream], arrays[mean], arrays[rstd]
    w64 = to_float64(arrays[weight]) if affine else None
    run = max(1, target // max(N * D, 1))

    def work(item):
        b, s0 = item
        s1 = min(S, s0 + run)
        k = (s1 - s0) * N
        g5 = np.ascontiguousarray(bnsd_to_bsnd(P[b:b + 1, :, s0:s1])).reshape(1, 1, 1, k, D)
        x5 = to_float64(x[b:b + 1, s0:s1]).reshape(1, 1, 1, k, D)
        m5 = to_float64(m[b:b + 1, s0:s1]).reshape(1, 1, 1, k, 1)
        r5 = to_float64(r[b:b + 1, s0:s1]).reshape(1, 1, 1, k, 1)
        dx5, dw5, _db5 = layer_norm_backward(g5, x5, m5, r5, norm, w64)
        dx[b, s0:s1] = dx5.reshape(s1 - s0, N, D)
        return None if dw5 is None else dw5.reshape(k, D)

    for rows in _ordered(work, itertools.product(range(B), range(0, S, run)), threads):
        if affine:
            dweight = _sum_rows(dweight, rows)                   # (b, s, n) order
    if affine:
        out[1][...] = 0.0 if dweight is None else dweight
        out[2][...] = 0.0 if dbias is None else dbias


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
    if op == "nrc_grad":
        names = [n for n in inspect.signature(norm_rope_concat_backward).parameters][:21]
        tensors = {n: inputs.get(n) for n in names}
        attrs = {k: params[k] for k in ("norm_type", "norm_added_type", "rope_type", "concat_order")}
        grads = nrc_grad_blocked(tensors, attrs, params["soc"])
        exact = {k: v for k, v in grads.items() if v is not None}
        terms = norm_rope_concat_backward_terms(tensors, attrs, params["soc"])
        return exact, {k: terms[k] for k in exact}
    return None
