"""Turning one sweep case into golden data by calling the public spec functions.

:func:`build_case` lays out the case's tensors (:func:`tensor_plan`: names, shapes, dtypes,
roles; a ``fault`` changes one of them so the chosen profile must reject the call), draws them
with :mod:`refspec.inputs` (float64, rounded once to the case dtype), and calls the spec with
``soc=`` the case's profile:

- a call the profile rejects makes a *negative case*: its inputs plus the error the spec raised
  (code and message; codes are never written down here);
- otherwise ``exact`` = the spec with ``out_dtype=np.float64`` and ``expected`` = each exact
  output rounded once (:func:`refspec.dtypes.round_to`) to its documented dtype, with the
  tolerance metadata of :mod:`refspec.terms` and the axis letters of each output.

NormRopeConcatBackward cases take mean/rstd from ``refspec.norm_rope_concat(...,
is_training=True)`` on the rounded inputs, float32 as the device forward writes them. Large
cases go through :mod:`refspec.blocked`, which returns the same bits as the spec functions.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from math import prod, sqrt
from typing import NamedTuple

import numpy as np

from . import blocked
from .dtypes import resolve_dtype, round_to
from .enums import NormType
from .errors import AclnnError
from .inputs import draw, draw_tables, dtype_max, stream
from .layouts import layout_shape
from .norm_rope_concat import norm_rope_concat, norm_rope_concat_backward
from .nrc_checks import STREAMS, check_nrc_args
from .reduce import broadcast_dims
from .rope import rotary_position_embedding, rotary_position_embedding_grad
from .rope_checks import check_rope_args
from .selfstats import outputs_self_stats
from .sweep import OP_FUNCTIONS, Case
from .terms import (norm_rope_concat_backward_terms, norm_rope_concat_terms, rope_grad_terms,
                    rope_terms)

__all__ = ["TensorPlan", "CaseData", "tensor_plan", "probe", "build_case", "regenerate_command",
           "output_axes", "expected_outputs"]

_PAIRING = {"half": "half", "interleave": "interleave", "quarter": "quarter",
            "interleave-half": "half"}
_RSTD_MAX = 1 / sqrt(1e-5)     # rstd of a constant row with the default eps
_WEIGHTS = tuple(spec[1] for spec in STREAMS.values())
_BIASES = tuple(spec[2] for spec in STREAMS.values())


class TensorPlan(NamedTuple):
    """One input tensor of a case: shape, dtype, role (inputs.ROLES, or "table"/"stats")."""

    shape: tuple
    dtype: np.dtype
    role: str


@dataclass
class CaseData:
    """Everything the writer needs for one case (plain data; picklable across processes)."""

    case_id: str
    op: str                      # the refspec function name
    params: dict
    seed: int
    soc: str | None
    distribution: str
    inputs: dict
    expected: dict = field(default_factory=dict)
    exact: dict = field(default_factory=dict)
    terms: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    error: AclnnError | None = None
    self_stats: dict | None = None   # {output: JSON text} of refspec.selfstats (large outputs)
    shipped_to: str | None = None    # the file holding the arrays (refspec.transfer.ship)

    @property
    def negative(self) -> bool:
        return self.error is not None

    @property
    def nbytes(self) -> int:
        arrays = [*self.inputs.values(), *self.expected.values(), *self.exact.values(),
                  *(t.sum_abs for t in self.terms.values() if t.sum_abs is not None)]
        return sum(a.nbytes for a in arrays)

    def writer_kwargs(self, regenerate: str = "") -> dict:
        """Keyword arguments of GoldenWriter.write_case (after the case id)."""
        return dict(op=self.op, params=self.params, seed=self.seed, soc=self.soc,
                    distribution=self.distribution, inputs=self.inputs, expected=self.expected,
                    exact=self.exact, terms=self.terms, axes=self.axes,
                    expected_error=self.error, regenerate=regenerate,
                    self_stats=self.self_stats)


# --- tensor layout of a case ------------------------------------------------------------------

def _rope_cos_shape(layout: str, pattern: str, p: dict) -> tuple:
    sizes = {"B": p["B"], "N": p["N"], "S": p["S"], "T": p["B"] * p["S"], "D": p["D"]}
    return tuple(1 if c == "1" else sizes[letter] for c, letter in zip(pattern, layout))


def _other_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float16) if dt == np.float32 else np.dtype(np.float32)


def _nrc_seq(p: dict) -> dict:
    return {"query": p["Sq"], "key": p["Sk"], "encoder_query": p["Seq"], "encoder_key": p["Sek"]}


def tensor_plan(params: dict) -> dict:
    """name -> :class:`TensorPlan` of every input the case passes (absent inputs omitted), in the
    order of the spec function's parameters."""
    p = params
    op = p["op"]
    dt = resolve_dtype(p["dtype"])
    fault = p.get("fault", "none")
    plan: dict = {}
    if op in ("rope_grad", "rope"):
        B, N, S, D = p["B"], p["N"], p["S"], p["D"]
        full = layout_shape(p["layout"], B, N, S, D)
        cshape = _rope_cos_shape(p["layout"], p["cos_pattern"], p)
        tdt = _other_dtype(dt) if fault == "cos_dtype" else dt
        plan["dy" if op == "rope_grad" else "x"] = TensorPlan(full, dt, "grad" if op == "rope_grad" else "data")
        if fault != "missing_cos":
            plan["cos"] = TensorPlan(cshape, tdt, "table")
        plan["sin"] = TensorPlan(cshape[:-1] + (D + 2,) if fault == "sin_shape" else cshape, tdt, "table")
        if op == "rope_grad" and p["x"]:
            xshape = (full[0] + 1,) + full[1:] if fault == "x_shape" else full
            plan["x"] = TensorPlan(xshape, dt, "data")
        return plan

    B, N, D = p["B"], p["N"], p["D"]
    seq = _nrc_seq(p)
    types = {"norm_type": p["norm_type"], "norm_added_type": p["norm_added_type"]}
    present = [s for s in STREAMS if seq[s] > 0 or s in ("query", "key")]
    wshape = (D + 2,) if fault == "weight_shape" else (D,)
    if op == "nrc_grad":
        Lq, Lk = p["Sq"] + p["Seq"], p["Sk"] + p["Sek"]
        plan["grad_query_output"] = TensorPlan((B, N, Lq + (fault == "grad_seq"), D), dt, "grad")
        plan["grad_key_output"] = TensorPlan((B, N, Lk, D), dt, "grad")
        plan["grad_value_output"] = TensorPlan((B, N, Lk, D), dt, "grad")
        for s in ("query", "key", "encoder_query", "encoder_key"):
            if s in present:
                plan[s] = TensorPlan((B, seq[s], N, D), dt, "data")
        sdt = (dt if dt != np.float32 else np.dtype(np.float16)) if fault == "stats_dtype" else np.dtype(np.float32)
        dropped = False
        for s, (type_attr, weight, _bias, mean, rstd) in STREAMS.items():
            if s not in present:
                continue
            if types[type_attr] == NormType.AFFINE_LAYER_NORM:
                plan[weight] = TensorPlan(wshape, dt, "weight")
            if types[type_attr] >= 1:
                for name in (mean, rstd):
                    if fault == "missing_stats" and not dropped:
                        dropped = True
                        continue
                    plan[name] = TensorPlan((B, seq[s], N, 1), sdt, "stats")
    else:
        plan["query"] = TensorPlan((B, p["Sq"], N, D), dt, "data")
        plan["key"] = TensorPlan((B, p["Sk"], N, D), dt, "data")
        plan["value"] = TensorPlan((B, p["Sk"] + (fault == "value_seq"), N, D), dt, "data")
        for s, v in (("encoder_query", None), ("encoder_key", "encoder_value")):
            if s in present:
                plan[s] = TensorPlan((B, seq[s], N, D), dt, "data")
                if v:
                    plan[v] = TensorPlan((B, seq[s], N, D), dt, "data")
        dropped = False
        for s, (type_attr, weight, bias, _mean, _rstd) in STREAMS.items():
            if s in present and types[type_attr] == NormType.AFFINE_LAYER_NORM:
                plan[weight] = TensorPlan(wshape, dt, "weight")
                if fault == "missing_bias" and not dropped:
                    dropped = True
                else:
                    plan[bias] = TensorPlan((D,), dt, "bias")
    if p["rope_type"] != 0 and fault != "missing_rope":
        plan["rope_sin"] = TensorPlan((p["Sr"], D), dt, "table")
        plan["rope_cos"] = TensorPlan((p["Sr"], D), dt, "table")
    return plan


