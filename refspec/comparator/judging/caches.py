"""Caches updated in place (docs/compare.md, "Caches updated in place"): the whole cache a kernel
leaves behind, against the cache it was given.

The golden names the flat offsets the call writes (``written/<cache>``, ascending) and their
exact values (``exact/<cache>``, one per offset). One pass over the actual cache, in blocks of
``CACHE_BLOCK`` elements, compares every element's bits with the input cache's
(``inputs/<cache>``) and gathers the written elements; the elements outside the index must be
bit-identical, the written ones are then judged by the class of their values
(``written_class``): quantised codes by ``quantised.judge_codes``, float values by the one
pass of every other output (``measure.measure``) on the gathered values. Elements are named in
the cache's own indices; a changed element outside the index is named by its slot when the
cache's axis letters say which axes number the slots (``SLOT_AXES``; a fractal cache in its
fractal view, ``named_shape``), and the value it holds is
decoded as a sentinel of the input cache when it is one (``refspec.ops.sampling``: a value
moved from another element).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...ops.sampling import position_decode, position_period
from ...spec.dtypes import round_to
from ...spec.errors import one_line
from ...spec.kv_cache import CACHE_AXES, nz_width
from ...spec.quant_dtypes import decode, is_quant_dtype
from ...spec.terms import QUANTISED
from ..sources.arrays import ArrayActual
from .golden_output import GoldenOutput
from .measure import MeasureProblem, measure
from .metrics import Accumulator, Metrics
from .naming import format_value, index_of, index_text
from .outcomes import OutputResult
from .quantised import judge_codes
from .standards import SMALL_VALUES, Rule
from .streaming import BlockReader, plan_blocks
from .verdict import verdict

__all__ = ["judge_cache", "scan_cache", "named_shape", "CacheScan", "SLOT_AXES", "CACHE_BLOCK"]

#: elements per block of the pass over a cache (a few MiB of each side)
CACHE_BLOCK = 1 << 21
#: the axis letters that number a cache's slots, and what the statement calls them
SLOT_AXES = {"B": "batch", "K": "block", "S": "slot"}


class ActualUnreadable(Exception):
    """Reading the actual cache failed (the output is "unreadable", not a golden error)."""


@dataclass
class CacheScan:
    """What one pass over an actual cache found: the values at the written offsets (the cache's
    dtype), how many elements outside the index differ from the input cache and in how many
    slots, and the first of them (its flat offset, actual and input values), or None."""

    written: np.ndarray
    changed: int = 0
    slots: int = 0
    first: int | None = None
    first_actual: object = None
    first_given: object = None


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x).reshape(-1)
    return x.view(f"u{x.dtype.itemsize}")


def scan_cache(actual, given, written: np.ndarray, shape: tuple, axes: str) -> CacheScan:
    """One pass over ``actual`` (an ActualArray of the whole cache) and ``given`` (the input
    cache, a LazyArray or an array) in blocks of ``CACHE_BLOCK``: the actual values at the
    ascending flat offsets ``written``, and the elements elsewhere whose bits differ, their
    slots counted in ``shape`` (the named shape) by the axis letters ``axes``."""
    stored = tuple(actual.shape)
    out = np.empty(written.size, actual.dtype)
    reader = BlockReader(given)
    slot_pos = [i for i, ch in enumerate(axes) if ch in SLOT_AXES] if len(axes) == len(shape) else []
    slot_dims = [shape[i] for i in slot_pos]
    seen = np.zeros(int(np.prod(slot_dims)), bool) if slot_pos else None
    scan = CacheScan(out)
    try:
        for key, flat0, count in plan_blocks(stored, CACHE_BLOCK):
            try:
                a = np.ascontiguousarray(actual.read(key, flat0, count)).reshape(-1)
            except Exception as exc:         # a file that changed or broke while being read
                raise ActualUnreadable(one_line(exc)) from None
            lo, hi = np.searchsorted(written, (flat0, flat0 + count))
            local = written[lo:hi] - flat0
            out[lo:hi] = a[local]
            diff = _bits(a) != _bits(reader.read(key, flat0, count))
            diff[local] = False
            k = int(np.count_nonzero(diff))
            if not k:
                continue
            where = np.flatnonzero(diff)
            if scan.first is None:
                scan.first = flat0 + int(where[0])
                scan.first_actual = a[where[0]]
            scan.changed += k
            if seen is not None:
                idx = np.unravel_index(where + flat0, shape)
                seen[np.ravel_multi_index([idx[i] for i in slot_pos], slot_dims)] = True
    finally:
        reader.close()
    scan.slots = int(seen.sum()) if seen is not None else scan.changed
    if scan.first is not None:
        scan.first_given = np.asarray(given[np.unravel_index(scan.first, stored)])
    return scan


def named_shape(golden: GoldenOutput) -> tuple:
    """The shape a cache's elements are named in: its own, except that a fractal (NZ) cache
    stored in its logical shape (block_num, block_size, N, D), as KvRmsNormRopeCache's are, is
    named in its fractal view (block_num, N*D/C0, block_size, C0), the order of its memory
    (axis letters ``KFSC``; a cache whose last axis is already C0 is that view)."""
    shape, c0 = golden.shape, nz_width(golden.dtype)
    if golden.axes != CACHE_AXES["NZ"] or len(shape) != 4 or shape[3] == c0:
        return shape
    K, S, N, D = shape
    return (K, N * D // c0, S, c0)


def judge_cache(res: OutputResult, job, scan: CacheScan | None = None) -> OutputResult:
    """The verdict of a cache output (``job`` a ``judge.JudgedOutput`` whose golden's class is
    ``cache``): its written values by their class, every other element bit-identical."""
    case = job.case
    golden = replace(job.golden, shape=named_shape(job.golden))
    res.shape = golden.shape
    written = np.asarray(case.written[golden.name][()], dtype=np.int64)
    try:
        if scan is None:
            scan = scan_cache(job.actual, case.inputs[golden.name], written, golden.shape,
                              golden.axes)
    except ActualUnreadable as exc:
        return res.problem("unreadable", f"{job.actual.source}: {exc}")
    except Exception as exc:
        return res.problem("error", f"reading the golden failed: {one_line(exc)}")
    exact = np.asarray(golden.exact[()], dtype=np.float64).reshape(-1)
    S = (np.asarray(case.sum_abs[golden.name][()], dtype=np.float64).reshape(-1)
         if golden.name in case.sum_abs else None)
    try:
        m = _written_metrics(job, written, scan.written, exact, S)
    except MeasureProblem as p:
        return res.problem(p.status, p.detail)
    res.metrics = m
    verdict(res, m, job.rule)                # the written elements, by their class's rule
    res.rule = (f"written ({golden.written_class}, {written.size} elements): "
                f"{job.rule.describe()}; every other element bit-identical to the cache given")
    _written_reason(res, m, written.size, job.rule, scan.changed)
    m.n = int(np.prod(golden.shape, dtype=np.int64))         # then the whole cache's counts
    m.failures += scan.changed
    m.outside = {"elements": scan.changed, "slots": scan.slots, "first": scan.first}
    if scan.changed:
        statement = outside_statement(golden, scan, case.inputs[golden.name])
        res.status = "fail"
        res.reason = statement + (f"; {res.reason}" if res.reason else "")
        res.message = f"{statement} [{res.context}]"
    return res


def _written_metrics(job, written, values, exact, S) -> Metrics:
    """The metrics of the written values, their elements named by their offsets in the cache."""
    golden, options = job.golden, job.options
    if job.rule.codes or golden.written_class == QUANTISED:
        acc = Accumulator(SMALL_VALUES["float32"], options.top)
        boundary = judge_codes(acc, written, values, exact, S, golden.K)
        m = acc.finish()
        m.boundary = boundary
        return m
    view = GoldenOutput(name=golden.name, dtype=golden.dtype, dtype_name=golden.dtype_name,
                        shape=(written.size,), comparison_class=golden.written_class,
                        K=golden.K, axes="", exact=exact)
    values_case = _Values({golden.name: round_to(exact, golden.dtype)},
                          {} if S is None else {golden.name: S})
    m = measure(values_case, view, ArrayActual(job.actual.source, values), job.rule, options)
    at = lambda e: None if e is None else replace(e, flat=int(written[e.flat]))  # noqa: E731
    m.max_abs, m.max_rel_at = at(m.max_abs), at(m.max_rel_at)
    m.worst = [at(e) for e in m.worst]
    return m


@dataclass
class _Values:
    """The written values as a case of their own, for ``measure``: their golden rounded to
    the cache's dtype and their sums of |terms|."""

    expected: dict
    sum_abs: dict


