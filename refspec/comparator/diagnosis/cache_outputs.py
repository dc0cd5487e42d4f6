"""Why a cache updated in place failed (docs/compare.md, "Diagnosis", "Caches"): the record's
hypotheses (``Comparison.hypotheses``: ``refspec.ops.cache_hypotheses``, an attribute's other
value), then, unless one of those explains the whole cache, those generated for every operator
(``refspec.ops.hypotheses.GENERATED``: an input left out, its sign, ...), each evaluated by the
spec and judged over the whole cache the way the cache comparison judges it
(``judging.caches``): at the offsets the variant writes, its values by their class (quantised
codes within the arithmetic error of their exact value, float values by the output's rule),
everywhere else bit-identical to the cache the kernel was given.

A variant explains a failing element of the cache where the kernel agrees with it there and
what it leaves there would fail; the findings are a cover (at most ``ROUNDS``, the one that
explains most first), each saying the share of the failing elements and of the slots they lie
in that it explains. Changes outside the index that no variant explains are an ``outside``
finding (what they hold); written values that none explains are ``unexplained``. A case whose
inputs hold more than ``SPEC_ELEMENTS`` elements is not re-evaluated: its finding points to the
verdict. The spec's outputs of a case are kept for its other cache while they hold at most
``candidates.MEMO_ELEMENTS``. Two caches are compared only where either touches them when that
is a small part (``SPARSE``); a cache with many failing elements screens each candidate on a
sample of them first (``SCREENED``, ``SAMPLE``, ``SCREEN_SHARE``)."""

from __future__ import annotations

from typing import NamedTuple
from weakref import WeakKeyDictionary

import numpy as np

from ...ops.cache_hypotheses import SLOT_LETTERS, CacheWrite
from ...ops.hypotheses import GENERATED, Variant
from ...spec.dtypes import round_to
from ...spec.quant_dtypes import decode, is_quant_dtype, round_code, round_value
from ..judging.agreement import agrees
from ..judging.caches import named_shape
from ..judging.quantised import arithmetic_error
from ..judging.streaming import plan_blocks
from .accuracy import rounded_toward_zero
from .candidates import MEMO_ELEMENTS, on_some_profile
from .cover import CHANCE, MIN_ELEMENTS, MIN_SHARE, ROUNDS, SAME
from .findings import SPEC_ELEMENTS, SPEC_VARIANTS, Finding, count

__all__ = ["diagnose_cache"]

#: a comparison looks only at the offsets two caches touch when they are under 1/SPARSE of it
SPARSE = 16
#: with more than SCREENED failing elements, a candidate is judged over the whole cache only
#: when the kernel agrees with it on SCREEN_SHARE of SAMPLE failing elements, evenly spaced
SCREENED, SAMPLE, SCREEN_SHARE = 1 << 14, 1 << 12, 0.05


