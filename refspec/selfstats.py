"""Self statistics of a golden output: every metric of the comparator as if the actual output
were the rounded golden itself (actual == ``expected/<name>``), measured against ``exact/<name>``
(spec/tolerances.md, "Report beside the verdict"; docs/compare.md, "How a step is computed").

For an element whose actual bits equal the rounded golden's, its contribution to every metric is
a function of the golden alone. Stored next to each large elementwise output (JSON text in the
attribute ``self_stats`` of ``expected/<name>``, docs/goldens.md), these statistics let the
comparator judge a large output by comparing bit patterns and looking at the exact golden only
where they differ (:mod:`refspec.compare.screen`):

- ``sums``: the float64 sums behind RMSE, cosine similarity and the mean relative error
  (sum (e-g)^2, sum e*g, sum e^2, sum g^2, sum |e-g|/|g| over the non-small elements);
- ``n_small``, ``small_errors``: the small-value counts; ``hist``: the ulp-distance histogram;
- ``abs``, ``rel``, ``small_abs``: the flat indices of the ``top`` elements with the largest
  |e-g|, relative error (non-small elements) and |e-g| among small elements;
- ``rules``: for each element rule the standards give this output's dtype (rtol, atol, rounding
  gate), the number of elements over the rule and the ``top`` worst elements by (badness, |e-g|);
- ``finite``: False when the golden has a NaN, an infinity or a value that rounds to one
  (nothing else is stored then; the comparator takes its full path).

Orderings are total: (key descending, ..., flat index ascending), the order the comparator
reports its maxima and worst elements in. Only outputs of at least ``MIN_ELEMENTS`` elements of
class elementwise get self statistics.
"""

from __future__ import annotations

import json
import math

import numpy as np

__all__ = ["SELF_STATS_VERSION", "MIN_ELEMENTS", "TOP", "STEP", "SelfStatsBuilder",
           "self_stats", "outputs_self_stats", "top_order", "rule_signature", "wants_self_stats",
           "SIGNATURE_STANDARDS", "dumps", "loads"]

SELF_STATS_VERSION = 1
#: smaller outputs get no self statistics: the full path compares 2^20 elements in about 40 ms,
#: while the statistics would cost the generator about 60 ns per element of every such output
MIN_ELEMENTS = 1 << 20
#: length of each stored list of worst elements
TOP = 128
#: elements per step of the computation (bounds its temporaries)
STEP = 1 << 16
#: standards whose element rules are covered (``ratio`` judges by a benchmark instead)
SIGNATURE_STANDARDS = ("default", "ascend-mixed", "torch", "vendor-threshold")


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


class _TopList:
    """The ``T`` first elements seen so far under (keys descending, flat ascending), fed in
    increasing flat order."""

    def __init__(self, nkeys: int, T: int):
        self.T = T
        self.flats = np.empty(0, np.int64)
        self.keys = [np.empty(0) for _ in range(nkeys)]

    def offer(self, flat0: int, pos, keys, kmax: float | None = None) -> None:
        """Elements at flat indices ``flat0 + pos`` (``pos`` ascending; None: 0, 1, ...);
        ``kmax``: max of keys[0] when known."""
        if keys[0].size == 0 or self.T <= 0:
            return
        if self.flats.size >= self.T:    # only elements not below the T-th kept can enter
            if kmax is not None and kmax < self.keys[0][-1]:
                return
            idx = np.flatnonzero(keys[0] >= self.keys[0][-1])
            if idx.size == 0:
                return
            pos = idx if pos is None else pos[idx]
            keys = [k[idx] for k in keys]
        elif pos is None:
            pos = np.arange(keys[0].size)
        sel = top_order(keys, self.T)
        f = np.concatenate((self.flats, flat0 + pos[sel]))
        ks = [np.concatenate((k0, k[sel])) for k0, k in zip(self.keys, keys)]
        by_flat = np.argsort(f, kind="stable")
        f, ks = f[by_flat], [k[by_flat] for k in ks]
        keep = top_order(ks, self.T)
        self.flats, self.keys = f[keep], [k[keep] for k in ks]


