"""The screened path: a large elementwise output judged by comparing bit patterns with the
rounded golden, the exact golden read only where they differ (docs/compare.md, "How a step is
computed").

An element whose actual bits equal ``expected/<name>`` contributes to every metric what the
golden's self statistics (:mod:`refspec.selfstats`) say it does. So, with M the elements that
differ: counts and the histogram are the self totals minus M's self counts plus M's actual
counts (exact); the float sums the same (within the bound below); maxima, their elements and
the worst elements are taken from M's actual elements and the stored top lists of self elements
not in M (exact; when more list entries are in M than the report needs, the full path decides).

The golden's bytes are read in place: the file is memory-mapped and each raw chunk
(:meth:`refspec.goldens_read.LazyArray.raw_extents`) viewed where it lies; so is a raw actual
(``.bin`` or ``.npy``). Mapped pages are released after each step, so resident memory stays
about one step whatever the file size.

:func:`screened_metrics` returns None whenever it cannot guarantee the full path's report: no
self statistics (small output, another class, a golden written before they existed), a golden
with NaN/Inf, compressed or otherwise non-raw storage, an actual that cannot be mapped, a NaN or
Inf in the actual, a rule whose ordering the stored lists do not cover (copies, reductions, the
float32 evaluation bound with S, ``ratio``, most ``--rtol/--atol`` overrides), heat maps, more
than a quarter of the elements differing (then the full path is as fast), top lists used up, or
sums whose subtraction would cancel.

Float sums: each sum is the self total minus M's self terms plus M's actual terms, accumulated
per step in float64; the result is used only when the terms taken away and added are at most
``SUM_SLACK`` times the sum of |terms| of the result, so its difference from the full path's
sum stays within a small multiple of float64 rounding of that sum of |terms| (tests check
1e-12 relative to it).
"""

from __future__ import annotations

import math
import mmap
import os

import numpy as np

from ..selfstats import rule_signature, top_order
from .actuals import ArrayActual, RawFileActual
from .floatinfo import ulp_at
from .metrics import Element, Metrics, product_sums, ulp_bin_counts
from .standards import SMALL_VALUES

__all__ = ["screened_metrics", "SCREEN_ELEMENTS", "DENSE_FRACTION", "SUM_SLACK"]

#: elements per screening step (the bit comparison runs over whole raw chunks of this size)
SCREEN_ELEMENTS = 1 << 22
#: above this fraction of differing elements the full path is used (the screen saves nothing)
DENSE_FRACTION = 0.25
#: the float sums are used only when taken-away plus added terms <= SUM_SLACK x sum |terms|
SUM_SLACK = 4.0
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_PAGE = mmap.PAGESIZE
#: releases mapped pages of a file (they stay in the page cache); None where the OS has none
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None) if hasattr(mmap.mmap, "madvise") else None


class _Mapped:
    """A read-only memory map of a file, with its pages released on request."""

    def __init__(self, path: str):
        with open(path, "rb") as fh:
            self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def view(self, dtype, count: int, offset: int) -> np.ndarray:
        return np.frombuffer(self.mm, dtype=dtype, count=count, offset=offset)

    def release(self, start: int, stop: int) -> None:
        start -= start % _PAGE
        stop = min(stop, len(self.mm))
        if stop > start and _DONTNEED is not None:
            try:
                self.mm.madvise(_DONTNEED, start, stop - start)
            except (OSError, ValueError):
                pass


