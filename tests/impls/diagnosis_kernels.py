"""RotaryPositionEmbeddingGrad kernels with one deliberate mistake each, one per kind of the
diagnosis vocabulary (docs/compare.md, "Diagnosis"), for ``refspec run`` and the tests.

Each is the NumPy float32 kernel of ``tests/impls/implementations.py`` (written from the documented
formulas, not from refspec's code) with one thing done wrong, the way kernels go wrong:

    refspec run --impl tests/impls/diagnosis_kernels.py:SIGN goldens.h5 --op rope_grad

``KERNELS`` maps each kind to the kernel that should be diagnosed with it.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import implementations  # noqa: E402  (tests/impls/implementations.py)

from refspec import ops  # noqa: E402
from refspec.ops.record import Call  # noqa: E402
from refspec.spec.dtypes import bfloat16  # noqa: E402

HALF, INTERLEAVE = 0, 1


def _sign(out, mode, dy, x):
    """dsin's sign flipped in rotate-half mode only."""
    if mode == HALF and out.get("dsin") is not None:
        out["dsin"] = -out["dsin"]


def _scale(out, mode, dy, x):
    """dx twice too large (a factor applied twice)."""
    out["dx"] = (out["dx"].astype(np.float32) * 2).astype(out["dx"].dtype)


def _zero(out, mode, dy, x):
    """dcos never written."""
    if out.get("dcos") is not None:
        out["dcos"] = np.zeros_like(out["dcos"])


def _constant(out, mode, dy, x):
    """dsin left at the value its buffer was initialised with."""
    if out.get("dsin") is not None:
        out["dsin"] = np.full_like(out["dsin"], 0.5)


def _nonfinite(out, mode, dy, x):
    """dx left as a NaN-filled buffer."""
    out["dx"] = np.full_like(out["dx"], np.nan)


def _copy(out, mode, dy, x):
    """dy passed through as dx."""
    out["dx"] = np.array(dy, copy=True)


def _copy_output(out, mode, dy, x):
    """dsin's buffer written to dcos as well."""
    if out.get("dsin") is not None:
        out["dcos"] = out["dsin"].copy()


def _dtype(out, mode, dy, x):
    """dx computed right (in float32) but stored as bfloat16 bits where float16 is expected."""
    out["dx"] = out["dx"].astype(bfloat16).view(np.float16)
    for name in ("dcos", "dsin"):
        if out.get(name) is not None:
            out[name] = out[name].astype(np.float16)


def _tail(out, mode, dy, x):
    """dx unwritten from flat index 64 on: a loop that stops after its first block."""
    flat = out["dx"].reshape(-1).copy()
    flat[64:] = 0
    out["dx"] = flat.reshape(out["dx"].shape)


#: kind -> (the tests/impls/implementations.py bug it starts from, a change of the outputs, a mode
#: forced on every call); the changes of ``_FLOAT32`` see the outputs before their rounding
_MISTAKES = {
    "sign": (None, _sign, None), "scale": (None, _scale, None), "zero": (None, _zero, None),
    "constant": (None, _constant, None), "nonfinite": (None, _nonfinite, None),
    "copy": (None, _copy, None), "copy_output": (None, _copy_output, None), "permuted": ("swapped_halves", None, None),
    "region": ("lost_minus", None, None), "alternative": (None, None, INTERLEAVE),
    "reduction": ("dcos_wrong_axes", None, None), "rounding": ("truncation", None, None),
    "dtype": (None, _dtype, None), "tail": (None, _tail, None),
}
_FLOAT32 = ("dtype",)


class Mistaken:
    """The float32 kernel with the mistake of ``kind``."""

    def __init__(self, kind: str):
        self.kind = kind
        self.bug, self.change, self.mode = _MISTAKES[kind]

    def rotary_position_embedding_grad(self, dy, cos, sin, x=None, mode=0, *, soc=None):
        ops.get("rope_grad").generation.check(
            Call({"dy": dy, "cos": cos, "sin": sin, "x": x}, {"mode": mode}, soc))
        used = type(mode)(self.mode) if self.mode is not None else mode
        inputs = {"dy": dy, "cos": cos, "sin": sin, "x": x}
        if self.kind in _FLOAT32 and np.asarray(dy).dtype == np.float16:
            inputs = {k: None if v is None else np.asarray(v, np.float32) for k, v in inputs.items()}
        out = implementations.run("rope_grad", {"mode": used}, inputs, self.bug)
        if self.change is not None and (self.kind not in _FLOAT32 or
                                        np.asarray(dy).dtype == np.float16):
            self.change(out, int(mode), dy, x)
        return out["dx"], out.get("dcos"), out.get("dsin")


KERNELS = {kind: Mistaken(kind) for kind in _MISTAKES}
SIGN = KERNELS["sign"]
SCALE = KERNELS["scale"]
rotary_position_embedding_grad = SIGN.rotary_position_embedding_grad
