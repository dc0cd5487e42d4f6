"""What the kernel wrote instead (docs/compare.md, "Diagnosis"): a fill (``zero``,
``constant``, ``nonfinite``), a ``copy`` of an input or another output, a multiple of the golden
(``sign``, ``scale``), the golden ``permuted`` (an axis, or the order of each head along D),
and the spec under the hypotheses the record declares or adds (``alternative``, ``sign``,
``input``, ``index``, ``reduction``, ``extent``; ``refspec.ops.hypotheses``). Each gives its
candidate findings with the failing elements they explain; the diagnosis chooses among them."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...ops.head_orders import head_maps
from ...ops.hypotheses import GENERATED, Variant
from ...spec.dtypes import resolve_dtype, round_to
from ...spec.errors import AclnnError
from ..judging.twins import TWINS
from .cover import explains_all
from .findings import SPEC_BUDGET, SPEC_VARIANTS, Finding, Subject, candidate, count

__all__ = ["twins", "fills", "copies", "multiples", "permutations", "own_hypotheses", "hypotheses",
           "remembered", "spec_hypotheses", "exact_terms", "spec_values", "on_some_profile"]


def _fill(s: Subject, fail, claims, value: float, texts: tuple, detail: dict) -> Finding:
    """A fill's finding: the failing elements holding ``value`` (compared exactly, not by the
    standard: a fill is no near miss); ``texts`` its summary when it holds at every failing
    element, when it holds at some, and for a part."""
    share = float(claims[fail].mean())
    return Finding(kind_of(value), texts[0] if share == 1 else texts[1], share, detail,
                   claims=claims & fail, values=np.full(s.g.shape, value), part=texts[2])


def kind_of(value: float) -> str:
    return "zero" if value == 0 else "constant" if np.isfinite(value) else "nonfinite"


def fills(s: Subject, fail: np.ndarray, golden_agrees: float = 0.0) -> list[Finding]:
    """The failing elements hold 0, one constant, or NaN/Inf."""
    a = s.a[fail]
    n = a.size
    whole = "the whole output" if fail.all() else f"{count(n)} failing elements"
    verb = "is" if fail.all() else "are"
    out = []
    nonfinite = ~np.isfinite(s.a)
    if nonfinite[fail].any():
        nan = int(np.isnan(a).sum())
        what = "NaN" if nan == n else "Inf" if nan == 0 else "NaN or Inf"
        out.append(_fill(s, fail, nonfinite, np.nan,
                         (f"{whole} {verb} {what} where the golden is finite (a NaN fill, or an "
                          "overflow)", f"{what} where the golden is finite (a NaN fill, or an "
                          "overflow?)", f"{{where}} {what} ({{count}}: a NaN fill, or an overflow?)"),
                         {"nan": nan, "inf": int((~np.isfinite(a)).sum()) - nan}))
    zero = s.a == 0
    if zero[fail].any():
        out.append(_fill(s, fail, zero, 0.0,
                         (f"{whole} {verb} zero where the golden is not (never written?)",
                          "zero where the golden is not (never written?)",
                          "{where} zero (unwritten; {count})"),
                         {"all": bool(zero.all()), "elements": float(zero.mean())}))
    finite = a[np.isfinite(a) & (a != 0)]
    if finite.size > 1:
        values, counts = np.unique(finite, return_counts=True)
        c = float(values[np.argmax(counts)])
        if counts.max() > 1:
            held = "holds" if fail.all() else "hold"
            out.append(_fill(s, fail, s.a == c, c,
                             (f"{whole} {held} the constant {c:.7g} (a fill?)",
                              f"the constant {c:.7g} (a fill?)",
                              f"{{where}} the constant {c:.7g} (a fill?; {{count}})"), {"value": c}))
    return out


def twins(s: Subject, fail: np.ndarray, golden_agrees: float = 0.0) -> list[Finding]:
    """The bits of the other 16-bit dtype (``judging.twins.TWINS``): the golden rounded to it,
    its bits read as the output's dtype, as a file or an array of the output's dtype holds
    them when a kernel wrote the one where the other is expected."""
    twin = TWINS.get(s.dtype)
    if twin is None:
        return []
    with np.errstate(all="ignore"):
        bits = np.ascontiguousarray(round_to(s.g, resolve_dtype(twin))).view(np.uint16)
        values = bits.view(resolve_dtype(s.dtype)).astype(np.float64)
    return candidate(s, fail, golden_agrees, values, "dtype", f"the bits are {twin} (was {twin} "
                     f"written where {s.dtype} is expected?)", {"as": twin})


def copies(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The kernel's values equal one of the case's inputs or another output's golden, read in
    memory order."""
    out = []
    for label, values in s.others.items():
        out += candidate(s, fail, golden_agrees, values, "copy", f"equal to {label}",
                         {"of": label})
    return out