def _attrs(p: dict) -> dict:
    a = dict(norm_type=p["norm_type"], norm_added_type=p["norm_added_type"],
             rope_type=p["rope_type"], concat_order=p["concat_order"])
    if p["op"] == "nrc":
        a.update(eps=p["eps"], is_training=p["is_training"])
    return a


def _call(p: dict, inputs: dict, out_dtype=None):
    """The public spec function of the case on ``inputs`` (missing names = absent)."""
    soc = p["soc"]
    op = p["op"]
    if op == "rope_grad":
        return rotary_position_embedding_grad(inputs["dy"], inputs.get("cos"), inputs.get("sin"),
                                              inputs.get("x"), p["mode"], soc=soc, out_dtype=out_dtype)
    if op == "rope":
        return rotary_position_embedding(inputs["x"], inputs.get("cos"), inputs.get("sin"),
                                         p["mode"], soc=soc, out_dtype=out_dtype)
    if op == "nrc_grad":
        return norm_rope_concat_backward(**inputs, **_attrs(p), soc=soc, out_dtype=out_dtype)
    return norm_rope_concat(**inputs, **_attrs(p), soc=soc, out_dtype=out_dtype)


def probe(params: dict) -> AclnnError | None:
    """The error the case's profile raises for its arguments, found without computing anything:
    the validation sees zero-stride arrays of the planned shapes and dtypes (it never looks at
    values, and the rules check arguments before any arithmetic)."""
    plan = tensor_plan(params)
    arrays = {k: np.broadcast_to(np.zeros((), t.dtype), t.shape) for k, t in plan.items()}
    try:
        if params["op"] in ("rope_grad", "rope"):
            fn = OP_FUNCTIONS[params["op"]]
            primary = "dy" if params["op"] == "rope_grad" else "x"
            check_rope_args(fn, primary, arrays[primary], arrays.get("cos"), arrays.get("sin"),
                            arrays.get("x") if primary == "dy" else None, params["mode"],
                            params["soc"])
        else:
            backward = params["op"] == "nrc_grad"
            names = _nrc_param_names(backward)
            tensors = {n: arrays.get(n) for n in names}
            check_nrc_args(OP_FUNCTIONS[params["op"]], "grad_query_output" if backward else "query",
                           tensors, _attrs(params), params["soc"], backward=backward)
    except AclnnError as exc:
        return exc
    return None


