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

import numpy as np

from ... import ops
from .accuracy import precision, roundings, twin_dtype
from .candidates import copies, exact_terms, fills, hypotheses, multiples, permutations
from .findings import (EXPLAINS, KINDS, SAMPLE_ELEMENTS, Finding, Subject, complete)
from .regions import regions

__all__ = ["CANDIDATES", "Finding", "Subject", "diagnose", "diagnose_output", "read_subject",
           "sample_rows", "KINDS", "SAMPLE_ELEMENTS", "EXPLAINS"]


#: what the kernel wrote instead, asked in this order until a finding explains every failing
#: element: each takes (subject, the failing elements, the share of the elements that agree with
#: the golden) and gives its findings (``findings.candidate`` makes one); a new kind of finding
#: is one more entry (and its name in ``findings.KINDS``)
CANDIDATES = [fills, copies, multiples, permutations, hypotheses]


def diagnose(subject: Subject) -> list[Finding]:
    """The findings for one failing output, best first (see the module docstring)."""
    s = subject
    fail = ~s.agree(s.g)
    if not fail.any():
        return []
    accuracy = precision(s, fail)
    if accuracy is not None:
        return [accuracy] + roundings(s, fail) + twin_dtype(s, fail)
    golden_agrees = 1.0 - float(fail.mean())
    found = []
    for stage in CANDIDATES:
        found += stage(s, fail, golden_agrees)
        if any(complete(f) for f in found):
            break                      # an explanation of every element: no need to look on
    else:
        found += roundings(s, fail) + twin_dtype(s, fail)
    order = {k: i for i, k in enumerate(KINDS)}
    found.sort(key=lambda f: (-round(f.agreement, 3), order.get(f.kind, len(order))))
    return _dedupe(found) + regions(s, fail)


def _dedupe(found: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in found:
        key = (f.kind, f.summary)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


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


def read_subject(case, golden, actual, rule, record=None) -> Subject:
    """The ``Subject`` of one failing output: ``golden`` its ``GoldenOutput``, ``actual`` an
    ``ActualArray``. An output
    larger than ``SAMPLE_ELEMENTS`` is read in whole rows of its first axis (``sample_rows``)
    and gets no spec hypotheses."""
    name, shape = golden.name, tuple(golden.shape)
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
    exact = golden.exact
    g = np.concatenate([np.asarray(exact[k] if shape else exact[()], np.float64).reshape(-1)
                        for k, _, _ in keys])
    S = _sums(case, name, keys, record, rows is None)
    others = {} if rows is not None else _others(case, name, n)
    return Subject(name, golden.dtype_name, shape, golden.axes, rule, golden.K,
                   raw.astype(np.float64), g, flat, raw, S, golden.comparison_class, case, record,
                   others)


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


def diagnose_output(case, golden, actual, rule) -> list[Finding]:
    """The diagnosis of one failing output (``read_subject``, then ``diagnose``)."""
    return diagnose(read_subject(case, golden, actual, rule, ops.find(case.op)))