class _Raw:
    """Views of a dataset's raw extents in a mapped file."""

    def __init__(self, mapped: _Mapped, extents, dtype):
        self.m = mapped
        self.ext = extents
        self.starts = np.array([e[0] for e in extents], np.int64)
        self.dtype = np.dtype(dtype)
        self._views = {}

    def view(self, k: int) -> np.ndarray:
        v = self._views.get(k)
        if v is None:
            _, count, off = self.ext[k]
            v = self._views[k] = self.m.view(self.dtype, count, off)
        return v

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """Elements at the sorted flat indices ``idx``."""
        out = np.empty(idx.size, self.dtype)
        if idx.size == 0:
            return out
        k = np.searchsorted(self.starts, idx, side="right") - 1
        cuts = np.flatnonzero(np.diff(k)) + 1
        lo = 0
        for hi in [*cuts.tolist(), idx.size]:
            kk = int(k[lo])
            out[lo:hi] = self.view(kk)[idx[lo:hi] - self.ext[kk][0]]
            lo = hi
        return out

    def release(self, lo: int, hi: int) -> None:
        """Release the mapped pages of the extents holding flat indices [lo, hi)."""
        k0 = max(int(np.searchsorted(self.starts, lo, side="right")) - 1, 0)
        k1 = int(np.searchsorted(self.starts, hi, side="left"))
        if k1 <= k0:
            return
        for k in range(k0, k1):
            self._views.pop(k, None)
        # one call over the byte range of these extents (what lies between is only unmapped,
        # to be mapped again if touched)
        first = min(self.ext[k][2] for k in range(k0, k1))
        last = max(self.ext[k][2] + self.ext[k][1] * self.dtype.itemsize for k in range(k0, k1))
        self.m.release(first, last)


def _actual_bits(actual, n: int, itemsize: int):
    """(bit-pattern view of the whole actual, release(lo, hi) callable) or None."""
    uint = _UINT[itemsize]
    if isinstance(actual, RawFileActual):
        st = actual.stored
        if st.itemsize != itemsize or st.byteorder == ">" or st.kind not in "fuV":
            return None
        if os.path.getsize(actual.path) < actual.offset + n * itemsize:
            return None
        m = _Mapped(actual.path)
        base = actual.offset
        return (m.view(uint, n, base),
                lambda lo, hi: m.release(base + lo * itemsize, base + hi * itemsize))
    if isinstance(actual, ArrayActual):
        arr = actual._arr
        if (not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous or arr.size != n
                or arr.dtype.itemsize != itemsize or arr.dtype.byteorder == ">"
                or arr.dtype.kind not in "fuV" or arr.dtype.hasobject):
            return None
        return arr.reshape(-1).view(uint), lambda lo, hi: None
    return None


class _Side:
    """Running sums and counts of one side (self: a = expected; actual) over M."""

    def __init__(self):
        self.d2 = self.ag = self.a2 = self.rel = self.ag_abs = 0.0
        self.small_errors = 0
        self.fails = 0
        self.hist = np.zeros(24, np.int64)


def screened_metrics(case, name: str, actual, rule, opts, info: dict, judge,
                     sum_abs=None) -> Metrics | None:
    """The metrics of the full path for one output, or None when the screen cannot guarantee
    them (see the module docstring). ``judge`` is the output's BlockJudge (its badness)."""
    if opts.heatmaps or not opts.fast or not hasattr(case, "self_stats"):
        return None
    try:
        stats = case.self_stats(name)
    except Exception:
        return None
    if not stats or not stats.get("finite"):
        return None
    sig = rule_signature(rule, sum_abs is not None)
    if sig is None:
        return None
    rules = [r for r in stats["rules"] if (r["rtol"], r["atol"], r["gate"]) == sig]
    if not rules:
        return None
    srule = rules[0]
    dt = np.dtype(info["dtype"])
    n = math.prod(info["shape"])
    sv, e_small = SMALL_VALUES.get(info["dtype_name"], SMALL_VALUES["float32"])
    if (stats["dtype"] != info["dtype_name"] or stats["n"] != n or stats["small"] != [sv, e_small]
            or len(stats["hist"]) != 24):
        return None
    exp_arr, ex_arr = case.expected[name], case.exact[name]
    if not hasattr(exp_arr, "raw_extents") or not hasattr(ex_arr, "raw_extents"):
        return None
    exp_ext, ex_ext = exp_arr.raw_extents(), ex_arr.raw_extents()
    if (exp_ext is None or ex_ext is None or np.dtype(ex_arr._ds.dtype) != np.dtype("<f8")
            or exp_arr._ds.dtype.itemsize != dt.itemsize):
        return None
    try:
        bits = _actual_bits(actual, n, dt.itemsize)
        if bits is None:
            return None
        gmap = _Mapped(exp_arr.file_path)
    except (OSError, ValueError):
        return None
    uint = _UINT[dt.itemsize]
    pieces = []                 # at most one step per piece (contiguous storage is one extent)
    for start, count, off in exp_ext:
        for i in range(0, count, SCREEN_ELEMENTS):
            pieces.append((start + i, min(SCREEN_ELEMENTS, count - i), off + i * dt.itemsize))
    exp = _Raw(gmap, pieces, np.dtype(uint).newbyteorder("<"))
    ex = _Raw(gmap, ex_ext, np.dtype("<f8"))
    try:
        return _screen(stats, srule, n, dt, sv, e_small, judge, opts.top, bits, exp, ex)
    except _Fallback:
        return None
    finally:
        exp._views.clear()
        ex._views.clear()


