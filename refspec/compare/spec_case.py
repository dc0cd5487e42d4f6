"""A golden case held in memory, computed on the spot by the spec functions.

:func:`spec_case` is what ``refspec.testing.assert_allclose_to_spec`` judges against: the same
attributes a :class:`refspec.goldens.GoldenCase` has (``inputs``, ``expected``, ``exact``,
``sum_abs``, ``output_meta``), with the exact float64 outputs from ``out_dtype=np.float64``,
the once-rounded ones from the default call, and the tolerance terms of :mod:`refspec.terms`.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import dtype_name
from ..errors import AclnnError
from ..layouts import cos_pattern, infer_layout
from ..norm_rope_concat import norm_rope_concat, norm_rope_concat_backward
from ..rope import rotary_position_embedding, rotary_position_embedding_grad
from ..terms import (norm_rope_concat_backward_terms, norm_rope_concat_terms, rope_grad_terms,
                     rope_terms)

__all__ = ["MemoryCase", "spec_case", "SPEC_OPS"]

SPEC_OPS = ("rotary_position_embedding", "rotary_position_embedding_grad", "norm_rope_concat",
            "norm_rope_concat_backward")

_NRC_ATTRS = ("norm_type", "norm_added_type", "rope_type", "concat_order")


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

    @property
    def output_names(self):
        return list(self.expected)

    def output_meta(self, name: str) -> dict:
        t = self._terms[name]
        return {"comparison_class": t.comparison_class, "reduced_terms": t.reduced_terms,
                "axes": self._axes.get(name, ""), "dtype": dtype_name(self.expected[name].dtype)}

    def __repr__(self):
        return f"<MemoryCase {self.case_id} op={self.op}>"


def _rope_layout(primary, cos, mode, soc):
    for profile in ((soc,) if soc else ()) + ("A2", None):
        try:
            inf = infer_layout(np.shape(primary), np.shape(cos), mode=0 if mode not in (0, 1) else mode,
                               soc=profile)
        except AclnnError:
            continue
        if inf.layout:
            return inf.layout, inf.cos_pattern or cos_pattern(np.shape(cos), inf.layout)
    return None, None


def spec_case(op: str, *, soc=None, layout=None, case_id=None, **kwargs) -> MemoryCase:
    """Compute a case in memory: ``op`` is a refspec function name, ``kwargs`` its arguments
    (tensors and attributes). ``layout`` names the axes of RoPE tensors when the shapes alone
    do not (default: what the A2/A3 rules infer)."""
    if op not in SPEC_OPS:
        raise ValueError(f"unknown operator {op!r}; allowed: {', '.join(SPEC_OPS)}")
    if op in ("rotary_position_embedding", "rotary_position_embedding_grad"):
        grad = op.endswith("_grad")
        primary_name = "dy" if grad else "x"
        primary = np.asarray(kwargs[primary_name])
        cos, sin = kwargs["cos"], kwargs["sin"]
        mode = int(kwargs.get("mode", 0))
        x = kwargs.get("x") if grad else None
        if grad:
            names = ("dx", "dcos", "dsin")
            rounded = rotary_position_embedding_grad(primary, cos, sin, x, mode=mode, soc=soc)
            exact = rotary_position_embedding_grad(primary, cos, sin, x, mode=mode, soc=soc,
                                                   out_dtype=np.float64)
            terms = rope_grad_terms(primary, cos, sin, x, mode=mode, soc=soc)
            inputs = dict(dy=primary, cos=cos, sin=sin, x=x)
        else:
            names = ("y",)
            rounded = (rotary_position_embedding(primary, cos, sin, mode=mode, soc=soc),)
            exact = (rotary_position_embedding(primary, cos, sin, mode=mode, soc=soc,
                                               out_dtype=np.float64),)
            terms = rope_terms(primary, cos, sin, mode=mode, soc=soc)
            inputs = dict(x=primary, cos=cos, sin=sin)
        if layout is None:
            layout, pattern = _rope_layout(primary, cos, mode, soc)
        else:
            pattern = cos_pattern(np.shape(cos), layout)
        axes = dict.fromkeys(names, layout or "")
        params = dict(mode=mode, layout=layout, cos_pattern=pattern,
                      dtype=dtype_name(primary.dtype), x=x is not None if grad else None)
        expected = dict(zip(names, rounded))
        exact = dict(zip(names, exact))
    else:
        attrs = {k: kwargs.pop(k) for k in _NRC_ATTRS if k in kwargs}
        if op == "norm_rope_concat_backward":
            out = norm_rope_concat_backward(**kwargs, **attrs, soc=soc)._asdict()
            ex = norm_rope_concat_backward(**kwargs, **attrs, soc=soc, out_dtype=np.float64)._asdict()
            full = {**dict.fromkeys(_NRC_ATTRS, 0), **attrs}
            terms = norm_rope_concat_backward_terms(kwargs, full, soc)
            axes = {n: ("D" if a is not None and a.ndim == 1 else "BSND") for n, a in out.items()}
            primary = np.asarray(kwargs["grad_query_output"])
        else:
            extra = {k: kwargs.pop(k) for k in ("eps", "is_training") if k in kwargs}
            out = norm_rope_concat(**kwargs, **attrs, **extra, soc=soc)._asdict()
            ex = norm_rope_concat(**kwargs, **attrs, **extra, soc=soc, out_dtype=np.float64)._asdict()
            D = np.shape(kwargs["query"])[-1]
            terms = norm_rope_concat_terms(attrs.get("norm_type", 0), attrs.get("norm_added_type", 0),
                                           attrs.get("rope_type", 0), D)
            axes = {n: ("BSN1" if n.endswith(("_mean", "_rstd")) else "BNSD") for n in out}
            primary = np.asarray(kwargs["query"])
            attrs.update(extra)
        expected = {n: a for n, a in out.items() if a is not None}
        exact = {n: ex[n] for n in expected}
        inputs = kwargs
        params = {**dict.fromkeys(_NRC_ATTRS, 0), **attrs, "dtype": dtype_name(primary.dtype)}
    cid = case_id or f"{op}/in-memory"
    return MemoryCase(cid, op, params, inputs, expected, exact, terms, axes, soc=soc)