def multiples(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The golden's negative; a constant multiple of it (least squares on the failing
    elements)."""
    out = candidate(s, fail, golden_agrees, -s.g, "sign", "the golden's negative", {})
    a, g = s.a[fail], s.g[fail]
    ok = np.isfinite(a) & np.isfinite(g)
    with np.errstate(all="ignore"):
        gg = float(np.dot(g[ok], g[ok]))
        c = float(np.dot(a[ok], g[ok])) / gg if gg else 0.0
    if gg == 0 or not np.isfinite(c) or abs(c) < 1e-12 or abs(abs(c) - 1) < 1e-3:
        return out
    c = _round_factor(c)
    rounded = round_to(c * round_to(s.g, resolve_dtype(s.dtype)).astype(np.float64),
                       resolve_dtype(s.dtype)).astype(np.float64)
    return out + candidate(s, fail, golden_agrees, c * s.g, "scale", f"the golden times {c:.6g}",
                           {"factor": c}, rounded)


def _round_factor(c: float) -> float:
    """A least-squares factor as the simple number it estimates (2, 0.5, 1/8, 3) when it is
    within 1e-3 of one."""
    for simple in (round(c), 1 / round(1 / c) if abs(c) < 1 else c):
        if simple and abs(c / simple - 1) < 1e-3:
            return float(simple)
    return c


def permutations(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The golden with an axis the elements read hold whole reversed or shifted by one, two
    axes transposed (the whole output only), or each head along the last axis written in
    another order: halves or pairs exchanged, pairs interleaved or de-interleaved."""
    grid = s.grid or s.shape
    if not grid or int(np.prod(grid)) != s.g.size:
        return []
    full = s.g.reshape(grid)
    names = s.axis_names
    whole = [ax for ax, size in enumerate(grid) if size > 1 and size == s.shape[ax]]
    tries = _head_orders(s, full)
    if not s.sampled:
        tries += [(ax, "transposed with " + names[other], np.swapaxes(full, ax, other))
                  for i, ax in enumerate(whole) for other in whole[i + 1:]]
    for ax in whole:
        tries += [(ax, "reversed", np.flip(full, ax)), (ax, "shifted by one", np.roll(full, 1, ax))]
    out = []
    for ax, how, values in tries:
        name = names[ax]
        out += candidate(s, fail, golden_agrees, np.ascontiguousarray(values).reshape(-1),
                         "permuted", f"the golden with {name.lower()} {how}",
                         {"axis": name, "how": how.split(" (")[0]})
        if explains_all(s, out, fail):
            break
    return out