def _written_reason(res: OutputResult, m: Metrics, n_written: int, rule: Rule,
                    changed: int) -> None:
    """The reason of a cache's verdict in terms of its written elements (``m`` their metrics;
    ``changed`` the elements outside the index that changed)."""
    judged = m.failures
    if rule.codes:
        boundary = (f", {m.boundary} of them the neighbouring code at a rounding boundary "
                    "(boundary)" if m.boundary else "")
        res.reason = (f"all {n_written} written codes are the exact values'{boundary}" if not judged
                      else f"{judged} of {n_written} written codes wrong{boundary}")
    else:                                    # the verdict's own words, of the written elements
        res.reason = res.reason.replace(" elements", " written elements", 1)
    if res.status == "pass" and not changed:
        res.reason += "; every other element as given"


def outside_statement(golden: GoldenOutput, scan: CacheScan, given) -> str:
    """``k_cache: 3 slots outside the index were changed, first at block 7 slot 12 (...)``."""
    axes = golden.axes if len(golden.axes) == len(golden.shape) else ""
    idx = index_of(scan.first, golden.shape, axes)
    slot_words = [(SLOT_AXES[ch], idx[ch.lower()]) for ch in axes if ch in SLOT_AXES]
    unit = "slot" if slot_words else "element"
    count = scan.slots if slot_words else scan.changed
    where = " ".join(f"{w} {i}" for w, i in slot_words) if slot_words else index_text(idx, ", ")
    held = _value_text(scan.first_actual, golden.dtype_name)
    was = _value_text(scan.first_given, golden.dtype_name)
    text = (f"{golden.name}: {count} {unit}{'s' * (count != 1)} outside the index "
            f"{'were' if count != 1 else 'was'} changed")
    if slot_words:
        text += f" ({scan.changed} elements)"
    text += (f", first at {where}: {golden.name}[{index_text(idx)}] = {held} where the cache "
             f"held {was}")
    moved = _moved_from(golden, scan, given)
    if moved is not None:
        text += (f", the input's value at {golden.name}"
                 f"[{index_text(index_of(moved, golden.shape, axes))}]")
    return text


