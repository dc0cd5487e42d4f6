"""The records of KvRmsNormRopeCache (``kv_rope_cache``, V1: kv merged) and KvRmsNormRopeCacheV2
(``kv_rope_cache_v2``, kv and v separate): names, tensors, sweep axes, and how a case's inputs
are planned and sampled (docs/kv_rms_norm_rope_cache.md).

A case is B batches of S tokens with N heads; V1's kv is [Dv rms part | Dk rope part], V2's kv
is Dk wide (RMSNorm of all, RoPE of its first R values) and v Dv wide. The caches are Norm
(B, N, slots, D) or paged (blocks, slots, N, D) by ``cache_mode``; ``kcache``/``ckvcache`` say
their dtype (``kv``: kv's; int8 and the 950's float8 formats: quantised, with a scale of the
shape ``scale`` names and, with ``offset``, an offset). The caches hold sentinel values
(``refspec.ops.sampling.sentinels``) and the index names slots by the pattern ``index``:
``scattered`` (out of order, the cache's first and last slot and the last slot of a block, a
-1 skip, every other slot left as it was), ``sequential`` (in order from slot 0) or ``decode``
(vLLM's slot mapping: each batch its own blocks, starting part way into its first one).
"""

from __future__ import annotations

import numpy as np

from . import cache_hypotheses, hypotheses
from ..spec.dtypes import resolve_dtype
from ..spec.kv_cache import BLOCKED, CACHE_AXES, CACHE_MODES, LAYOUT_OF
from ..spec.kv_norm_rope import (kv_rms_norm_rope_cache, kv_rms_norm_rope_cache_terms,
                                 kv_rms_norm_rope_cache_v2)
from ..spec.kv_norm_rope_checks import check_kv_cache_args
from ..spec.quant_dtypes import QUANT_NAMES
from .axes import Axis, Shape, bad_value, choice, dist_axis, dtype_axis, fault_axis, flag, soc_axis
from .record import Call, Comparison, Generation, Operator, Output, SweepAxes, Tensor, TensorPlan, Tensors
from .sampling import ROPE_VENDOR, draw, draw_tables, stream

__all__ = ["KV_ROPE_CACHE", "KV_ROPE_CACHE_V2", "CACHE_DTYPES", "INDEX_PATTERNS", "SCALE_SHAPES", "spread_slots",
           "slots_of", "cache_scale", "cache_axes"]

#: a cache's dtype: kv's, or quantised
CACHE_DTYPES = ("kv",) + tuple(QUANT_NAMES.values())
INDEX_PATTERNS = ("scattered", "sequential", "decode")
#: the shape of the quantisation parameters: (D,), (1, D), (N, D), (1,)
SCALE_SHAPES = ("d", "1d", "nd", "one")
_FAULTS = ("none", "kv_dtype", "index_dtype", "cache_dtype", "no_scale", "block_size",
           "index_size", "heads", "index_range", "index_twice")
#: the scale ranges of each quantised dtype: values of a few units reach the top codes
_SCALES = {"int8": (10.0, 60.0), "float8_e4m3fn": (20.0, 200.0), "float8_e5m2": (1000.0, 30000.0),
           "hifloat8": (1000.0, 15000.0)}


def _mode(v) -> str:
    """A cache mode, its case ignored (``pa_nz`` -> ``PA_NZ``)."""
    for m in CACHE_MODES:
        if str(v).strip().upper() == m.upper() and not isinstance(v, bool):
            return m
    raise bad_value(v, CACHE_MODES)


def _cache_label(v) -> str:
    """A cache dtype label (``float8-e4m3fn`` reads as ``float8_e4m3fn``)."""
    s = str(v).strip().lower().replace("-", "_")
    if s not in CACHE_DTYPES or isinstance(v, bool):
        raise bad_value(v, CACHE_DTYPES)
    return s


def _axes(v2: bool) -> tuple:
    return (soc_axis(),
            Axis("cache_mode", _mode, ("PA",), CACHE_MODES, attr="cache_mode"),
            Axis("kcache", _cache_label, ("kv",), CACHE_DTYPES),
            Axis("ckvcache", _cache_label, ("kv",), CACHE_DTYPES),
            Axis("scale", choice(SCALE_SHAPES), ("nd",) if v2 else ("d",), SCALE_SHAPES),
            Axis("offset", flag, (False,)),
            Axis("index", choice(INDEX_PATTERNS), ("scattered",), INDEX_PATTERNS),
            Axis("output_kv", flag, (True,), attr="is_output_kv"),
            dtype_axis(), dist_axis(), fault_axis(_FAULTS))


