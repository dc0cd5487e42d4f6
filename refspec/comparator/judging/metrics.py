"""Exact metrics of one output, accumulated block by block in float64 (docs/compare.md,
"Reports").

``Accumulator`` sees each block once: the actual values widened to float64, the exact
golden g, the per-element "badness" (error divided by what the rule allows: > 1 fails) from
``refspec.comparator.judging.bounds.badness``, and the special-value verdicts. It keeps only
scalars, a histogram, the top-k worst elements and, if asked, a 2-D error map, so memory does
not grow with the file.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

from .error_map import ErrorMap

__all__ = ["Accumulator", "Metrics", "Element", "BlockResults", "Counts", "Sums", "ULP_BIN_EXPONENTS",
           "ulp_bin_labels", "product_sums", "top_order", "cosine"]

#: ulp histogram bins: exact 0, then (2^(k-1), 2^k] for k = -1 .. 20, then > 2^20
ULP_BIN_EXPONENTS = tuple(range(-1, 21))
NBINS = len(ULP_BIN_EXPONENTS) + 2

# The layout of the compiled pass's results (refspec.comparator.judging.compiled_pass), which
# BlockResults holds:
#: positions in the int64 ``ints`` result
INTS = ("n_numeric", "failures", "n_small", "small_errors", "n_rel", "n_special", "n_top",
        "rounded_failures")
#: positions in the float64 ``floats`` result (max_abs and max_rel: the pass's running maxima,
#: -1 before the first numeric element; their elements are the rows of ``elems``)
FLOATS = ("max_badness", "max_abs_small", "sum_d2", "sum_ag", "sum_a2", "sum_g2", "sum_rel",
          "max_abs", "max_rel", "max_abs_unrounded")
#: columns of an element row: (local flat index, actual, golden, |a - g|, ulps, badness)
ELEMENT = ("flat", "actual", "golden", "abs_err", "ulps", "badness")
#: the ``ints`` and ``floats`` of a block by name
Counts = namedtuple("Counts", INTS)
Sums = namedtuple("Sums", FLOATS)
#: the position of each name in ``ints``, ``floats`` and an element row (the compiled pass
#: indexes its arrays by these)
INTS_AT = Counts(*range(len(INTS)))
FLOATS_AT = Sums(*range(len(FLOATS)))
ELEMENT_AT = namedtuple("ElementAt", ELEMENT)(*range(len(ELEMENT)))


def ulp_bin_labels() -> list[str]:
    labels = ["0", "(0, 1/2]"]
    for k in ULP_BIN_EXPONENTS[1:]:
        labels.append(f"({_pow2(k - 1)}, {_pow2(k)}]")
    labels.append(f"> {_pow2(ULP_BIN_EXPONENTS[-1])}")
    return labels


def _pow2(k: int) -> str:
    return "1/2" if k == -1 else str(2 ** k)


def product_sums(a: np.ndarray, g: np.ndarray, d: np.ndarray) -> tuple[float, float, float, float]:
    """(sum d*d, sum a*g, sum a*a, sum g*g) in float64, the sums behind RMSE and cosine
    similarity."""
    return (float(np.einsum("i,i->", d, d)), float(np.einsum("i,i->", a, g)),
            float(np.einsum("i,i->", a, a)), float(np.einsum("i,i->", g, g)))


def top_order(keys, T: int, idx: np.ndarray | None = None) -> np.ndarray:
    """Positions of the first ``T`` elements under the total order (keys[0] descending, then
    keys[1] descending, ..., then position ascending), in that order. ``keys``: equal-length
    float arrays without NaN; ``idx``: candidate positions (ascending), None for all."""
    n = keys[0].size if idx is None else idx.size
    if T <= 0 or n == 0:
        return np.empty(0, np.int64)
    sel = _select(keys, idx, T)
    order = np.lexsort((sel,) + tuple(-k[sel] for k in reversed(keys)))
    return sel[order]


def _select(keys, idx, T):
    p = keys[0] if idx is None else keys[0][idx]
    if p.size <= T:
        return np.arange(p.size, dtype=np.int64) if idx is None else idx
    v = np.partition(p, p.size - T)[p.size - T]
    gt = np.flatnonzero(p > v)
    eq = np.flatnonzero(p == v)
    if idx is not None:
        gt, eq = idx[gt], idx[eq]
    need = T - gt.size
    if eq.size > need:
        eq = _select(keys[1:], eq, need) if len(keys) > 1 else eq[:need]
    return np.concatenate((gt, eq)).astype(np.int64, copy=False)


@dataclass
class Element:
    """One element: its flat index, actual and golden values, |a - g|, ulps, badness."""

    flat: int
    actual: float
    golden: float
    abs_err: float
    ulps: float
    badness: float
    kind: str = "numeric"          # numeric | nan mismatch | inf mismatch


@dataclass
class Metrics:
    """What ``Accumulator.finish`` returns (all errors against the exact golden)."""

    n: int = 0
    n_numeric: int = 0
    n_special_matched: int = 0
    nan_mismatches: int = 0
    inf_mismatches: int = 0
    failures: int = 0                      # numeric elements over the rule, plus special mismatches
    max_badness: float = 0.0
    max_abs: Element | None = None
    max_rel: float | None = None           # on non-small elements
    max_rel_at: Element | None = None
    mean_rel: float | None = None
    rmse: float | None = None
    cosine: float | None = None
    n_small: int = 0
    small_errors: int = 0                  # small elements with |a - g| > E
    max_abs_small: float | None = None
    ulp_hist: list[int] = field(default_factory=lambda: [0] * NBINS)
    worst: list[Element] = field(default_factory=list)
    heatmap: np.ndarray | None = None
    #: for the too-strict question (``bounds.ElementBounds.counts_rounded``): numeric elements
    #: over the rule whose bits equal the golden rounded to the output dtype, and the largest
    #: |a - g| of the numeric elements whose bits do not
    rounded_failures: int = 0
    max_abs_unrounded: float = 0.0
    #: quantised codes: how many take the neighbouring code at a rounding boundary (None: not
    #: codes); a cache updated in place: its elements outside the index that were changed
    #: (``{"elements", "slots", "first"}``; None: not a cache)
    boundary: int | None = None
    outside: dict | None = None

    @property
    def mismatch_fraction(self) -> float:
        return self.failures / self.n if self.n else 0.0


def cosine(sum_ag: float, sum_a2: float, sum_g2: float, identical: bool) -> float:
    """Cosine similarity sum(a*g) / (sqrt(sum a^2) * sqrt(sum g^2)) of the numeric elements
    (docs/compare.md, "Cosine similarity"): exactly 1 when every numeric a equals its g
    (rounding of the three sums cannot make it differ), clamped to [-1, 1] otherwise; when one
    side is all zeros and the other not it is 0 (no direction to compare), and 1 when both
    are (they are identical)."""
    if identical:
        return 1.0
    denom = math.sqrt(sum_a2) * math.sqrt(sum_g2)
    if not denom > 0:
        return 0.0
    return min(1.0, max(-1.0, sum_ag / denom))


def _row_element(flat0: int, row: np.ndarray) -> Element:
    """An Element from a row (local flat index, actual, golden, |a - g|, ulps, badness)."""
    flat, a, g, ad, ulps, bad = row.tolist()
    return Element(flat0 + int(flat), a, g, ad, ulps, bad)


def _worst_key(e: Element):
    """Sort key (descending) of the worst elements: badness, |a - g|, then the lower flat index."""
    return (e.badness, e.abs_err, -e.flat)


class BlockResults:
    """What the compiled pass (``refspec.comparator.judging.compiled_pass.fused_block``) found
    in one block: counts, sums and extreme elements of its numeric elements; the positions and
    values of its special ones; or, when they are too many, copies of the block for the NumPy
    pass."""

    #: special values listed per block before the block goes to the NumPy pass
    SPECIAL_CAP = 4096

    def __init__(self, flat0: int, n: int, top: int):
        self.flat0, self.n = flat0, n
        self.ints = np.zeros(len(INTS), np.int64)
        self.floats = np.zeros(len(FLOATS), np.float64)
        self.hist = np.zeros(NBINS, np.int64)
        self.top = np.zeros((max(top, 1), len(ELEMENT)), np.float64)
        self.elems = np.zeros((2, len(ELEMENT)), np.float64)
        self.special = np.empty(min(n, self.SPECIAL_CAP), np.int64)
        self.special_values = None
        self.arrays = None

    def counts(self) -> Counts:
        return Counts._make(self.ints.tolist())

    def sums(self) -> Sums:
        return Sums._make(self.floats.tolist())


class Accumulator:
    """Streaming metrics of one output. ``small`` is (SV, E); ``top`` the number of worst
    elements kept; ``heat`` (shape, axes i, j) asks for a max-badness map over two axes."""

    def __init__(self, small: tuple[float, float], top: int = 10, heat=None):
        self.sv, self.e_small = small
        self.top = top
        self.m = Metrics()
        self._sum_d2 = self._sum_ag = self._sum_a2 = self._sum_g2 = 0.0
        self._sum_rel = 0.0
        self._n_rel = 0
        self._cand: list[Element] = []
        self._heat = None if heat is None else ErrorMap(*heat)

    def heat_geometry(self):
        """The 2-D map and how a flat index finds its cell (``ErrorMap.geometry``); None when
        no map is kept."""
        return None if self._heat is None else self._heat.geometry()

    # -- numeric elements ------------------------------------------------------------------
    def add_numeric(self, flat0: int, where: np.ndarray | None, a: np.ndarray, g: np.ndarray,
                    ad: np.ndarray, ag: np.ndarray, ulps: np.ndarray, bad: np.ndarray) -> None:
        """Numeric elements of one block: ``where`` their positions in the block (None = all,
        in order from flat index ``flat0``); a, g float64; ad = |a - g|; ag = |g|."""
        m = self.m
        n = a.size
        if n == 0:
            return
        m.n_numeric += n
        fails = int(np.count_nonzero(bad > 1.0))
        m.failures += fails
        bmax = float(bad.max())
        if bmax > m.max_badness:
            m.max_badness = bmax
        i = int(np.argmax(ad))
        if m.max_abs is None or ad[i] > m.max_abs.abs_err:
            m.max_abs = self._element(flat0, where, i, a, g, ad, ulps, bad)
        self._add_sums(a, g, a - g)
        small = ag < self.sv
        ns = self._add_small(ad, small)
        if ns < n:
            big = ~small if ns else slice(None)
            rel = ad[big] / ag[big]
            self._add_rel(rel, big, ns, flat0, where, (a, g, ad, ulps, bad))
        self._hist(ulps)
        self._keep_worst(flat0, where, a, g, ad, ulps, bad, bmax)
        if self._heat is not None:
            self._heat.add(flat0, where, bad)

    def add_block_results(self, out: BlockResults) -> None:
        """The numeric elements of one block as the compiled pass accumulated them: the same
        counts, maxima (first occurrence in flat order), histogram and worst elements as
        ``add_numeric`` over the block's steps; the float sums to a few roundings."""
        m = self.m
        c, f = out.counts(), out.sums()
        if c.n_numeric == 0:
            return
        m.n_numeric += c.n_numeric
        m.failures += c.failures
        m.rounded_failures += c.rounded_failures
        m.max_abs_unrounded = max(m.max_abs_unrounded, f.max_abs_unrounded)
        if f.max_badness > m.max_badness:
            m.max_badness = f.max_badness
        largest = _row_element(out.flat0, out.elems[0])
        if m.max_abs is None or largest.abs_err > m.max_abs.abs_err:
            m.max_abs = largest
        self._sum_d2 += f.sum_d2
        self._sum_ag += f.sum_ag
        self._sum_a2 += f.sum_a2
        self._sum_g2 += f.sum_g2
        if c.n_small:
            m.n_small += c.n_small
            m.small_errors += c.small_errors
            m.max_abs_small = (f.max_abs_small if m.max_abs_small is None
                               else max(m.max_abs_small, f.max_abs_small))
        if c.n_rel:
            self._add_compiled_rel(out, f.sum_rel, c.n_rel)
        h = m.ulp_hist
        for b, n in enumerate(out.hist.tolist()):
            h[b] += n
        if self.top > 0 and c.n_top:
            self._cand.extend(_row_element(out.flat0, r) for r in out.top[:c.n_top])
            self._trim()

    def _add_compiled_rel(self, out: BlockResults, sum_rel: float, n_rel: int) -> None:
        """The relative errors of a compiled block: their sum and the largest with its element."""
        m = self.m
        self._sum_rel += sum_rel
        self._n_rel += n_rel
        at = _row_element(out.flat0, out.elems[1])
        rel = at.abs_err / abs(at.golden)
        if m.max_rel is None or rel > m.max_rel:
            m.max_rel = rel
            m.max_rel_at = at

    def add_special(self, flat0: int, where: np.ndarray, a: np.ndarray, g: np.ndarray,
                    matched: np.ndarray, nan_mismatch: np.ndarray) -> None:
        """Special-value positions of one block (NaN/Inf on either side): ``matched`` where
        they agree, ``nan_mismatch`` where exactly one side is NaN; other unmatched positions
        are Inf mismatches."""
        m = self.m
        m.n_special_matched += int(np.count_nonzero(matched))
        bad_nan = int(np.count_nonzero(nan_mismatch))
        bad_inf = int(np.count_nonzero(~matched & ~nan_mismatch))
        m.nan_mismatches += bad_nan
        m.inf_mismatches += bad_inf
        m.failures += bad_nan + bad_inf
        if bad_nan + bad_inf:
            m.max_badness = math.inf
            for k in np.flatnonzero(~matched)[: self.top]:
                self._cand.append(Element(flat0 + int(where[k]), float(a[k]), float(g[k]),
                                          math.inf, math.inf, math.inf,
                                          "nan mismatch" if nan_mismatch[k] else "inf mismatch"))
            self._trim()
            if self._heat is not None:
                self._heat.add(flat0, where[~matched], np.full(int((~matched).sum()), np.inf))

    def add_rounded(self, failures: int, max_abs_unrounded: float) -> None:
        """Of one step's numeric elements: how many over the rule equal the rounded golden, and
        the largest |a - g| of those that do not (``Metrics.rounded_failures``)."""
        m = self.m
        m.rounded_failures += failures
        m.max_abs_unrounded = max(m.max_abs_unrounded, max_abs_unrounded)

    def count(self, n: int) -> None:
        self.m.n += n

    # -- helpers -----------------------------------------------------------------------------
    def _add_sums(self, a, g, d) -> None:
        """Exact float64 sums behind RMSE and cosine similarity."""
        d2, ag, a2, g2 = product_sums(a, g, d)
        self._sum_d2 += d2
        self._sum_ag += ag
        self._sum_a2 += a2
        self._sum_g2 += g2

    def _add_rel(self, rel, big, ns, flat0, where, arrays) -> None:
        """Relative errors of the non-small elements (``big`` their mask when ``ns`` > 0):
        their sum for the mean and the largest with its element (``arrays``: a, g, ad, ulps,
        bad of the step, as ``add_numeric`` has them)."""
        m = self.m
        self._sum_rel += float(rel.sum())
        self._n_rel += rel.size
        k = int(np.argmax(rel))
        if m.max_rel is None or rel[k] > m.max_rel:
            m.max_rel = float(rel[k])
            pos = np.flatnonzero(big)[k] if ns else k
            m.max_rel_at = self._element(flat0, where, pos, *arrays)

    def _add_small(self, ad, small) -> int:
        """Small-value counts (|g| < SV) and their errors; returns how many are small."""
        m = self.m
        ns = int(np.count_nonzero(small))
        if ns:
            m.n_small += ns
            ads = ad[small]
            m.small_errors += int(np.count_nonzero(ads > self.e_small))
            mx = float(ads.max())
            m.max_abs_small = mx if m.max_abs_small is None else max(m.max_abs_small, mx)
        return ns

    @staticmethod
    def _element(flat0, where, i, a, g, ad, ulps, bad) -> Element:
        flat = flat0 + (int(where[i]) if where is not None else int(i))
        return Element(flat, float(a[i]), float(g[i]), float(ad[i]), float(ulps[i]), float(bad[i]))

    def _hist(self, ulps: np.ndarray) -> None:
        h = self.m.ulp_hist
        zero = ulps == 0
        nz = int(np.count_nonzero(zero))
        h[0] += nz
        pos = ulps[~zero] if nz else ulps
        if pos.size == 0:
            return
        mant, exp = np.frexp(pos)                 # pos = mant * 2^exp, mant in [0.5, 1)
        k = exp - (mant == 0.5)                   # bin (2^(k-1), 2^k]
        lo, hi = ULP_BIN_EXPONENTS[0], ULP_BIN_EXPONENTS[-1]
        np.clip(k, lo, hi + 1, out=k)
        counts = np.bincount(k - lo, minlength=hi - lo + 2)
        for b, c in enumerate(counts):
            h[1 + b] += int(c)

    def _keep_worst(self, flat0, where, a, g, ad, ulps, bad, bmax: float) -> None:
        if self.top <= 0:
            return
        # the step's first elements by (badness, |a - g|) descending, then flat index ascending:
        # the order of the report, total so that ties never depend on the selection algorithm
        idx = top_order([bad, ad] if bmax > 0 else [ad], self.top)
        for i in idx.tolist():
            self._cand.append(self._element(flat0, where, i, a, g, ad, ulps, bad))
        self._trim()

    def _trim(self) -> None:
        if len(self._cand) > 4 * self.top:
            self._cand.sort(key=_worst_key, reverse=True)
            del self._cand[self.top:]

    def finish(self) -> Metrics:
        m = self.m
        if m.n_numeric:
            m.rmse = math.sqrt(self._sum_d2 / m.n_numeric)
            m.cosine = cosine(self._sum_ag, self._sum_a2, self._sum_g2,
                              identical=m.max_abs is not None and m.max_abs.abs_err == 0)
        if self._n_rel:
            m.mean_rel = self._sum_rel / self._n_rel
        self._cand.sort(key=_worst_key, reverse=True)
        seen, worst = set(), []
        for e in self._cand:
            if e.flat not in seen:
                seen.add(e.flat)
                worst.append(e)
            if len(worst) == self.top:
                break
        m.worst = worst
        m.heatmap = None if self._heat is None else self._heat.cells
        return m