class _Fallback(Exception):
    pass


def _screen(stats, srule, n, dt, sv, e_small, judge, top, bits, exp, ex) -> Metrics:
    info = judge.info
    A, release_actual = bits
    S, T = _Side(), _Side()
    self_fails = int(srule["fails"])
    lists = {k: np.asarray(stats[k], np.int64) for k in ("abs", "rel", "small_abs")}
    lists["worst"] = np.asarray(srule["worst"], np.int64)
    removed = {k: np.zeros(v.size, bool) for k, v in lists.items()}
    n_m = n_m_big = 0
    cand = []                       # per step: (flats, a, g, ad, ulps, bad) of M's worst
    best_abs = best_rel = None      # (ad or rel, flat, a, g, ad, ulps, bad)
    best_small = None
    bad_m = 0.0
    buf = np.empty(max(c for _, c, _ in exp.ext), bool)
    done = 0
    k = 0
    hi = 0
    nk = len(exp.ext)
    while k < nk:
        lo = hi = exp.ext[k][0]
        parts_m, parts_a, parts_e = [], [], []
        while k < nk and hi - lo < SCREEN_ELEMENTS:      # whole raw chunks, in C order
            start, count, _ = exp.ext[k]
            ev = exp.view(k)
            av = A[start:start + count]
            loc = np.flatnonzero(np.not_equal(av, ev, out=buf[:count]))
            if loc.size:
                parts_m.append(loc + start)
                parts_a.append(av[loc])
                parts_e.append(ev[loc])
            hi = start + count
            k += 1
        done += hi - lo
        if parts_m:
            M = np.concatenate(parts_m)
            n_m += M.size
            if n_m > DENSE_FRACTION * done:
                raise _Fallback
            a_bits = np.concatenate(parts_a)
            e_bits = np.concatenate(parts_e)
            g = ex.gather(M)
            a = a_bits.view(dt)
            e = e_bits.view(dt)
            a64 = a.astype(np.float64)
            if not np.isfinite(a64).all():
                raise _Fallback          # special values: the full path matches them
            e64 = e.astype(np.float64)
            ag = np.abs(g)
            ulp = ulp_at(ag, info)
            small = ag < sv
            big = ~small
            n_m_big += int(np.count_nonzero(big))
            # self side: the golden's own contributions at M, taken away
            de = e64 - g
            ade = np.abs(de)
            _side(S, e64, g, de, ade, ag, ulp, small, big, e_small)
            if self_fails:
                bad_e = judge._badness(e, e, ade, ag, ulp, ade / ulp, None)
                S.fails += int(np.count_nonzero(bad_e > 1.0))
            # actual side: added
            d = a64 - g
            ad = np.abs(d)
            ulps = ad / ulp
            _side(T, a64, g, d, ad, ag, ulp, small, big, e_small, ulps)
            T.ag_abs += float(np.einsum("i,i->", np.abs(a64), ag))
            bad = judge._badness(a, e, ad, ag, ulp, ulps, None)
            T.fails += int(np.count_nonzero(bad > 1.0))
            bad_m = max(bad_m, float(bad.max()))
            i = int(np.argmax(ad))
            if best_abs is None or ad[i] > best_abs[0]:
                best_abs = (float(ad[i]), int(M[i]), a64[i], g[i], ad[i], ulps[i], bad[i])
            if big.any():
                bi = np.flatnonzero(big)
                rel = ad[bi] / ag[bi]
                j = int(np.argmax(rel))
                if best_rel is None or rel[j] > best_rel[0]:
                    p = bi[j]
                    best_rel = (float(rel[j]), int(M[p]), a64[p], g[p], ad[p], ulps[p], bad[p])
            if small.any():
                mx = float(ad[small].max())
                best_small = mx if best_small is None else max(best_small, mx)
            if top > 0:
                sel = top_order([bad, ad], top)
                cand.append((M[sel], a64[sel], g[sel], ad[sel], ulps[sel], bad[sel]))
            for key, L in lists.items():
                inside = (L >= lo) & (L < hi)
                if inside.any():
                    x = L[inside]
                    pos = np.minimum(np.searchsorted(M, x), M.size - 1)
                    removed[key][inside] |= M[pos] == x           # M is sorted
        release_actual(lo, hi)
        exp.release(lo, hi)
        ex.release(lo, hi)
    return _assemble(stats, srule, n, n_m, n_m_big, S, T, lists, removed, cand, best_abs,
                     best_rel, best_small, bad_m, judge, top, exp, ex, dt)


