"""The records of RotaryPositionEmbeddingGrad (``rope_grad``) and RotaryPositionEmbedding
(``rope``): names, tensors, sweep axes, and how a case's inputs are planned and sampled."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from ..spec import terms
from . import hypotheses
from ..spec.dtypes import resolve_dtype, widen
from ..spec.enums import RopeMode
from ..spec.errors import AclnnError
from ..spec.layouts import LAYOUTS, cos_pattern, infer_layout, layout_shape
from ..spec.reduce import reduced_terms
from ..spec.rope import (ROPE_BACKWARD, ROPE_FORWARD, rotary_position_embedding,
                         rotary_position_embedding_grad)
from ..spec.rope_checks import check_rope_args
from .axes import Axis, Shape, choice, dist_axis, dtype_axis, enum_labels, fault_axis, flag, soc_axis
from .record import (Autograd, Call, Comparison, Generation, Operator, Output, Rotation,
                     SweepAxes, TablePart, Tensor, TensorPlan, Tensors)
from .sampling import ROPE_VENDOR, draw, draw_tables, dtype_max, stream

__all__ = ["ROPE_GRAD", "ROPE", "MODES", "PAIRING", "cos_fits", "parse_pattern", "table_positions"]

MODES = tuple(m.label for m in RopeMode)
#: cos/sin pattern per layout when a sweep block names none
DEFAULT_COS = ("11SD", "1S1D", "S11D", "T1D")
#: frequency pairing of the rotary tables that suits each mode
PAIRING = {"half": "half", "interleave": "interleave", "quarter": "quarter",
            "interleave-half": "half"}
#: aclnn spellings of the vendor files (docs/rope.md, Parameters: xOptional, dxOut, ...)
_ALIASES = {"xOptional": "x", "dxOut": "dx", "dcosOut": "dcos", "dsinOut": "dsin", "yOut": "y"}
_SOCS = ("A2", "A3", "950", None)


def cos_fits(pattern: str, layout: str) -> bool:
    """A cos/sin pattern names a tensor of the layout: same rank, each leading letter either the
    layout's own or 1, last letter D."""
    return (len(pattern) == len(layout) and pattern[-1] == "D"
            and all(p in (l, "1") for p, l in zip(pattern[:-1], layout[:-1])))


# --- sweeps -----------------------------------------------------------------------------------

def _check_axes(axes: dict, given: set) -> None:
    """Every cos/sin pattern a block names must fit one of its layouts."""
    if "cos" not in given:
        return
    for c in axes["cos"]:
        if not any(cos_fits(c, lay) for lay in axes["layout"]):
            raise ValueError(f"axis 'cos': {c!r} fits none of the layouts "
                             f"{', '.join(axes['layout'])}; a pattern spells the layout's "
                             "letters with 1 on broadcast axes (BNSD: 11SD, B1SD, ...)")


def parse_pattern(v) -> str:
    """A cos/sin pattern as a sweep spells it (``11sd`` -> ``11SD``)."""
    s = str(v).strip().upper()
    if not re.fullmatch(r"[1BNST]{1,3}D", s):
        raise ValueError(f"{v!r} is not a cos/sin pattern; a pattern spells the layout's "
                         "letters with 1 on broadcast axes, e.g. 11SD, BS1D, T1D")
    return s


def _complete(values: dict) -> dict:
    """T = B*S of a TND layout."""
    return {**values, "T": values["B"] * values["S"]} if values["layout"] == "TND" else values


_MODE_PARSE, _MODE_SPEC = enum_labels(RopeMode, lambda m: m.label)


