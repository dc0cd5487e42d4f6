"""``measure``: the metrics of one output in one pass over its blocks (docs/compare.md,
"Judging" and "Reports").

The blocks of the golden's plan (``streaming.plan_blocks``) are read side by side from the
exact golden, the actual and, when the rule needs them, the rounded golden and the sums of
|terms|; each block goes through the compiled pass (``compiled_blocks.CompiledBlocks``, blocks in
threads with ``options.pool``, one after the other when an error map is kept: its cells are
shared) or, for the outputs ``uses_compiled`` leaves to it, the NumPy pass
(``numpy_pass.numpy_block``), under the rule's ``bounds.ElementBounds``, into one
``metrics.Accumulator``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import wait

import numpy as np

from ...spec.errors import one_line
from .bounds import element_bounds
from .compiled_blocks import CompiledBlocks
from .golden_output import GoldenOutput
from .metrics import Accumulator, Metrics
from .naming import axis_names
from .numpy_pass import numpy_block
from .options import COMPILED_ABOVE
from .standards import SMALL_VALUES, Rule
from .streaming import BlockReader, plan_blocks

__all__ = ["measure", "MeasureProblem", "Benchmark", "block_plan", "heat_axes", "in_order",
           "uses_compiled"]

_LOG = logging.getLogger("refspec")
#: seconds the first compiled block may take before the compile notice is logged
NOTICE_SECONDS = 1.0


class MeasureProblem(Exception):
    """The pass could not read its blocks: ``status`` "unreadable" (the actual) or "error"
    (the golden), ``detail`` the message of the output's row."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class Benchmark:
    """The ratio standard's same-precision result, an array in memory, measured in place of the
    actual (a failure to read it is the golden side's, not an unreadable actual)."""

    source = "benchmark"

    def __init__(self, array):
        self.array = array


def measure(case, golden: GoldenOutput, actual, rule: Rule | None, options,
            sum_abs=None, heat=None) -> Metrics:
    """The metrics of ``actual`` (an ActualArray, or a ``Benchmark``) against ``golden`` under
    ``rule`` (None: metrics only, every badness 0), with ``options`` (``CompareOptions``: top,
    saturation, read_elements, fast, pool). ``sum_abs``: the sums of |terms| when the case has
    none of its own; ``heat`` (shape, axis i, axis j or None) keeps the 2-D max-badness map.
    ``MeasureProblem`` when a block cannot be read."""
    small = SMALL_VALUES.get(golden.dtype_name, SMALL_VALUES["float32"])
    bounds = element_bounds(rule, golden.dtype, golden.K, options.saturation)
    acc = Accumulator(small, options.top, heat)
    plan = block_plan(golden, options.read_elements)
    readers = _readers(case, golden, bounds, sum_abs)
    try:
        if uses_compiled(golden, options):
            _compiled_pass(CompiledBlocks(bounds, acc), readers, actual, plan,
                           options.pool if heat is None else None)
        else:
            for key, flat0, count in plan:
                numpy_block(bounds, acc, *_load(readers, actual, key, flat0, count))
    except _ActualUnreadable as exc:
        raise MeasureProblem("unreadable", f"{actual.source}: {exc}") from None
    except Exception as exc:
        raise MeasureProblem("error", f"reading the golden failed: {one_line(exc)}") from None
    finally:
        for rd in readers:
            if rd is not None:
                rd.close()
    return acc.finish()


def uses_compiled(golden: GoldenOutput, options) -> bool:
    """Whether the output goes through the compiled pass: always with ``options.fast`` True,
    never with False, and when None only above ``COMPILED_ABOVE`` elements (below, the NumPy
    pass gives the same report without waiting for a compiler)."""
    if options.fast is not None:
        return bool(options.fast)
    return int(np.prod(golden.shape, dtype=np.int64)) > COMPILED_ABOVE


def block_plan(golden: GoldenOutput, read_elements: int) -> list:
    """The blocks (key, flat0, count) of an output, whole HDF5 chunks of its exact values where
    possible."""
    return list(plan_blocks(golden.shape, read_elements, getattr(golden.exact, "chunks", None)))


def _readers(case, golden, bounds, sum_abs) -> tuple:
    """Block readers of the exact golden, the rounded golden and the sums of |terms| (None for
    what the rule does not use)."""
    expected = case.expected[golden.name] if bounds.needs_expected else None
    if not bounds.uses_sum_abs:
        sum_abs = None
    elif golden.name in case.sum_abs:
        sum_abs = case.sum_abs[golden.name]
    return (BlockReader(golden.exact, np.float64),
            None if expected is None else BlockReader(expected),
            None if sum_abs is None else BlockReader(sum_abs, np.float64))


def _compiled_pass(blocks: CompiledBlocks, readers, actual, plan, pool) -> None:
    """Each block through the compiled pass (side by side with ``pool`` when there are
    several), merged in flat order."""
    def work(key, flat0, count):
        return blocks.compute(*_load(readers, actual, key, flat0, count))

    notice = _compile_notice()
    try:
        for out in in_order(pool if len(plan) > 1 else None, work, plan):
            notice.cancel()
            blocks.merge(out)
    finally:
        notice.cancel()


def _compile_notice() -> threading.Timer:
    """A timer that logs one line (logger ``refspec``) if the first block of the process's
    first compiled pass takes over a second: numba compiling it after an installation."""
    from .compiled_pass import fused_block
    timer = threading.Timer(NOTICE_SECONDS, _LOG.warning, (
        "compiling the comparison pass for large outputs (once after installing: about "
        "20 s; later runs load it from the cache)",))
    timer.daemon = True
    if not fused_block.signatures:
        timer.start()
    return timer


def _load(readers, actual, key, flat0, count):
    """(flat0, a, g, e, S) of one block: the actual flattened, the golden arrays' blocks."""
    rd_g, rd_e, rd_S = readers
    g = rd_g.read(key, flat0, count)
    if isinstance(actual, Benchmark):
        a = np.asarray(actual.array[key]).reshape(-1)
    else:
        try:
            a = actual.read(key, flat0, count).reshape(-1)
        except Exception as exc:  # a file that changed or broke while being read
            raise _ActualUnreadable(one_line(exc)) from None
    e = None if rd_e is None else rd_e.read(key, flat0, count)
    S = None if rd_S is None else rd_S.read(key, flat0, count)
    return flat0, a, g, e, S


class _ActualUnreadable(Exception):
    """Reading the actual failed (the output is "unreadable", not a golden error)."""


def heat_axes(shape, axes: str, wanted: str | None):
    """Indices of the two axes of the error map (the axes named by the letters ``wanted``, else
    the last two axes of size > 1); (i, None) for one axis; None for scalars."""
    if not shape:
        return None
    if wanted:
        names = [n.upper() for n in axis_names(axes, len(shape))]
        idx = [names.index(ch) if ch in names else -1 for ch in wanted.upper()]
        if all(i >= 0 for i in idx) and len(set(idx)) == len(idx) and len(idx) in (1, 2):
            return (idx[0], idx[1] if len(idx) == 2 else None)
    big = [i for i, s in enumerate(shape) if s > 1] or [len(shape) - 1]
    if len(big) == 1:
        return (big[0], None)
    return (big[-2], big[-1])


def in_order(pool, fn, items, ahead: int = 4):
    """``fn(*item)`` for each item, results in order; with ``pool`` (an Executor) computed
    side by side, at most ``ahead`` items in flight so memory stays bounded."""
    if pool is None:
        for item in items:
            yield fn(*item)
        return
    pending = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, *item))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        wait(pending)
