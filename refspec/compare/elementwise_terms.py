"""Sum of |terms| of elementwise outputs, for the float32 evaluation bound (tolerances.md).

An elementwise RoPE value is c*d + s*e: with float32 inputs its float32 evaluation error is up
to a few units of 2^-24 times |c*d| + |s*e|, which exceeds any fixed relative tolerance when the
two products cancel. refspec.terms stores S only for reductions, so it is derived here from the
spec's own formula blocks on absolute values (no second copy of a formula): each element is one
cos product plus or minus one sin product, so max(F(|d|, |c|, |s|), F(|d|, |c|, -|s|)) is
|cos product| + |sin product|.
"""

from __future__ import annotations

from math import prod

import numpy as np

from ..enums import RopeMode
from ..norm_rope_concat import backward_args, backward_exact
from ..rope import ROPE_BACKWARD, ROPE_FORWARD

__all__ = ["elementwise_sum_abs", "MAX_ELEMENTS"]

#: cases with more input elements than this are judged without the evaluation bound
MAX_ELEMENTS = 1 << 24


def _abs(a):
    return None if a is None else np.abs(np.asarray(a, dtype=np.float64))


def elementwise_sum_abs(case, names) -> dict[str, np.ndarray]:
    """{output: S} for the elementwise outputs ``names`` of ``case`` it can derive."""
    if not names:
        return {}
    total = sum(prod(case.inputs[n].shape) for n in case.input_names)
    if total > MAX_ELEMENTS:
        return {}
    t = {n: case.inputs[n][()] for n in case.input_names}
    op, params = case.op, case.params
    out = {}
    if op in ("rotary_position_embedding_grad", "rotary_position_embedding"):
        mode = RopeMode(int(params["mode"]))
        if op.endswith("_grad"):
            d, c, s = _abs(t["dy"]), _abs(t["cos"]), _abs(t["sin"])
            S = np.maximum(ROPE_BACKWARD[mode](d, c, s)[0], ROPE_BACKWARD[mode](d, c, -s)[0])
            key = "dx"
        else:
            x, c, s = _abs(t["x"]), _abs(t["cos"]), _abs(t["sin"])
            S = np.maximum(ROPE_FORWARD[mode](x, c, s), ROPE_FORWARD[mode](x, c, -s))
            key = "y"
        if key in names:
            out[key] = S
    elif op == "norm_rope_concat_backward":
        attrs = {k: int(params[k]) for k in ("norm_type", "norm_added_type", "rope_type",
                                              "concat_order")}
        t64, a, _ = backward_args(t, attrs, case.soc or None)
        ab = {k: _abs(v) for k, v in t64.items()}
        plus, _ = backward_exact(ab, a)
        if ab.get("rope_sin") is not None:
            ab["rope_sin"] = -ab["rope_sin"]
        minus, _ = backward_exact(ab, a)
        for n in names:
            if plus.get(n) is not None:
                out[n] = np.maximum(plus[n], minus[n])
    return out