def _within(sorted_at: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``sorted_at``, positions in ``offsets``) of the offsets it holds."""
    i = np.minimum(np.searchsorted(sorted_at, offsets), sorted_at.size - 1)
    k = np.flatnonzero(sorted_at[i] == offsets)
    return i[k], k


class _Written(NamedTuple):
    """What a candidate leaves in the cache: the flat offsets it writes, their exact values and
    sums of |terms| (None: none), how they are rounded, the offsets it sets to 0 (or None)."""

    offsets: np.ndarray
    values: np.ndarray
    S: np.ndarray | None
    rounding: str = "nearest"
    saturate: bool = True
    zeroed: np.ndarray | None = None


class _Cache:
    """The cache being diagnosed: the kernel's (``raw``, in its dtype) and the one it was
    given, flat in memory order, in its named shape and axis letters."""

    def __init__(self, golden, given, raw, rule):
        self.golden, self.rule = golden, rule
        self.dtype = np.dtype(golden.dtype)
        self.shape, self.axes = named_shape(golden), golden.axes
        self.given, self.raw = given, raw
        self._changed = None
        self.a = self._values(raw)

    def _values(self, raw):
        return decode(raw) if is_quant_dtype(self.dtype) else raw.astype(np.float64)

    def bits(self, x):
        return np.ascontiguousarray(x).view(f"u{self.dtype.itemsize}")

    def touched(self, w: _Written | None) -> np.ndarray:
        """The offsets where what ``w`` leaves (the kernel's cache for None) may differ from
        the cache given: everywhere else it holds the given bits."""
        if w is None:
            if self._changed is None:
                self._changed = np.flatnonzero(self.bits(self.raw) != self.bits(self.given))
            return self._changed
        return w.offsets if w.zeroed is None else np.concatenate((w.offsets, w.zeroed))

    def rounded(self, w: _Written) -> np.ndarray:
        """A candidate's values rounded once its way, in the cache's dtype."""
        if is_quant_dtype(self.dtype):
            return round_code(w.values, self.dtype, w.rounding, w.saturate)
        if w.rounding == "toward_zero":
            return rounded_toward_zero(w.values, self.dtype)
        return round_to(w.values, self.dtype)

    def left(self, w: _Written | None, at: np.ndarray | None = None) -> np.ndarray:
        """The cache a candidate leaves (the kernel's for None), whole or at the sorted
        offsets ``at``, which hold every offset it touches."""
        if w is None:
            return self.raw if at is None else self.raw[at]
        out = self.given.copy() if at is None else self.given[at]

        def put(offsets, values):
            out[offsets if at is None else np.searchsorted(at, offsets)] = values
        if w.zeroed is not None:
            put(w.zeroed, np.zeros(1, self.dtype))
        put(w.offsets, self.rounded(w))
        return out

    def near(self, w: _Written, raw: np.ndarray) -> np.ndarray:
        """At the offsets ``w`` writes: does ``raw`` (what is there) pass were ``w`` the golden
        (codes within the arithmetic error of their exact value, float values by the rule)?"""
        a = self._values(raw)
        if is_quant_dtype(self.dtype):
            e = arithmetic_error(w.S, self.golden.K, w.offsets.size)
            with np.errstate(invalid="ignore"):
                lo = round_value(w.values - e, self.dtype, w.rounding, w.saturate)
                hi = round_value(w.values + e, self.dtype, w.rounding, w.saturate)
            return (a == lo) | (a == hi) | ((lo <= hi) & (a >= lo) & (a <= hi))
        return agrees(self.rule, self.golden.dtype_name, self.golden.K, a, raw, w.values, w.S)

    def screen(self, w: _Written, sample: np.ndarray) -> float:
        """The share of the sorted offsets ``sample`` where the kernel's cache agrees with
        what ``w`` leaves."""
        held = self.given[sample]
        if w.zeroed is not None:
            held[_within(sample, w.zeroed)[0]] = np.zeros(1, self.dtype)
        i, k = _within(sample, w.offsets)
        part = w._replace(offsets=sample[i], values=w.values[k],
                          S=None if w.S is None else w.S[k], zeroed=None)
        held[i] = self.rounded(part)
        raw = self.raw[sample]
        ok = self.bits(raw) == self.bits(held)
        ok[i] |= self.near(part, raw[i])
        return float(ok.mean())

    def agree(self, w: _Written, other: _Written | None = None) -> np.ndarray:
        """Per element: would the cache ``other`` leaves (the kernel's for None) pass were
        ``w`` the golden? Where neither touches the cache both hold the cache given, so when
        they touch a small part of it (under ``1/SPARSE``) only that part is compared."""
        touched = np.concatenate((self.touched(w), self.touched(other)))
        if touched.size * SPARSE < self.given.size:
            ok = np.ones(self.given.size, bool)
            at = np.sort(touched)
            at = at[np.r_[True, at[1:] != at[:-1]]]              # each offset once
            held = self.left(other, at)
            ok[at] = self.bits(held) == self.bits(self.left(w, at))
            raw = held[np.searchsorted(at, w.offsets)]
        else:
            held = self.left(other)
            ok = self.bits(held) == self.bits(self.left(w))
            raw = held[w.offsets]
        ok[w.offsets] |= self.near(w, raw)
        return ok

    def slots(self, mask: np.ndarray) -> int:
        """How many slots hold an element of ``mask``."""
        pos = [i for i, ch in enumerate(self.axes) if ch in SLOT_LETTERS] \
            if len(self.axes) == len(self.shape) else []
        where = np.flatnonzero(mask)
        if not pos:
            return int(where.size)
        idx = np.unravel_index(where, self.shape)
        return int(np.unique(np.ravel_multi_index([idx[i] for i in pos],
                                                  [self.shape[i] for i in pos])).size)


#: zero written at the offsets the index names (a value never computed)
_ZERO = Variant("zero", "zero written at the slots of the index (never computed?)",
                {"written": 0}, None)
#: per case (while it is alive): the spec's outputs and terms of each call evaluated
_MEMOS: WeakKeyDictionary = WeakKeyDictionary()


def diagnose_cache(case, golden, actual, rule, record) -> list[Finding]:
    """The findings of one failing cache output, best first (module docstring)."""
    name = golden.name
    n = int(np.prod(golden.shape, dtype=np.int64))
    written = np.asarray(case.written[name][()], np.int64)
    exact = np.asarray(golden.exact[()], np.float64).reshape(-1)
    S = np.asarray(case.sum_abs[name][()], np.float64).reshape(-1) if name in case.sum_abs \
        else None
    if record is None or sum(int(np.prod(case.inputs[k].shape, dtype=np.int64))
                             for k in case.input_names) > SPEC_ELEMENTS:
        return [_measured(golden, n)]
    given = np.ascontiguousarray(case.inputs[name][()]).reshape(-1)
    raw = np.concatenate([np.asarray(actual.read(k, f0, c)).reshape(-1)
                          for k, f0, c in plan_blocks(tuple(actual.shape), 1 << 22)])
    c = _Cache(golden, given, raw.astype(given.dtype, copy=False), rule)
    gold = _Written(written, exact, S)
    fail = ~c.agree(gold)
    if not fail.any():
        return [_measured(golden, n)]
    total, slots = int(fail.sum()), c.slots(fail)
    where = np.flatnonzero(fail)
    sample = where[np.linspace(0, where.size - 1, SAMPLE).astype(np.int64)] \
        if where.size > SCREENED else None
    scored = []
    for group, families in (("own", record.comparison.hypotheses), ("generated", GENERATED)):
        pool = list(_candidates(case, record, c, name, group, families))
        if group == "own":             # (before the generated ones: a fill is no computation)
            pool.append((_ZERO, _Written(written, np.zeros(written.size), None)))
        for v, w in pool:
            if sample is not None and c.screen(w, sample) < SCREEN_SHARE:
                continue
            agreed = c.agree(w)
            claims = _claims(c, gold, fail, w, agreed)
            if claims.any():
                scored.append((v, w, claims, bool(agreed.all())))
        if any(whole and claims.sum() == total for _, _, claims, whole in scored):
            break                      # one of the record's own explains the whole cache
    chosen, rest = _cover(c, gold, fail, scored)
    out = [_finding(c, v, mine, whole, same, total, slots) for v, mine, whole, same in chosen]
    if rest.any():
        out += _left(c, gold, rest, total, slots)
    return out


def _candidates(case, record, c: _Cache, name: str, group: str, families):
    """(variant, what it leaves written) of each hypothesis of ``families`` that applies to a
    cache (at most ``SPEC_VARIANTS``): the spec's values at the offsets its terms say it
    writes, moved where the ``CacheWrite`` says."""
    params = record.upgrade_params(case.params)
    try:
        memo = _MEMOS.setdefault(case, {})
    except TypeError:
        memo = {}
    call = record.call_of(params, dict(case.input_arrays()))
    tried = 0
    for fi, family in enumerate(families):
        try:
            variants = family(record, call, params)
        except (TypeError, ValueError):   # inputs it cannot vary (HiFloat8 caches have no sign)
            continue
        for vi, v in enumerate(variants):
            how = v.after if isinstance(v.after, CacheWrite) else None
            if v.parts or (v.after is not None and how is None):
                continue
            tried += 1
            if tried > SPEC_VARIANTS:
                return
            how = how or CacheWrite()
            key = (group, fi, vi) if v.call is not call else "base"
            got = memo[key] if key in memo else _evaluate(record, v.call)
            held = 0 if got is None else sum(int(np.size(getattr(x, "values", x)))
                                             for x in got[0].values() if x is not None)
            if key not in memo and memo.get("elements", 0) + held <= MEMO_ELEMENTS:
                memo[key] = got
                memo["elements"] = memo.get("elements", 0) + held
            if got is None or name not in got[0] or name not in got[1]:
                continue
            writes, terms = got[0][name], got[1][name]
            offsets = np.asarray(terms.written, np.int64)
            if (writes.cache.size != c.given.size or offsets.size == 0
                    or not np.array_equal(writes.offsets, offsets)):
                continue
            x = np.asarray(writes.values, np.float64)
            S = None if terms.sum_abs is None else np.asarray(terms.sum_abs, np.float64).reshape(-1)
            zeroed = None
            if how.moved is not None:
                offsets = how.moved(offsets, c.shape, c.axes, c.dtype)
                if offsets is None:
                    continue
            if how.cleared is not None:
                zeroed = how.cleared(offsets, c.shape, c.axes)
                if zeroed is None:
                    continue
            yield v, _Written(np.asarray(offsets, np.int64), x, S, how.rounding, how.saturate,
                              zeroed)


def _evaluate(record, call):
    """The spec's exact outputs (a cache as ``CacheWrites``: the cache given and the exact
    values written, never widened whole) and the record's terms of a call (None when
    rejected; ``candidates.on_some_profile``)."""
    return on_some_profile(lambda one: (dict(record.call(one, out_dtype=np.float64,
                                                         whole_caches=False)),
                                        record.generation.terms(one)), call)


def _cover(c: _Cache, gold: _Written, fail: np.ndarray, scored: list):
    """The candidates ``scored`` ((variant, what it leaves, the failing elements it explains,
    whether the whole cache agrees with it)) that explain most of the failing elements left,
    in turn: (variant, the failing elements it explains, whether the whole cache agrees with it,
    the variants that explain exactly the same) and the failing elements left. A candidate that
    explains part of them explains ``CHANCE`` times more than its values shuffled among its
    offsets do."""
    n = int(fail.sum())
    least = max(MIN_ELEMENTS, int(np.ceil(MIN_SHARE * n)))
    scored = list(scored)
    rest, chosen = fail.copy(), []
    while scored and len(chosen) < ROUNDS and rest.any():
        gains = [int((claims & rest).sum()) for _, _, claims, _ in scored]
        best = int(np.argmax(gains))
        gain, left = gains[best], int(rest.sum())
        v, w, claims, whole = scored[best]
        if gain == 0 or (gain < left and (gain < least or not _beyond_chance(c, gold, rest, w))):
            break
        mine = claims & rest
        same = [x for x in scored if np.array_equal(x[2] & rest, mine)]
        scored = [x for x in scored if not any(x is y for y in same)]
        chosen.append((v, mine, whole, [x[0] for x in same if x[0] is not v]))
        rest &= ~claims
    return chosen, rest


def _claims(c: _Cache, gold: _Written, fail: np.ndarray, w: _Written,
            agreed: np.ndarray | None = None) -> np.ndarray:
    """The failing elements where the kernel agrees with a candidate (``agreed``, when known)
    and what the candidate leaves would fail."""
    claims = (c.agree(w) if agreed is None else agreed) & fail
    return claims & ~c.agree(gold, w) if claims.any() else claims


def _beyond_chance(c: _Cache, gold: _Written, rest: np.ndarray, w: _Written) -> bool:
    """A partial explanation is no coincidence (saturated codes agree anywhere; a token written
    elsewhere leaves the slots it should have written as given, whatever went where): at the
    offsets the candidate writes, it explains some of the elements left, and far more than its
    values shuffled among them do."""
    order = np.random.default_rng(0).permutation(w.values.size)
    shuffled = w._replace(values=w.values[order], S=None if w.S is None else w.S[order])
    at = np.zeros(rest.size, bool)
    at[w.offsets] = True
    gain = int((_claims(c, gold, rest, w) & at).sum())
    by_chance = int((_claims(c, gold, rest, shuffled) & at).sum())
    return gain >= CHANCE * by_chance + 1


def _finding(c: _Cache, v, mine: np.ndarray, whole: bool, same: list, total: int,
             slots: int) -> Finding:
    k, ks = int(mine.sum()), c.slots(mine)
    summary = v.summary + (f" (or: {'; '.join(x.summary for x in same[:SAME])})" if same else "")
    if whole:
        text = (f"{summary}: all {count(total)} failing elements ({count(slots)} slots) agree "
                "with it, and every other element of the cache")
    else:
        text = (f"{summary} on {count(k)} of the {count(total)} failing elements ({count(ks)} "
                f"of the {count(slots)} slots that fail)")
    detail = {**v.detail, "explained": k, "slots": ks, "failing_slots": slots}
    if same:
        detail["same_as"] = [{"kind": x.kind, "summary": x.summary, **x.detail}
                             for x in same[:SAME]]
    return Finding(v.kind, text, k / total, detail)


def _left(c: _Cache, gold: _Written, rest: np.ndarray, total: int, slots: int) -> list[Finding]:
    """What no candidate explains: changes outside the index (``outside``, with what they
    hold), written values (``unexplained``)."""
    inside = np.zeros(rest.size, bool)
    inside[gold.offsets] = True
    out = []
    outside = rest & ~inside
    if outside.any():
        k, ks = int(outside.sum()), c.slots(outside)
        held = c.a[outside]
        what = ("all 0" if (held == 0).all() else
                f"all {held[0]:.7g}" if (held == held[0]).all() else "other values")
        out.append(Finding("outside", f"{count(ks)} slots outside the index changed "
                           f"({count(k)} elements, {what}) that no hypothesis explains", k / total,
                           {"explained": 0, "elements": k, "slots": ks, "held": what}))
    wrong = rest & inside
    if wrong.any():
        k = int(wrong.sum())
        out.append(Finding("unexplained", f"{count(k)} of the {count(total)} failing elements "
                           f"are written values no hypothesis explains ({count(c.slots(wrong))} "
                           f"of the {count(slots)} slots that fail)", k / total,
                           {"failing": k, "slots": c.slots(wrong)}))
    return out


def _measured(golden, n: int) -> Finding:
    """The finding of a cache not re-evaluated (its case too large for the spec's hypotheses,
    or no failing element found where the verdict found some): the verdict's statement."""
    return Finding("unexplained", f"the cache ({count(n)} elements) is diagnosed from its "
                   "verdict only (its message above)", 0.0, {"failing": None, "read": 0})
