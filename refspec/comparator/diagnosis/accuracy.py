"""Accuracy findings (docs/compare.md, "Diagnosis"): every failing element within what
rounding in the output's dtype can do (``precision``), or errors beyond that which have the size
of a narrower arithmetic, evaluated by the spec (``precision`` with its ``cause``); the exact
value rounded another way (``rounding``); the bits of the other 16-bit dtype (``dtype``)."""

from __future__ import annotations

from itertools import groupby
from typing import NamedTuple

import numpy as np

from ...ops.hypotheses import rotation_terms
from ...spec.dtypes import resolve_dtype, round_to
from ...spec.errors import AclnnError
from ..judging.floatinfo import bits_of, float_info, ulp_at
from ..judging.twins import read_as_twin
from .candidates import (copies, fills, hypotheses, multiples, own_hypotheses, permutations,
                         twins)
from .findings import (EXPLAINS, PRECISION_FACTOR, SPEC_BUDGET, SPEC_ELEMENTS, Finding,
                       Subject, share)

__all__ = ["precision", "arithmetic_cause", "roundings", "rounded_toward_zero", "twin_dtype",
           "NARROWER", "SIZE_FACTOR", "BEYOND_ONE_ROUNDING", "ROUNDING_LIKE", "EQUALLY_GOOD"]

#: the dtypes a kernel may accumulate in or read its inputs through
NARROWER = ("bfloat16", "float16", "float32")
#: a cause explains the errors' size when the kernel's RMS error and its largest error are each
#: within this factor of the cause's
SIZE_FACTOR = 3.0
#: a cause is sought only when the kernel's RMS error is at least this many times that of the
#: golden rounded once to the output dtype (a kernel computing in that dtype stays below it)
BEYOND_ONE_ROUNDING = 4.0
#: errors look like rounding when every failing element is within this fraction of the
#: magnitude of its terms (S, or |g|)
ROUNDING_LIKE = 2.0 ** -2
#: what the kernel may have written instead: an arithmetic cause is named only when none of
#: these explains the failing elements (a small logic error can have a rounding's size)
LOGIC = (twins, fills, copies, multiples, own_hypotheses, permutations, hypotheses)
#: causes whose score (the sum of |log| of the two size ratios) is within this of the best are
#: equally good; the first of them (the simplest) is named
EQUALLY_GOOD = 0.3


def precision(s: Subject, fail: np.ndarray) -> Finding | None:
    """Every failing element within ``PRECISION_FACTOR`` times what rounding in the output's
    dtype allows: half an ulp of the result plus (K + 2) roundings of the sum of |terms| (S; |g|
    when none is known); a 16-bit kernel's own arithmetic stays within it, unless arithmetic
    narrower than the output's dtype (bfloat16 for a float16 output) explains their size
    (``arithmetic_cause``). Beyond it, when the errors still look like rounding (within
    ``ROUNDING_LIKE`` of their terms), the narrower arithmetic that explains their size, if one
    does."""
    a, g = s.a[fail], s.g[fail]
    if not (np.isfinite(a).all() and np.isfinite(g).all()):
        return None
    info = float_info(resolve_dtype(s.dtype))
    u = 2.0 ** -(info.mant + 1)
    scale = np.abs(g) if s.S is None else np.maximum(s.S[fail], np.abs(g))
    bound = PRECISION_FACTOR * (ulp_at(np.abs(g), info) / 2 + ((s.K or 0) + 2) * u * scale)
    err = np.abs(a - g)
    if not (err <= bound).all():
        return arithmetic_cause(s, fail) if (err <= ROUNDING_LIKE * scale).all() else None
    narrower = arithmetic_cause(s, fail, below=s.dtype)
    if narrower is not None:
        return narrower
    ulps = err / ulp_at(np.abs(g), info)
    worst = float(ulps.max())
    of_bound = float((err / bound).max()) * PRECISION_FACTOR
    n = int(fail.sum())
    return Finding("precision", f"floating-point accuracy, not a logic error: the {n} failing "
                   f"elements are at most {worst:.3g} ulps of {s.dtype} off, within "
                   f"{of_bound:.2g}x the rounding error of {s.dtype} arithmetic on their terms",
                   1.0, {"worst_ulps": worst, "of_arithmetic_bound": of_bound,
                         "failing": n, "terms": "sum_abs" if s.S is not None else "golden"})


