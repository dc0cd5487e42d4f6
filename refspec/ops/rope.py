"""The records of RotaryPositionEmbeddingGrad (``rope_grad``) and RotaryPositionEmbedding
(``rope``): names, tensors, sweep axes, and how a case's inputs are planned and sampled."""

from __future__ import annotations

import numpy as np

from ..spec import terms
from ..spec.dtypes import resolve_dtype, widen
from ..spec.enums import RopeMode
from ..spec.errors import AclnnError
from ..spec.layouts import cos_pattern, infer_layout, layout_shape
from ..spec.reduce import reduced_terms
from ..spec.rope import (ROPE_BACKWARD, ROPE_FORWARD, rotary_position_embedding,
                         rotary_position_embedding_grad)
from ..spec.rope_checks import check_rope_args
from .record import Autograd, Operator, Output, SweepAxes, Tensor, TensorPlan
from .sampling import ROPE_VENDOR, draw, draw_tables, dtype_max, stream

__all__ = ["ROPE_GRAD", "ROPE", "MODES", "cos_fits"]

MODES = tuple(m.label for m in RopeMode)
#: cos/sin pattern per layout when a sweep block names none
DEFAULT_COS = ("11SD", "1S1D", "S11D", "T1D")
#: frequency pairing of the rotary tables that suits each mode
_PAIRING = {"half": "half", "interleave": "interleave", "quarter": "quarter",
            "interleave-half": "half"}
#: aclnn spellings of the vendor files (docs/rope.md, Parameters: xOptional, dxOut, ...)
_ALIASES = {"xOptional": "x", "dxOut": "dx", "dcosOut": "dcos", "dsinOut": "dsin", "yOut": "y"}


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


def _params(grad: bool):
    def params(values: dict, shape: dict) -> dict:
        p = {"soc": None if values["soc"] == "none" else values["soc"],
             "mode": int(RopeMode[values["mode"].upper().replace("-", "_")]),
             "mode_name": values["mode"], "layout": values["layout"],
             "cos_pattern": values["cos"], "dtype": values["dtype"]}
        if grad:
            p["x"] = values["x"]
        p["distribution"] = values["dist"]
        p["fault"] = values["fault"]
        p.update(shape)
        if values["layout"] == "TND":
            p["T"] = shape["B"] * shape["S"]
        return p
    return params


def _sweep(grad: bool) -> SweepAxes:
    axes = ("soc", "mode", "layout", "cos", "dtype") + (("x",) if grad else ()) + ("dist", "fault")
    faults = ("none", "cos_dtype", "sin_shape") + (("x_shape",) if grad else ()) + ("missing_cos",)
    return SweepAxes(
        axes=axes, shape_keys=("B", "N", "S", "D"), shape_example="B2N8S128D64",
        params=_params(grad), label=lambda s: f"B{s['B']}N{s['N']}S{s['S']}D{s['D']}",
        faults=faults, derived=lambda values, shape: {"T": shape["B"] * shape["S"]},
        derived_names=("T",), admits=lambda values: cos_fits(values["cos"], values["layout"]),
        check_axes=_check_axes,
        defaults={"cos": list(DEFAULT_COS)}, filters={"mode": "mode_name", "layout": "layout"})


# --- inputs -----------------------------------------------------------------------------------

def _cos_shape(p: dict) -> tuple:
    sizes = {"B": p["B"], "N": p["N"], "S": p["S"], "T": p["B"] * p["S"], "D": p["D"]}
    return tuple(1 if c == "1" else sizes[letter] for c, letter in zip(p["cos_pattern"], p["layout"]))


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


def _positions(p: dict, cshape: tuple, seed: int) -> np.ndarray:
    """Positions of each row of a cos/sin table: the sequence index where the table has the S
    axis (TND: the index within each packed sequence), plus a random offset per index of any
    other axis the table has (per-batch or per-head tables); one random position when the table
    has no sequence axis."""
    rng = stream(seed, "positions")
    layout, pattern = p["layout"], p["cos_pattern"]
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
        dist = p["distribution"]
        plan = plan_of(p)
        drawn = [(name, t) for name, t in plan.items() if t.role != "table"]

        def one(item):
            name, t = item
            large = large_of(p, name, t) if dist == "special" else None
            return draw(dist, t.role, t.shape, t.dtype, seed, name, vendor=ROPE_VENDOR, large=large)

        out = dict(zip((name for name, _ in drawn), (pool.map if pool else map)(one, drawn)))
        tplan = plan.get("cos", plan["sin"])
        cshape = _cos_shape(p)
        cos, sin = draw_tables(dist, cshape, tplan.dtype, seed, positions=_positions(p, cshape, seed),
                               pairing=_PAIRING[p["mode_name"]], vendor=ROPE_VENDOR)
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

    def check(inputs: dict, attrs: dict, soc) -> None:
        check_rope_args(function, primary, inputs.get(primary), inputs.get("cos"),
                        inputs.get("sin"), inputs.get("x") if grad else None, attrs["mode"], soc)
    return check


def _terms_grad(inputs, attrs, soc):
    return terms.rope_grad_terms(inputs["dy"], inputs["cos"], inputs["sin"], inputs.get("x"),
                                 attrs["mode"], soc)