def _nrc_param_names(backward: bool) -> tuple:
    if backward:
        names = ["grad_query_output", "grad_key_output", "grad_value_output", "query", "key",
                 "encoder_query", "encoder_key"]
        for s, (_t, weight, _b, mean, rstd) in STREAMS.items():
            names += [weight, mean, rstd]
    else:
        names = ["query", "key", "value", "encoder_query", "encoder_key", "encoder_value",
                 *_WEIGHTS, *_BIASES]
    return tuple(names + ["rope_sin", "rope_cos"])


# --- drawing the inputs -----------------------------------------------------------------------

def _rope_positions(p: dict, cshape: tuple, seed: int) -> np.ndarray:
    """Positions of each row of a RoPE cos/sin table: the sequence index where the table has
    the S axis (TND: the index within each packed sequence), plus a random offset per index of
    any other axis the table has (per-batch or per-head tables); one random position when the
    table has no sequence axis."""
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


def _special_large(p: dict, name: str, plan: TensorPlan):
    """The large magnitude of one tensor under ``special``: as large as worst-case bounds of
    the operator allow without the exact outputs exceeding the dtype's maximum."""
    top = dtype_max(plan.dtype)
    op = p["op"]
    if op == "rope":
        return top / 4                                   # |y| <= 2 * max|x| (|cos|, |sin| <= 1)
    if op == "rope_grad":
        if name == "dy":
            return top / 4                               # |dx| <= 2 * max|dy|
        full = plan.shape
        cshape = _rope_cos_shape(p["layout"], p["cos_pattern"], p)
        K = prod(full[i] for i in broadcast_dims(full, cshape)) if len(cshape) == len(full) else 1
        return 2.0 / max(K, 1)                           # |dcos| <= K * max|dy| * max|x| <= max/2
    D = p["D"]
    rows = p["B"] * p["N"] * max(p["Sq"], p["Sk"], p["Seq"], p["Sek"], 1)
    if plan.role == "data":
        return min(top / 4, 2.0 ** 400)                  # the LayerNorm variance stays finite
    if op == "nrc":
        return top / 8                                   # biases: |out| <= sqrt(D) + max|b|
    if name == "grad_value_output":
        return top / 2                                   # copied
    if max(p["norm_type"], p["norm_added_type"]) == 0:
        return top / 4                                   # RoPE backward doubles at most
    amplification = max(_RSTD_MAX * (D + 2), rows * sqrt(D), rows)
    return top / (8 * amplification)


