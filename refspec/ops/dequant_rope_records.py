"""The record of DequantRopeQuantKvcache (``dequant_rope_kv``): names, tensors, sweep axes, and
how a case's inputs are planned and sampled (docs/dequant_rope_quant_kvcache.md).

A case is x of B batches and S tokens (``x = "BH"``: one token per batch, x 2-D) holding the
query, key and value parts ``size_splits`` names (Nq*D, Nkv*D, Nkv*D, the API's attribute), heads
of size D, int8 caches (C1, C2, Nkv, D) with sentinel values,
written ``contiguous`` (batch b's S tokens from row indices[b] of its cache row) or ``page``
(the caches seen as C1*C2 rows, one index per token). ``dequant`` gives x as int32 with a
weight scale and an activation scale, ``bias`` the bias's dtype; ``offset`` adds the
quantisation offsets. ``index``: ``scattered`` (contiguous: the first and the last start a row
allows; page: out of order, the ends of the cache, every other row left as it was) or
``sequential``. RopeQuantKvcache is the float16, contiguous case with one scale and integer
offset for k and v (``rope_quant_kvcache``): the same sweep covers it.
"""

from __future__ import annotations

import numpy as np

from . import cache_hypotheses, hypotheses
from ..spec.dequant_rope import dequant_rope_quant_kvcache, dequant_rope_quant_kvcache_terms
from ..spec.dequant_rope_checks import CACHE_MODES, check_dequant_args
from ..spec.dtypes import bfloat16, resolve_dtype
from .axes import (Axis, Shape, choice, dist_axis, dtype_axis, fault_axis, flag, integers,
                   soc_axis)
from .kv_cache_records import keyword_terms, sentinel_caches, spread_slots, tensors_of
from .record import Call, Comparison, Generation, Operator, Output, SweepAxes, Tensor, TensorPlan, Tensors
from .sampling import ROPE_VENDOR, draw, draw_tables, stream

__all__ = ["DEQUANT_ROPE_KV", "BIASES"]

BIASES = ("none", "int32", "float32", "float16", "bfloat16")
_FAULTS = ("none", "x_dtype", "cache_dtype", "indices_dtype", "one_offset", "index_range")
_TENSORS = ("x", "cos", "sin", "k_cache", "v_cache", "indices", "scale_k", "scale_v", "offset_k",
            "offset_v", "weight_scale", "activation_scale", "bias")


def _sweep() -> SweepAxes:
    axes = (soc_axis(),
            Axis("size_splits", integers(3, "512,128,128"), (), attr="size_splits",
                 to_spec=lambda v: [int(x) for x in v.split(",")]),
            Axis("cache_mode", choice(CACHE_MODES), ("contiguous",), CACHE_MODES, attr="cache_mode"),
            Axis("x", choice(("BSH", "BH"), upper=True), ("BSH",), ("BSH", "BH")),
            Axis("dequant", flag, (False,)),
            Axis("bias", choice(BIASES), ("none",), BIASES),
            Axis("offset", flag, (True,)),
            Axis("index", choice(("scattered", "sequential")), ("scattered",), ("scattered", "sequential")),
            Axis("kv_output", flag, (True,), attr="kv_output"),
            dtype_axis(), dist_axis(), fault_axis(_FAULTS))
    keys = ("B", "S", "D", "C1", "C2")
    return SweepAxes(axes=axes, shape=Shape(keys, "B2S3D128C12C216",
                                            lambda s: "".join(f"{k}{s[k]}" for k in keys)),
                     complete=lambda v: {**v, "S": 1} if v.get("x") == "BH" else v)


def _heads(p: dict) -> tuple:
    """(Nq, Nkv, H) of size_splits (Nkv from the k part)."""
    q, k, v = (int(x) for x in p["size_splits"].split(","))
    return q // p["D"], k // p["D"], q + k + v


def _plan(p: dict) -> dict:
    """x (B, S, H) or (B, H), the tables, the caches, indices, the scales and the
    dequantisation's inputs; a ``fault`` makes the profile reject the call (a float32 x, float16
    caches, int64 indices, one offset alone, an index past the cache)."""
    dt, fault, two_d = resolve_dtype(p["dtype"]), p.get("fault", "none"), p["x"] == "BH"
    B, S, D = p["B"], p["S"], p["D"]
    Nq, Nkv, H = _heads(p)
    x_dt = np.dtype(np.int32) if p["dequant"] else dt
    x_dt = np.dtype(np.float32) if fault == "x_dtype" else x_dt
    lead = (B,) if two_d else (B, S)
    table = (B, D) if two_d else (B, S, 1, D)
    cache = TensorPlan((p["C1"], p["C2"], Nkv, D),
                       np.dtype(np.float16 if fault == "cache_dtype" else np.int8), "cache")
    out = {"x": TensorPlan(lead + (H,), x_dt, "data"), "cos": TensorPlan(table, dt, "table"),
           "sin": TensorPlan(table, dt, "table"), "k_cache": cache, "v_cache": cache,
           "indices": TensorPlan((B * S if p["cache_mode"] == "page" else B,),
                                 np.dtype(np.int64 if fault == "indices_dtype" else np.int32), "index"),
           "scale_k": TensorPlan((Nkv * D,), np.dtype(np.float32), "scale"),
           "scale_v": TensorPlan((Nkv, D), np.dtype(np.float32), "scale")}
    if p["offset"] or fault == "one_offset":
        out["offset_k"] = TensorPlan((Nkv, D), np.dtype(np.float32), "scale")
        if fault != "one_offset":
            out["offset_v"] = TensorPlan((Nkv, D), np.dtype(np.float32), "scale")
    if p["dequant"]:
        out["weight_scale"] = TensorPlan((H,), np.dtype(np.float32), "scale")
        out["activation_scale"] = TensorPlan((B * S,), np.dtype(np.float32), "scale")
        if p["bias"] != "none":
            out["bias"] = TensorPlan((H,), resolve_dtype(p["bias"]) if p["bias"] != "int32"
                                     else np.dtype(np.int32), "bias")
    return out