def _value_text(v, dtype_name: str) -> str:
    a = np.asarray(v).reshape(1)
    return format_value(float(decode(a)[0]), dtype_name)


def _moved_from(golden: GoldenOutput, scan: CacheScan, given) -> int | None:
    """The nearest flat offset whose value in the input cache the first changed element holds,
    found by decoding it as a sentinel (``refspec.ops.sampling.position_decode``: the input
    cache's values encode their offsets modulo a period) and checked bit for bit; None when it
    holds no value of the input cache there. Only float caches hold position-coded sentinels."""
    dt = np.dtype(given.dtype)
    if is_quant_dtype(dt) or scan.first_actual is None:
        return None
    try:
        j = int(position_decode(np.asarray([scan.first_actual]), dt, golden.name)[0])
    except (ValueError, OverflowError):
        return None
    period = position_period(dt)
    n = int(np.prod(golden.shape, dtype=np.int64))
    base = scan.first - (scan.first - j) % period
    held = _bits(np.asarray([scan.first_actual]))
    for cand in sorted((base, base + period), key=lambda c: abs(c - scan.first)):
        if 0 <= cand < n and cand != scan.first and np.array_equal(
                _bits(np.asarray([given[np.unravel_index(cand, given.shape)]])), held):
            return cand
    return None