def draw_inputs(case: Case) -> dict:
    """The case's inputs as stored (each in its planned dtype); statistics of the
    NormRopeConcatBackward come from the spec's forward on the other rounded inputs."""
    p, seed, dist = case.params, case.seed, case.params["distribution"]
    plan = tensor_plan(p)
    family = "rope" if case.op in ("rope_grad", "rope") else "nrc"
    out = {}
    for name, t in plan.items():
        if t.role in ("table", "stats"):
            continue
        large = _special_large(p, name, t) if dist == "special" else None
        out[name] = draw(dist, t.role, t.shape, t.dtype, seed, name, family=family, large=large)
    if family == "rope":
        if "cos" in plan or "sin" in plan:
            cplan = plan.get("cos", plan["sin"])
            cshape = _rope_cos_shape(p["layout"], p["cos_pattern"], p)
            cos, sin = draw_tables(dist, cshape, cplan.dtype, seed,
                                   positions=_rope_positions(p, cshape, seed),
                                   pairing=_PAIRING[p["mode_name"]], family="rope")
            if "cos" in plan:
                out["cos"] = cos
            if "sin" in plan:
                out["sin"] = sin if plan["sin"].shape == cshape else draw(
                    dist, "data", plan["sin"].shape, plan["sin"].dtype, seed, "sin")
        return {k: out[k] for k in plan}
    if "rope_sin" in plan:
        Sr, D = plan["rope_sin"].shape
        cos, sin = draw_tables(dist, (Sr, D), plan["rope_sin"].dtype, seed,
                               positions=np.arange(Sr, dtype=np.float64)[:, None],
                               pairing="interleave" if p["rope_type"] == 1 else "half",
                               family="nrc", names=("rope_cos", "rope_sin"))
        out["rope_cos"], out["rope_sin"] = cos, sin
    stats = [k for k, t in plan.items() if t.role == "stats"]
    if stats:
        out.update(_forward_stats(p, out, {k: plan[k] for k in stats}))
    return {k: out[k] for k in plan}


