"""The records of NormRopeConcatBackward (``nrc_grad``) and NormRopeConcat (``nrc``): names,
tensors, sweep axes, and how a case's inputs are planned and sampled."""

from __future__ import annotations

from dataclasses import replace
from math import sqrt

import numpy as np

from ..spec import terms
from . import hypotheses
from ..spec.dtypes import resolve_dtype, round_to, to_float64, widen
from ..spec.enums import NormType, RopeType
from ..spec.nrc import (BACKWARD_TENSORS, FORWARD_TENSORS, NormRopeConcatGrads,
                        NormRopeConcatOutputs, backward_args, backward_exact, layer_norm,
                        norm_rope_concat, norm_rope_concat_backward)
from ..spec.nrc_checks import STREAMS, check_nrc_args
from .axes import Axis, Shape, dist_axis, dtype_axis, enum_labels, fault_axis, flag, number, numbered, soc_axis
from .record import (Autograd, Call, Comparison, Generation, Operator, Output, Rotation,
                     SweepAxes, TablePart, Tensor, TensorPlan, Tensors, camel_case)
from .sampling import NRC_VENDOR, draw, draw_tables, dtype_max

__all__ = ["NRC_GRAD", "NRC", "ROPE_TYPES"]

ROPE_TYPES = tuple(t.name.lower() for t in RopeType)
_RSTD_MAX = 1 / sqrt(1e-5)     # rstd of a constant row with the default eps
_WEIGHTS = tuple(st.weight for st in STREAMS.values())
_BIASES = tuple(st.bias for st in STREAMS.values())
_STATS = tuple(n for st in STREAMS.values() for n in (st.mean, st.rstd))


# --- sweeps -----------------------------------------------------------------------------------

_NORM_TYPE = numbered((0, 1, 2), {"none": 0, "layer_norm": 1, "layernorm": 1, "affine": 2,
                                  "affine_layer_norm": 2},
                      ("0 (none)", "1 (layer_norm)", "2 (affine)"))
_ROPE_TYPE_PARSE, _ROPE_TYPE_SPEC = enum_labels(RopeType, lambda t: t.name.lower())


def _label(s: dict) -> str:
    label = f"B{s['B']}N{s['N']}Sq{s['Sq']}Sk{s['Sk']}Seq{s['Seq']}Sek{s['Sek']}D{s['D']}"
    return label + (f"Sr{s['Sr']}" if s["Sr"] else "")


def _complete(values: dict) -> dict:
    """Sr: 0 without RoPE; "min" is min(Sq+Seq, Sk+Sek), the largest the spec allows."""
    values = dict(values)
    if values["rope_type"] == "none":
        values["Sr"] = 0
    elif values["Sr"] == "min":
        values["Sr"] = min(values["Sq"] + values["Seq"], values["Sk"] + values["Sek"])
    return values


def _sweep(forward: bool) -> SweepAxes:
    faults = (("none", "missing_bias", "missing_rope", "value_seq", "weight_shape") if forward
              else ("none", "stats_dtype", "missing_stats", "missing_rope", "grad_seq",
                    "weight_shape"))
    axes = (soc_axis(),
            Axis("norm_type", _NORM_TYPE, (0,), (0, 1, 2), attr="norm_type"),
            Axis("norm_added_type", _NORM_TYPE, (0,), (0, 1, 2), attr="norm_added_type"),
            Axis("rope_type", _ROPE_TYPE_PARSE, ("none",), ROPE_TYPES, attr="rope_type",
                 to_spec=_ROPE_TYPE_SPEC, legacy="rope_type_name", filters=("mode",)),
            Axis("concat_order", numbered((0, 1)), (0,), (0, 1), attr="concat_order"))
    if forward:
        axes += (Axis("training", flag, (True,), (True, False), attr="is_training",
                      legacy="is_training"),
                 Axis("eps", number(), (1e-5,), attr="eps", omit=1e-5))
    else:                  # the eps the statistics were computed with: no attribute of the spec
        axes += (Axis("eps", number(), (1e-5,), omit=1e-5),)
    axes += (dtype_axis(), dist_axis(), fault_axis(faults))
    return SweepAxes(
        axes=axes, shape=Shape(("B", "N", "Sq", "Sk", "Seq", "Sek", "D", "Sr"),
                               "B1N2Sq8Sk8Seq4Sek4D16Sr6", _label,
                               {"Seq": 0, "Sek": 0, "Sr": "min"}),
        complete=_complete)