def _side(side, a, g, d, ad, ag, ulp, small, big, e_small, ulps=None):
    d2, a_g, a2, _ = product_sums(a, g, d)
    side.d2 += d2
    side.ag += a_g
    side.a2 += a2
    if big.any():
        side.rel += float((ad[big] / ag[big]).sum())
    if small.any():
        side.small_errors += int(np.count_nonzero(ad[small] > e_small))
    side.hist += ulp_bin_counts(ad / ulp if ulps is None else ulps)


def _self_elements(flats, exp, ex, dt, judge):
    """(a = e as float64, g, ad, ulps, bad, rel) of self elements at ``flats``."""
    order = np.argsort(flats, kind="stable")
    f = flats[order]
    e = exp.gather(f).view(dt)
    g = ex.gather(f)
    inv = np.empty_like(order)
    inv[order] = np.arange(order.size)
    e, g = e[inv], g[inv]
    e64 = e.astype(np.float64)
    ag = np.abs(g)
    ad = np.abs(e64 - g)
    ulp = ulp_at(ag, judge.info)
    ulps = ad / ulp
    bad = judge._badness(e, e, ad, ag, ulp, ulps, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = ad / ag
    return e64, g, ad, ulps, bad, rel


def _element(flat, a, g, ad, ulps, bad) -> Element:
    return Element(int(flat), float(a), float(g), float(ad), float(ulps), float(bad))


def _assemble(stats, srule, n, n_m, n_m_big, S, T, lists, removed, cand, best_abs, best_rel,
              best_small, bad_m, judge, top, exp, ex, dt) -> Metrics:
    n_small = int(stats["n_small"])
    n_self = n - n_m
    n_self_big = (n - n_small) - n_m_big
    n_self_small = n_self - n_self_big
    keep = {k: lists[k][~removed[k]] for k in lists}
    need_worst = min(max(top, 1), n_self)
    if (keep["worst"].size < need_worst or (n_self and keep["abs"].size == 0)
            or (n_self_big and keep["rel"].size == 0)
            or (n_self_small and keep["small_abs"].size == 0)):
        raise _Fallback                  # the stored lists cannot decide
    m = Metrics(path="screened")
    m.n = m.n_numeric = n
    m.failures = int(srule["fails"]) - S.fails + T.fails
    m.n_small = n_small
    m.small_errors = int(stats["small_errors"]) - S.small_errors + T.small_errors
    hist = np.asarray(stats["hist"], np.int64) - S.hist + T.hist
    m.ulp_hist = [int(c) for c in hist]
    # sums: self totals - M's self terms + M's actual terms, unless that would cancel
    s = stats["sums"]
    sums = {}
    for key in ("d2", "a2", "rel", "ag"):
        tot, sub, add = float(s[key]), getattr(S, key), getattr(T, key)
        res = tot - sub + add
        absum = tot - sub + (T.ag_abs if key == "ag" else add)
        if not (tot + sub + abs(add) <= SUM_SLACK * absum) and (tot + sub + abs(add)) > 0:
            raise _Fallback
        sums[key] = res
    g2 = float(s["g2"])
    m.rmse = math.sqrt(max(sums["d2"], 0.0) / n)
    denom = math.sqrt(max(sums["a2"], 0.0)) * math.sqrt(g2)
    m.cosine = sums["ag"] / denom if denom > 0 else (1.0 if sums["d2"] == 0 else 0.0)
    n_rel = n - n_small
    m.mean_rel = sums["rel"] / n_rel if n_rel else None

    # self candidates from the stored lists (recomputed here, so the values are the full path's)
    pool = np.unique(np.concatenate([keep["worst"][:max(top, 1)], keep["abs"][:1],
                                     keep["rel"][:1], keep["small_abs"][:1]]))
    vals = dict(zip(pool.tolist(), zip(*_self_elements(pool, exp, ex, dt, judge)))) if pool.size else {}

    def self_el(f):
        a, g, ad, ulps, bad, _ = vals[int(f)]
        return _element(f, a, g, ad, ulps, bad)

    # max |a - g|: the first element with the largest (ties: lowest flat index)
    el_abs = None
    if keep["abs"].size:
        el_abs = self_el(keep["abs"][0])
    if best_abs is not None:
        other = _element(*best_abs[1:])
        if el_abs is None or (other.abs_err, -other.flat) > (el_abs.abs_err, -el_abs.flat):
            el_abs = other
    m.max_abs = el_abs
    # max relative error on non-small elements
    el_rel, rel_v = None, None
    if n_self_big:
        f = keep["rel"][0]
        el_rel, rel_v = self_el(f), float(vals[int(f)][5])
    if best_rel is not None and (el_rel is None
                                 or (best_rel[0], -best_rel[1]) > (rel_v, -el_rel.flat)):
        el_rel, rel_v = _element(*best_rel[1:]), best_rel[0]
    m.max_rel, m.max_rel_at = rel_v, el_rel
    # max |a - g| of small values
    small_v = None
    if n_self_small:
        small_v = float(vals[int(keep["small_abs"][0])][2])
    if best_small is not None:
        small_v = best_small if small_v is None else max(small_v, best_small)
    m.max_abs_small = small_v
    # worst elements and the max badness
    flats, bads, ads = [], [], []
    els = {}
    for f in keep["worst"][:max(top, 1)].tolist():
        el = self_el(f)
        els[f] = el
        flats.append(f)
        bads.append(el.badness)
        ads.append(el.abs_err)
    for (fm, am, gm, adm, um, bm) in cand:
        for j in range(fm.size):
            f = int(fm[j])
            els[f] = _element(f, am[j], gm[j], adm[j], um[j], bm[j])
            flats.append(f)
            bads.append(float(bm[j]))
            ads.append(float(adm[j]))
    if flats:
        f_arr = np.asarray(flats, np.int64)
        o = np.argsort(f_arr, kind="stable")
        f_arr = f_arr[o]
        b_arr, a_arr = np.asarray(bads)[o], np.asarray(ads)[o]
        m.max_badness = max(bad_m, float(b_arr.max()))
        if top > 0:
            sel = top_order([b_arr, a_arr], top)
            m.worst = [els[int(f)] for f in f_arr[sel]]
    return m
