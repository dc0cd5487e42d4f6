"""The NumPy pass (docs/compare.md, "How an output is judged"): one block of an output through
whole-array NumPy operations, in cache-sized steps of ``COMPUTE_ELEMENTS``. It judges the outputs
of at most ``refspec.comparator.judging.options.COMPILED_ABOVE`` elements (nothing to compile for
a small comparison), every output with ``refspec.compare(..., fast=False)``, and the blocks with
more special values than the compiled pass lists (``metrics.BlockResults.SPECIAL_CAP``). The tests
hold the compiled pass (``refspec.comparator.judging.compiled_pass``) to it
(tests/comparator/test_compare_fast.py).

Each step: the special values to ``special_values.add_special``, the numeric elements to
``bounds.badness`` and ``Accumulator.add_numeric`` (and, for the too-strict question,
``bounds.rounded_counts``).
"""

from __future__ import annotations

import numpy as np

from .bounds import ElementBounds, badness, rounded_counts
from .floatinfo import ulp_at
from .special_values import add_special, numeric
from .streaming import COMPUTE_ELEMENTS

__all__ = ["numpy_block"]


def numpy_block(bounds: ElementBounds, acc, flat0, a, g, e, S) -> None:
    """One block under ``bounds`` into the accumulator ``acc`` (flattened, C order from
    ``flat0``: a in the output dtype, g exact float64, e the golden rounded to the output dtype,
    S sum of |terms|; e and S None when the rule reads neither), in cache-sized steps."""
    acc.count(a.size)
    for lo in range(0, a.size, COMPUTE_ELEMENTS):
        hi = min(lo + COMPUTE_ELEMENTS, a.size)
        _step(bounds, acc, flat0 + lo, a[lo:hi], g[lo:hi], None if e is None else e[lo:hi],
              None if S is None else S[lo:hi])


def _step(bounds, acc, flat0, a, g, e, S) -> None:
    a64 = a.astype(np.float64)
    ag = np.abs(g)
    ok = numeric(a64, ag, bounds.info)
    if ok.all():
        where = None
    else:
        where = np.flatnonzero(ok)
        special = np.flatnonzero(~ok)
        add_special(bounds, acc, flat0, special, a64[special], g[special])
        a64, g, ag = a64[where], g[where], ag[where]
        a = a[where]
        e = None if e is None else e[where]
        S = None if S is None else S[where]
    ad = np.abs(a64 - g)
    ulp = ulp_at(ag, bounds.info)
    ulps = ad / ulp
    bad = badness(bounds, (a, e, S), ad, ag, ulp, ulps)
    acc.add_numeric(flat0, where, a64, g, ad, ag, ulps, bad)
    if bounds.counts_rounded and a.size:
        acc.add_rounded(*rounded_counts(a, e, ad, bad))