def _sweep(grad: bool) -> SweepAxes:
    faults = ("none", "cos_dtype", "sin_shape") + (("x_shape",) if grad else ()) + ("missing_cos",)
    axes = (soc_axis(),
            Axis("mode", _MODE_PARSE, ("half",), MODES, attr="mode", to_spec=_MODE_SPEC,
                 legacy="mode_name"),
            Axis("layout", choice(LAYOUTS, upper=True), ("BNSD",), LAYOUTS),
            Axis("cos", parse_pattern, DEFAULT_COS, legacy="cos_pattern"),
            dtype_axis())
    axes += (Axis("x", flag, (True,), (True, False)),) if grad else ()
    axes += (dist_axis(), fault_axis(faults))
    return SweepAxes(
        axes=axes, shape=Shape(("B", "N", "S", "D"), "B2N8S128D64",
                               lambda s: f"B{s['B']}N{s['N']}S{s['S']}D{s['D']}"),
        complete=_complete, derived=lambda values: {"T": values["B"] * values["S"]},
        derived_names=("T",), admits=lambda values: cos_fits(values["cos"], values["layout"]),
        check=_check_axes)


# --- inputs -----------------------------------------------------------------------------------

def _cos_shape(p: dict) -> tuple:
    sizes = {"B": p["B"], "N": p["N"], "S": p["S"], "T": p["B"] * p["S"], "D": p["D"]}
    return tuple(1 if c == "1" else sizes[letter] for c, letter in zip(p["cos"], p["layout"]))


def _other_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float16) if dt == np.float32 else np.dtype(np.float32)


def _plan(grad: bool):
    primary = "dy" if grad else "x"

    def plan(p: dict) -> dict:
        """name -> TensorPlan in the spec's parameter order; a ``fault`` changes one tensor so
        that the chosen profile must reject the call."""
        dt = resolve_dtype(p["dtype"])
        fault = p.get("fault", "none")
        full = layout_shape(p["layout"], p["B"], p["N"], p["S"], p["D"])
        cshape = _cos_shape(p)
        tdt = _other_dtype(dt) if fault == "cos_dtype" else dt
        out = {primary: TensorPlan(full, dt, "grad" if grad else "data")}
        if fault != "missing_cos":
            out["cos"] = TensorPlan(cshape, tdt, "table")
        out["sin"] = TensorPlan(cshape[:-1] + (p["D"] + 2,) if fault == "sin_shape" else cshape,
                                tdt, "table")
        if grad and p["x"]:
            xshape = (full[0] + 1,) + full[1:] if fault == "x_shape" else full
            out["x"] = TensorPlan(xshape, dt, "data")
        return out
    return plan


def table_positions(p: dict, cshape: tuple, seed: int) -> np.ndarray:
    """Positions of each row of a cos/sin table: the sequence index where the table has the S
    axis (TND: the index within each packed sequence), plus a random offset per index of any
    other axis the table has (per-batch or per-head tables); one random position when the table
    has no sequence axis."""
    rng = stream(seed, "positions")
    layout, pattern = p["layout"], p["cos"]
    pos = np.zeros(cshape[:-1] + (1,))
    has_seq = False
    for axis, (c, letter) in enumerate(zip(pattern[:-1], layout[:-1])):
        if c == "1":
            continue
        shape = [1] * len(cshape)
        shape[axis] = cshape[axis]
        if letter == "S":
            pos = pos + np.arange(cshape[axis]).reshape(shape)
            has_seq = True
        elif letter == "T":
            pos = pos + (np.arange(cshape[axis]) % p["S"]).reshape(shape)
            has_seq = True
        else:
            pos = pos + rng.integers(0, 4096, cshape[axis]).reshape(shape)
    if not has_seq:
        pos = pos + rng.integers(1, 4096)
    return pos


def _special_large(grad: bool):
    def large(p: dict, name: str, plan: TensorPlan) -> float:
        """The ``special`` distribution's large magnitude for one tensor: as large as
        worst-case bounds allow without the exact outputs exceeding the dtype's maximum."""
        top = dtype_max(plan.dtype)
        if not grad or name == "dy":
            return top / 4                       # |y| <= 2 max|x|, |dx| <= 2 max|dy| (|cos|, |sin| <= 1)
        full, cshape = plan.shape, _cos_shape(p)
        K = reduced_terms(full, cshape) if len(cshape) == len(full) else 1
        return 2.0 / max(K, 1)                   # |dcos| <= K * max|dy| * max|x| <= max/2
    return large


