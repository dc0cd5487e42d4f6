"""Why an output failed (docs/compare.md, "Diagnosis"): a short ranked list of findings, each
backed by a measurement on the failing output, never empty.

The diagnosis sees one failing output as a ``Subject``: the kernel's values and the exact
golden on the elements ``views`` chooses (the whole output, or a slice of the case along the
axes its operator computes independently), the sums of absolute terms, and the case (its
inputs, or those of the slice, its other outputs, its operator record). It asks, in turn:

- is every failing element within what floating-point arithmetic in the output's dtype can do
  (``precision``: errors growing with the sum of absolute terms)? Then that is the whole
  diagnosis, with the rounding mode or 16-bit dtype that explains the bits where one does;
- are the bits the other 16-bit dtype's (``dtype``)?
- what did the kernel write instead: a fill (``zero``, ``constant``, ``nonfinite``), a copy
  of an input or of another output (``copy``), the golden's negative or a multiple of it
  (``sign``, ``scale``), the golden permuted (``permuted``), the spec under one of the
  hypotheses of ``refspec.ops.hypotheses`` (``alternative``, ``sign``, ``input``, ``index``,
  ``reduction``, ``extent``)? Each candidate explains the failing elements where the kernel's
  value agrees with it by the case's own standard and it is clearly not the golden; the
  findings are a cover (``cover.choose``): the candidate that explains most, then the best of
  the rest, each with the part of the output it explains;
- what is left is ``unexplained``, measured (``unexplained``): how many, how large, spread like
  rounding or structured, where.

``Finding.agreement`` is the fraction of the failing elements the finding explains; no two
findings of an output explain the same element.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import numpy as np

from ... import ops
from .accuracy import precision, roundings, twin_dtype
from ...spec.terms import CACHE
from .cache_outputs import diagnose_cache
from .candidates import (copies, exact_terms, fills, hypotheses, multiples, own_hypotheses,
                         permutations, remembered, twins)
from .cover import choose, explains_all
from .findings import EXPLAINS, KINDS, SPEC_ELEMENTS, Finding, Subject
from .unexplained import unexplained
from .views import (CASE_ELEMENTS, VIEW_ELEMENTS, View, choose_view, read_actual, read_golden,
                    view_inputs)

__all__ = ["CANDIDATES", "Finding", "Subject", "diagnose", "diagnose_output", "read_subject",
           "KINDS", "VIEW_ELEMENTS", "CASE_ELEMENTS", "EXPLAINS"]


#: what the kernel wrote instead, asked in this order until a candidate explains every failing
#: element: each takes (subject, the failing elements, the share of the elements that agree with
#: the golden) and gives its candidate findings (``findings.candidate`` makes one); a new kind
#: of finding is one more entry (and its name in ``findings.KINDS``)
CANDIDATES = [twins, fills, copies, multiples, own_hypotheses, permutations, hypotheses]


def diagnose(subject: Subject) -> list[Finding]:
    """The findings for one failing output, best first (see the module docstring); the last
    one is ``unexplained`` when the others leave failing elements."""
    s = subject
    fail = ~s.agree(s.g)
    if not fail.any():
        return [_nothing_read(s)]
    accuracy = precision(s, fail)
    if accuracy is not None:
        return [accuracy] + roundings(s, fail) + twin_dtype(s, fail)
    found = roundings(s, fail)
    golden_agrees = 1.0 - float(fail.mean())
    if not explains_all(s, found, fail):
        for stage in CANDIDATES:
            found += stage(s, fail, golden_agrees)
            if explains_all(s, found, fail):
                if stage is not hypotheses:            # (ties with those already evaluated)
                    found += remembered(s, fail, golden_agrees)
                break
    chosen, rest = choose(s, fail, found)
    if rest.any():
        chosen.append(unexplained(s, rest, int(fail.sum())))
    return chosen


def _nothing_read(s: Subject) -> Finding:
    """A failing output none of whose elements read fails the element checks (the ratio
    standard's aggregate figures, or failures outside the elements read)."""
    total = s.failing_total
    where = (f"none of the {s.a.size:,} elements read fails the element checks" +
             (f" ({total:,} fail in the whole output, outside the elements read)" if total else
              ": the output fails on its aggregate figures (the ratio standard's error ratios)"))
    return Finding("unexplained", where, 0.0, {"failing": 0, "read": int(s.a.size)})


# --- reading a failing output -----------------------------------------------------------------

def read_subject(case, golden, actual, rule, record=None, metrics=None) -> Subject:
    """The ``Subject`` of one failing output: ``golden`` its ``GoldenOutput``, ``actual`` an
    ``ActualArray``, ``metrics`` what the judge measured (its worst element is read)."""
    worst = _worst(metrics)
    view = choose_view(golden, case, record, worst)
    raw = read_actual(view, actual)
    g = read_golden(view, golden.exact)
    params = record.upgrade_params(case.params) if record is not None else dict(case.params)
    inputs = _inputs(view, case, record)
    S = _sums(case, golden.name, view, record, params, inputs)
    return Subject(golden.name, golden.dtype_name, tuple(golden.shape), golden.axes, rule,
                   golden.K, raw.astype(np.float64), g, view.flat, raw, S,
                   golden.comparison_class, case, record,
                   _others(case, golden.name, view, inputs), inputs, params, view.shape,
                   None if metrics is None else int(metrics.failures), _memo(case, view))


#: per case (while it is alive), per slice: the spec's values of the hypotheses evaluated for
#: one of its failing outputs, kept for the others (``candidates.spec_values``)
_MEMOS: WeakKeyDictionary = WeakKeyDictionary()


def _memo(case, view: View) -> dict:
    """The memo of the case's slice ``view`` reads (a fresh one when the case cannot be
    remembered)."""
    key = None if view.letters is None else tuple(
        sorted((k, tuple(np.asarray(v).tolist())) for k, v in view.letters.items()))
    try:
        memos = _MEMOS.setdefault(case, {})
    except TypeError:
        return {}
    return memos.setdefault(key, {})


def _worst(metrics) -> int | None:
    if metrics is None:
        return None
    element = metrics.worst[0] if metrics.worst else metrics.max_abs
    return None if element is None else int(element.flat)


def _inputs(view: View, case, record) -> dict | None:
    """The inputs the spec hypotheses are evaluated on: those of the view's slice, or the whole
    case's when no slice fits and it is small enough (``SPEC_ELEMENTS``)."""
    if record is None:
        return None
    try:
        inputs = view_inputs(view, case, record)
        if inputs is None and view.flat.size == int(np.prod(view.shape)) and sum(
                int(np.prod(case.inputs[n].shape)) for n in case.input_names) <= SPEC_ELEMENTS:
            inputs = dict(case.input_arrays())
    except Exception:  # noqa: BLE001 - an unreadable input: no hypotheses
        return None
    return inputs


def _sums(case, name, view: View, record, params, inputs):
    """The sums of |terms| of the elements read: the golden file's, else the spec's terms on
    the inputs (in float32)."""
    stored = getattr(case, "sum_abs", {})
    if name in stored:
        return read_golden(view, stored[name])
    if record is not None and inputs is not None:
        S = exact_terms(record, params, inputs, name)
        if S is not None and S.size == view.flat.size:
            return S.reshape(-1)
    return None


def _others(case, name: str, view: View, inputs: dict | None) -> dict:
    """The inputs (of the view) and the other outputs' goldens holding as many elements as the
    elements read, by ``input:<name>`` / ``output:<name>``."""
    n = view.flat.size
    out = {}
    for k, v in (inputs or {}).items():
        if v is not None and np.size(v) == n and np.asarray(v).dtype.kind not in "iub":
            out[f"input:{k}"] = np.asarray(v, np.float64).reshape(-1)
    shape = tuple(case.exact[name].shape)
    for other in case.output_names:
        if other != name and other in case.exact and tuple(case.exact[other].shape) == shape:
            out[f"output:{other}"] = read_golden(view, case.exact[other])
    return out


def diagnose_output(case, golden, actual, rule, metrics=None) -> list[Finding]:
    """The diagnosis of one failing output (``read_subject``, then ``diagnose``; a cache
    updated in place: ``cache_outputs.diagnose_cache``)."""
    if golden.comparison_class == CACHE:
        return diagnose_cache(case, golden, actual, rule, ops.find(case.op))
    return diagnose(read_subject(case, golden, actual, rule, ops.find(case.op), metrics))