def rule_signature(rule, has_sum_abs: bool):
    """What the badness of an element depends on besides the golden: (rtol, atol, rounding
    gate) of an element rule, or None for rules the stored lists never cover (bitwise copies,
    data-dependent atol, hard bound, the float32 evaluation bound with S, the ratio standard)."""
    if rule is None or rule.bitwise or rule.ratio_level or rule.rtol is None:
        return None
    if rule.data_atol or rule.hard_bound or (rule.eval_bound and has_sum_abs):
        return None
    return (float(rule.rtol), float(rule.atol or 0.0), bool(rule.rounding_gate))


class SelfStatsBuilder:
    """Self statistics of one output, fed block by block in C order (``add``), for outputs too
    large to hold (the benchmark writes its golden this way)."""

    def __init__(self, dtype, cls: str = "elementwise", top: int = TOP):
        from .compare.floatinfo import float_info
        from .compare.judge import BlockJudge
        from .compare.metrics import Accumulator
        from .compare.standards import SMALL_VALUES, resolve_rule
        from .dtypes import dtype_name

        self.dtype = np.dtype(dtype)
        self.dtype_name = dtype_name(self.dtype)
        self.info = float_info(self.dtype)
        self.sv, self.e_small = SMALL_VALUES.get(self.dtype_name, SMALL_VALUES["float32"])
        self.top = top
        self.n = 0
        self.finite = True
        self._buf = None
        self.sums = dict.fromkeys(("d2", "ag", "a2", "g2", "rel"), 0.0)
        self.n_small = self.small_errors = 0
        self.hist = np.zeros(24, np.int64)
        self.lists = {"abs": _TopList(1, top), "rel": _TopList(1, top),
                      "small_abs": _TopList(1, top)}
        self.rules = []
        seen = set()
        for std in SIGNATURE_STANDARDS:
            rule = resolve_rule(std, self.dtype_name, cls, None)
            sig = rule_signature(rule, False)
            if sig is None or sig in seen:
                continue
            seen.add(sig)
            judge = BlockJudge(rule, self.dtype, None, Accumulator((self.sv, self.e_small), 0))
            self.rules.append({"sig": sig, "judge": judge, "fails": 0, "list": _TopList(2, top)})

    def add(self, e: np.ndarray, g: np.ndarray) -> None:
        """The next block: ``e`` the rounded golden (output dtype), ``g`` the exact float64."""
        e = np.ascontiguousarray(e).reshape(-1)
        g = np.ascontiguousarray(g, dtype=np.float64).reshape(-1)
        for lo in range(0, e.size, STEP):
            self._step(e[lo:lo + STEP], g[lo:lo + STEP])

    def _step(self, e, g) -> None:
        from .compare.floatinfo import ulp_at_into
        from .compare.metrics import product_sums, ulp_bin_counts

        flat0 = self.n
        self.n += e.size
        if not self.finite:
            return
        info = self.info
        n = e.size
        if self._buf is None:
            self._buf = [np.empty(STEP) for _ in range(7)]
            self._ints = np.empty(STEP, np.int64)
        a, d, ad, ag, ulp, ulps, buf = (b[:n] for b in self._buf)    # reused temporaries
        np.copyto(a, e, casting="unsafe")
        with np.errstate(invalid="ignore", over="ignore"):
            np.subtract(a, g, out=d)
        np.abs(d, out=ad)
        np.abs(g, out=ag)
        # a finite max |e - g| means e and g are finite; max |g| below the overflow threshold
        # that g does not round to an infinity
        ad_max = float(ad.max())
        if not (math.isfinite(ad_max) and float(ag.max()) < info.overflow):
            self.finite = False
            return
        ulp_at_into(ag, info, ulp)
        np.divide(ad, ulp, out=ulps)
        s = self.sums
        for key, v in zip(("d2", "ag", "a2", "g2"), product_sums(a, g, d)):
            s[key] += v
        small = ag < self.sv
        ns = int(np.count_nonzero(small))
        if ns:
            self.n_small += ns
            pos = np.flatnonzero(small)
            ads = ad[pos]
            self.small_errors += int(np.count_nonzero(ads > self.e_small))
            self.lists["small_abs"].offer(flat0, pos, [ads])
        if ns == 0:
            rel = np.divide(ad, ag, out=buf)
            s["rel"] += float(rel.sum())
            self.lists["rel"].offer(flat0, None, [rel])
        elif ns < e.size:
            pos = np.flatnonzero(~small)
            rel = ad[pos] / ag[pos]
            s["rel"] += float(rel.sum())
            self.lists["rel"].offer(flat0, pos, [rel])
        self.hist += ulp_bin_counts(ulps, self._ints[:n])
        self.lists["abs"].offer(flat0, None, [ad], ad_max)
        for r in self.rules:
            bad = r["judge"].badness_into(e, e, ad, ag, ulp, ulps, None, buf)
            bmax = float(bad.max())
            if bmax > 1.0:
                r["fails"] += int(np.count_nonzero(bad > 1.0))
            r["list"].offer(flat0, None, [bad, ad], bmax)

    def finish(self) -> dict:
        """The statistics as a JSON-ready dict (see the module docstring)."""
        out = {"version": SELF_STATS_VERSION, "n": self.n, "dtype": self.dtype_name,
               "finite": self.finite}
        if not self.finite:
            return out
        out.update(small=[self.sv, self.e_small], top=self.top, step=STEP, sums=dict(self.sums),
                   n_small=self.n_small, small_errors=self.small_errors,
                   hist=self.hist.tolist())
        for k, lst in self.lists.items():
            out[k] = lst.flats.tolist()
        out["rules"] = [{"rtol": r["sig"][0], "atol": r["sig"][1], "gate": r["sig"][2],
                         "fails": r["fails"], "worst": r["list"].flats.tolist()}
                        for r in self.rules]
        return out