def _sample(grad: bool):
    plan_of, large_of = _plan(grad), _special_large(grad)

    def sample(p: dict, seed: int, pool=None) -> dict:
        """The case's inputs as stored, each in its planned dtype (tensors drawn side by side
        by ``pool``, an executor, when given: each has its own random stream)."""
        dist = p["dist"]
        plan = plan_of(p)
        drawn = [(name, t) for name, t in plan.items() if t.role != "table"]

        def one(item):
            name, t = item
            large = large_of(p, name, t) if dist == "special" else None
            return draw(dist, t.role, t.shape, t.dtype, seed, name, vendor=ROPE_VENDOR, large=large)

        out = dict(zip((name for name, _ in drawn), (pool.map if pool else map)(one, drawn)))
        tplan = plan.get("cos", plan["sin"])
        cshape = _cos_shape(p)
        cos, sin = draw_tables(dist, cshape, tplan.dtype, seed, positions=table_positions(p, cshape, seed),
                               pairing=PAIRING[p["mode"]], vendor=ROPE_VENDOR)
        if "cos" in plan:
            out["cos"] = cos
        out["sin"] = sin if plan["sin"].shape == cshape else draw(
            dist, "data", plan["sin"].shape, plan["sin"].dtype, seed, "sin", vendor=ROPE_VENDOR)
        return {k: out[k] for k in plan}
    return sample


# --- the spec behind the record ---------------------------------------------------------------

def _check(grad: bool):
    function, primary = (("rotary_position_embedding_grad", "dy") if grad
                         else ("rotary_position_embedding", "x"))

    def check(call: Call) -> None:
        t = call.inputs
        check_rope_args(function, primary, t.get(primary), t.get("cos"), t.get("sin"),
                        t.get("x") if grad else None, call.attrs["mode"], call.soc)
    return check


def _terms_grad(call: Call) -> dict:
    t = call.inputs
    return terms.rope_grad_terms(t["dy"], t["cos"], t["sin"], t.get("x"), call.attrs["mode"],
                                 call.soc)


def _terms(call: Call) -> dict:
    t = call.inputs
    return terms.rope_terms(t["x"], t["cos"], t["sin"], call.attrs["mode"], call.soc)


def _describe(grad: bool):
    primary = "dy" if grad else "x"

    def describe(call: Call) -> dict:
        """layout and cos pattern of an in-memory case, as the A2/A3 rules name them (the
        profile's own rules first), and whether x was given."""
        shape, cshape = np.shape(call.inputs[primary]), np.shape(call.inputs["cos"])
        mode = int(call.attrs.get("mode", 0))
        out = {"layout": None, "cos": None}
        for profile in ((call.soc,) if call.soc else ()) + ("A2", None):
            try:
                inf = infer_layout(shape, cshape, mode=mode if mode in (0, 1) else 0, soc=profile)
            except AclnnError:
                continue
            if inf.layout:
                out.update(layout=inf.layout, cos=inf.cos_pattern or cos_pattern(cshape, inf.layout))
                break
        if grad:
            out["x"] = call.inputs.get("x") is not None
        return out
    return describe


def _benchmark(grad: bool):
    def benchmark(call: Call) -> dict:
        """The formula block run on the inputs converted to float32 (exact): what a naive
        float32 kernel computes."""
        t = widen(call.inputs, np.float32)
        mode = RopeMode(int(call.attrs["mode"]))
        if grad:
            return dict(zip(("dx", "dcos", "dsin"),
                            ROPE_BACKWARD[mode](t["dy"], t["cos"], t["sin"], t.get("x"))))
        return {"y": ROPE_FORWARD[mode](t["x"], t["cos"], t["sin"])}
    return benchmark