def arithmetic_cause(s: Subject, fail: np.ndarray, below=None) -> Finding | None:
    """Errors beyond one rounding of the output dtype, of the size a narrower arithmetic gives:
    the case (or the slice of it the elements read belong to: ``Subject.inputs``) evaluated by
    the spec with the documented sums accumulated in a narrower dtype (the spec's
    ``sum_dtype``: every partial sum rounded, in the stated order), with a rotation's products
    rounded to one before they are added, or with inputs read through one (an input, the
    inputs of one shape, all of them), rounded to the output dtype, as many causes as
    ``SPEC_BUDGET`` input elements allow (``below``: only dtypes narrower than that one, the
    output's, for errors within its own arithmetic's). Sought only when the kernel's RMS error
    is at least ``BEYOND_ONE_ROUNDING`` times that of the golden rounded once; a cause's errors
    must be beyond one rounding too, and its RMS and largest error each within ``SIZE_FACTOR``
    of the kernel's. Rounded products and inputs read through a dtype give the kernel's own
    numbers, so such a cause also needs the failing elements to agree with its values
    (``EXPLAINS`` of them, by the case's standard); for the sums only the errors' size is
    compared (a kernel adds in its own order). A cause the values agree with is preferred; of
    the others within ``EQUALLY_GOOD`` of the closest size, the first in the order above (the
    simplest) is named. Errors of the same size from arithmetic not evaluated here (noise) get
    no cause. No cause is named when one of ``LOGIC`` explains the failing elements."""
    record, inputs = s.record, s.inputs
    if record is None or inputs is None:
        return None
    cost = sum(int(np.size(v)) for v in inputs.values() if v is not None)
    if cost > SPEC_ELEMENTS:
        return None
    dt = resolve_dtype(s.dtype)
    mine = _sizes(np.abs(s.a - s.g))
    once = _sizes(np.abs(round_to(s.g, dt).astype(np.float64) - s.g))
    if mine[0] < BEYOND_ONE_ROUNDING * once[0]:
        return None
    found = []
    causes = _causes(record, record.call_of(s.params, inputs), s.params, dt,
                     _bits(below or np.float64))
    for i, (cause, what, detail, call) in enumerate(causes):
        if (i + 1) * cost > SPEC_BUDGET:
            break
        values = _cause_output(record, call, s.name, s.g.size, dt)
        if values is None:
            continue
        theirs = _sizes(np.abs(values - s.g))
        if theirs[0] <= 1.5 * once[0] or not np.isfinite(theirs).all():
            continue                    # no more than one rounding of the output: no cause
        ratios = mine / np.maximum(theirs, np.finfo(float).tiny)
        if (ratios > SIZE_FACTOR).any() or (ratios < 1 / SIZE_FACTOR).any():
            continue
        agree = float(s.agree(values)[fail].mean())
        if ("inputs" in detail or isinstance(call, Products)) and agree < EXPLAINS:
            continue                    # (they give the kernel's numbers themselves)
        found.append((agree, float(np.abs(np.log(ratios)).sum()), cause, what, detail, theirs))
    if not found or _logic_explains(s, fail):
        return None
    return _cause_finding(s, fail, dt, mine, _best(found))


def _cause_finding(s: Subject, fail: np.ndarray, dt, mine: np.ndarray, best: tuple) -> Finding:
    """The ``precision`` finding that names the cause ``best`` (``arithmetic_cause``)."""
    agree, _, cause, what, detail, theirs = best
    worst = float((np.abs(s.a - s.g)[fail] / ulp_at(np.abs(s.g[fail]), float_info(dt))).max())
    n = int(fail.sum())
    return Finding("precision", f"narrower arithmetic than the golden's: the {n} failing "
                   f"elements (at most {worst:.3g} ulps of {s.dtype} off) have the size of the "
                   f"errors {what}: RMS {mine[0]:.2g} against {theirs[0]:.2g}, largest "
                   f"{mine[1]:.2g} against {theirs[1]:.2g} (the spec evaluated so)", 1.0,
                   {"cause": cause, **detail, "worst_ulps": worst, "failing": n,
                    "elements_agreeing": round(agree, 6),
                    "rms_ratio": round(float(mine[0] / theirs[0]), 3),
                    "largest_ratio": round(float(mine[1] / theirs[1]), 3)})


