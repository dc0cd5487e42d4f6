"""The failing elements nothing explains, measured (docs/compare.md, "Diagnosis",
``unexplained``): how many, how far off in ulps of the output dtype and relative to their sums
of |terms| (median, 99th percentile, worst), whether they are spread like rounding (no position
holds more of them than chance, errors growing with the sum of |terms|) or structured, and where
they lie."""

from __future__ import annotations

import numpy as np

from ...spec.dtypes import resolve_dtype
from ..judging.floatinfo import float_info, ulp_at
from .findings import Finding, Subject, count
from .regions import where

__all__ = ["unexplained", "spread", "Z_LIMIT", "GROWS"]

#: an index along an axis holding a share of the failing elements this many standard deviations
#: away from the share over all the elements read makes them structured along that axis
Z_LIMIT = 5.0
#: a rank correlation of the errors with the sums of |terms| of at least this says they grow
#: with them
GROWS = 0.3
#: errors like rounding are at most this share of their sums of |terms| (median), or, without
#: those, this many ulps
ROUNDING_SIZE, ROUNDING_ULPS = 2.0 ** -6, 64.0


def _percentiles(x: np.ndarray) -> dict | None:
    x = x[np.isfinite(x)]
    if not x.size:
        return None
    med, p99 = np.percentile(x, [50, 99])
    return {"median": float(med), "p99": float(p99), "worst": float(x.max())}


def _three(p: dict | None, unit: str) -> str:
    if p is None:
        return ""
    return f"{p['median']:.3g} / {p['p99']:.3g} / {p['worst']:.3g} {unit}"


def _rank_correlation(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rank correlation of x and y (None for fewer than 8 pairs or no spread)."""
    if x.size < 8:
        return None
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _uneven_axis(s: Subject, mask: np.ndarray) -> tuple[str, float, float] | None:
    """An axis along which the share of ``mask``'s elements among those read varies beyond
    chance: (its name, the smallest and the largest share), or None."""
    if not s.shape:
        return None
    p = float(mask.mean())
    if p in (0.0, 1.0):
        return None
    idx = np.unravel_index(s.flat, s.shape)
    for ax, name in enumerate(s.axis_names):
        n = np.bincount(idx[ax], minlength=s.shape[ax])
        k = np.bincount(idx[ax][mask], minlength=s.shape[ax])
        seen = n > 0
        if seen.sum() < 4:
            continue
        rate = k[seen] / n[seen]
        z = np.abs(rate - p) / np.sqrt(p * (1 - p) / n[seen])
        if z.max() > Z_LIMIT:
            return name.lower(), float(rate.min()), float(rate.max())
    return None


def spread(s: Subject, mask: np.ndarray, small: bool = True) -> dict:
    """How the elements of ``mask`` lie and grow: ``where`` (text, detail) when they hold only
    part of an axis, ``uneven`` (axis, least share, largest share) when their share varies along
    one beyond chance, ``correlation`` of |a - g| with the sums of |terms| (None without
    them), ``like_rounding`` when none of the first two holds, the errors are ``small`` (of a
    rounding's size) and grow with S (or S is unknown)."""
    text, detail = where(s, mask)
    uneven = None if text else _uneven_axis(s, mask)
    corr = None
    if s.S is not None:
        a, g, S = s.a[mask], s.g[mask], s.S[mask]
        ok = np.isfinite(a) & np.isfinite(g) & (S > 0)
        corr = _rank_correlation(np.abs(a - g)[ok], S[ok])
    flat = not text and uneven is None
    return {"where": (text, detail), "uneven": uneven, "correlation": corr,
            "like_rounding": flat and small and (corr is None or corr >= GROWS)}


def _spread_text(sp: dict) -> str:
    text, _ = sp["where"]
    if text:
        return f"structured: they lie at {text}"
    if sp["uneven"] is not None:
        axis, lo, hi = sp["uneven"]
        return f"structured: their share varies along {axis} (from {lo:.0%} to {hi:.0%})"
    corr = sp["correlation"]
    if corr is None:
        return ("spread like rounding: no position holds more of them than chance" if
                sp["like_rounding"] else "spread over the output (no position holds more of "
                "them than chance), but larger than rounding")
    if sp["like_rounding"]:
        return ("spread like rounding: no position holds more of them than chance, growing "
                f"with the sum of |terms| (rank correlation {corr:.2f})")
    why = "larger than rounding" if corr >= GROWS else "not growing with the sum of |terms|"
    return (f"spread over the output, but {why} (rank correlation with the sum of |terms| "
            f"{corr:.2f})")


def unexplained(s: Subject, rest: np.ndarray, n_fail: int) -> Finding:
    """The ``unexplained`` finding of the failing elements ``rest`` (the last one: nothing
    before it explains them)."""
    k = int(rest.sum())
    a, g = s.a[rest], s.g[rest]
    info = float_info(resolve_dtype(s.dtype))
    with np.errstate(all="ignore"):
        err = np.abs(a - g)
        ulps = _percentiles(err / ulp_at(np.abs(g), info))
        rel = None if s.S is None else _percentiles(err / s.S[rest])
    nonfinite = int((~(np.isfinite(a) & np.isfinite(g))).sum())
    small = (rel["median"] <= ROUNDING_SIZE if rel is not None else
             ulps is not None and ulps["median"] <= ROUNDING_ULPS)
    sp = spread(s, rest, small)
    whole = s.failing_total
    read = "" if whole is None or whole == n_fail else f" (of {count(whole)} in the whole output)"
    head = (f"{count(k)} of the {count(n_fail)} failing elements{read} no hypothesis explains"
            if k < n_fail else f"{count(k)} failing elements{read}, no hypothesis explains them")
    parts = [head]
    if ulps is not None:
        parts.append(f"errors {_three(ulps, 'ulps of ' + s.dtype)} (median / 99th percentile / "
                     "worst)" + (f", {_three(rel, 'of the sum of |terms|')}" if rel else ""))
    if nonfinite:
        parts.append(f"{count(nonfinite)} of them NaN or Inf")
    parts.append(_spread_text(sp))
    detail = {"failing": k, "ulps": ulps, "of_sum_abs": rel, "nonfinite": nonfinite,
              "spread": "rounding" if sp["like_rounding"] else "structured"
              if sp["where"][0] or sp["uneven"] else "other",
              "rank_correlation": sp["correlation"], "part": sp["where"][1]}
    return Finding("unexplained", "; ".join(parts), 0.0, detail)