def self_stats(expected: np.ndarray, exact: np.ndarray, cls: str = "elementwise") -> dict:
    """Self statistics of one output held in memory."""
    b = SelfStatsBuilder(np.asarray(expected).dtype, cls)
    b.add(expected, exact)
    return b.finish()


def wants_self_stats(cls: str | None, size: int, dtype) -> bool:
    """True for outputs that get self statistics: elementwise, at least MIN_ELEMENTS elements,
    a float dtype the comparator knows."""
    from .dtypes import dtype_name
    return (cls == "elementwise" and size >= MIN_ELEMENTS
            and dtype_name(np.dtype(dtype)) in ("float16", "bfloat16", "float32", "float64"))


def outputs_self_stats(expected: dict, exact: dict, terms: dict) -> dict[str, str]:
    """{output: JSON text} for the outputs of one case that get self statistics."""
    out = {}
    for name, e in expected.items():
        e = np.asarray(e)
        t = terms.get(name)
        cls = getattr(t, "comparison_class", None)
        if wants_self_stats(cls, e.size, e.dtype):
            out[name] = dumps(self_stats(e, exact[name], cls))
    return out


def dumps(stats: dict) -> str:
    """JSON text (floats written with repr: they read back exactly)."""
    return json.dumps(stats, separators=(",", ":"), allow_nan=False)


def loads(text) -> dict | None:
    """Parsed self statistics, or None when absent, unreadable or of another version."""
    if text is None:
        return None
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        d = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(d, dict) or d.get("version") != SELF_STATS_VERSION:
        return None
    if d.get("finite") and not all(math.isfinite(v) for v in d["sums"].values()):
        return None
    return d