def _best(found: list) -> tuple:
    """Of the causes found, ``(agreement, size distance, ...)``: the ones whose values the
    kernel's agree with best when they reach ``EXPLAINS``, then the first within
    ``EQUALLY_GOOD`` of the closest size."""
    matched = max(f[0] for f in found)
    if matched >= EXPLAINS:                 # the kernel's values themselves: the best match
        found = [f for f in found if f[0] == matched]
    least = min(f[1] for f in found)
    return next(f for f in found if f[1] <= least + EQUALLY_GOOD)


def _logic_explains(s: Subject, fail: np.ndarray) -> bool:
    """Whether a stage of ``LOGIC`` explains the failing elements (the spec budget it spends is
    given back: the diagnosis that follows spends its own)."""
    golden_agrees = 1.0 - float(fail.mean())
    spent, tried = s.spent, s.tried
    try:
        return any(f.agreement >= EXPLAINS
                   for stage in LOGIC for f in stage(s, fail, golden_agrees))
    finally:
        s.spent, s.tried = spent, tried


def _sizes(err: np.ndarray) -> np.ndarray:
    """The RMS and the largest of an error array."""
    return np.array([float(np.sqrt(np.mean(err ** 2))), float(err.max())])


def _bits(dtype) -> int:
    return float_info(resolve_dtype(dtype)).mant


def _causes(record, call, params: dict, out_dtype, below: int):
    """(cause, what it does, detail, spec call) for each narrower arithmetic: the sums
    accumulated in a dtype narrower than a correct kernel's accumulator (float32; float64 for
    float64 outputs), a rotation's products rounded to it before they are added (the spec call
    a ``Products`` of the cos term, the sin term and what passes through:
    ``refspec.ops.hypotheses.rotation_terms``), then the float inputs read through a dtype
    narrower than their own; only dtypes of fewer than ``below`` mantissa bits."""
    acc = min(below, _bits(np.float64 if out_dtype == np.float64 else np.float32))
    terms = rotation_terms(record, call, params)
    for name in NARROWER:
        if _bits(name) < acc:
            yield (f"{name} accumulation", f"of sums accumulated in {name} (in the spec's order)",
                   {"dtype": name}, call._replace(attrs={**call.attrs, "sum_dtype": name}))
    for name in NARROWER:
        if _bits(name) < acc and terms is not None:
            yield (f"products rounded to {name}", f"of the products rounded to {name} before "
                   "they are added", {"dtype": name}, Products(name, *terms))
    floats = {k: np.asarray(v) for k, v in call.inputs.items()
              if v is not None and np.asarray(v).dtype.kind == "f" and np.size(v) > 1}
    by_shape = sorted(floats, key=lambda k: floats[k].shape)
    groups = [(k,) for k in floats]
    groups += [g for g in (tuple(v) for _, v in groupby(by_shape, key=lambda k: floats[k].shape))
               if 1 < len(g) < len(floats)]
    groups += [tuple(floats)] if len(floats) > 1 else []
    for name in NARROWER:
        for group in groups:
            if any(_bits(name) >= min(below, _bits(floats[k].dtype)) for k in group):
                continue
            read = {k: round_to(floats[k], name).astype(floats[k].dtype) for k in group}
            what = f"of reading {', '.join(group)} through {name}"
            yield (f"inputs read as {name}", what, {"dtype": name, "inputs": list(group)},
                   call._replace(inputs={**call.inputs, **read}))


class Products(NamedTuple):
    """The rotation's products, each rounded to ``dtype`` before they are added."""

    dtype: str
    cos_term: object
    sin_term: object
    through: object


def _cause_output(record, how, name: str, size: int, out_dtype) -> np.ndarray | None:
    """Output ``name`` under a cause: the spec on a call (``_spec_output``), or the rotation's
    products (the spec's exact terms) each rounded to a dtype, added, rounded to the output's
    dtype."""
    if not isinstance(how, Products):
        return _spec_output(record, how, name, size)
    exact = [_spec_output(record, call, name, size, np.float64)
             for call in (how.cos_term, how.sin_term, how.through)]
    if any(v is None for v in exact):
        return None
    *products, through = exact
    with np.errstate(all="ignore"):
        narrow = [round_to(p - through, resolve_dtype(how.dtype)).astype(np.float64)
                  for p in products]
        return round_to(narrow[0] + narrow[1] + through, out_dtype).astype(np.float64)


