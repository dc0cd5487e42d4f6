"""The records of NormRopeConcatBackward (``nrc_grad``) and NormRopeConcat (``nrc``): names,
tensors, sweep axes, and how a case's inputs are planned and sampled."""

from __future__ import annotations

from math import sqrt

import numpy as np

from ..spec import terms
from ..spec.dtypes import resolve_dtype, round_to, to_float64, widen
from ..spec.enums import NormType, RopeType
from ..spec.nrc import (BACKWARD_TENSORS, NormRopeConcatGrads, NormRopeConcatOutputs, backward_args,
                        backward_exact, layer_norm, norm_rope_concat, norm_rope_concat_backward)
from ..spec.nrc_checks import STREAMS, check_nrc_args
from .record import Autograd, Operator, Output, SweepAxes, Tensor, TensorPlan, camel_case
from .sampling import NRC_VENDOR, draw, draw_tables, dtype_max

__all__ = ["NRC_GRAD", "NRC", "ROPE_TYPES"]

ROPE_TYPES = tuple(t.name.lower() for t in RopeType)
_RSTD_MAX = 1 / sqrt(1e-5)     # rstd of a constant row with the default eps
_WEIGHTS = tuple(spec[1] for spec in STREAMS.values())
_BIASES = tuple(spec[2] for spec in STREAMS.values())
_STATS = tuple(n for spec in STREAMS.values() for n in spec[3:])


def _tensors(names, role_of) -> tuple:
    return tuple(Tensor(n, camel_case(n), role_of(n)) for n in names)


# --- sweeps -----------------------------------------------------------------------------------

def _params(forward: bool):
    def params(values: dict, shape: dict) -> dict:
        p = {"soc": None if values["soc"] == "none" else values["soc"],
             "norm_type": values["norm_type"], "norm_added_type": values["norm_added_type"],
             "rope_type": int(RopeType[values["rope_type"].upper()]),
             "rope_type_name": values["rope_type"], "concat_order": values["concat_order"]}
        if forward:
            p["is_training"] = values["training"]
            p["eps"] = 1e-5
        p.update(dtype=values["dtype"], distribution=values["dist"], fault=values["fault"])
        p.update(shape)
        return p
    return params


def _label(s: dict) -> str:
    label = f"B{s['B']}N{s['N']}Sq{s['Sq']}Sk{s['Sk']}Seq{s['Seq']}Sek{s['Sek']}D{s['D']}"
    return label + (f"Sr{s['Sr']}" if s["Sr"] else "")


def _complete(values: dict, shape: dict) -> dict:
    """Sr: 0 without RoPE; "min" is min(Sq+Seq, Sk+Sek), the largest the spec allows."""
    shape = dict(shape)
    if values["rope_type"] == "none":
        shape["Sr"] = 0
    elif shape["Sr"] == "min":
        shape["Sr"] = min(shape["Sq"] + shape["Seq"], shape["Sk"] + shape["Sek"])
    return shape


def _sweep(forward: bool) -> SweepAxes:
    axes = (("soc", "norm_type", "norm_added_type", "rope_type", "concat_order")
            + (("training",) if forward else ()) + ("dtype", "dist", "fault"))
    faults = (("none", "missing_bias", "missing_rope", "value_seq", "weight_shape") if forward
              else ("none", "stats_dtype", "missing_stats", "missing_rope", "grad_seq",
                    "weight_shape"))
    return SweepAxes(
        axes=axes, shape_keys=("B", "N", "Sq", "Sk", "Seq", "Sek", "D", "Sr"),
        shape_example="B1N2Sq8Sk8Seq4Sek4D16Sr6", params=_params(forward), label=_label,
        shape_defaults={"Seq": 0, "Sek": 0, "Sr": "min"}, faults=faults, complete=_complete,
        filters={"mode": "rope_type_name"})


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
        if p["rope_type"] != 0 and fault != "missing_rope":
            out["rope_sin"] = TensorPlan((p["Sr"], D), dt, "table")
            out["rope_cos"] = TensorPlan((p["Sr"], D), dt, "table")
        return out
    return plan