def _head_orders(s: Subject, full: np.ndarray) -> list:
    """(axis, how, values) of the golden's heads along the last axis in another order (each
    head of the record's head size, and the whole axis)."""
    D = full.shape[-1]
    rotation = s.record.comparison.rotation if s.record is not None else None
    h = D
    if rotation is not None and rotation.head_size and s.params.get(rotation.head_size):
        h = int(s.params[rotation.head_size])
    out = []
    for size in dict.fromkeys((h, D)):
        if size < 2 or D % size or size % 2:
            continue
        maps = head_maps(size)
        orders = {"halves exchanged": maps["halves"], "pairs exchanged": maps["pairs"],
                  "pairs interleaved (2i takes i, 2i + 1 takes i + h/2)": maps["interleaved"],
                  "de-interleaved (i takes 2i, i + h/2 takes 2i + 1)": maps["de-interleaved"]}
        heads = full.reshape(full.shape[:-1] + (D // size, size))
        within = f" within each head of {size}" if size < D else ""
        out += [(full.ndim - 1, how + within, np.take(heads, index, axis=-1).reshape(full.shape))
                for how, index in orders.items()]
    return out


# --- the spec under the record's hypotheses ---------------------------------------------------

def own_hypotheses(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The record's own hypotheses (``Comparison.hypotheses``: an attribute's other values,
    another layout's reading), evaluated by the spec (``spec_hypotheses``)."""
    if s.record is None:
        return []
    return spec_hypotheses(s, fail, s.record.comparison.hypotheses)


def hypotheses(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The hypotheses generated from the record's declarations
    (``refspec.ops.hypotheses.GENERATED``), evaluated by the spec (``spec_hypotheses``)."""
    return spec_hypotheses(s, fail, GENERATED)


def spec_hypotheses(s: Subject, fail: np.ndarray, families) -> list[Finding]:
    """Each variant of ``families`` (functions ``(record, call, params) -> [Variant]``)
    evaluated by the spec on the inputs the elements read belong to, within ``SPEC_BUDGET`` and
    ``SPEC_VARIANTS`` for the output; none when the spec on those inputs does not give the golden (the slice would
    not be a case of its own). The spec's values of a variant are kept for the other outputs
    of the case (``Subject.spec_memo``)."""
    record = s.record
    if record is None or s.inputs is None or not families:
        return []
    call = record.call_of(s.params, s.inputs)
    memo = s.spec_memo
    values = spec_values(record, s.name, s.g.size, memo)
    base = values(Variant("", "", {}, call), "base")
    if base is None or not np.allclose(base, s.g, rtol=1e-9, atol=0, equal_nan=True):
        return []
    cost = sum(int(np.size(v)) for v in s.inputs.values() if v is not None)
    out = []
    for family in families:
        for i, variant in enumerate(family(record, call, s.params)):
            s.spent += cost * (1 + len(variant.parts))
            s.tried += 1
            if s.spent > SPEC_BUDGET or s.tried > SPEC_VARIANTS:
                return out
            out += candidate(s, fail, 0.0, values(variant, (family, i)), variant.kind,
                             variant.summary, dict(variant.detail))
        if explains_all(s, out, fail):
            return out                 # a variant of this family explains the whole output
    return out


def remembered(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The generated hypotheses whose spec values are already known for the case (evaluated
    for another of its outputs: ``Subject.spec_memo``), at no cost: asked when the search
    stopped before the generated hypotheses, so a candidate of theirs that explains exactly as
    much as the one that stopped it competes with it (``cover.choose`` breaks the tie by
    ``KINDS``)."""
    results = s.spec_memo.get("results", {})
    known = [f for f in GENERATED if (f, 0) in results]
    if s.record is None or s.inputs is None or "base" not in results or not known:
        return []
    call = s.record.call_of(s.params, s.inputs)
    values = spec_values(s.record, s.name, s.g.size, s.spec_memo)
    base = values(Variant("", "", {}, call), "base")
    if base is None or not np.allclose(base, s.g, rtol=1e-9, atol=0, equal_nan=True):
        return []
    out = []
    for family in known:
        for i, v in enumerate(family(s.record, call, s.params)):
            keys = [(family, i)] + [((family, i), j) for j in range(len(v.parts))]
            if all(k in results for k in keys):
                out += candidate(s, fail, 0.0, values(v, (family, i)), v.kind, v.summary,
                                 dict(v.detail))
    return out


#: the spec's values kept for the other outputs of a case hold at most this many elements
MEMO_ELEMENTS = 1 << 22


def spec_values(record, name: str, size: int, memo: dict):
    """A function of a ``Variant`` and its key: the spec's exact value of output ``name`` for
    it, in memory order (its parts added, ``after`` applied), or None when the spec rejects it
    or it gives another number of elements; each call evaluated once for all the outputs of the
    case (``memo``, while it holds at most ``MEMO_ELEMENTS``)."""
    results = memo.setdefault("results", {})

    def one(call, key):
        if key in results:
            return results[key].get(name)
        out = _evaluate(record, call)
        held = sum(int(np.size(v)) for v in out.values()) if out else 0
        if memo.get("elements", 0) + held <= MEMO_ELEMENTS:
            results[key] = out or {}
            memo["elements"] = memo.get("elements", 0) + held
        return (out or {}).get(name)

    def values(variant: Variant, key):
        value = one(variant.call, key)
        for j, (coefficient, call) in enumerate(variant.parts):
            other = one(call, (key, j))
            if value is None or other is None or np.shape(other) != np.shape(value):
                return None
            value = value + coefficient * other
        if value is not None and variant.after is not None:
            value = variant.after(name, value)
        if value is None or np.size(value) != size:
            return None
        return np.asarray(value, np.float64).reshape(-1)
    return values


def on_some_profile(compute: Callable, call):
    """``compute(call)`` (None when the spec rejects the call). A call the chip profile rejects
    (a pattern its kernel has no plan for) is computed on the math-only profile: the formula is
    what a mistaken kernel computes."""
    for soc in dict.fromkeys((call.soc, None)):
        try:
            with np.errstate(all="ignore"):
                return compute(call._replace(soc=soc))
        except (AclnnError, ValueError, TypeError, IndexError, KeyError):
            continue
    return None


def _evaluate(record, call) -> dict | None:
    """The spec's exact outputs for a call (None when the spec rejects it)."""
    return on_some_profile(lambda one: dict(record.call(one, out_dtype=np.float64)), call)


def exact_terms(record, params: dict, inputs: dict, name: str) -> np.ndarray | None:
    """The sums of absolute terms of one output when the golden file has none (16-bit
    elementwise outputs): the spec's terms of the case on its inputs in float32."""
    try:
        wide = {k: (v if v is None or np.asarray(v).dtype.kind in "iu" else
                    np.asarray(v).astype(np.float32)) for k, v in inputs.items()}
        terms = record.generation.terms(record.call_of(params, wide))
    except Exception:  # noqa: BLE001 - the bound falls back to |g|
        return None
    t = terms.get(name)
    return None if t is None or t.sum_abs is None else np.asarray(t.sum_abs, np.float64)
