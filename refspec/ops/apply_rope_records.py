"""The records of ApplyRotaryPosEmb (``apply_rope``) and ApplyRotaryPosEmbV2 (``apply_rope_v2``):
names, tensors, sweep axes, and how a case's inputs are planned and sampled
(docs/apply_rotary_pos_emb.md).

A case is query and key in one of the four layouts, rotated together by one cos/sin table whose
head axis is 1 (``cos`` names the table's pattern in the layout's letters, as for
RotaryPositionEmbedding: ``BS1D``, ``1S1D``, ``T1D``). The API updates query and key in place;
the golden outputs are ``query_out`` and ``key_out`` (vendor files ``queryOut``, ``keyOut``),
beside the inputs ``queryRef`` and ``keyRef``.
"""

from __future__ import annotations

import numpy as np

from . import hypotheses
from ..spec.apply_rope import (apply_rotary_pos_emb, apply_rotary_pos_emb_terms,
                               apply_rotary_pos_emb_v2)
from ..spec.apply_rope_checks import LAYOUT_NAMES, ROTARY_MODES, check_apply_rope_args
from ..spec.dtypes import resolve_dtype
from ..spec.errors import AclnnError
from ..spec.layouts import cos_pattern
from .axes import Axis, Shape, bad_value, dist_axis, dtype_axis, fault_axis, soc_axis
from .record import (Call, Comparison, Generation, Operator, Output, Rotation, SweepAxes,
                     TablePart, Tensor, TensorPlan, Tensors)
from .rope_records import PAIRING, cos_fits, parse_pattern, table_positions
from .sampling import ROPE_VENDOR, draw, draw_tables, dtype_max

__all__ = ["APPLY_ROPE", "APPLY_ROPE_V2", "LAYOUTS"]

#: the layouts by name, in the API's numbering 1..4
LAYOUTS = tuple(LAYOUT_NAMES.values())
_FAULTS = ("none", "cos_dtype", "sin_shape", "key_dim")


def _layout(v) -> str:
    """A layout by name or by the API's number (1 BSND, 2 SBND, 3 BNSD, 4 TND)."""
    if isinstance(v, int) and not isinstance(v, bool) and v in LAYOUT_NAMES:
        return LAYOUT_NAMES[v]
    s = str(v).strip().upper()
    if s.isdigit() and int(s) in LAYOUT_NAMES:
        return LAYOUT_NAMES[int(s)]
    if s not in LAYOUTS:
        raise bad_value(v, LAYOUTS + ("or 1..4",))
    return s


def _rotary_mode(v) -> str:
    s = str(v).strip().lower()
    if s not in ROTARY_MODES or isinstance(v, bool):
        raise bad_value(v, tuple(ROTARY_MODES))
    return s


def _admits(values: dict) -> bool:
    """A table of the layout whose head axis is 1."""
    layout, cos = values["layout"], values["cos"]
    return cos_fits(cos, layout) and cos[layout.index("N")] == "1"


def _sweep(v2: bool) -> SweepAxes:
    axes = (soc_axis(), Axis("layout", _layout, ("BSND",), LAYOUTS, attr="layout"))
    if v2:
        axes += (Axis("rotary_mode", _rotary_mode, ("half",), tuple(ROTARY_MODES),
                      attr="rotary_mode", filters=("mode",)),)
    axes += (Axis("cos", parse_pattern, ("BS1D", "SB1D", "B1SD", "T1D")), dtype_axis(),
             dist_axis(), fault_axis(_FAULTS))
    return SweepAxes(
        axes=axes, shape=Shape(("B", "S", "Nq", "Nk", "D"), "B2S8Nq4Nk2D64",
                               lambda s: f"B{s['B']}S{s['S']}Nq{s['Nq']}Nk{s['Nk']}D{s['D']}"),
        complete=lambda v: {**v, "T": v["B"] * v["S"]} if v["layout"] == "TND" else v,
        derived=lambda v: {"T": v["B"] * v["S"]}, derived_names=("T",), admits=_admits)


# --- inputs -----------------------------------------------------------------------------------

def _shape(p: dict, heads: str, pattern: str | None = None) -> tuple:
    """A tensor of the case's layout with ``heads`` (Nq or Nk) heads, or the cos/sin table of
    ``pattern`` (1 on its broadcast axes)."""
    sizes = {"B": p["B"], "S": p["S"], "N": p[heads], "T": p["B"] * p["S"], "D": p["D"]}
    letters = pattern or p["layout"]
    return tuple(1 if c == "1" else sizes[letter] for c, letter in zip(letters, p["layout"]))