def _special_large(forward: bool):
    def large(p: dict, name: str, plan: TensorPlan) -> float:
        """The ``special`` distribution's large magnitude for one tensor: as large as
        worst-case bounds allow without the exact outputs exceeding the dtype's maximum."""
        top = dtype_max(plan.dtype)
        D = p["D"]
        rows = p["B"] * p["N"] * max(p["Sq"], p["Sk"], p["Seq"], p["Sek"], 1)
        if plan.role == "data":
            return min(top / 4, 2.0 ** 400)              # the LayerNorm variance stays finite
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
    its step 1 (``refspec.spec.nrc.layer_norm``, the default eps) on each stream, rounded
    to float32 (and then to the planned dtype, which differs only for a deliberate fault)."""
    streams = [(s, spec[3], spec[4]) for s, spec in STREAMS.items()
               if spec[3] in wanted or spec[4] in wanted]

    def one(item):
        s, mean, rstd = item
        _, m, r = layer_norm(to_float64(drawn[s]), NormType.LAYER_NORM)
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
        dist = p["distribution"]
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
                                   pairing="interleave" if p["rope_type"] == 1 else "half",
                                   vendor=NRC_VENDOR, names=("rope_cos", "rope_sin"))
            out["rope_cos"], out["rope_sin"] = cos, sin
        stats = {k: t for k, t in plan.items() if t.role == "stats"}
        if stats:
            out.update(forward_statistics(p, out, stats, pool))
        return {k: out[k] for k in plan}
    return sample


# --- the spec behind the record ---------------------------------------------------------------

def _attrs_of(forward: bool):
    def attrs_of(p: dict) -> dict:
        a = {k: p[k] for k in ("norm_type", "norm_added_type", "rope_type", "concat_order")}
        if forward:
            a.update(eps=p["eps"], is_training=p["is_training"])
        return a
    return attrs_of


def _check(forward: bool):
    """The validation the spec function itself runs (the same rules in the same order)."""
    if not forward:
        def check(inputs: dict, attrs: dict, soc) -> None:
            backward_args({n: inputs.get(n) for n in BACKWARD_TENSORS}, attrs, soc)
        return check

    def check(inputs: dict, attrs: dict, soc) -> None:
        check_nrc_args("norm_rope_concat", "query", {n: inputs.get(n) for n in _FORWARD_INPUTS},
                       {**dict(eps=1e-5, is_training=False), **attrs}, soc, backward=False)
    return check


def _terms_grad(inputs, attrs, soc):
    return terms.norm_rope_concat_backward_terms(inputs, attrs, soc)


def _terms(inputs, attrs, soc):
    D = np.shape(inputs["query"])[-1]
    return terms.norm_rope_concat_terms(attrs.get("norm_type", 0), attrs.get("norm_added_type", 0),
                                        attrs.get("rope_type", 0), D)


def _benchmark_grad(inputs, attrs, soc):
    """The backward dataflow computed in float32 on the inputs converted to float32 (exact)."""
    t, a, _ = backward_args(inputs, attrs, soc)
    return backward_exact(widen(t, np.float32), a, work=np.float32)


def _elementwise_grad(inputs, attrs, soc, names):
    return terms.norm_rope_concat_backward_elementwise_sum_abs(inputs, attrs, names, soc)


def _axes_grad(p: dict, name: str) -> str:
    return "D" if name.endswith(("_weight", "_bias")) else "BSND"


def _axes(p: dict, name: str) -> str:
    return "BSN1" if name.endswith(("_mean", "_rstd")) else "BNSD"


def _autograd(inputs: dict, attrs: dict) -> Autograd:
    """NormRopeConcatBackward's gradients are those of NormRopeConcat (eps 1e-5, the default
    the statistics were computed with) for the upstream gradients of its three outputs. value
    and encoder_value (present with encoder_key) and, for affine LayerNorm, the biases are not
    stored with a backward case: zeros of their shape, since no gradient depends on them. The
    weight and bias gradients of an affine LayerNorm are outputs even when the stream is absent
    (then zero). With a normalised stream the forward runs in training mode: its own mean and
    rstd are what its backward uses (``saved``)."""
    query, key = np.asarray(inputs["query"]), np.asarray(inputs["key"])
    fwd = {n: inputs[n] for n in ("query", "key", "encoder_query", "encoder_key", "rope_sin",
                                  "rope_cos") if inputs.get(n) is not None}
    fwd["value"] = np.zeros(key.shape, key.dtype)
    if inputs.get("encoder_key") is not None:
        fwd["encoder_value"] = np.zeros(np.shape(inputs["encoder_key"]), key.dtype)
    leaves = {n: "grad_" + n for n in ("query", "key", "value", "encoder_query", "encoder_key",
                                      "encoder_value") if n in fwd}
    for stream, (type_attr, weight, bias, _, _) in STREAMS.items():
        if attrs.get(type_attr) == NormType.AFFINE_LAYER_NORM:     # also for an absent stream
            zeros = np.zeros(query.shape[-1:], query.dtype)        # (its gradients are zero)
            fwd[weight] = inputs[weight] if inputs.get(weight) is not None else zeros
            fwd[bias] = zeros
            leaves.update({weight: "grad_" + weight, bias: "grad_" + bias})
    saved = {n: n for stream, spec in STREAMS.items() if stream in fwd and attrs.get(spec[0])
             for n in spec[3:]}
    return Autograd("nrc", fwd, {**{k: attrs[k] for k in _ATTRS}, "eps": 1e-5,
                                 "is_training": bool(saved)}, leaves,
                    {"query_output": "grad_query_output", "key_output": "grad_key_output",
                     "value_output": "grad_value_output"}, saved)


_BACKWARD_INPUTS = (("grad_query_output", "grad_key_output", "grad_value_output", "query", "key",
                     "encoder_query", "encoder_key")
                    + tuple(n for spec in STREAMS.values() for n in (spec[1], spec[3], spec[4]))
                    + ("rope_sin", "rope_cos"))
_FORWARD_INPUTS = (("query", "key", "value", "encoder_query", "encoder_key", "encoder_value")
                   + tuple(n for pair in zip(_WEIGHTS, _BIASES) for n in pair)
                   + ("rope_sin", "rope_cos"))
_ROLE = {"grad_query_output": "grad", "grad_key_output": "grad", "grad_value_output": "grad",
         **dict.fromkeys(_WEIGHTS, "weight"), **dict.fromkeys(_BIASES, "bias"),
         **dict.fromkeys(_STATS, "stats"), "rope_sin": "table", "rope_cos": "table"}
_ATTRS = ("norm_type", "norm_added_type", "rope_type", "concat_order")
_CONTEXT = _ATTRS + ("dtype",)
_SOCS = ("A2", "A3", None)

NRC_GRAD = Operator(
    id="nrc_grad", function="norm_rope_concat_backward", aclnn="aclnnNormRopeConcatBackward",
    title="NormRopeConcatBackward", spec=norm_rope_concat_backward,
    inputs=_tensors(_BACKWARD_INPUTS, lambda n: _ROLE.get(n, "data")),
    outputs=tuple(Output(n, camel_case(n)) for n in NormRopeConcatGrads._fields),
    attributes=_ATTRS, socs=_SOCS, sweep=_sweep(forward=False), attrs_of=_attrs_of(False),
    plan=_plan(forward=False), sample=_sample(forward=False), check=_check(forward=False),
    terms=_terms_grad, output_axes=_axes_grad, context=_CONTEXT, ratio_level="L2",
    benchmark=_benchmark_grad, elementwise_sum_abs=_elementwise_grad, autograd=_autograd)

NRC = Operator(
    id="nrc", function="norm_rope_concat", aclnn="aclnnNormRopeConcat", title="NormRopeConcat",
    spec=norm_rope_concat,
    inputs=_tensors(_FORWARD_INPUTS, lambda n: _ROLE.get(n, "data")),
    outputs=tuple(Output(n, camel_case(n), "float32" if n in _STATS else None)
                  for n in NormRopeConcatOutputs._fields),
    attributes=_ATTRS + ("eps", "is_training"), socs=_SOCS, sweep=_sweep(forward=True),
    attrs_of=_attrs_of(True), plan=_plan(forward=True), sample=_sample(forward=True),
    check=_check(forward=True), terms=_terms, output_axes=_axes, context=_CONTEXT,
    ratio_level="L2")
