"""The record of RopeWithSinCosCache (``rope_cache``): names, tensors, sweep axes, and how a
case's inputs are planned and sampled (docs/rope_with_sin_cos_cache.md).

A case is T tokens of query (Nq heads) and key (Nk heads) of ``head_size`` each, a cos/sin cache
of M rows and R = rotaryDim columns (R <= head_size: the rest of each head passes through), the
rotation style (``neox``: rotate half; ``gptj``: interleaved), rope or mrope mode (``mrope`` the
three sections of the angles, each fed by its own row of positions), and the pattern of the
positions: ``sequential``, ``repeated`` (each position twice in a row), ``shuffled`` (out of
order) or ``edges`` (the cache's first and last rows, alternately).
"""

from __future__ import annotations

import numpy as np

from . import hypotheses
from ..spec.dtypes import resolve_dtype
from ..spec.rope_cache import rope_with_sin_cos_cache, rope_with_sin_cos_cache_terms
from ..spec.rope_cache_checks import check_rope_cache_args
from .axes import Axis, Shape, choice, dist_axis, dtype_axis, fault_axis, soc_axis
from .record import (Call, Comparison, Generation, Operator, Output, Rotation, SweepAxes,
                     TablePart, Tensor, TensorPlan, Tensors)
from .sampling import ROPE_VENDOR, draw, draw_tables, dtype_max, stream

__all__ = ["ROPE_CACHE", "POSITIONS", "STYLES"]

#: how the positions pick the cache's rows
POSITIONS = ("sequential", "repeated", "shuffled", "edges")
#: the rotation styles: the value of is_neox_style
STYLES = {"neox": True, "gptj": False}
_FAULTS = ("none", "positions_dtype", "cache_dtype", "query_width", "odd_rotary_dim")


_STYLE_NAMES = choice(tuple(STYLES), {"gpt-neox": "neox", "gpt-j": "gptj"})


def _style(v) -> str:
    """``neox`` or ``gptj`` (also ``gpt-neox``, ``gpt-j``, or is_neox_style as a bool)."""
    if isinstance(v, (bool, np.bool_)):
        return "neox" if v else "gptj"
    return _STYLE_NAMES(v)


def _mrope(v) -> str:
    """``none`` (rope mode) or the three sections, e.g. ``16,24,24`` (a list too)."""
    if v is None or (isinstance(v, str) and v.strip().lower() == "none"):
        return "none"
    parts = list(v) if isinstance(v, (list, tuple)) else str(v).replace(" ", "").split(",")
    ok = len(parts) == 3 and not any(isinstance(x, bool) for x in parts)
    try:
        sections = [int(x) for x in parts] if ok else []
    except (TypeError, ValueError):
        sections = []
    if len(sections) != 3 or min(sections) < 0:
        raise ValueError(f"{v!r} is not three sections; allowed: none, or three integers >= 0 "
                         "such as 16,24,24")
    return ",".join(map(str, sections))


def _sections(value: str):
    return None if value == "none" else tuple(int(s) for s in value.split(","))