# --- inputs -----------------------------------------------------------------------------------

def _seq(p: dict) -> dict:
    return {"query": p["Sq"], "key": p["Sk"], "encoder_query": p["Seq"], "encoder_key": p["Sek"]}


def _plan(forward: bool):
    def plan(p: dict) -> dict:
        """name -> TensorPlan in the spec's parameter order (absent streams left out); a
        ``fault`` changes one tensor so that the profile must reject the call."""
        dt = resolve_dtype(p["dtype"])
        fault = p.get("fault", "none")
        B, N, D = p["B"], p["N"], p["D"]
        seq = _seq(p)
        types = {"norm_type": p["norm_type"], "norm_added_type": p["norm_added_type"]}
        present = [s for s in STREAMS if seq[s] > 0 or s in ("query", "key")]
        wshape = (D + 2,) if fault == "weight_shape" else (D,)
        out = {}
        if not forward:
            Lq, Lk = p["Sq"] + p["Seq"], p["Sk"] + p["Sek"]
            out["grad_query_output"] = TensorPlan((B, N, Lq + (fault == "grad_seq"), D), dt, "grad")
            out["grad_key_output"] = TensorPlan((B, N, Lk, D), dt, "grad")
            out["grad_value_output"] = TensorPlan((B, N, Lk, D), dt, "grad")
            for s in ("query", "key", "encoder_query", "encoder_key"):
                if s in present:
                    out[s] = TensorPlan((B, seq[s], N, D), dt, "data")
            sdt = ((dt if dt != np.float32 else np.dtype(np.float16)) if fault == "stats_dtype"
                   else np.dtype(np.float32))
            dropped = False
            for s, (type_attr, weight, _bias, mean, rstd) in STREAMS.items():
                if s not in present:
                    continue
                if types[type_attr] == NormType.AFFINE_LAYER_NORM:
                    out[weight] = TensorPlan(wshape, dt, "weight")
                if types[type_attr] >= 1:
                    for name in (mean, rstd):
                        if fault == "missing_stats" and not dropped:
                            dropped = True
                            continue
                        out[name] = TensorPlan((B, seq[s], N, 1), sdt, "stats")
        else:
            out["query"] = TensorPlan((B, p["Sq"], N, D), dt, "data")
            out["key"] = TensorPlan((B, p["Sk"], N, D), dt, "data")
            out["value"] = TensorPlan((B, p["Sk"] + (fault == "value_seq"), N, D), dt, "data")
            for s, v in (("encoder_query", None), ("encoder_key", "encoder_value")):
                if s in present:
                    out[s] = TensorPlan((B, seq[s], N, D), dt, "data")
                    if v:
                        out[v] = TensorPlan((B, seq[s], N, D), dt, "data")
            dropped = False
            for s, (type_attr, weight, bias, _mean, _rstd) in STREAMS.items():
                if s in present and types[type_attr] == NormType.AFFINE_LAYER_NORM:
                    out[weight] = TensorPlan(wshape, dt, "weight")
                    if fault == "missing_bias" and not dropped:
                        dropped = True
                    else:
                        out[bias] = TensorPlan((D,), dt, "bias")
        if p["rope_type"] != "none" and fault != "missing_rope":
            out["rope_sin"] = TensorPlan((p["Sr"], D), dt, "table")
            out["rope_cos"] = TensorPlan((p["Sr"], D), dt, "table")
        return out
    return plan


