"""A PyTorch implementation of the RoPE family's forwards as inference stacks write them
(LLaMA's ``q*cos + rotate_half(q)*sin``, vLLM's ``_apply_rotary_emb``, Qwen2-VL's mrope
sections), for ``refspec run --framework torch``. Written from the documents
(docs/apply_rotary_pos_emb.md, docs/rope_with_sin_cos_cache.md, docs/interleave_rope.md)
without refspec's arithmetic.

Inputs are widened to float32 (float64 cases stay float64), computed there, and the outputs
rounded once to the case dtype. The profile's argument checks stand in for the aclnn front end
(``refspec.ops.get(...).generation.check``), as in tests/impls/torch_forward.py.

``--impl tests/impls/torch_family.py`` uses the correct functions; ``...torch_family.py:NAME``
one of the deliberately broken variants in ``BROKEN``.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_forward import _check, _work, rotate_half, rotate_interleaved  # noqa: E402


def _rotate(x, mode: str):
    if mode == "half":
        return rotate_half(x)
    if mode == "interleave":
        return rotate_interleaved(x)
    h1, h2 = x.chunk(2, dim=-1)                          # quarter: each half by halves
    return torch.cat((rotate_half(h1), rotate_half(h2)), dim=-1)


class TorchFamily:
    """The forwards of the family, correct or with one deliberate ``bug``."""

    def __init__(self, bug: str | None = None):
        self.bug = bug

    def _embed(self, x, cos, sin, mode):
        w, c, s = _work(x), _work(cos), _work(sin)
        if self.bug == "sin_sign":
            s = -s
        return (w * c + _rotate(w, mode) * s).to(x.dtype)

    def apply_rotary_pos_emb_v2(self, query, key, cos, sin, layout=1, rotary_mode="half", *,
                                soc=None):
        op = "apply_rope_v2"
        _check(op, {"query": query, "key": key, "cos": cos, "sin": sin},
               {"layout": layout, "rotary_mode": rotary_mode}, soc)
        return (self._embed(query, cos, sin, rotary_mode),
                key.clone() if self.bug == "key_untouched" else self._embed(key, cos, sin,
                                                                             rotary_mode))

    def apply_rotary_pos_emb(self, query, key, cos, sin, layout=1, *, soc=None):
        _check("apply_rope", {"query": query, "key": key, "cos": cos, "sin": sin},
               {"layout": layout}, soc)
        return (self._embed(query, cos, sin, "half"), self._embed(key, cos, sin, "half"))


_CORRECT = TorchFamily()
apply_rotary_pos_emb = _CORRECT.apply_rotary_pos_emb
apply_rotary_pos_emb_v2 = _CORRECT.apply_rotary_pos_emb_v2

#: the deliberately broken variants: ``--impl torch_family.py:NAME``
BROKEN = {name: TorchFamily(name) for name in ("sin_sign", "key_untouched")}
sin_sign = BROKEN["sin_sign"]
key_untouched = BROKEN["key_untouched"]

__all__ = ["TorchFamily", "BROKEN", "apply_rotary_pos_emb", "apply_rotary_pos_emb_v2"]