def _plan(p: dict) -> dict:
    """query, key, cos, sin; a ``fault`` changes one tensor so that the profile must reject the
    call (cos of another dtype, sin of another shape, key of another head size)."""
    dt = resolve_dtype(p["dtype"])
    fault = p.get("fault", "none")
    cshape = _shape(p, "Nq", p["cos"])
    kshape = _shape(p, "Nk")
    other = np.dtype(np.float16) if dt == np.float32 else np.dtype(np.float32)
    return {"query": TensorPlan(_shape(p, "Nq"), dt, "data"),
            "key": TensorPlan(kshape[:-1] + (p["D"] + 2,) if fault == "key_dim" else kshape,
                              dt, "data"),
            "cos": TensorPlan(cshape, other if fault == "cos_dtype" else dt, "table"),
            "sin": TensorPlan(cshape[:-1] + (p["D"] + 2,) if fault == "sin_shape" else cshape,
                              dt, "table")}


def _sample(p: dict, seed: int, pool=None) -> dict:
    """query and key drawn, cos and sin drawn together (rotary tables at the positions along S,
    paired for the rotary mode); ``special``: data at a quarter of the dtype's maximum
    (|out| <= 2 max|x| since |cos|, |sin| <= 1)."""
    plan = _plan(p)
    dist = p["dist"]
    out = {}
    for name in ("query", "key"):
        t = plan[name]
        large = dtype_max(t.dtype) / 4 if dist == "special" else None
        out[name] = draw(dist, "data", t.shape, t.dtype, seed, name, vendor=ROPE_VENDOR,
                         large=large)
    c = plan["cos"]
    cos, sin = draw_tables(dist, c.shape, c.dtype, seed, vendor=ROPE_VENDOR,
                           positions=table_positions(p, c.shape, seed),
                           pairing=PAIRING[p.get("rotary_mode", "half")])
    out["cos"] = cos
    s = plan["sin"]
    out["sin"] = sin if s.shape == c.shape else draw(dist, "data", s.shape, s.dtype, seed, "sin")
    return out


# --- the spec behind the record ---------------------------------------------------------------

def _args(call: Call) -> tuple:
    t, a = call.inputs, call.attrs
    return (t.get("query"), t.get("key"), t.get("cos"), t.get("sin"), a.get("layout", 1),
            a.get("rotary_mode", "half"))


def _check(function: str):
    def check(call: Call) -> None:
        check_apply_rope_args(function, *_args(call), call.soc)
    return check


def _terms(call: Call) -> dict:
    terms = apply_rotary_pos_emb_terms(*_args(call), soc=call.soc)
    return {"query_out": terms["query"], "key_out": terms["key"]}


def _describe(call: Call) -> dict:
    """The cos/sin pattern of the table in the call's layout."""
    layout = _layout(call.attrs.get("layout", 1))
    try:
        return {"cos": cos_pattern(np.shape(call.inputs["cos"]), layout)}
    except (KeyError, ValueError, AclnnError):
        return {}


def _record(v2: bool) -> Operator:
    function = "apply_rotary_pos_emb_v2" if v2 else "apply_rotary_pos_emb"
    return Operator(
        id="apply_rope_v2" if v2 else "apply_rope",
        aclnn="aclnnApplyRotaryPosEmbV2" if v2 else "aclnnApplyRotaryPosEmb",
        title="ApplyRotaryPosEmbV2" if v2 else "ApplyRotaryPosEmb",
        spec=apply_rotary_pos_emb_v2 if v2 else apply_rotary_pos_emb,
        tensors=Tensors(
            inputs=(Tensor("query", "queryRef", "data", "{layout}"),
                    Tensor("key", "keyRef", "data", "{layout}"),
                    Tensor("cos", "cos", "table", "{layout}"),
                    Tensor("sin", "sin", "table", "{layout}")),
            outputs=(Output("query_out", "queryOut", axes="{layout}"),
                     Output("key_out", "keyOut", axes="{layout}"))),
        sweep=_sweep(v2),
        generation=Generation(plan=_plan, sample=_sample, check=_check(function), terms=_terms,
                              socs=("A2", "A3", "950", None), describe=_describe),
        comparison=Comparison(
            context=("rotary_mode", "layout", "cos", "dtype") if v2 else ("layout", "cos", "dtype"),
            hypotheses=((hypotheses.other_values("rotary_mode"),) if v2 else ())
            + (hypotheses.other_values("layout"),),
            independent=("B", "S", "T"),
            rotation=Rotation(data=("query", "key"), cos=TablePart("cos"), sin=TablePart("sin"))))


APPLY_ROPE = _record(v2=False)
APPLY_ROPE_V2 = _record(v2=True)