def _indices(p: dict, rng) -> np.ndarray:
    B, S, C1, C2 = p["B"], p["S"], p["C1"], p["C2"]
    if p["cache_mode"] == "page":
        idx = np.arange(B * S) if p["index"] == "sequential" else \
            spread_slots(C1 * C2, [C1 * C2 - 1, 0], B * S, rng, skip=False)
    else:
        idx = np.zeros(B, np.int64) if p["index"] == "sequential" else rng.integers(0, C2 - S + 1, B)
        if p["index"] == "scattered":
            idx[[0, -1]] = C2 - S, 0                     # the last start a row allows, the first
    if p.get("fault") == "index_range":
        idx[0] = C1 * C2 if p["cache_mode"] == "page" else C2 - S + 1
    return idx


def _sample(p: dict, seed: int, pool=None) -> dict:
    """x drawn (int32: integers in [-2000, 2000)), the tables drawn together (rotary: the angles
    of the positions along S, half-paired), sentinel caches, scales dividing to a few hundred
    at most (some codes saturate), offsets in [-4, 4], dequantisation scales near 1e-3 and 1."""
    t, dist = _plan(p), p["dist"]
    out = {}
    x = t["x"]
    out["x"] = (stream(seed, "x").integers(-2000, 2000, x.shape).astype(np.int32)
                if x.dtype == np.int32 else draw(dist, "data", x.shape, x.dtype, seed, "x", vendor=ROPE_VENDOR))
    c = t["cos"]
    pos = np.arange(p["S"], dtype=np.float64).reshape(1, -1, 1, 1) if len(c.shape) == 4 else np.zeros((1, 1))
    out["cos"], out["sin"] = draw_tables(dist, c.shape, c.dtype, seed, positions=pos,
                                         pairing="half", vendor=ROPE_VENDOR)
    out.update(sentinel_caches(t, seed, ("k_cache", "v_cache")))
    ranges = {"scale_k": (0.01, 0.05), "scale_v": (0.01, 0.05), "offset_k": (-4, 4), "offset_v": (-4, 4),
              "weight_scale": (5e-4, 2e-3), "activation_scale": (0.5, 2.0)}
    for name, (lo, hi) in ranges.items():
        if name in t:
            out[name] = stream(seed, name).uniform(lo, hi, t[name].shape).astype(np.float32)
    if "bias" in t:
        b = t["bias"]
        rng = stream(seed, "bias")
        out["bias"] = (rng.integers(-50, 50, b.shape).astype(np.int32) if b.dtype == np.int32
                       else rng.uniform(-1, 1, b.shape).astype(b.dtype))
    out["indices"] = _indices(p, stream(seed, "indices")).astype(t["indices"].dtype)
    return {k: out[k] for k in t}


def _cache_axes(p: dict) -> str:
    """The caches' axis letters: (batch, slot, N, D) contiguous, (block, slot, N, D) paged."""
    return "KSND" if p["cache_mode"] == "page" else "BSND"


def _check(call: Call) -> None:
    a = call.attrs
    check_dequant_args("dequant_rope_quant_kvcache", tensors_of(call, _TENSORS),
                       a.get("size_splits"), a.get("quant_mode", "static"), a.get("layout", "BSND"),
                       a.get("kv_output", False), a.get("cache_mode", "contiguous"), call.soc,
                       values=False)


DEQUANT_ROPE_KV = Operator(
    id="dequant_rope_kv", aclnn="aclnnDequantRopeQuantKvcache", title="DequantRopeQuantKvcache",
    spec=dequant_rope_quant_kvcache,
    tensors=Tensors(
        inputs=(Tensor("x", "x", "data"), Tensor("cos", "cos", "table"), Tensor("sin", "sin", "table"),
                Tensor("k_cache", "kCacheRef", "cache"), Tensor("v_cache", "vCacheRef", "cache"),
                Tensor("indices", "indices", "index"), Tensor("scale_k", "scaleK", "scale"),
                Tensor("scale_v", "scaleV", "scale"), Tensor("offset_k", "offsetK", "scale"),
                Tensor("offset_v", "offsetV", "scale"), Tensor("weight_scale", "weightScale", "scale"),
                Tensor("activation_scale", "activationScale", "scale"), Tensor("bias", "bias", "bias")),
        outputs=(Output("q_out", "qOut"), Output("k_out", "kOut"), Output("v_out", "vOut"),
                 Output("k_cache", "kCacheRef", axes=_cache_axes, in_place=True),
                 Output("v_cache", "vCacheRef", axes=_cache_axes, in_place=True)),
        aliases={"offsetKOptional": "offsetK", "offsetVOptional": "offsetV",
                 "weightScaleOptional": "weightScale", "activationScaleOptional": "activationScale",
                 "biasOptional": "bias"},
        dtype_from="cos"),
    sweep=_sweep(),
    generation=Generation(plan=_plan, sample=_sample, check=_check,
                          terms=keyword_terms(dequant_rope_quant_kvcache_terms, _TENSORS),
                          socs=("A2", "A3", None)),
    comparison=Comparison(context=("size_splits", "cache_mode", "x", "dequant", "dtype"),
                          hypotheses=(*cache_hypotheses.CACHES,
                                      cache_hypotheses.quantisation(("scale_k", "scale_v"),
                                                                    ("offset_k", "offset_v"),
                                                                    divides=True),
                                      hypotheses.other_values("cache_mode"))))
