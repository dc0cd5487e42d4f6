"""A NumPy float32 implementation of the two backward operators under the spec's names and
signatures, for ``refspec run --framework numpy``: the device-like implementations of
``tests/implementations.py`` (float32 arithmetic in another order than the spec's, one rounding)
behind the profile's argument checks (the operator records' own, standing in for the aclnn
front end).

``--impl tests/impls/numpy_backward.py`` uses the correct functions; ``...numpy_backward.py:NAME``
a deliberately broken variant (``BROKEN``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import implementations  # noqa: E402  (tests/implementations.py)

from refspec import ops  # noqa: E402


class NumpyBackwards:
    def __init__(self, bug: str | None = None):
        self.bug = bug

    def _checked(self, op: str, inputs: dict, attrs: dict, soc):
        if self.bug != "missing_rejection":
            ops.get(op).check(inputs, attrs, soc)
        record = ops.get(op)
        return implementations.run(record.function, attrs, inputs,
                                   None if self.bug == "missing_rejection" else self.bug)

    def rotary_position_embedding_grad(self, dy, cos, sin, x=None, mode=0, *, soc=None):
        out = self._checked("rope_grad", {"dy": dy, "cos": cos, "sin": sin, "x": x},
                            {"mode": mode}, soc)
        return out["dx"], out.get("dcos"), out.get("dsin")

    def norm_rope_concat_backward(self, *, soc=None, norm_type=0, norm_added_type=0,
                                  rope_type=0, concat_order=0, **tensors):
        attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                     concat_order=concat_order)
        return self._checked("nrc_grad", tensors, attrs, soc)


CORRECT = NumpyBackwards()
rotary_position_embedding_grad = CORRECT.rotary_position_embedding_grad
norm_rope_concat_backward = CORRECT.norm_rope_concat_backward

BROKEN = ("swapped_halves", "wrong_sin_partner", "lost_minus", "dcos_wrong_axes",
          "missing_rejection")
SWAPPED_HALVES = NumpyBackwards("swapped_halves")
WRONG_SIN_PARTNER = NumpyBackwards("wrong_sin_partner")
LOST_MINUS = NumpyBackwards("lost_minus")
DCOS_WRONG_AXES = NumpyBackwards("dcos_wrong_axes")
MISSING_REJECTION = NumpyBackwards("missing_rejection")
