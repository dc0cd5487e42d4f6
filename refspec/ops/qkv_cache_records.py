"""The record of QkvRmsNormRopeCache (``qkv_rope_cache``): names, tensors, sweep axes, and how a
case's inputs are planned and sampled (docs/qkv_rms_norm_rope_cache.md).

A case is the API's ``qkv_size`` [B, S, N, D] and ``head_nums`` [Nq, Nk, Nv] (attributes the
sweep names as they are), PA_NZ caches of ``blocks`` blocks of ``slots`` slots, int8 when
``kcache``/``vcache`` say so (with scales and, with ``offset``, offsets), cos/sin per token or
(``cos = "batch"``) per batch. The caches hold sentinel values; the index names slots by the
pattern ``index`` (as KvRmsNormRopeCache's paged modes: ``scattered``, ``sequential``,
``decode``).
"""

from __future__ import annotations

import numpy as np

from ..spec.dtypes import resolve_dtype
from ..spec.kv_cache import CACHE_AXES
from ..spec.qkv_norm_rope import qkv_rms_norm_rope_cache, qkv_rms_norm_rope_cache_terms
from ..spec.qkv_norm_rope_checks import check_qkv_args
from . import cache_hypotheses
from .axes import (Axis, Shape, choice, dist_axis, dtype_axis, fault_axis, flag, integers,
                   soc_axis)
from .kv_cache_records import keyword_terms, sentinel_caches, slots_of, tensors_of
from .record import Call, Comparison, Generation, Operator, Output, SweepAxes, Tensor, TensorPlan, Tensors
from .sampling import ROPE_VENDOR, draw, draw_tables, stream

__all__ = ["QKV_ROPE_CACHE"]

_FAULTS = ("none", "qkv_dtype", "index_dtype", "cache_tiles", "no_scale", "zero_scale",
           "index_twice")
_TENSORS = ("qkv", "q_gamma", "k_gamma", "cos", "sin", "index", "k_cache", "v_cache", "k_scale",
            "v_scale", "k_offset", "v_offset")


def _to_list(v: str) -> list:
    return [int(x) for x in v.split(",")]


def _sweep() -> SweepAxes:
    axes = (soc_axis(),
            Axis("qkv_size", integers(4, "2,3,8,128"), (), attr="qkv_size", to_spec=_to_list),
            Axis("head_nums", integers(3, "32,8,8"), (), attr="head_nums", to_spec=_to_list),
            Axis("kcache", choice(("qkv", "int8")), ("int8",), ("qkv", "int8")),
            Axis("vcache", choice(("qkv", "int8")), ("qkv",), ("qkv", "int8")),
            Axis("offset", flag, (False,)),
            Axis("cos", choice(("token", "batch")), ("token",), ("token", "batch")),
            Axis("index", choice(("scattered", "sequential", "decode")), ("scattered",),
                 ("scattered", "sequential", "decode")),
            Axis("output_qkv", flag, (True,), attr="is_output_qkv"),
            dtype_axis(), dist_axis(), fault_axis(_FAULTS))
    return SweepAxes(axes=axes, shape=Shape(("blocks", "slots"), "blocks4slots32",
                                            lambda s: f"blocks{s['blocks']}slots{s['slots']}"))


def _sizes(p: dict) -> tuple:
    B, S, N, D = _to_list(p["qkv_size"])
    Nq, Nk, Nv = _to_list(p["head_nums"])
    return B, S, N, D, Nq, Nk, Nv


