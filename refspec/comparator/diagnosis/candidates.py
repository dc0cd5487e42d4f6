"""What the kernel wrote instead (docs/compare.md, "Diagnosis"): a fill (``zero``,
``constant``, ``nonfinite``), a ``copy`` of an input or another output, a multiple of the golden
(``sign``, ``scale``), the golden ``permuted``, and the spec under the operator record's
hypotheses (``alternative``, ``sign``, ``reduction``; ``refspec.ops.hypotheses``)."""

from __future__ import annotations

import time

import numpy as np

from ...spec.dtypes import resolve_dtype, round_to
from ...spec.errors import AclnnError
from .findings import (BUDGET_SECONDS, EXPLAINS, SPEC_ELEMENTS, Finding, Subject, candidate,
                       complete)

__all__ = ["fills", "copies", "multiples", "permutations", "hypotheses", "exact_terms"]


def fills(s: Subject, fail: np.ndarray, golden_agrees: float = 0.0) -> list[Finding]:
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
    if out:
        return out
    a, g = s.a[fail], s.g[fail]
    ok = np.isfinite(a) & np.isfinite(g)
    with np.errstate(all="ignore"):
        gg = float(np.dot(g[ok], g[ok]))
        c = float(np.dot(a[ok], g[ok])) / gg if gg else 0.0
    if gg == 0:
        return []
    if not np.isfinite(c) or abs(c) < 1e-12 or abs(abs(c) - 1) < 1e-3:
        return []
    c = _round_factor(c)
    rounded = round_to(c * round_to(s.g, resolve_dtype(s.dtype)).astype(np.float64),
                       resolve_dtype(s.dtype)).astype(np.float64)
    return candidate(s, fail, golden_agrees, c * s.g, "scale", f"the golden times {c:.6g}",
                      {"factor": c}, rounded)


def _round_factor(c: float) -> float:
    """A least-squares factor as the simple number it estimates (2, 0.5, 1/8, 3) when it is
    within 1e-3 of one."""
    for simple in (round(c), 1 / round(1 / c) if abs(c) < 1 else c):
        if simple and abs(c / simple - 1) < 1e-3:
            return float(simple)
    return c


def permutations(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
    """The golden with the halves or pairs of the last axis exchanged, or an axis reversed or
    shifted by one."""
    if len(s.shape) == 0 or s.sampled:
        full = None
    else:
        full = s.g.reshape(s.shape)
    if full is None:
        return []
    names = s.axis_names
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
        tries += [(ax, "transposed with " + names[other], np.swapaxes(full, ax, other))
                  for other in big[i + 1:]]
    for ax in big:
        tries.append((ax, "reversed", np.flip(full, ax)))
        tries.append((ax, "shifted by one", np.roll(full, 1, ax)))
    for ax, how, values in tries:
        name = names[ax]
        out += candidate(s, fail, golden_agrees, np.ascontiguousarray(values).reshape(-1),
                          "permuted", f"the golden with {name.lower()} {how}",
                          {"axis": name, "how": how})
        if out:
            return out
    return out


# --- the spec under the record's hypotheses ---------------------------------------------------

def hypotheses(s: Subject, fail: np.ndarray, golden_agrees: float) -> list[Finding]:
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
            out += candidate(s, fail, golden_agrees, values, variant.kind, variant.summary,
                              dict(variant.detail))
        if any(complete(f) for f in out):
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
