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
from typing import NamedTuple

import numpy as np

from ...goldens.format import GoldenFileError
from ...goldens.integrity import rounding_mismatch
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
    except GoldenFileError:
        raise                    # the golden file's problem (a damaged file), not the output's
    except Exception as exc:
        raise MeasureProblem("error", f"reading the golden failed: {one_line(exc)}") from None
    finally:
        readers.close()
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


class _Readers(NamedTuple):
    """The block readers of one output's golden arrays: the exact values, the rounded golden
    (``expected``, None when neither the rule nor the check reads it), the sums of |terms|
    (None when the rule does not use them); ``rounded_for_rule``: the rule reads the rounded
    golden; ``verify``: the rounded golden comes from a golden file and each of its blocks is
    checked against the exact one (``check_rounding``)."""

    exact: BlockReader
    expected: BlockReader | None
    sum_abs: BlockReader | None
    rounded_for_rule: bool
    golden: GoldenOutput
    verify: object = None            # the expected LazyArray being checked, or None

    def close(self) -> None:
        for rd in (self.exact, self.expected, self.sum_abs):
            if rd is not None:
                rd.close()


def _readers(case, golden, bounds, sum_abs) -> _Readers:
    """Block readers of the exact golden, the rounded golden and the sums of |terms| (None for
    what is not read). A golden file's rounded golden is always read, to be checked block by
    block against the exact values the pass reads anyway (docs/compare.md, "A damaged
    golden file")."""
    expected = case.expected[golden.name]
    verify = expected if hasattr(expected, "corrupt") else None     # a golden file's dataset
    if not bounds.needs_expected and verify is None:
        expected = None
    if not bounds.uses_sum_abs:
        sum_abs = None
    elif golden.name in case.sum_abs:
        sum_abs = case.sum_abs[golden.name]
    return _Readers(BlockReader(golden.exact, np.float64),
                    None if expected is None else BlockReader(expected),
                    None if sum_abs is None else BlockReader(sum_abs, np.float64),
                    bounds.needs_expected, golden, verify)


def check_rounding(expected, golden: GoldenOutput, flat0: int, e: np.ndarray,
                   g: np.ndarray) -> None:
    """``CorruptGoldenError`` (``expected.corrupt``) unless the block ``e`` of the rounded
    golden (its stored bits, or values of the output dtype) is the block ``g`` of the exact
    values rounded once to the output dtype, bit for bit (``refspec.goldens.rounding_mismatch``);
    ``flat0`` is the block's first flat index."""
    if e.dtype.itemsize != golden.dtype.itemsize:
        raise expected.corrupt(f"holds {e.dtype} values, but the output is "
                               f"{golden.dtype_name} in the index")
    if e.dtype != golden.dtype:                 # bfloat16 read raw: its 16-bit patterns
        e = e.view(golden.dtype)
    at = rounding_mismatch(e, g)
    if at is not None:
        index = tuple(int(i) for i in np.unravel_index(flat0 + at, golden.shape))
        raise expected.corrupt(f"element {index} is not exact/{golden.name} rounded once to "
                               f"{golden.dtype_name} (the golden was changed after it was "
                               "computed)")


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
    g = readers.exact.read(key, flat0, count)
    e = None if readers.expected is None else readers.expected.read(key, flat0, count)
    if readers.verify is not None:               # the golden checked before the actual is read
        check_rounding(readers.verify, readers.golden, flat0, e, g)
    if not readers.rounded_for_rule:
        e = None
    S = None if readers.sum_abs is None else readers.sum_abs.read(key, flat0, count)
    if isinstance(actual, Benchmark):
        a = np.asarray(actual.array[key]).reshape(-1)
    else:
        try:
            a = actual.read(key, flat0, count).reshape(-1)
        except Exception as exc:  # a file that changed or broke while being read
            raise _ActualUnreadable(one_line(exc)) from None
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