def work_dtype(dtype) -> np.dtype:
    """The arithmetic a kernel of I/O dtype ``dtype`` computes in: float32 for the device
    dtypes (16-bit inputs are widened, as the vendor's kernels do), float64 for float64."""
    return np.dtype(np.float64 if resolve_dtype(dtype) == np.float64 else np.float32)


def _special_large(forward: bool):
    def large(p: dict, name: str, plan: TensorPlan) -> float:
        """The ``special`` distribution's large magnitude for one tensor: the edges a kernel
        meets, as large as worst-case bounds allow without the exact outputs exceeding the
        dtype's maximum, and, for a normalised stream, without the sum of D squares of its
        LayerNorm (|x - mean| <= 2 max|x|) exceeding the maximum of the kernel's arithmetic
        (``work_dtype``: float32 for every device dtype), so that a kernel computing the
        documented dataflow can attain the golden (the backward's statistics come from that
        forward)."""
        top = dtype_max(plan.dtype)
        D = p["D"]
        rows = p["B"] * p["N"] * max(p["Sq"], p["Sk"], p["Seq"], p["Sek"], 1)
        if plan.role == "data":
            if name in STREAMS and p[STREAMS[name].norm] != NormType.NONE:
                return min(top / 4, sqrt(dtype_max(work_dtype(plan.dtype)) / D) / 4)
            return top / 4                               # copied or rotated: |out| <= 2 max|x|
        if forward:
            return top / 8                               # biases: |out| <= sqrt(D) + max|b|
        if name == "grad_value_output":
            return top / 2                               # copied
        if max(p["norm_type"], p["norm_added_type"]) == 0:
            return top / 4                               # RoPE backward doubles at most
        amplification = max(_RSTD_MAX * (D + 2), rows * sqrt(D), rows)
        return top / (8 * amplification)
    return large


def forward_statistics(p: dict, drawn: dict, wanted: dict, pool=None) -> dict:
    """mean/rstd of the normed streams as NormRopeConcat(..., is_training=True) writes them:
    its step 1 (``refspec.spec.nrc.layer_norm``, with the case's ``eps``, default 1e-5) on
    each stream, rounded to float32 (and then to the planned dtype, which differs only for a
    deliberate fault)."""
    streams = [(s, st.mean, st.rstd) for s, st in STREAMS.items()
               if st.mean in wanted or st.rstd in wanted]

    def one(item):
        s, mean, rstd = item
        _, m, r = layer_norm(to_float64(drawn[s]), NormType.LAYER_NORM, eps=p.get("eps", 1e-5))
        out = {}
        for name, value in ((mean, m), (rstd, r)):
            if name in wanted:
                v32 = round_to(value, np.float32)
                out[name] = v32 if wanted[name].dtype == np.float32 else round_to(v32, wanted[name].dtype)
        return out

    return {k: v for part in (pool.map if pool else map)(one, streams) for k, v in part.items()}


def _sample(forward: bool):
    plan_of, large_of = _plan(forward), _special_large(forward)

    def sample(p: dict, seed: int, pool=None) -> dict:
        """The case's inputs as stored; a backward case's statistics come from the forward
        (tensors drawn side by side by ``pool``, an executor, when given: each has its own
        random stream)."""
        dist = p["dist"]
        plan = plan_of(p)
        drawn = [(name, t) for name, t in plan.items() if t.role not in ("table", "stats")]

        def one(item):
            name, t = item
            large = large_of(p, name, t) if dist == "special" else None
            return draw(dist, t.role, t.shape, t.dtype, seed, name, vendor=NRC_VENDOR, large=large)

        out = dict(zip((name for name, _ in drawn), (pool.map if pool else map)(one, drawn)))
        if "rope_sin" in plan:
            Sr, D = plan["rope_sin"].shape
            cos, sin = draw_tables(dist, (Sr, D), plan["rope_sin"].dtype, seed,
                                   positions=np.arange(Sr, dtype=np.float64)[:, None],
                                   pairing="interleave" if p["rope_type"] == "interleave" else "half",
                                   vendor=NRC_VENDOR, names=("rope_cos", "rope_sin"))
            out["rope_cos"], out["rope_sin"] = cos, sin
        stats = {k: t for k, t in plan.items() if t.role == "stats"}
        if stats:
            out.update(forward_statistics(p, out, stats, pool))
        return {k: out[k] for k in plan}
    return sample


