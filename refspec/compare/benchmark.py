"""The same-precision benchmark of the ``ratio`` standard (spec/tolerances.md, dual benchmark).

An independent naive float32 kernel: the spec's own formula blocks, which compute in whatever
dtype their arrays have, run on the case's inputs converted to float32 (exact for float16,
bfloat16 and float32 inputs), then rounded once to the output dtype. No second copy of any
formula: ``refspec.rope.ROPE_FORWARD/ROPE_BACKWARD[mode]`` and
``refspec.norm_rope_concat.backward_exact`` do the arithmetic.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import round_to
from ..enums import RopeMode
from ..norm_rope_concat import backward_args, backward_exact
from ..rope import ROPE_BACKWARD, ROPE_FORWARD

__all__ = ["BenchmarkUnavailable", "float32_benchmark"]


class BenchmarkUnavailable(Exception):
    """The ratio standard has no benchmark for this operator or case."""


def _f32(a):
    return None if a is None else np.asarray(a).astype(np.float32)


def _inputs(case) -> dict:
    return {n: case.inputs[n][()] for n in case.input_names}


def float32_benchmark(case) -> dict[str, np.ndarray]:
    """Output name -> the float32 benchmark rounded to that output's dtype."""
    op, params = case.op, case.params
    t = _inputs(case)
    if op == "rotary_position_embedding_grad":
        mode = RopeMode(int(params["mode"]))
        outs = ROPE_BACKWARD[mode](_f32(t["dy"]), _f32(t["cos"]), _f32(t["sin"]), _f32(t.get("x")))
        raw = dict(zip(("dx", "dcos", "dsin"), outs))
    elif op == "rotary_position_embedding":
        mode = RopeMode(int(params["mode"]))
        raw = {"y": ROPE_FORWARD[mode](_f32(t["x"]), _f32(t["cos"]), _f32(t["sin"]))}
    elif op == "norm_rope_concat_backward":
        attrs = {k: int(params[k]) for k in ("norm_type", "norm_added_type", "rope_type",
                                              "concat_order")}
        t64, a, _ = backward_args(t, attrs, case.soc or None)
        raw, _ = backward_exact({k: _f32(v) for k, v in t64.items()}, a)
    else:
        raise BenchmarkUnavailable(f"no float32 benchmark for {op}")
    out = {}
    for name in case.output_names:
        if raw.get(name) is None:
            continue
        out[name] = round_to(np.asarray(raw[name], dtype=np.float64), case.expected[name].dtype)
    return out