def _positive(v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{v!r} must be an integer > 0")
    return int(v)


def _sweep() -> SweepAxes:
    axes = (soc_axis(),
            Axis("style", _style, ("neox",), tuple(STYLES), attr="is_neox_style",
                 to_spec=lambda s: STYLES.get(s, s)),
            Axis("mrope", _mrope, ("none",), attr="mrope_section", to_spec=_sections),
            Axis("head_size", _positive, (64,), attr="head_size"),
            Axis("positions", choice(POSITIONS), ("sequential",), POSITIONS),
            dtype_axis(), dist_axis(), fault_axis(_FAULTS))
    return SweepAxes(
        axes=axes, shape=Shape(("T", "Nq", "Nk", "R", "M"), "T16Nq4Nk1R64M32",
                               lambda s: f"T{s['T']}Nq{s['Nq']}Nk{s['Nk']}R{s['R']}M{s['M']}"))


# --- inputs -----------------------------------------------------------------------------------

def _plan(p: dict) -> dict:
    """positions (T,) or (3, T) int64, query, key and the cache; a ``fault`` makes the profile
    reject the call (int32 positions, a cache of another dtype, a query width that is no
    multiple of head_size, an odd rotary_dim)."""
    dt = resolve_dtype(p["dtype"])
    fault = p.get("fault", "none")
    T, H = p["T"], p["head_size"]
    pshape = (T,) if p["mrope"] == "none" else (3, T)
    other = np.dtype(np.float16) if dt == np.float32 else np.dtype(np.float32)
    return {"positions": TensorPlan(pshape, np.dtype(np.int32 if fault == "positions_dtype"
                                                     else np.int64), "index"),
            "query": TensorPlan((T, p["Nq"] * H + (fault == "query_width")), dt, "data"),
            "key": TensorPlan((T, p["Nk"] * H), dt, "data"),
            "cos_sin_cache": TensorPlan((p["M"], p["R"] + (fault == "odd_rotary_dim")),
                                        other if fault == "cache_dtype" else dt, "table")}


def _pattern(name: str, T: int, M: int, rng, row: int = 0) -> np.ndarray:
    """The cache rows of T tokens (row: which of mrope's three position rows)."""
    i = np.arange(T)
    if name == "sequential":
        return (i // (row + 1)) % M
    if name == "repeated":
        return (i // 2 + row) % M
    if name == "shuffled":
        return rng.permutation(T) % M
    return np.where((i + row) % 2 == 0, 0, M - 1)           # edges


def _sample(p: dict, seed: int, pool=None) -> dict:
    """The positions of the case's pattern (each mrope row its own), query and key drawn, and
    the cache: per row p, R/2 cos values then R/2 sin values (``rotary``: of the angles p *
    10000^(-2i/R), the inverse frequencies of GPT-NeoX and vLLM)."""
    plan = _plan(p)
    t = plan["positions"]
    rng = stream(seed, "positions")
    n_rows = 1 if p["mrope"] == "none" else 3
    rows = [_pattern(p["positions"], p["T"], p["M"], rng, r) for r in range(n_rows)]
    out = {"positions": np.stack(rows).reshape(t.shape).astype(t.dtype)}
    for name in ("query", "key"):
        x = plan[name]
        large = dtype_max(x.dtype) / 4 if p["dist"] == "special" else None
        out[name] = draw(p["dist"], "data", x.shape, x.dtype, seed, name, vendor=ROPE_VENDOR,
                         large=large)
    c = plan["cos_sin_cache"]
    cos, sin = draw_tables(p["dist"], (c.shape[0], c.shape[1] - c.shape[1] // 2), c.dtype, seed,
                           positions=np.arange(c.shape[0], dtype=np.float64)[:, None],
                           pairing="element", vendor=ROPE_VENDOR,
                           names=("cos_sin_cache_cos", "cos_sin_cache_sin"))
    out["cos_sin_cache"] = np.concatenate([cos, sin], axis=1)[:, :c.shape[1]]
    return {k: out[k] for k in plan}


# --- the spec behind the record ---------------------------------------------------------------

def _args(call: Call) -> tuple:
    t, a = call.inputs, call.attrs
    return (t.get("positions"), t.get("query"), t.get("key"), t.get("cos_sin_cache"),
            a.get("head_size"), a.get("mrope_section"), a.get("is_neox_style", True))


def _check(call: Call) -> None:
    check_rope_cache_args("rope_with_sin_cos_cache", *_args(call), call.soc)


def _terms(call: Call) -> dict:
    terms = rope_with_sin_cos_cache_terms(*_args(call), soc=call.soc)
    return {"query_out": terms["query"], "key_out": terms["key"]}


ROPE_CACHE = Operator(
    id="rope_cache", aclnn="aclnnRopeWithSinCosCache", title="RopeWithSinCosCache",
    spec=rope_with_sin_cos_cache,
    tensors=Tensors(
        inputs=(Tensor("positions", "positions", "index", "T"),
                Tensor("query", "queryIn", "data", "TD"), Tensor("key", "keyIn", "data", "TD"),
                Tensor("cos_sin_cache", "cosSinCache", "table", "MR")),
        outputs=(Output("query_out", "queryOut", axes="TD"),
                 Output("key_out", "keyOut", axes="TD"))),
    sweep=_sweep(),
    generation=Generation(plan=_plan, sample=_sample, check=_check, terms=_terms,
                          socs=("A2", "A3", None)),
    comparison=Comparison(context=("style", "mrope", "head_size", "dtype"),
                          hypotheses=(hypotheses.other_values("style"),), independent=("T",),
                          rotation=Rotation(data=("query", "key"),
                                            cos=TablePart("cos_sin_cache", 0, 2),
                                            sin=TablePart("cos_sin_cache", 1, 2),
                                            head_size="head_size", extent_axis=-1)))