def _spec_output(record, call, name: str, size: int, out_dtype=None) -> np.ndarray | None:
    """Output ``name`` of the spec on ``call``, rounded to its dtype, as float64 in memory
    order (None when the spec rejects the call, e.g. ``sum_dtype`` on an operator without
    documented sums)."""
    try:
        with np.errstate(all="ignore"):
            value = record.call(call, out_dtype=out_dtype).get(name)
    except (AclnnError, ValueError, TypeError, IndexError, KeyError):
        return None
    if value is None or np.size(value) != size:
        return None
    return np.asarray(value, np.float64).reshape(-1)


def roundings(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The kernel's bits equal the exact golden rounded another way: toward zero, half away
    from zero, or twice (through float32 first) instead of once to nearest-even."""
    dt = resolve_dtype(s.dtype)
    if dt == np.float64:
        return []
    nearest = bits_of(round_to(s.g, dt))
    ways = {"toward_zero": rounded_toward_zero(s.g, dt), "half_away": _rounded_half_away(s.g, dt)}
    if dt.itemsize < 4:
        ways["double"] = round_to(round_to(s.g, np.float32).astype(np.float64), dt)
    mine = bits_of(s.raw)
    out = []
    for mode, values in ways.items():
        bits = bits_of(values)
        differs = bits != nearest
        if differs.sum() < 2:
            continue
        matches = float((mine[differs] == bits[differs]).mean())
        explains = float((mine[fail] == bits[fail]).mean())
        if matches >= EXPLAINS and explains >= EXPLAINS:
            words = {"toward_zero": "truncated (rounded toward zero)",
                     "half_away": "rounded half away from zero",
                     "double": "rounded twice (to float32, then to " + s.dtype + ")"}[mode]
            out.append(Finding("rounding", f"the values are the exact result {words} instead of "
                               f"to nearest-even: {share(matches)} of the {int(differs.sum())} "
                               "elements where the two differ", explains,
                               {"mode": mode, "elements": int(differs.sum())}))
    return out


def rounded_toward_zero(g: np.ndarray, dt) -> np.ndarray:
    """g rounded toward zero to ``dt``: the nearest value, stepped back one place where it lies
    farther from zero than g."""
    r = round_to(g, dt)
    with np.errstate(all="ignore"):
        r64 = r.astype(np.float64)
        over = np.isfinite(r64) & (np.abs(r64) > np.abs(g))
    step = _step_in(r)
    r = r.copy()
    r[over] = step[over]
    return r


def _rounded_half_away(g: np.ndarray, dt) -> np.ndarray:
    """g rounded to nearest with ties away from zero."""
    r = round_to(g, dt)
    r64 = r.astype(np.float64)
    away = _step_out(r)
    with np.errstate(all="ignore"):
        tie = (np.abs(np.abs(away.astype(np.float64) - g) - np.abs(r64 - g)) == 0) & \
              (np.abs(away.astype(np.float64)) > np.abs(r64))
    r = r.copy()
    r[tie] = away[tie]
    return r


def _step_in(r: np.ndarray) -> np.ndarray:
    """One place toward zero (any float dtype, by its bits)."""
    b = bits_of(r).copy()
    nz = (b & ~_sign_mask(b.dtype)) != 0
    b[nz] -= 1
    return b.view(r.dtype)


def _step_out(r: np.ndarray) -> np.ndarray:
    """One place away from zero (any float dtype, by its bits)."""
    b = bits_of(r).copy() + 1
    return b.view(r.dtype)


def _sign_mask(dt) -> int:
    return dt.type(1 << (dt.itemsize * 8 - 1))


def twin_dtype(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The other 16-bit dtype: the kernel's bits are its (``refspec.comparator.judging.twins``,
    the test of the judge's hint), and read as it they explain the failing elements."""
    reading = read_as_twin(s.raw, s.g, s.dtype)
    if reading is None or not reading.holds:
        return []
    twin, overall = reading.twin, reading.share
    explains = float(reading.agree[fail].mean())
    if explains < EXPLAINS:
        return []
    return [Finding("dtype", f"the bits are {twin}: read as {twin}, {share(overall)} of the "
                    f"elements agree with the golden (was {twin} written where {s.dtype} is "
                    "expected?)", explains, {"as": twin, "elements": round(overall, 6)})]