def _terms(inputs, attrs, soc):
    return terms.rope_terms(inputs["x"], inputs["cos"], inputs["sin"], attrs["mode"], soc)


def _describe(grad: bool):
    primary = "dy" if grad else "x"

    def describe(inputs: dict, attrs: dict, soc) -> dict:
        """layout and cos pattern of an in-memory case, as the A2/A3 rules name them (the
        profile's own rules first), and whether x was given."""
        shape, cshape = np.shape(inputs[primary]), np.shape(inputs["cos"])
        mode = int(attrs.get("mode", 0))
        out = {"mode": mode, "layout": None, "cos_pattern": None}
        for profile in ((soc,) if soc else ()) + ("A2", None):
            try:
                inf = infer_layout(shape, cshape, mode=mode if mode in (0, 1) else 0, soc=profile)
            except AclnnError:
                continue
            if inf.layout:
                out.update(layout=inf.layout,
                           cos_pattern=inf.cos_pattern or cos_pattern(cshape, inf.layout))
                break
        if grad:
            out["x"] = inputs.get("x") is not None
        return out
    return describe


def _benchmark(grad: bool):
    def benchmark(inputs: dict, attrs: dict, soc) -> dict:
        """The formula block run on the inputs converted to float32 (exact): what a naive
        float32 kernel computes."""
        t = widen(inputs, np.float32)
        mode = RopeMode(int(attrs["mode"]))
        if grad:
            return dict(zip(("dx", "dcos", "dsin"),
                            ROPE_BACKWARD[mode](t["dy"], t["cos"], t["sin"], t.get("x"))))
        return {"y": ROPE_FORWARD[mode](t["x"], t["cos"], t["sin"])}
    return benchmark


def _elementwise(grad: bool):
    primary, name = ("dy", "dx") if grad else ("x", "y")

    def sum_abs(inputs: dict, attrs: dict, soc, names) -> dict:
        if name not in names:
            return {}
        return {name: terms.rope_elementwise_sum_abs(inputs[primary], inputs["cos"],
                                                     inputs["sin"], attrs["mode"], grad)}
    return sum_abs


def _autograd(inputs: dict, attrs: dict) -> Autograd:
    """dx, dcos, dsin are the gradients of y = RotaryPositionEmbedding(x, cos, sin) for the
    upstream gradient dy; without x only dx is asked for (it does not depend on x)."""
    x = inputs.get("x")
    leaves = {"x": "dx", "cos": "dcos", "sin": "dsin"} if x is not None else {"x": "dx"}
    if x is None:
        x = np.zeros(np.shape(inputs["dy"]), np.asarray(inputs["dy"]).dtype)
    return Autograd("rope", {"x": x, "cos": inputs["cos"], "sin": inputs["sin"]},
                    {"mode": attrs["mode"]}, leaves, {"y": "dy"})


_SOCS = ("A2", "A3", "950", None)
_CONTEXT = ("mode", "layout", "cos_pattern", "dtype")


def _attrs_of(p: dict) -> dict:
    return {"mode": p["mode"]}


def _output_axes(p: dict, name: str) -> str:
    return p.get("layout") or ""


ROPE_GRAD = Operator(
    id="rope_grad", function="rotary_position_embedding_grad",
    aclnn="aclnnRotaryPositionEmbeddingGrad", title="RotaryPositionEmbeddingGrad",
    spec=rotary_position_embedding_grad,
    inputs=(Tensor("dy", "dy", "grad"), Tensor("cos", "cos", "table"),
            Tensor("sin", "sin", "table"), Tensor("x", "x", "data")),
    outputs=(Output("dx", "dx"), Output("dcos", "dcos"), Output("dsin", "dsin")),
    attributes=("mode",), socs=_SOCS, sweep=_sweep(grad=True), attrs_of=_attrs_of,
    plan=_plan(grad=True), sample=_sample(grad=True), check=_check(grad=True),
    terms=_terms_grad, output_axes=_output_axes, describe=_describe(grad=True),
    context=_CONTEXT, ratio_level="L0", benchmark=_benchmark(grad=True),
    elementwise_sum_abs=_elementwise(grad=True), file_aliases=_ALIASES, autograd=_autograd)

ROPE = Operator(
    id="rope", function="rotary_position_embedding", aclnn="aclnnRotaryPositionEmbedding",
    title="RotaryPositionEmbedding", spec=rotary_position_embedding,
    inputs=(Tensor("x", "x", "data"), Tensor("cos", "cos", "table"),
            Tensor("sin", "sin", "table")),
    outputs=(Output("y", "y"),),
    attributes=("mode",), socs=_SOCS, sweep=_sweep(grad=False), attrs_of=_attrs_of,
    plan=_plan(grad=False), sample=_sample(grad=False), check=_check(grad=False),
    terms=_terms, output_axes=_output_axes, describe=_describe(grad=False),
    context=_CONTEXT, ratio_level="L0", benchmark=_benchmark(grad=False),
    elementwise_sum_abs=_elementwise(grad=False), file_aliases=_ALIASES)