# --- the spec behind the record ---------------------------------------------------------------

def _check_grad(call: Call) -> None:
    """The validation the spec function itself runs (the same rules in the same order)."""
    backward_args({n: call.inputs.get(n) for n in BACKWARD_TENSORS}, call.attrs, call.soc)


def _check(call: Call) -> None:
    check_nrc_args("norm_rope_concat", "query", {n: call.inputs.get(n) for n in FORWARD_TENSORS},
                   {**dict(eps=1e-5, is_training=False), **call.attrs}, call.soc, backward=False)


def _terms_grad(call: Call) -> dict:
    return terms.norm_rope_concat_backward_terms(call.inputs, call.attrs, call.soc)


def _terms(call: Call) -> dict:
    a = call.attrs
    D = np.shape(call.inputs["query"])[-1]
    return terms.norm_rope_concat_terms(a.get("norm_type", 0), a.get("norm_added_type", 0),
                                        a.get("rope_type", 0), D)


def _benchmark_grad(call: Call) -> dict:
    """The backward dataflow computed in float32 on the inputs converted to float32 (exact)."""
    t, a, _ = backward_args(call.inputs, call.attrs, call.soc)
    return backward_exact(widen(t, np.float32), a, work=np.float32)


def _autograd(call: Call, params: dict | None = None) -> Autograd:
    """NormRopeConcatBackward's gradients are those of NormRopeConcat (at the eps the case's
    statistics were computed with, its ``eps`` parameter, default 1e-5) for the upstream
    gradients of its three outputs. value
    and encoder_value (present with encoder_key) and, for affine LayerNorm, the biases are not
    stored with a backward case: zeros of their shape, since no gradient depends on them. The
    weight and bias gradients of an affine LayerNorm are outputs even when the stream is absent
    (then zero). With a normalised stream the forward runs in training mode: its own mean and
    rstd are what its backward uses (``saved``)."""
    inputs, attrs = call.inputs, call.attrs
    query, key = np.asarray(inputs["query"]), np.asarray(inputs["key"])
    fwd = {n: inputs[n] for n in ("query", "key", "encoder_query", "encoder_key", "rope_sin",
                                  "rope_cos") if inputs.get(n) is not None}
    fwd["value"] = np.zeros(key.shape, key.dtype)
    if inputs.get("encoder_key") is not None:
        fwd["encoder_value"] = np.zeros(np.shape(inputs["encoder_key"]), key.dtype)
    leaves = {n: "grad_" + n for n in ("query", "key", "value", "encoder_query", "encoder_key",
                                      "encoder_value") if n in fwd}
    for st in STREAMS.values():
        if attrs.get(st.norm) == NormType.AFFINE_LAYER_NORM:       # also for an absent stream
            zeros = np.zeros(query.shape[-1:], query.dtype)        # (its gradients are zero)
            fwd[st.weight] = inputs[st.weight] if inputs.get(st.weight) is not None else zeros
            fwd[st.bias] = zeros
            leaves.update({st.weight: "grad_" + st.weight, st.bias: "grad_" + st.bias})
    saved = {n: n for stream, st in STREAMS.items() if stream in fwd and attrs.get(st.norm)
             for n in (st.mean, st.rstd)}
    eps = (params or {}).get("eps", 1e-5)
    return Autograd("nrc", fwd, {**{k: attrs[k] for k in _ATTRS}, "eps": eps,
                                 "is_training": bool(saved)}, leaves,
                    {"query_output": "grad_query_output", "key_output": "grad_key_output",
                     "value_output": "grad_value_output"}, saved)


