"""The record of InterleaveRope (``interleave_rope``): names, tensors, sweep axes, and how a
case's inputs are planned and sampled (docs/interleave_rope.md).

A case is x (B, N, S, D) whose head values come in interleaved pairs and one cos/sin table whose
pattern ``cos`` names it in x's letters (``B1SD``: per batch and position, ``B11D``: one row per
batch, as the A2/A3 kernels take them; on 950 and in the math-only profile any pattern of
RotaryPositionEmbedding in BNSD, ``11SD``, ``BNSD``, ...). The table's frequencies are paired
half-and-half, as the rotation after the pairs are taken apart is rotate-half.
"""

from __future__ import annotations

import numpy as np

from ..spec.dtypes import resolve_dtype
from ..spec.errors import AclnnError
from ..spec.irope import interleave_rope, interleave_rope_terms
from ..spec.irope_checks import check_interleave_rope_args
from ..spec.layouts import cos_pattern
from .axes import Axis, Shape, dist_axis, dtype_axis, fault_axis, soc_axis
from .record import (Call, Comparison, Generation, Operator, Output, Rotation, SweepAxes,
                     TablePart, Tensor, TensorPlan, Tensors)
from .rope_records import PAIRING, cos_fits, parse_pattern, table_positions
from .sampling import ROPE_VENDOR, draw, draw_tables, dtype_max

__all__ = ["INTERLEAVE_ROPE"]

LAYOUT = "BNSD"
_FAULTS = ("none", "cos_dtype", "sin_shape")


def _pattern(v) -> str:
    """A cos/sin pattern in x's letters BNSD (``b1sd`` -> ``B1SD``)."""
    s = parse_pattern(v)
    if not cos_fits(s, LAYOUT):
        raise ValueError(f"{v!r} is no cos/sin pattern of x (B, N, S, D); a pattern has each of "
                         "B, N, S or 1 in its place, then D: B1SD, B11D, 11SD, BNSD")
    return s


def _sweep() -> SweepAxes:
    axes = (soc_axis(), Axis("cos", _pattern, ("B1SD",)), dtype_axis(), dist_axis(),
            fault_axis(_FAULTS))
    return SweepAxes(axes=axes, shape=Shape(("B", "N", "S", "D"), "B2N4S8D64",
                                            lambda s: f"B{s['B']}N{s['N']}S{s['S']}D{s['D']}"))


# --- inputs -----------------------------------------------------------------------------------

def _table_shape(p: dict) -> tuple:
    sizes = {"B": p["B"], "N": p["N"], "S": p["S"], "D": p["D"]}
    return tuple(1 if c == "1" else sizes[letter] for c, letter in zip(p["cos"], LAYOUT))


def _plan(p: dict) -> dict:
    """x, cos, sin; a ``fault`` makes the profile reject the call (cos of another dtype, sin of
    another shape)."""
    dt = resolve_dtype(p["dtype"])
    fault = p.get("fault", "none")
    cshape = _table_shape(p)
    other = np.dtype(np.float16) if dt == np.float32 else np.dtype(np.float32)
    return {"x": TensorPlan((p["B"], p["N"], p["S"], p["D"]), dt, "data"),
            "cos": TensorPlan(cshape, other if fault == "cos_dtype" else dt, "table"),
            "sin": TensorPlan(cshape[:-1] + (p["D"] + 2,) if fault == "sin_shape" else cshape,
                              dt, "table")}


def _sample(p: dict, seed: int, pool=None) -> dict:
    """x drawn (``special``: at a quarter of the dtype's maximum, |y| <= 2 max|x|), cos and sin
    drawn together at the positions along S, paired half-and-half."""
    plan = _plan(p)
    x = plan["x"]
    large = dtype_max(x.dtype) / 4 if p["dist"] == "special" else None
    out = {"x": draw(p["dist"], "data", x.shape, x.dtype, seed, "x", vendor=ROPE_VENDOR,
                     large=large)}
    c, s = plan["cos"], plan["sin"]
    cos, sin = draw_tables(p["dist"], c.shape, c.dtype, seed, vendor=ROPE_VENDOR,
                           positions=table_positions({**p, "layout": LAYOUT}, c.shape, seed),
                           pairing=PAIRING["interleave-half"])
    out["cos"] = cos
    out["sin"] = sin if s.shape == c.shape else draw(p["dist"], "data", s.shape, s.dtype, seed,
                                                     "sin", vendor=ROPE_VENDOR)
    return out


# --- the spec behind the record ---------------------------------------------------------------

def _args(call: Call) -> tuple:
    t = call.inputs
    return t.get("x"), t.get("cos"), t.get("sin")


def _check(call: Call) -> None:
    check_interleave_rope_args("interleave_rope", *_args(call), call.soc)


def _terms(call: Call) -> dict:
    return interleave_rope_terms(*_args(call), soc=call.soc)


def _describe(call: Call) -> dict:
    """The cos/sin pattern of the table in x's letters."""
    try:
        return {"cos": cos_pattern(np.shape(call.inputs["cos"]), LAYOUT)}
    except (KeyError, ValueError, AclnnError):
        return {}


INTERLEAVE_ROPE = Operator(
    id="interleave_rope", aclnn="aclnnInterleaveRope", title="InterleaveRope",
    spec=interleave_rope,
    tensors=Tensors(inputs=(Tensor("x", "x", "data", LAYOUT), Tensor("cos", "cos", "table", LAYOUT),
                            Tensor("sin", "sin", "table", LAYOUT)),
                    outputs=(Output("y", "y", axes=LAYOUT),)),
    sweep=_sweep(),
    generation=Generation(plan=_plan, sample=_sample, check=_check, terms=_terms,
                          socs=("A2", "A3", "950", None), describe=_describe),
    comparison=Comparison(context=("cos", "dtype"), independent=("B", "N", "S"),
                          rotation=Rotation(data=("x",), cos=TablePart("cos"),
                                            sin=TablePart("sin"))))