def _forward_stats(p: dict, drawn: dict, wanted: dict) -> dict:
    """mean/rstd of the normed streams from refspec.norm_rope_concat(..., is_training=True),
    rounded to float32 as the device forward writes them (math-only profile, weight 1, bias 0:
    the statistics depend on neither)."""
    dt = resolve_dtype(p["dtype"])
    D = p["D"]
    one, zero = np.ones(D, dt), np.zeros(D, dt)
    kw = {}
    for s, (type_attr, weight, bias, _m, _r) in STREAMS.items():
        if p[type_attr] == NormType.AFFINE_LAYER_NORM:
            kw[weight], kw[bias] = one, zero
    fwd = norm_rope_concat(drawn["query"], drawn["key"], drawn["key"],
                           drawn.get("encoder_query"), drawn.get("encoder_key"),
                           drawn.get("encoder_key"), **kw, norm_type=p["norm_type"],
                           norm_added_type=p["norm_added_type"], rope_type=0,
                           concat_order=p["concat_order"], is_training=True, soc=None)
    stats = fwd._asdict()
    return {k: (stats[k] if t.dtype == np.float32 else round_to(stats[k], t.dtype))
            for k, t in wanted.items()}


# --- outputs ----------------------------------------------------------------------------------

def output_axes(p: dict, name: str) -> str:
    """Axis letters of an output, for naming indices (docs/goldens.md)."""
    if p["op"] in ("rope_grad", "rope"):
        return p["layout"]
    if name.endswith(("_weight", "_bias")):
        return "D"
    if name.endswith(("_mean", "_rstd")):
        return "BSN1"
    if p["op"] == "nrc":
        return "BNSD"
    return "BSND"


def expected_outputs(p: dict, exact: dict) -> dict:
    """Each exact output rounded once (half to even) to its documented dtype: the case dtype,
    float32 for NormRopeConcat's statistics."""
    dt = resolve_dtype(p["dtype"])
    return {k: round_to(v, np.float32 if k.endswith(("_mean", "_rstd")) else dt)
            for k, v in exact.items()}


def _terms(p: dict, inputs: dict) -> dict:
    soc = p["soc"]
    op = p["op"]
    if op == "rope_grad":
        return rope_grad_terms(inputs["dy"], inputs["cos"], inputs["sin"], inputs.get("x"),
                               p["mode"], soc)
    if op == "rope":
        return rope_terms(inputs["x"], inputs["cos"], inputs["sin"], p["mode"], soc)
    if op == "nrc_grad":
        tensors = {n: inputs.get(n) for n in _nrc_param_names(True)}
        return norm_rope_concat_backward_terms(tensors, _attrs(p), soc)
    return norm_rope_concat_terms(p["norm_type"], p["norm_added_type"], p["rope_type"], p["D"])


def _exact(p: dict, inputs: dict) -> tuple[dict, dict]:
    """(exact outputs by name, terms by name): blocked evaluation for large cases, else the
    public spec function with out_dtype=float64 and refspec.terms."""
    fast = blocked.evaluate(p, inputs)
    if fast is not None:
        return fast
    outs = _call(p, inputs, out_dtype=np.float64)
    if p["op"] == "rope_grad":
        exact = dict(zip(("dx", "dcos", "dsin"), outs))
    elif p["op"] == "rope":
        exact = {"y": outs}
    else:
        exact = outs._asdict()
    exact = {k: v for k, v in exact.items() if v is not None}
    terms = _terms(p, inputs)
    return exact, {k: terms[k] for k in exact}


def build_case(case: Case) -> CaseData:
    """Inputs, outputs and metadata of one case (see the module docstring)."""
    p = case.params
    inputs = draw_inputs(case)
    data = CaseData(case.id, OP_FUNCTIONS[case.op], p, case.seed, p["soc"], p["distribution"],
                    inputs)
    try:
        exact, terms = _exact(p, inputs)
    except AclnnError as exc:
        data.error = exc
        return data
    data.exact = exact
    data.expected = expected_outputs(p, exact)
    data.terms = terms
    data.axes = {k: output_axes(p, k) for k in exact}
    data.self_stats = outputs_self_stats(data.expected, exact, terms)
    return data


def regenerate_command(case: Case, sweep_ref: str, seed: int) -> str:
    """The shell command that regenerates exactly this case."""
    return (f"refspec generate --sweep {shlex.quote(str(sweep_ref))} --seed {int(seed)} "
            f"--case {shlex.quote(case.id)} -o {shlex.quote(case.id.replace('/', '_') + '.h5')}")