def _unattainable(call: Call) -> str:
    """Why a kernel computing the documented dataflow in ``work_dtype`` cannot attain the
    forward's goldens: a normalised stream whose LayerNorm statistics (the spec's step 1 on
    the inputs in that dtype) overflow there; "" when every one stays finite."""
    where, work = [], None
    for s, st in STREAMS.items():
        x = call.inputs.get(s)
        if x is None or not call.attrs.get(st.norm):
            continue
        work = work_dtype(np.asarray(x).dtype)
        with np.errstate(all="ignore"):
            _, mean, rstd = layer_norm(np.asarray(x).astype(work), NormType.LAYER_NORM,
                                       eps=call.attrs.get("eps", 1e-5))
        bad = ~(np.isfinite(mean) & np.isfinite(rstd) & (rstd > 0))
        if bad.any():
            where.append(f"{s} ({int(bad.sum())} of {bad.size} rows)")
    return f"its LayerNorm statistics overflow {work.name} in {', '.join(where)}" if where else ""


_ROLE = {"grad_query_output": "grad", "grad_key_output": "grad", "grad_value_output": "grad",
         **dict.fromkeys(_WEIGHTS, "weight"), **dict.fromkeys(_BIASES, "bias"),
         **dict.fromkeys(_STATS, "stats"), "rope_sin": "table", "rope_cos": "table"}
_ATTRS = ("norm_type", "norm_added_type", "rope_type", "concat_order")
_SOCS = ("A2", "A3", None)
_COMPARISON = Comparison(
    context=_ATTRS + ("dtype",), ratio_level="L2",
    hypotheses=tuple(hypotheses.other_values(a) for a in _ATTRS)
    + (hypotheses.other_axes("norm_axis", "query", "the LayerNorm statistics"),),
    independent=("B", "N"))
#: the letters of each input's axes by role (a gradient of an output is B, N, S, D)
_AXES = {"data": "BSND", "grad": "BNSD", "weight": "D", "bias": "D", "stats": "BSN1",
         "table": "SD"}


def _rotation(data: tuple) -> Rotation:
    """RoPE on the first Sr rows (the tables' axis 0) of the rotated tensors."""
    return Rotation(data=data, cos=TablePart("rope_cos"), sin=TablePart("rope_sin"),
                    extent_axis=0)


def _tensors(names) -> tuple:
    return tuple(Tensor(n, camel_case(n), _ROLE.get(n, "data"), _AXES[_ROLE.get(n, "data")])
                 for n in names)


NRC_GRAD = Operator(
    id="nrc_grad", aclnn="aclnnNormRopeConcatBackward", title="NormRopeConcatBackward",
    spec=norm_rope_concat_backward,
    tensors=Tensors(
        inputs=_tensors(BACKWARD_TENSORS),
        outputs=tuple(Output(n, camel_case(n), axes="D" if n.endswith(("_weight", "_bias"))
                             else "BSND") for n in NormRopeConcatGrads._fields)),
    sweep=_sweep(forward=False),
    generation=Generation(plan=_plan(forward=False), sample=_sample(forward=False),
                          check=_check_grad, terms=_terms_grad, socs=_SOCS),
    comparison=replace(_COMPARISON, benchmark=_benchmark_grad,
                       rotation=_rotation(("grad_query_output", "grad_key_output"))),
    autograd=_autograd)

NRC = Operator(
    id="nrc", aclnn="aclnnNormRopeConcat", title="NormRopeConcat", spec=norm_rope_concat,
    tensors=Tensors(
        inputs=_tensors(FORWARD_TENSORS),
        outputs=tuple(Output(n, camel_case(n), "float32" if n in _STATS else None,
                             "BSN1" if n in _STATS else "BNSD", "stats" if n in _STATS else "")
                      for n in NormRopeConcatOutputs._fields)),
    sweep=_sweep(forward=True),
    generation=Generation(plan=_plan(forward=True), sample=_sample(forward=True),
                          check=_check, terms=_terms, socs=_SOCS),
    comparison=replace(_COMPARISON, unattainable=_unattainable,
                       rotation=_rotation(("query", "key", "encoder_query", "encoder_key"))))