def _autograd(call: Call, params: dict | None = None) -> Autograd:
    """dx, dcos, dsin are the gradients of y = RotaryPositionEmbedding(x, cos, sin) for the
    upstream gradient dy; without x only dx is asked for (it does not depend on x)."""
    inputs = call.inputs
    x = inputs.get("x")
    leaves = {"x": "dx", "cos": "dcos", "sin": "dsin"} if x is not None else {"x": "dx"}
    if x is None:
        x = np.zeros(np.shape(inputs["dy"]), np.asarray(inputs["dy"]).dtype)
    return Autograd("rope", {"x": x, "cos": inputs["cos"], "sin": inputs["sin"]},
                    {"mode": call.attrs["mode"]}, leaves, {"y": "dy"})


def _reread_shape(name: str, call: Call, p: dict, layout: str) -> tuple | None:
    """The shape a tensor of a BNSD/BSND/SBND case has when its bytes are read in ``layout``
    (None: no such reading)."""
    here, pattern = p.get("layout"), p.get("cos")
    if "TND" in (layout, here) or here not in LAYOUTS or not pattern:
        return None
    sizes = dict(zip(here, np.shape(call.inputs["dy" if "dy" in call.inputs else "x"])))
    if name in ("cos", "sin"):
        kept = {letter for c, letter in zip(pattern, here) if c != "1"}
        return tuple(sizes[letter] if letter in kept else 1 for letter in layout)
    return tuple(sizes[letter] for letter in layout)


_HYPOTHESES = (hypotheses.other_values("mode"), hypotheses.reread_layout("layout", _reread_shape))
_COMPARISON = Comparison(context=("mode", "layout", "cos", "dtype"), ratio_level="L0",
                         hypotheses=_HYPOTHESES, independent=("B", "N", "S", "T"))


def _rotation(data: tuple) -> Rotation:
    return Rotation(data=data, cos=TablePart("cos"), sin=TablePart("sin"))


def _tensor(name: str, role: str) -> Tensor:
    return Tensor(name, name, role, axes="{layout}")

ROPE_GRAD = Operator(
    id="rope_grad", aclnn="aclnnRotaryPositionEmbeddingGrad", title="RotaryPositionEmbeddingGrad",
    spec=rotary_position_embedding_grad,
    tensors=Tensors(
        inputs=(_tensor("dy", "grad"), _tensor("cos", "table"), _tensor("sin", "table"),
                _tensor("x", "data")),
        outputs=tuple(Output(n, n, axes="{layout}") for n in ("dx", "dcos", "dsin")),
        aliases=_ALIASES),
    sweep=_sweep(grad=True),
    generation=Generation(plan=_plan(grad=True), sample=_sample(grad=True),
                          check=_check(grad=True), terms=_terms_grad, socs=_SOCS,
                          describe=_describe(grad=True)),
    comparison=replace(_COMPARISON, benchmark=_benchmark(grad=True),
                       rotation=_rotation(("dy", "x"))),
    autograd=_autograd)

ROPE = Operator(
    id="rope", aclnn="aclnnRotaryPositionEmbedding", title="RotaryPositionEmbedding",
    spec=rotary_position_embedding,
    tensors=Tensors(
        inputs=(_tensor("x", "data"), _tensor("cos", "table"), _tensor("sin", "table")),
        outputs=(Output("y", "y", axes="{layout}"),), aliases=_ALIASES),
    sweep=_sweep(grad=False),
    generation=Generation(plan=_plan(grad=False), sample=_sample(grad=False),
                          check=_check(grad=False), terms=_terms, socs=_SOCS,
                          describe=_describe(grad=False)),
    comparison=replace(_COMPARISON, benchmark=_benchmark(grad=False), rotation=_rotation(("x",))))
