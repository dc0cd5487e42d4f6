"""A golden case held in memory, computed on the spot by the spec functions.

``spec_case`` is what ``refspec.testing.assert_allclose_to_spec`` judges against: the same
attributes a ``refspec.goldens.GoldenCase`` has (``inputs``, ``expected``, ``exact``,
``sum_abs``, ``written``, ``output_meta``), computed exactly as a generated case is
(``refspec.goldens.cases.compute_case``, through the operator's record).
"""

from __future__ import annotations

import numpy as np

from ... import ops
from ...goldens.cases import CaseData, compute_case
from ...ops.record import Call
from ...spec.dtypes import dtype_name
from ...spec.layouts import cos_pattern

__all__ = ["MemoryCase", "spec_case"]


class MemoryCase:
    """A golden case of arrays in memory (the GoldenCase attributes the comparator uses), made
    from the ``refspec.goldens.cases.CaseData`` of a positive case."""

    def __init__(self, data: CaseData):
        self.case_id, self.op, self.params = data.case_id, data.op, dict(data.params)
        self.seed = data.seed
        self.soc = self.params.get("soc") or ""
        self.regenerate = data.regenerate
        self.inputs = {k: np.asarray(v) for k, v in data.present("inputs").items()}
        self.expected = {k: np.asarray(v) for k, v in data.present("expected").items()}
        self.exact = {k: np.asarray(data.exact[k], dtype=np.float64) for k in self.expected}
        self.sum_abs = {k: np.asarray(v, dtype=np.float64) for k, v in data.sums().items()}
        self.written = {k: np.asarray(v, dtype=np.int64) for k, v in data.written().items()}
        self._terms = data.terms
        self._axes = data.axes
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
        meta = {"comparison_class": t.comparison_class, "reduced_terms": t.reduced_terms,
                "axes": self._axes.get(name, ""), "dtype": dtype_name(self.expected[name].dtype)}
        if getattr(t, "written_class", None) is not None:
            meta["written_class"] = t.written_class
        return meta

    def __repr__(self):
        return f"<MemoryCase {self.case_id} op={self.op}>"


def spec_case(op: str, *, soc=None, layout=None, case_id=None, **kwargs) -> MemoryCase:
    """Compute a case in memory: ``op`` names an operator (its id, spec function name or aclnn
    name), ``kwargs`` are the spec function's arguments (tensors and attributes). ``layout``
    names the axes of RoPE tensors when the shapes alone do not (default: what the A2/A3 rules
    infer). Arguments the spec rejects raise its ``AclnnError``."""
    record = ops.find(op)
    if record is None:
        raise ValueError(f"unknown operator {op!r}; allowed: "
                         f"{', '.join(o.function for o in ops.OPERATORS.values())}")
    unknown = set(kwargs) - set(record.input_names) - set(record.attributes)
    if unknown:
        raise TypeError(f"{record.function}() got unexpected arguments: {', '.join(sorted(unknown))}")
    inputs = {n: kwargs[n] for n in record.input_names if kwargs.get(n) is not None}
    attrs = record.complete_attrs({a: kwargs[a] for a in record.attributes if a in kwargs})
    params = record.params_of(Call(inputs, attrs, soc))
    if layout is not None:
        params["layout"] = layout
        if "cos" in inputs:
            params["cos"] = cos_pattern(np.shape(inputs["cos"]), layout)
    data = compute_case(record, case_id or f"{record.id}/in-memory", params, 0, inputs)
    if data.error is not None:
        raise data.error
    return MemoryCase(data)