def _sweep(v2: bool) -> SweepAxes:
    keys = ("B", "S", "N", "Dk", "Dv", "R", "blocks", "slots") if v2 else \
        ("B", "S", "N", "Dv", "Dk", "blocks", "slots")
    example = "B2S3N1Dk192Dv128R64blocks4slots32" if v2 else "B2S3N1Dv512Dk64blocks4slots32"
    return SweepAxes(axes=_axes(v2), shape=Shape(keys, example,
                                                 lambda s: "".join(f"{k}{s[k]}" for k in keys)))


# --- inputs -------------------------------------------------------------------------------------

def _widths(p: dict, v2: bool) -> tuple:
    """(kv's width, gamma's, the rope width, the k cache's, the ckv cache's)."""
    if v2:
        return p["Dk"], p["Dk"], p["R"], p["Dk"], p["Dv"]
    return p["Dv"] + p["Dk"], p["Dv"], p["Dk"], p["Dk"], p["Dv"]


def _cache_dtype(label: str, dt) -> np.dtype:
    return dt if label == "kv" else next(d for d, n in QUANT_NAMES.items() if n == label)


def _index_shape(p: dict) -> tuple:
    mode, B, S, short = p["cache_mode"], p["B"], p["S"], p.get("fault") == "index_size"
    if mode == "Norm":
        return B, S - short
    runs = -(-S // p["slots"]) if mode in BLOCKED else S
    return (B * runs - short,)


def _quant_shape(p: dict, width: int) -> tuple:
    return {"d": (width,), "1d": (1, width), "nd": (p["N"], width), "one": (1,)}[p["scale"]]


def _plan_for(v2: bool):
    def plan(p: dict) -> dict:
        """The tensors of a case; a ``fault`` makes the profile reject it (a float32 kv, an int32
        index, a cache of another float dtype, a quantised cache without its scale, a block size
        that is no multiple of 32 bytes, an index one short, two heads in V1, an index past the
        cache or naming a slot twice)."""
        dt, fault = resolve_dtype(p["dtype"]), p.get("fault", "none")
        kv_dt = np.dtype(np.float32) if fault == "kv_dtype" else dt
        width, rms, rope, dk, dv = _widths(p, v2)
        B, S, N = p["B"], p["S"], p["N"] + (fault == "heads")
        slots = p["slots"] - 8 * (fault == "block_size")
        out = {"kv": TensorPlan((B, N, S, width), kv_dt, "data"),
               "gamma": TensorPlan((rms,), dt, "weight"),
               "cos": TensorPlan((B, N, S, rope), dt, "table"),
               "sin": TensorPlan((B, N, S, rope), dt, "table"),
               "index": TensorPlan(_index_shape(p), np.dtype(np.int32 if fault == "index_dtype"
                                                             else np.int64), "index")}
        for name, label, d, q in (("k_cache", p["kcache"], dk, "k_rope"),
                                  ("ckv_cache", p["ckvcache"], dv, "c_kv")):
            cdt = _cache_dtype(label, dt)
            if fault == "cache_dtype" and name == "k_cache" and label == "kv":
                cdt = np.dtype(np.float32) if dt != np.float32 else np.dtype(np.float16)
            shape = (B, N, slots, d) if p["cache_mode"] == "Norm" else (p["blocks"], slots, N, d)
            out[name] = TensorPlan(shape, cdt, "cache")
            if label != "kv" and not (fault == "no_scale" and name == "k_cache"):
                out[f"{q}_scale"] = TensorPlan(_quant_shape(p, d), np.dtype(np.float32), "scale")
                if p["offset"]:
                    out[f"{q}_offset"] = TensorPlan(_quant_shape(p, d), np.dtype(np.float32), "scale")
        if v2:
            out["v"] = TensorPlan((B, N, S, dv), dt, "data")
        return out
    return plan


def spread_slots(total: int, first: list, n: int, rng, skip: bool = True) -> np.ndarray:
    """n of ``total`` slots (or blocks): ``first`` (the cache's ends, a block's last slot), then
    every other one, then the rest, shuffled; -1 for the fourth when n > 3 and ``skip``."""
    rest = [s for s in range(total) if s not in first]
    picked = list(dict.fromkeys(first)) + [int(s) for s in rng.permutation(rest[::2])] + \
        [int(s) for s in rng.permutation(rest[1::2])]
    if len(picked) < n:
        raise ValueError(f"{n} tokens do not fit into {total} slots")
    idx = np.array(picked[:n])
    if n > 3 and skip:
        idx[3] = -1                                       # a token skipped
    return idx[rng.permutation(n)]                        # out of order


def slots_of(p: dict, rng) -> np.ndarray:
    """The index of a case's pattern (module docstring), before any fault."""
    mode, B, S, slots, pattern = p["cache_mode"], p["B"], p["S"], p["slots"], p["index"]
    if mode == "Norm":
        if pattern == "sequential":
            return np.tile(np.arange(S), (B, 1))
        if pattern == "decode":
            return rng.integers(0, slots - S + 1, (B, 1)) + np.arange(S)
        return np.stack([spread_slots(slots, [slots - 1, 0], S, rng) for _ in range(B)])
    if mode in BLOCKED:
        runs, blocks = -(-S // slots), p["blocks"]
        starts = (np.arange(B * runs) if pattern == "sequential"
                  else spread_slots(blocks, [blocks - 1, 0], B * runs, rng))
        return np.where(starts >= 0, starts * slots, -1)
    total = p["blocks"] * slots
    if pattern == "sequential":
        return np.arange(B * S)
    if pattern == "decode":                               # vLLM's slot mapping
        per = -(-(slots + S) // slots)
        if B * per > p["blocks"]:
            raise ValueError(f"{B} batches of {per} blocks do not fit into {p['blocks']} blocks")
        table = rng.permutation(p["blocks"])[:B * per].reshape(B, per)
        start = rng.integers(0, slots, B)[:, None] + np.arange(S)
        return (np.take_along_axis(table, start // slots, 1) * slots + start % slots).reshape(-1)
    return spread_slots(total, [total - 1, 0, slots - 1], B * S, rng)


def cache_axes(p: dict) -> str:
    """The axis letters of a case's caches (``refspec.spec.kv_cache.CACHE_AXES``) by its cache
    mode."""
    return CACHE_AXES[LAYOUT_OF[p["cache_mode"]]]


def sentinel_caches(t: dict, seed: int, names) -> dict:
    """The caches ``names`` of the plan ``t``, each holding its sentinels (``sampling.sentinels``:
    every element encodes its index, whatever the distribution)."""
    return {n: draw("random", "cache", t[n].shape, t[n].dtype, seed, n) for n in names}


def tensors_of(call: Call, names) -> dict:
    """The call's tensors ``names`` by name (None when absent)."""
    return {n: call.inputs.get(n) for n in names}


def keyword_terms(terms, names):
    """A record's tolerance terms: ``terms`` called with the tensors ``names`` and the
    attributes by keyword, and the call's profile."""
    def of(call: Call) -> dict:
        return terms(**tensors_of(call, names), **call.attrs, soc=call.soc)
    return of


def cache_scale(label: str, shape, seed: int, name: str) -> np.ndarray:
    """A quantisation scale for a cache of ``label``'s dtype (values of a few units reach the
    top codes, so some saturate)."""
    lo, hi = _SCALES[label]
    return stream(seed, name).uniform(lo, hi, shape).astype(np.float32)


def _sample_for(v2: bool):
    plan = _plan_for(v2)

    def sample(p: dict, seed: int, pool=None) -> dict:
        """kv and v drawn, gamma drawn as a weight, cos/sin drawn together (rotary: the angles
        of the positions along S, half-paired), the caches' sentinels, the scales, the index."""
        t, dist = plan(p), p["dist"]
        out = {}
        for name in ("kv", "v", "gamma"):
            if name in t:
                out[name] = draw(dist, t[name].role, t[name].shape, t[name].dtype, seed, name,
                                 vendor=ROPE_VENDOR)
        c = t["cos"]
        pos = np.broadcast_to(np.arange(c.shape[2], dtype=np.float64)[:, None], c.shape[2:3] + (1,))
        out["cos"], out["sin"] = draw_tables(dist, c.shape, c.dtype, seed, positions=pos,
                                             pairing="half", vendor=ROPE_VENDOR)
        out.update(sentinel_caches(t, seed, ("k_cache", "ckv_cache")))
        for name, plan_q in t.items():
            if plan_q.role == "scale":
                label = p["kcache"] if name.startswith("k_") else p["ckvcache"]
                out[name] = (cache_scale(label, plan_q.shape, seed, name) if name.endswith("scale")
                             else stream(seed, name).uniform(-4, 4, plan_q.shape).astype(np.float32))
        out["index"] = _faulty(p, slots_of(p, stream(seed, "index")), t["index"])
        return {k: out[k] for k in t}
    return sample


def _faulty(p: dict, idx: np.ndarray, planned: TensorPlan) -> np.ndarray:
    """The index with the case's value fault (past the cache, a slot twice), in its planned
    shape and dtype."""
    idx = np.array(idx).reshape(-1)[:int(np.prod(planned.shape))]
    fault = p.get("fault")
    if fault == "index_range":
        idx[0] = p["slots"] if p["cache_mode"] == "Norm" else p["blocks"] * p["slots"]
    if fault == "index_twice":                      # two tokens of batch 0 into one slot
        row = idx[:p["S"]] if p["cache_mode"] == "Norm" else idx
        both = np.flatnonzero(row >= 0)[:2]
        row[both] = row[both[0]]
    return idx.reshape(planned.shape).astype(planned.dtype)


# --- the spec behind the records ----------------------------------------------------------------

_TENSORS = ("kv", "gamma", "cos", "sin", "index", "k_cache", "ckv_cache", "k_rope_scale",
            "c_kv_scale", "k_rope_offset", "c_kv_offset", "v")


def _check(call: Call) -> None:
    """The validation without the index's values (probing a case's shapes and dtypes)."""
    check_kv_cache_args("kv_rms_norm_rope_cache_v2", tensors_of(call, _TENSORS),
                        call.attrs.get("epsilon", 1e-5), call.attrs.get("cache_mode", "Norm"),
                        call.attrs.get("is_output_kv", False), call.soc, values=False)


def _describe(call: Call) -> dict:
    """The caches' dtypes as the kcache/ckvcache axes name them."""
    kv = call.inputs.get("kv")
    out = {}
    for name, axis in (("k_cache", "kcache"), ("ckv_cache", "ckvcache")):
        cache = call.inputs.get(name)
        if kv is not None and cache is not None:
            dt = np.asarray(cache).dtype
            out[axis] = "kv" if dt == np.asarray(kv).dtype else QUANT_NAMES.get(dt, str(dt))
    return out


def _record(v2: bool) -> Operator:
    inputs = [Tensor("kv", "kv", "data"), Tensor("gamma", "gamma", "weight"),
              Tensor("cos", "cos", "table"), Tensor("sin", "sin", "table"),
              Tensor("index", "index", "index"), Tensor("k_cache", "kCacheRef", "cache"),
              Tensor("ckv_cache", "ckvCacheRef", "cache"),
              Tensor("k_rope_scale", "kRopeScale", "scale"), Tensor("c_kv_scale", "cKvScale", "scale"),
              Tensor("k_rope_offset", "kRopeOffset", "scale"), Tensor("c_kv_offset", "cKvOffset", "scale")]
    if v2:
        inputs.append(Tensor("v", "v", "data"))
    aliases = {"kRopeScaleOptional": "kRopeScale", "cKvScaleOptional": "cKvScale",
               "ckvScaleOptional": "cKvScale", "kRopeOffsetOptional": "kRopeOffset",
               "cKvOffsetOptional": "cKvOffset", "vOptional": "v", "kCache": "kCacheRef",
               "ckvCache": "ckvCacheRef"}
    outputs = (Output("k_cache", "kCacheRef", axes=cache_axes, in_place=True),
               Output("ckv_cache", "ckvCacheRef", axes=cache_axes, in_place=True),
               Output("k_rope", "kRopeOut", axes="BNSD"), Output("c_kv", "cKvOut", axes="BNSD"))
    return Operator(
        id="kv_rope_cache_v2" if v2 else "kv_rope_cache",
        aclnn="aclnnKvRmsNormRopeCacheV2" if v2 else "aclnnKvRmsNormRopeCache",
        title="KvRmsNormRopeCacheV2" if v2 else "KvRmsNormRopeCache",
        spec=kv_rms_norm_rope_cache_v2 if v2 else kv_rms_norm_rope_cache,
        tensors=Tensors(inputs=tuple(inputs), outputs=outputs, aliases=aliases, dtype_from="cos"),
        sweep=_sweep(v2),
        generation=Generation(plan=_plan_for(v2), sample=_sample_for(v2), check=_check,
                              terms=keyword_terms(kv_rms_norm_rope_cache_terms, _TENSORS),
                              socs=("A2", "A3", "950", None),
                              describe=_describe),
        comparison=Comparison(context=("cache_mode", "kcache", "ckvcache", "dtype"),
                              hypotheses=(*cache_hypotheses.CACHES, _QUANTISATION,
                                          hypotheses.other_values("cache_mode"))))


#: KvRmsNormRopeCache's quantisation: the scale multiplies (docs/kv_rms_norm_rope_cache.md §1)
_QUANTISATION = cache_hypotheses.quantisation(("k_rope_scale", "c_kv_scale"),
                                              ("k_rope_offset", "c_kv_offset"), divides=False)
KV_ROPE_CACHE = _record(False)
KV_ROPE_CACHE_V2 = _record(True)