def _plan(p: dict) -> dict:
    """qkv (B*S, N*D), the gammas, cos/sin, index, the PA_NZ caches and their scales; a
    ``fault`` makes the profile reject the call (a float32 qkv, an int32 index, a k cache whose
    tiles are half the 32 bytes wide, an int8 cache without its scale, a scale of 0, two tokens
    into one slot)."""
    dt, fault = resolve_dtype(p["dtype"]), p.get("fault", "none")
    B, S, N, D, Nq, Nk, Nv = _sizes(p)
    x_dt = np.dtype(np.float32) if fault == "qkv_dtype" else dt
    rows = B if p["cos"] == "batch" else B * S
    out = {"qkv": TensorPlan((B * S, N * D), x_dt, "data"), "q_gamma": TensorPlan((D,), dt, "weight"),
           "k_gamma": TensorPlan((D,), dt, "weight"), "cos": TensorPlan((rows, D), dt, "table"),
           "sin": TensorPlan((rows, D), dt, "table"),
           "index": TensorPlan((B * S,), np.dtype(np.int32 if fault == "index_dtype" else np.int64), "index")}
    for name, label, heads, p_ in (("k_cache", p["kcache"], Nk, "k"), ("v_cache", p["vcache"], Nv, "v")):
        quant = label == "int8"
        cdt = np.dtype(np.int8) if quant else dt
        c0 = 32 // cdt.itemsize // (2 if fault == "cache_tiles" and name == "k_cache" else 1)
        out[name] = TensorPlan((p["blocks"], heads * D // c0, p["slots"], c0), cdt, "cache")
        if quant and not (fault == "no_scale" and name == "k_cache"):
            out[f"{p_}_scale"] = TensorPlan((heads, D), np.dtype(np.float32), "scale")
            if p["offset"]:
                out[f"{p_}_offset"] = TensorPlan((heads, D), np.dtype(np.float32), "scale")
    return out


def _sample(p: dict, seed: int, pool=None) -> dict:
    """qkv drawn, the gammas as weights, cos/sin together (rotary: the angles of each token's
    position in its batch, half-paired), sentinel caches, scales dividing to a few hundred at
    most, offsets in [-4, 4], the index of the pattern."""
    t, dist = _plan(p), p["dist"]
    B, S, *_ = _sizes(p)
    out = {n: draw(dist, t[n].role, t[n].shape, t[n].dtype, seed, n, vendor=ROPE_VENDOR)
           for n in ("qkv", "q_gamma", "k_gamma")}
    c = t["cos"]
    pos = (np.arange(B * S) % S if c.shape[0] == B * S else np.zeros(B)).astype(np.float64)[:, None]
    out["cos"], out["sin"] = draw_tables(dist, c.shape, c.dtype, seed, positions=pos,
                                         pairing="half", vendor=ROPE_VENDOR)
    out.update(sentinel_caches(t, seed, ("k_cache", "v_cache")))
    for name, plan in t.items():
        if plan.role == "scale":
            lo, hi = (0.01, 0.05) if name.endswith("scale") else (-4.0, 4.0)
            out[name] = stream(seed, name).uniform(lo, hi, plan.shape).astype(np.float32)
            if name == "k_scale" and p.get("fault") == "zero_scale":
                out[name][0, 0] = 0.0
    idx = slots_of({"cache_mode": "PA", "B": B, "S": S, "slots": p["slots"], "blocks": p["blocks"],
                    "index": p["index"]}, stream(seed, "index"))
    if p.get("fault") == "index_twice":
        both = np.flatnonzero(idx >= 0)[:2]
        idx[both] = idx[both[0]]
    out["index"] = idx.astype(t["index"].dtype)
    return {k: out[k] for k in t}


def _check(call: Call) -> None:
    a = call.attrs
    check_qkv_args("qkv_rms_norm_rope_cache", tensors_of(call, _TENSORS), a.get("qkv_size"),
                   a.get("head_nums"), a.get("epsilon", 1e-6), a.get("cache_mode", "PA_NZ"),
                   a.get("is_output_qkv", False), call.soc, values=False)


QKV_ROPE_CACHE = Operator(
    id="qkv_rope_cache", aclnn="aclnnQkvRmsNormRopeCache", title="QkvRmsNormRopeCache",
    spec=qkv_rms_norm_rope_cache,
    tensors=Tensors(
        inputs=(Tensor("qkv", "qkv", "data"), Tensor("q_gamma", "qGamma", "weight"),
                Tensor("k_gamma", "kGamma", "weight"), Tensor("cos", "cos", "table"),
                Tensor("sin", "sin", "table"), Tensor("index", "index", "index"),
                Tensor("k_cache", "kCache", "cache"), Tensor("v_cache", "vCache", "cache"),
                Tensor("k_scale", "kScale", "scale"), Tensor("v_scale", "vScale", "scale"),
                Tensor("k_offset", "kOffset", "scale"), Tensor("v_offset", "vOffset", "scale")),
        outputs=(Output("q_out", "qOut", axes="TH"), Output("k_cache", "kCache", axes=CACHE_AXES["NZ"], in_place=True),
                 Output("v_cache", "vCache", axes=CACHE_AXES["NZ"], in_place=True),
                 Output("q_out_before_quant", "qOutBeforeQuant", axes="TH"),
                 Output("k_out_before_quant", "kOutBeforeQuant", axes="TH"),
                 Output("v_out_before_quant", "vOutBeforeQuant", axes="TH")),
        aliases={"kScaleOptional": "kScale", "vScaleOptional": "vScale",
                 "kOffsetOptional": "kOffset", "vOffsetOptional": "vOffset"},
        dtype_from="cos"),
    sweep=_sweep(),
    generation=Generation(plan=_plan, sample=_sample, check=_check,
                          terms=keyword_terms(qkv_rms_norm_rope_cache_terms, _TENSORS),
                          socs=("A2", "A3", None)),
    comparison=Comparison(context=("head_nums", "kcache", "vcache", "dtype"),
                          hypotheses=(cache_hypotheses.quantisation(("k_scale", "v_scale"),
                                                                    ("k_offset", "v_offset"),
                                                                    divides=True),
                                      *cache_hypotheses.CACHES)))
