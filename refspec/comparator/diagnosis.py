"""Why an output failed (docs/compare.md, "Diagnosis"): a short ranked list of findings, each
backed by a measurement on the failing output.

The diagnosis sees one failing output as a ``Subject``: the kernel's values and the exact
golden (a sample of at most ``SAMPLE_ELEMENTS`` elements, whole rows of the leading axes), the
sums of absolute terms, and the case (its inputs, its other outputs, its operator record). It
asks, in turn:

- is every failing element within what floating-point arithmetic in the output's dtype can do
  (``precision``: errors growing with the sum of absolute terms)? Then that is the whole
  diagnosis, with the rounding mode or 16-bit dtype that explains the bits where one does;
- is the output unwritten or filled (``zero``, ``constant``, ``nonfinite``), a copy of an input
  or of another output (``copy``), the golden's negative or a multiple of it (``sign``,
  ``scale``), the golden with an axis permuted (``permuted``)?
- does the spec itself, under one of the record's hypotheses (``refspec.ops.hypotheses``:
  another attribute value, cos and sin exchanged, a reduction over fewer axes, ...), give what
  the kernel wrote (``alternative``, ``sign``, ``reduction``)?
- where do the failing elements lie along each named axis (``region``)?

Agreement is measured by the case's own standard (``Rule``): an element "agrees" with a
candidate when it would pass were the candidate the golden. ``Finding.agreement`` is the
fraction of the failing elements the finding explains; a candidate is reported only when it
explains at least ``EXPLAINS`` of them and agrees with more of the whole output than the
golden does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import ops
from ..spec.dtypes import resolve_dtype, round_to
from ..spec.errors import AclnnError
from .elementwise import agrees
from .floatinfo import float_info, ulp_at
from .standards import resolve_rule

__all__ = ["Finding", "Subject", "diagnose", "KINDS", "SAMPLE_ELEMENTS", "EXPLAINS"]

#: the vocabulary of findings, in the order of the docs
KINDS = ("precision", "sign", "scale", "zero", "constant", "nonfinite", "copy", "permuted",
         "region", "alternative", "reduction", "rounding", "dtype")
#: at most this many elements of an output are diagnosed (whole rows of its leading axes)
SAMPLE_ELEMENTS = 1 << 20
#: a case whose inputs hold more elements than this is not re-evaluated under hypotheses
SPEC_ELEMENTS = 1 << 22
#: a candidate must explain this fraction of the failing elements
EXPLAINS = 0.9
#: wall-clock seconds the spec hypotheses of one output may take
BUDGET_SECONDS = 2.0
#: a precision error is within this multiple of the arithmetic bound: half an ulp of the result
#: plus K + 2 roundings of the sum of |terms| (products, sum, the K-term accumulation)
PRECISION_FACTOR = 1.5


@dataclass
class Finding:
    """One finding: its ``kind`` (``KINDS``), a one-line ``summary``, the fraction of the
    failing elements it explains, and the measurements behind it."""

    kind: str
    summary: str
    agreement: float
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary,
                "agreement": round(float(self.agreement), 6), "detail": self.detail}

    def line(self) -> str:
        return f"{self.kind}: {self.summary}"


@dataclass
class Subject:
    """A failing output as the diagnosis sees it. ``a`` and ``g`` (float64) are the kernel's
    values and the exact golden on the sampled elements, whose flat indices are ``flat``;
    ``shape``/``axes`` the whole output's; ``S`` the sums of |terms| (or None); ``case`` the
    golden case and ``record`` its operator (None: no spec hypotheses)."""

    name: str
    dtype: str
    shape: tuple
    axes: str
    rule: object
    K: int | None
    a: np.ndarray
    g: np.ndarray
    flat: np.ndarray
    raw: np.ndarray
    S: np.ndarray | None = None
    cls: str | None = None
    case: object = None
    record: object = None
    others: dict = field(default_factory=dict)

    @property
    def sampled(self) -> bool:
        return self.flat.size < int(np.prod(self.shape, dtype=np.int64))

    def agree(self, candidate: np.ndarray) -> np.ndarray:
        """Per sampled element: would it pass were ``candidate`` the golden?"""
        return agrees(self.rule, self.dtype, self.K, self.a, self.raw, candidate, self.S)


def diagnose(subject: Subject) -> list[Finding]:
    """The findings for one failing output, best first (see the module docstring)."""
    s = subject
    fail = ~s.agree(s.g)
    if not fail.any():
        return []
    precision = _precision(s, fail)
    if precision is not None:
        return [precision] + _roundings(s, fail) + _twin_dtype(s, fail)
    golden_agrees = 1.0 - float(fail.mean())
    found = []
    for stage in (_fills, _copies, _multiples, _permutations, _hypotheses):
        found += stage(s, fail, golden_agrees)
        if any(_complete(f) for f in found):
            break                      # an explanation of every element: no need to look on
    else:
        found += _roundings(s, fail) + _twin_dtype(s, fail)
    order = {k: i for i, k in enumerate(("zero", "nonfinite", "constant", "copy", "alternative",
                                         "reduction", "sign", "permuted", "scale", "rounding",
                                         "dtype"))}
    found.sort(key=lambda f: (-round(f.agreement, 3), order.get(f.kind, 99)))
    return _dedupe(found) + _regions(s, fail)


def _complete(f: Finding) -> bool:
    """A finding that explains every failing element and agrees with the whole output."""
    return f.agreement >= 1 and f.detail.get("elements", 0) >= 1


def _dedupe(found: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in found:
        key = (f.kind, f.summary)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _explained(s: Subject, fail: np.ndarray, candidate: np.ndarray,
               after_rounding: np.ndarray | None = None) -> tuple[float, float, float]:
    """(fraction of the failing elements that agree with ``candidate`` (or with
    ``after_rounding``), fraction of all the sampled elements that do, worst ulps of the
    kernel's values from it)."""
    ok = s.agree(candidate)
    if after_rounding is not None:
        ok |= s.a == after_rounding
    info = float_info(resolve_dtype(s.dtype))
    with np.errstate(all="ignore"):
        ulps = np.abs(s.a - candidate) / ulp_at(np.abs(candidate), info)
    finite = ulps[np.isfinite(ulps)]
    worst = float(finite.max()) if finite.size else float("inf")
    return float(ok[fail].mean()), float(ok.mean()), worst


def _candidate(s, fail, golden_agrees, candidate, kind, summary, detail,
               after_rounding=None) -> list[Finding]:
    """A finding for ``candidate`` when it explains enough failing elements and agrees with
    more of the output than the golden does. ``after_rounding``: the same mistake made after
    the result was rounded to the output dtype (a scale applied to the rounded value); an
    element agrees with either."""
    if candidate is None or candidate.shape != s.g.shape:
        return []
    explains, overall, worst = _explained(s, fail, candidate, after_rounding)
    if explains < EXPLAINS or overall <= golden_agrees:
        return []
    detail = {**detail, "elements": round(overall, 6), "worst_ulps": _finite(worst)}
    n = int(fail.sum())
    how = (f"all {s.a.size} elements agree with it" if overall >= 1 else
           f"{_share(overall)} of the elements agree with it"
           + ("" if explains >= 1 else f", {_share(explains)} of the {n} failing ones"))
    return [Finding(kind, f"{summary}: {how}", explains, detail)]


def _share(x: float) -> str:
    return "all" if x >= 1 else f"{x:.1%}"


def _finite(x: float):
    return x if np.isfinite(x) else str(x)


# --- precision --------------------------------------------------------------------------------

def _precision(s: Subject, fail: np.ndarray) -> Finding | None:
    """Every failing element within ``PRECISION_FACTOR`` times what rounding in the output's
    dtype allows: half an ulp of the result plus (K + 2) roundings of the sum of |terms| (S; |g|
    when none is known)."""
    a, g = s.a[fail], s.g[fail]
    if not (np.isfinite(a).all() and np.isfinite(g).all()):
        return None
    info = float_info(resolve_dtype(s.dtype))
    u = 2.0 ** -(info.mant + 1)
    scale = np.abs(g) if s.S is None else np.maximum(s.S[fail], np.abs(g))
    bound = PRECISION_FACTOR * (ulp_at(np.abs(g), info) / 2 + ((s.K or 0) + 2) * u * scale)
    err = np.abs(a - g)
    if not (err <= bound).all():
        return None
    ulps = err / ulp_at(np.abs(g), info)
    worst = float(ulps.max())
    of_bound = float((err / bound).max()) * PRECISION_FACTOR
    n = int(fail.sum())
    return Finding("precision", f"floating-point accuracy, not a logic error: the {n} failing "
                   f"elements are at most {worst:.3g} ulps of {s.dtype} off, within "
                   f"{of_bound:.2g}x the rounding error of {s.dtype} arithmetic on their terms",
                   1.0, {"worst_ulps": worst, "of_arithmetic_bound": of_bound,
                         "failing": n, "terms": "sum_abs" if s.S is not None else "golden"})


def _roundings(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The kernel's bits equal the exact golden rounded another way: toward zero, half away
    from zero, or twice (through float32 first) instead of once to nearest-even."""
    dt = resolve_dtype(s.dtype)
    if dt == np.float64:
        return []
    nearest = _bits(round_to(s.g, dt))
    ways = {"toward_zero": _rounded_toward_zero(s.g, dt), "half_away": _rounded_half_away(s.g, dt)}
    if dt.itemsize < 4:
        ways["double"] = round_to(round_to(s.g, np.float32).astype(np.float64), dt)
    mine = _bits(s.raw)
    out = []
    for mode, values in ways.items():
        bits = _bits(values)
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
                               f"to nearest-even: {_share(matches)} of the {int(differs.sum())} "
                               "elements where the two differ", explains,
                               {"mode": mode, "elements": int(differs.sum())}))
    return out


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.uint16 if x.itemsize == 2 else np.uint32 if x.itemsize == 4 else np.uint64)


def _rounded_toward_zero(g: np.ndarray, dt) -> np.ndarray:
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
    b = _bits(r).copy()
    nz = (b & ~_sign_mask(b.dtype)) != 0
    b[nz] -= 1
    return b.view(r.dtype)


def _step_out(r: np.ndarray) -> np.ndarray:
    """One place away from zero (any float dtype, by its bits)."""
    b = _bits(r).copy() + 1
    return b.view(r.dtype)


def _sign_mask(dt) -> int:
    return dt.type(1 << (dt.itemsize * 8 - 1))


_TWINS = {"float16": "bfloat16", "bfloat16": "float16"}


def _twin_dtype(s: Subject, fail: np.ndarray) -> list[Finding]:
    """The other 16-bit dtype: the kernel's bits read as it agree with the golden."""
    twin = _TWINS.get(s.dtype)
    if twin is None:
        return []
    other = np.ascontiguousarray(s.raw).view(np.uint16).view(resolve_dtype(twin))
    standard = "default" if s.rule.ratio_level else s.rule.standard
    rule = resolve_rule(standard, twin, s.cls, s.K)
    ok = agrees(rule, twin, s.K, other.astype(np.float64), other, s.g, s.S)
    explains, overall = float(ok[fail].mean()), float(ok.mean())
    if explains < EXPLAINS or overall < 0.99:
        return []
    return [Finding("dtype", f"the bits are {twin}: read as {twin}, {_share(overall)} of the "
                    f"elements agree with the golden (was {twin} written where {s.dtype} is "
                    "expected?)", explains, {"as": twin, "elements": round(overall, 6)})]


# --- fills, copies, multiples, permutations ---------------------------------------------------

def _fills(s: Subject, fail: np.ndarray, golden_agrees: float = 0.0) -> list[Finding]:
    """The failing elements hold 0, one constant, or NaN/Inf."""
    a = s.a[fail]
    n = a.size
    whole = "the whole output" if fail.all() else f"{n} failing elements"
    nonfinite = ~np.isfinite(a)
    if nonfinite.mean() >= EXPLAINS:
        nan = int(np.isnan(a).sum())
        what = "NaN" if nan == n else "Inf" if nan == 0 else "NaN or Inf"
        return [Finding("nonfinite", f"{whole} {'is' if fail.all() else 'are'} {what} where the "
                        "golden is finite (a NaN fill, or an overflow)", float(nonfinite.mean()),
                        {"nan": nan, "inf": int(nonfinite.sum()) - nan})]
    zero = a == 0
    if zero.mean() >= EXPLAINS:
        return [Finding("zero", f"{whole} {'is' if fail.all() else 'are'} zero where the golden "
                        "is not (never written?)", float(zero.mean()),
                        {"all": bool((s.a == 0).all()), "elements": float((s.a == 0).mean())})]
    values, counts = np.unique(a, return_counts=True)
    top = int(np.argmax(counts))
    if counts[top] / n >= EXPLAINS and n > 1:
        c = float(values[top])
        verb = "holds" if fail.all() else "hold"
        return [Finding("constant", f"{whole} {verb} the constant {c:.7g} (a fill?)",
                        float(counts[top] / n), {"value": c})]
    return []


def _copies(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The kernel's values equal one of the case's inputs or another output's golden, read in
    memory order."""
    out = []
    for label, values in s.others.items():
        out += _candidate(s, fail, golden_agrees, values, "copy", f"equal to {label}",
                          {"of": label})
    return out


def _multiples(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The golden's negative; a constant multiple of it (least squares on the failing
    elements)."""
    out = _candidate(s, fail, golden_agrees, -s.g, "sign", "the golden's negative", {})
    if out:
        return out
    a, g = s.a[fail], s.g[fail]
    ok = np.isfinite(a) & np.isfinite(g)
    gg = float(np.dot(g[ok], g[ok]))
    if gg == 0:
        return []
    c = float(np.dot(a[ok], g[ok])) / gg
    if not np.isfinite(c) or abs(c) < 1e-12 or abs(abs(c) - 1) < 1e-3:
        return []
    c = _round_factor(c)
    rounded = round_to(c * round_to(s.g, resolve_dtype(s.dtype)).astype(np.float64),
                       resolve_dtype(s.dtype)).astype(np.float64)
    return _candidate(s, fail, golden_agrees, c * s.g, "scale", f"the golden times {c:.6g}",
                      {"factor": c}, rounded)


def _round_factor(c: float) -> float:
    """A least-squares factor as the simple number it estimates (2, 0.5, 1/8, 3) when it is
    within 1e-3 of one."""
    for simple in (round(c), 1 / round(1 / c) if abs(c) < 1 else c):
        if simple and abs(c / simple - 1) < 1e-3:
            return float(simple)
    return c


def _permutations(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The golden with the halves or pairs of the last axis exchanged, or an axis reversed or
    shifted by one."""
    if len(s.shape) == 0 or s.sampled:
        full = None
    else:
        full = s.g.reshape(s.shape)
    if full is None:
        return []
    letters = s.axes if len(s.axes) == len(s.shape) else "".join(f"{i}" for i in range(len(s.shape)))
    out = []
    D = s.shape[-1]
    tries = []
    if D % 2 == 0 and D > 1:
        h = D // 2
        tries.append((-1, "halves exchanged", np.concatenate([full[..., h:], full[..., :h]], -1)))
        pairs = full.reshape(s.shape[:-1] + (h, 2))[..., ::-1].reshape(s.shape)
        tries.append((-1, "pairs exchanged", pairs))
    big = [ax for ax, size in enumerate(s.shape) if size > 1]
    for i, ax in enumerate(big):
        tries += [(ax, "transposed with " + letters[other], np.swapaxes(full, ax, other))
                  for other in big[i + 1:]]
    for ax in big:
        tries.append((ax, "reversed", np.flip(full, ax)))
        tries.append((ax, "shifted by one", np.roll(full, 1, ax)))
    for ax, how, values in tries:
        name = letters[ax]
        out += _candidate(s, fail, golden_agrees, np.ascontiguousarray(values).reshape(-1),
                          "permuted", f"the golden with {name.lower()} {how}",
                          {"axis": name, "how": how})
        if out:
            return out
    return out


# --- the spec under the record's hypotheses ---------------------------------------------------

def _hypotheses(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """Each variant of the record's hypotheses evaluated by the spec (docstring of
    ``refspec.ops.hypotheses``), within ``BUDGET_SECONDS``."""
    record, case = s.record, s.case
    if record is None or case is None or not record.comparison.hypotheses or s.sampled:
        return []
    inputs = case.input_arrays()
    if sum(int(np.size(v)) for v in inputs.values() if v is not None) > SPEC_ELEMENTS:
        return []
    call = record.call_of(case.params, inputs)
    params = record.upgrade_params(case.params)
    start, out = time.monotonic(), []
    for hypothesis in record.comparison.hypotheses:
        for variant in hypothesis(record, call, params):
            if time.monotonic() - start > BUDGET_SECONDS:
                return out
            values = _evaluate(record, variant.call, s.name, s.g.size)
            out += _candidate(s, fail, golden_agrees, values, variant.kind, variant.summary,
                              dict(variant.detail))
        if any(_complete(f) for f in out):
            return out                 # this hypothesis explains every element
    return out


def _evaluate(record, call, name: str, size: int) -> np.ndarray | None:
    """The spec's exact value of output ``name`` for a variant call, in memory order (None when
    the spec rejects the call or gives another number of elements). A call the chip profile
    rejects (a pattern its kernel has no plan for) is evaluated by the math-only profile: the
    formula is what a mistaken kernel computes."""
    result = None
    for soc in dict.fromkeys((call.soc, None)):
        try:
            with np.errstate(all="ignore"):
                result = record.call(call._replace(soc=soc))
            break
        except (AclnnError, ValueError, TypeError, IndexError, KeyError):
            continue
    if result is None:
        return None
    value = result.get(name)
    if value is None or np.size(value) != size:
        return None
    return np.asarray(value, np.float64).reshape(-1)


def exact_terms(record, case, name: str) -> np.ndarray | None:
    """The sums of absolute terms of one output when the golden file has none (16-bit
    elementwise outputs): the spec's terms of the case on its inputs in float32."""
    try:
        inputs = {k: (v if v is None or np.asarray(v).dtype.kind in "iu" else
                      np.asarray(v).astype(np.float32)) for k, v in case.input_arrays().items()}
        terms = record.generation.terms(record.call_of(case.params, inputs))
    except Exception:  # noqa: BLE001 - the bound falls back to |g|
        return None
    t = terms.get(name)
    return None if t is None or t.sum_abs is None else np.asarray(t.sum_abs, np.float64)


# --- where ------------------------------------------------------------------------------------

def _regions(s: Subject, fail: np.ndarray) -> list[Finding]:
    """Where the failing elements lie: along each axis, the indices that hold them when they
    are part of it (a tail, a first part, a half of D, odd or even positions); the first wrong
    element in memory order when every element before it is right."""
    out = []
    if not s.shape:
        return out
    idx = np.unravel_index(s.flat[fail], s.shape)
    letters = s.axes if len(s.axes) == len(s.shape) else "".join(str(i) for i in range(len(s.shape)))
    sample_idx = np.unravel_index(s.flat, s.shape)
    for ax, size in enumerate(s.shape):
        if size < 2:
            continue
        seen = np.unique(sample_idx[ax])
        hit = np.unique(idx[ax])
        if hit.size == seen.size:
            continue
        out.append(_axis_region(letters[ax], size, hit, seen))
    first = int(s.flat[fail][0])
    if not s.sampled and first >= 16 and fail[first:].mean() >= 0.5:
        out.append(Finding("region", f"every element before flat index {first}{_pow2(first)} is "
                           "right; from it on most are wrong", 1.0,
                           {"axis": "flat", "ranges": [[first, int(s.flat[-1]) + 1]]}))
    return out


def _axis_region(letter: str, size: int, hit: np.ndarray, seen: np.ndarray) -> Finding:
    ranges = _runs(hit)
    name = letter.lower()
    parity = ""
    if hit.size > 1 and (hit % 2 == hit[0] % 2).all() and (seen % 2 != hit[0] % 2).any():
        parity = "odd" if hit[0] % 2 else "even"
    if parity:
        text = f"only at {parity} {name}"
    elif len(ranges) == 1 and size % 2 == 0 and ranges[0] == [size // 2, size]:
        text = f"only in the second half of {name} ({name} = {size // 2}..{size - 1})"
    elif len(ranges) == 1 and size % 2 == 0 and ranges[0] == [0, size // 2]:
        text = f"only in the first half of {name} ({name} = 0..{size // 2 - 1})"
    else:
        shown = ", ".join(f"{lo}" if hi == lo + 1 else f"{lo}..{hi - 1}" for lo, hi in ranges[:6])
        more = f" and {len(ranges) - 6} more ranges" if len(ranges) > 6 else ""
        tail = ""
        if len(ranges) == 1 and ranges[0][1] == size and ranges[0][0] > 0:
            tail = f" (the tail from {ranges[0][0]}{_pow2(ranges[0][0])})"
        text = f"only at {name} = {shown}{more}{tail}"
    detail = {"axis": letter, "ranges": ranges[:64], "indices": int(hit.size), "of": int(size)}
    if parity:
        detail["parity"] = parity
    return Finding("region", f"the failing elements lie {text}: {hit.size} of {size} indices",
                   1.0, detail)


def _runs(sorted_idx: np.ndarray) -> list[list[int]]:
    """Contiguous runs of sorted indices as [start, stop) pairs."""
    if sorted_idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_idx) != 1)
    starts = np.concatenate([[sorted_idx[0]], sorted_idx[breaks + 1]])
    stops = np.concatenate([sorted_idx[breaks], [sorted_idx[-1]]]) + 1
    return [[int(a), int(b)] for a, b in zip(starts, stops)]


def _pow2(n: int) -> str:
    """`` (= 3 x 2^9)`` when n is a multiple of 2^k for k >= 4."""
    if n <= 0:
        return ""
    k = (n & -n).bit_length() - 1
    return f" (= {n >> k} x 2^{k})" if k >= 4 else ""


# --- reading a failing output -----------------------------------------------------------------

def sample_rows(shape: tuple, limit: int = SAMPLE_ELEMENTS) -> np.ndarray | None:
    """Indices along the first axis to diagnose (evenly spaced, the first and the last among
    them) when the output holds more than ``limit`` elements; None: all of it."""
    n = int(np.prod(shape, dtype=np.int64))
    if n <= limit or not shape:
        return None
    row = n // shape[0]
    keep = max(1, limit // max(row, 1))
    return np.unique(np.linspace(0, shape[0] - 1, keep).round().astype(np.int64))


def read_subject(case, name: str, actual, rule, golden, record=None) -> Subject:
    """The ``Subject`` of one failing output: ``actual`` an ``ActualArray``, ``golden`` what the
    judge knows of the output (``dtype_name``, ``shape``, ``axes``, ``K``, ``exact``). An output
    larger than ``SAMPLE_ELEMENTS`` is read in whole rows of its first axis (``sample_rows``)
    and gets no spec hypotheses."""
    shape = tuple(golden["shape"])
    rows = sample_rows(shape)
    n = int(np.prod(shape, dtype=np.int64))
    row = n // shape[0] if shape else 1
    if rows is None:
        keys = [(tuple(slice(None) for _ in shape), 0, n)]
        flat = np.arange(n, dtype=np.int64)
    else:
        keys = [((int(i),), int(i) * row, row) for i in rows]
        flat = (rows[:, None] * row + np.arange(row)).reshape(-1)
    raw = np.concatenate([np.asarray(actual.read(k, f0, c)).reshape(-1) for k, f0, c in keys])
    exact = golden["exact"]
    g = np.concatenate([np.asarray(exact[k] if shape else exact[()], np.float64).reshape(-1)
                        for k, _, _ in keys])
    S = _sums(case, name, keys, record, rows is None)
    others = {} if rows is not None else _others(case, name, n)
    return Subject(name, golden["dtype_name"], shape, golden["axes"] or "", rule, golden["K"],
                   raw.astype(np.float64), g, flat, raw, S, golden["cls"], case, record, others)


def _sums(case, name, keys, record, whole: bool):
    stored = getattr(case, "sum_abs", {})
    if name in stored:
        return np.concatenate([np.asarray(stored[name][k], np.float64).reshape(-1)
                               for k, _, _ in keys])
    if whole and record is not None:
        S = exact_terms(record, case, name)
        return None if S is None else S.reshape(-1)
    return None


def _others(case, name: str, n: int) -> dict:
    """The case's inputs and its other outputs' goldens holding ``n`` elements, by
    ``input:<name>`` / ``output:<name>``."""
    out = {}
    try:
        inputs = case.input_arrays()
    except Exception:  # noqa: BLE001 - an unreadable input is simply not a candidate
        inputs = {}
    for k, v in inputs.items():
        if v is not None and np.size(v) == n and np.asarray(v).dtype.kind not in "iub":
            out[f"input:{k}"] = np.asarray(v, np.float64).reshape(-1)
    for other in case.output_names:
        if other != name and other in case.exact:
            arr = case.exact[other]
            if int(np.prod(arr.shape)) == n:
                out[f"output:{other}"] = np.asarray(arr, np.float64).reshape(-1)
    return out


def diagnose_output(case, name: str, actual, rule, golden) -> list[Finding]:
    """The diagnosis of one failing output (``read_subject``, then ``diagnose``)."""
    return diagnose(read_subject(case, name, actual, rule, golden, ops.find(case.op)))
