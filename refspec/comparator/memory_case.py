"""A golden case held in memory, computed on the spot by the spec functions.

``spec_case`` is what ``refspec.testing.assert_allclose_to_spec`` judges against: the same
attributes a ``refspec.goldens.GoldenCase`` has (``inputs``, ``expected``, ``exact``,
``sum_abs``, ``output_meta``), with the exact float64 outputs from ``out_dtype=np.float64``,
the once-rounded ones from the default call, and the tolerance terms of
``refspec.spec.terms``, all through the operator's record.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..spec.dtypes import dtype_name
from ..spec.layouts import cos_pattern

__all__ = ["MemoryCase", "spec_case"]


class MemoryCase:
    """A golden case of arrays in memory (the GoldenCase attributes the comparator uses)."""

    def __init__(self, case_id, op, params, inputs, expected, exact, terms, axes, soc=None,
                 regenerate=""):
        self.case_id, self.op, self.params = case_id, op, dict(params)
        self.soc = soc or ""
        self.regenerate = regenerate
        self.inputs = {k: np.asarray(v) for k, v in inputs.items() if v is not None}
        self.expected = {k: np.asarray(v) for k, v in expected.items() if v is not None}
        self.exact = {k: np.asarray(exact[k], dtype=np.float64) for k in self.expected}
        self.sum_abs = {k: np.asarray(t.sum_abs, dtype=np.float64) for k, t in terms.items()
                        if k in self.expected and t.sum_abs is not None}
        self._terms = terms
        self._axes = axes
        self.expected_error = None

    @property
    def input_names(self):
        return list(self.inputs)

    def input_arrays(self) -> dict:
        return self.inputs

    @property
    def output_names(self):
        return list(self.expected)

    def output_meta(self, name: str) -> dict:
        t = self._terms[name]
        return {"comparison_class": t.comparison_class, "reduced_terms": t.reduced_terms,
                "axes": self._axes.get(name, ""), "dtype": dtype_name(self.expected[name].dtype)}

    def __repr__(self):
        return f"<MemoryCase {self.case_id} op={self.op}>"


def spec_case(op: str, *, soc=None, layout=None, case_id=None, **kwargs) -> MemoryCase:
    """Compute a case in memory: ``op`` names an operator (its spec function name, short id or
    aclnn name), ``kwargs`` are the spec function's arguments (tensors and attributes).
    ``layout`` names the axes of RoPE tensors when the shapes alone do not (default: what the
    A2/A3 rules infer)."""
    record = ops.find(op)
    if record is None:
        raise ValueError(f"unknown operator {op!r}; allowed: "
                         f"{', '.join(o.function for o in ops.OPERATORS.values())}")
    unknown = set(kwargs) - set(record.input_names) - set(record.attributes)
    if unknown:
        raise TypeError(f"{record.function}() got unexpected arguments: {', '.join(sorted(unknown))}")
    inputs = {n: kwargs[n] for n in record.input_names if kwargs.get(n) is not None}
    attrs = record.complete_attrs({a: kwargs[a] for a in record.attributes if a in kwargs})
    expected = record.call(inputs, attrs, soc)
    exact = record.call(inputs, attrs, soc, out_dtype=np.float64)
    terms = record.terms(inputs, attrs, soc)
    primary = np.asarray(inputs[record.inputs[0].name])
    params = {**attrs, **record.describe(inputs, attrs, soc), "dtype": dtype_name(primary.dtype)}
    if layout is not None:
        params["layout"] = layout
        if "cos" in inputs:
            params["cos_pattern"] = cos_pattern(np.shape(inputs["cos"]), layout)
    axes = {n: record.output_axes(params, n) for n in expected}
    return MemoryCase(case_id or f"{record.function}/in-memory", record.function, params, inputs,
                      expected, exact, terms, axes, soc=soc)
