"""Several mistakes in one output (docs/compare.md, "Diagnosis"): the failing elements explained
by a cover, not by one winner. The candidate that explains most of them is taken, the elements
it explains set aside, and the rest looked at again (at most ``ROUNDS`` times); so no two
findings of an output claim the same element, and each says the part of the output it explains
(``cos and sin exchanged on d = 0..31 (all 1,536 elements there)``)."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import resolve_dtype
from ..judging.floatinfo import float_info, ulp_at
from .findings import EXPLAINS, KINDS, Finding, Subject, count, finite
from .regions import inside, where

__all__ = ["ROUNDS", "MIN_SHARE", "MIN_ELEMENTS", "PART_AXES", "PART_RANGES", "PART_HELD",
           "CHANCE", "NEAR", "SAME", "MIN_COVER", "choose", "explains_all", "claims"]

#: findings of one output at most (rounds of the cover)
ROUNDS = 4
#: a finding that explains part of what is left explains at least this share of the output's
#: failing elements, and this many
MIN_SHARE, MIN_ELEMENTS = 0.1, 8
#: and the part it explains is simple: along at most this many axes, in at most this many
#: ranges (or one parity) in all, and the kernel agrees with it at this share of the elements
#: there
PART_AXES, PART_RANGES, PART_HELD = 2, 3, 0.97
#: a finding that explains part of the failing elements explains this many times more of them
#: than its values shuffled do (what chance agreement explains)
CHANCE = 4
#: a candidate that agrees with most of what is left explains (is clearly not the golden at) at
#: least one in this many of the elements it agrees with
NEAR = 4
#: a finding names at most this many others that explain exactly what it does
SAME = 3
#: partial explanations alone (none explaining most of what was left) are kept only when
#: together they explain at least this share of the failing elements: a few elements explained
#: among many that nothing explains are what chance gives among hundreds of candidates
MIN_COVER = 0.5


def claims(f: Finding, fail: np.ndarray, covers: bool = False) -> np.ndarray:
    """The failing elements a candidate finding explains, or (``covers``) agrees with (a
    finding without them, from a function written before the cover: all of them when it
    explains ``EXPLAINS``)."""
    mask = f.covers if covers and f.covers is not None else f.claims
    if mask is not None:
        return mask
    return fail if f.agreement >= EXPLAINS else np.zeros_like(fail)


def explains_all(s: Subject, found: list[Finding], fail: np.ndarray) -> bool:
    """Whether one of the candidate findings explains every failing element and agrees with
    every element read (no other candidate can explain more: the search may stop)."""
    n = fail.sum()
    return any(claims(f, fail, covers=True).sum() == n and (f.values is None or _overall(s, f)
               == f.values.size) for f in found)


def choose(s: Subject, fail: np.ndarray, pool: list[Finding]) -> tuple[list[Finding], np.ndarray]:
    """The cover: findings best first (each explaining the most of what is left, ties broken by
    the most elements of the output agreeing, by ``KINDS``, by the order of the candidates;
    reported by the share they explain, then in the order of the parts they explain) and the
    failing elements none explains. A candidate that explains only part of what is left is
    taken when that part is no chance (``_clean_part``, ``_beyond_chance``); partial
    explanations alone that leave most of the failing elements unexplained are dropped
    (``MIN_COVER``)."""
    n = int(fail.sum())
    least = max(MIN_ELEMENTS, int(np.ceil(MIN_SHARE * n)))
    rest, chosen, strong = fail.copy(), [], False
    pool = list(pool)
    while pool and len(chosen) < ROUNDS and rest.any():
        # (ranked by what they explain, and by what they agree with besides: a candidate
        # near the golden at some elements explains fewer of them than it agrees with)
        gains = [int((claims(f, fail) & rest).sum()) + int((claims(f, fail, covers=True) &
                                                            rest).sum()) for f in pool]
        taken = None
        for i in _ranked(s, pool, gains):
            f = pool[i]
            gain = int((claims(f, fail) & rest).sum())
            mine = claims(f, fail, covers=True) & rest
            covered = int(mine.sum())      # (with the elements where it is near the golden)
            most = (covered >= EXPLAINS * rest.sum() and NEAR * gain >= covered
                    and (not chosen or gain >= least))
            if most or (gain >= least and _clean_part(s, f, mine)
                        and _beyond_chance(s, f, rest, gain)):
                taken = i
                break
        if taken is None:
            break
        strong = strong or most
        f = pool.pop(taken)
        same = _same(s, f, pool, fail, rest)
        chosen.append((int(np.argmax(mine)), _with_part(s, f, mine, n, same)))
        rest &= ~mine
    if not strong and (fail & ~rest).sum() < MIN_COVER * n:
        return [], fail.copy()
    chosen.sort(key=lambda c: (-round(c[1].agreement, 3), c[0]))
    return [f for _, f in chosen], rest


def _ranked(s: Subject, pool: list[Finding], gains: list[int]):
    """The indices of the candidates that explain some of what is left, the most first (ties:
    the most elements of the output agreeing, ``KINDS``, the order of the candidates)."""
    order = {k: i for i, k in enumerate(KINDS)}
    for gain in sorted({g for g in gains if g > 0}, reverse=True):
        tied = [i for i, g in enumerate(gains) if g == gain]
        if len(tied) > 1:
            tied.sort(key=lambda i: (-_overall(s, pool[i]), order.get(pool[i].kind, len(order)),
                                     i))
        yield from tied


def _clean_part(s: Subject, f: Finding, mine: np.ndarray) -> bool:
    """A partial explanation names a simple part of the output (``PART_AXES``,
    ``PART_RANGES``) and the kernel agrees with the candidate at nearly every element there
    (``PART_HELD``): a mistake in part of a kernel, not values that match by chance."""
    text, part = where(s, mine)
    if not text:
        return False
    if "axes" in part:
        ranges = [1 if _parity(r) else len(r) for r in part["axes"].values()]
        if len(ranges) > PART_AXES or sum(ranges) > PART_RANGES:
            return False
    region = inside(s, part)
    agree = s.agree(f.values) if f.values is not None else mine
    return float(agree[region].mean()) >= PART_HELD


def _parity(ranges: list) -> bool:
    """Runs of single indices two apart (odd or even positions)."""
    return len(ranges) > 2 and all(hi == lo + 1 for lo, hi in ranges) and \
        all(b[0] - a[0] == 2 for a, b in zip(ranges, ranges[1:]))


def _same(s: Subject, f: Finding, pool: list, fail, rest) -> list[Finding]:
    """The other candidates that explain exactly what ``f`` does, here and over the output
    (taken out of the pool: the data cannot tell them apart), at most ``SAME``."""
    mine, overall = claims(f, fail, covers=True) & rest, _overall(s, f)
    same = [g for g in pool if (claims(g, fail) & rest).sum() == mine.sum()
            and np.array_equal(claims(g, fail, covers=True) & rest, mine)
            and _overall(s, g) == overall]
    for g in same:
        pool.remove(g)
    return same[:SAME]


def _overall(s: Subject, f: Finding) -> int:
    """How many of the elements read agree with a candidate (the one that agrees with more of
    the output wins a tie)."""
    if f.values is None:
        return -1
    if f.overall is None:
        f.overall = int(s.agree(f.values).sum())
    return f.overall


def _beyond_chance(s: Subject, f: Finding, rest: np.ndarray, gain: int) -> bool:
    """A partial explanation is no coincidence: the candidate's values, shuffled, explain far
    fewer of the elements left (a fill or a constant candidate is exact, never chance)."""
    v = f.values
    if v is None:
        return True
    finite_ = v[np.isfinite(v)]
    if finite_.size == 0 or np.all(finite_ == finite_[0]):
        return True
    shuffled = v[np.random.default_rng(0).permutation(v.size)]
    at = np.flatnonzero(rest)
    by_chance = int((s.agree(shuffled, at) & s.distinct(shuffled, at)).sum())
    return gain >= CHANCE * by_chance + 1


def _with_part(s: Subject, f: Finding, mine: np.ndarray, n: int, same=()) -> Finding:
    """The finding as reported: the share of the failing elements it explains (``agreement``),
    its summary with the part of the output it explains, and the candidates that explain
    exactly the same (``detail["same_as"]``; ``(or: ...)`` in the summary)."""
    f = _or_same(f, same)
    k = int(mine.sum())
    detail = dict(f.detail)
    detail["explained"] = k
    agree = s.agree(f.values) if f.values is not None else None
    if agree is not None:
        detail["elements"] = round(float(agree.mean()), 6)
        detail["worst_ulps"] = finite(_worst_ulps(s, f.values))
    if agree is not None and agree.all():
        own = f.part is not None and "{count}" in f.part       # a fill says it its own way
        read = " read" if s.sampled else ""
        return Finding(f.kind, f.summary if own else
                       f"{f.summary}: all {count(agree.size)} elements{read} agree with it", k / n,
                       detail)
    text, part = where(s, mine)
    detail["part"] = part
    if not text:
        if k == n and f.values is None:
            return Finding(f.kind, f.summary, k / n, detail)
        return Finding(f.kind, f"{f.summary}: {count(k)} of the {count(n)} failing elements",
                       k / n, detail)
    region = inside(s, part)
    held = int((agree if agree is not None else mine)[region].sum())
    there = " read there" if s.sampled else " there"      # (a slice: the elements read)
    there = (f"all {count(region.sum())} elements{there}" if held == region.sum() else
             f"{count(held)} of the {count(region.sum())} elements{there}")
    summary = (f.part or f.summary + " on {where}").format(where=text, count=there)
    if "{count}" not in (f.part or ""):
        summary += f" ({there})"
    return Finding(f.kind, summary, k / n, detail)


def _or_same(f: Finding, same) -> Finding:
    """``f`` with the summaries of the candidates indistinguishable from it."""
    if not same:
        return f
    also = "; ".join(g.summary for g in same)
    detail = {**f.detail, "same_as": [{"kind": g.kind, "summary": g.summary, **g.detail}
                                      for g in same]}
    return Finding(f.kind, f"{f.summary} (or: {also})", f.agreement, detail, f.claims, f.covers,
                   f.values, f.part and f.part.replace(f.summary, f"{f.summary} (or: {also})"),
                   f.overall)


def _worst_ulps(s: Subject, values: np.ndarray) -> float:
    info = float_info(resolve_dtype(s.dtype))
    with np.errstate(all="ignore"):
        ulps = np.abs(s.a - values) / ulp_at(np.abs(values), info)
    ulps = ulps[np.isfinite(ulps)]
    return float(ulps.max()) if ulps.size else float("inf")
