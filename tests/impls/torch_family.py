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

    def rope_with_sin_cos_cache(self, positions, query, key, cos_sin_cache, head_size,
                                mrope_section=None, is_neox_style=True, *, soc=None):
        """vLLM's ``_apply_rotary_emb`` on the cache rows of the positions; in mrope mode
        Qwen2-VL's choice of the position row of each section."""
        _check("rope_cache", {"positions": positions, "query": query, "key": key,
                              "cos_sin_cache": cos_sin_cache},
               {"head_size": head_size, "mrope_section": mrope_section,
                "is_neox_style": is_neox_style}, soc)
        cos, sin = _work(cos_sin_cache[positions]).chunk(2, dim=-1)
        if mrope_section is not None:
            pick = 0 if self.bug == "one_position_row" else None
            cos, sin = (torch.cat([m[i if pick is None else pick] for i, m in
                                   enumerate(t.split(list(mrope_section), dim=-1))], dim=-1)
                        for t in (cos, sin))
        return (self._cache_embed(query, cos, sin, head_size, is_neox_style),
                self._cache_embed(key, cos, sin, head_size, is_neox_style))

    def _cache_embed(self, x, cos, sin, head_size, neox):
        T = x.shape[0]
        heads = x.view(T, -1, head_size)
        rotary = cos.shape[-1] * 2
        x_rot, x_pass = _work(heads[..., :rotary]), heads[..., rotary:]
        c, s = cos[:, None, :], sin[:, None, :]
        x1, x2 = x_rot.chunk(2, dim=-1) if neox else (x_rot[..., 0::2], x_rot[..., 1::2])
        o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
        out = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
        if self.bug == "pass_through_rotated":
            x_pass = -x_pass
        return torch.cat((out.to(x.dtype), x_pass), dim=-1).reshape(T, -1)

    def interleave_rope(self, x, cos, sin, *, soc=None):
        """The README's lines: q = x's pairs taken apart (reshape to (..., D/2, 2), swap the
        last two axes, reshape back), q*cos + rotate_half(q)*sin."""
        _check("interleave_rope", {"x": x, "cos": cos, "sin": sin}, {}, soc)
        q = x.reshape(*x.shape[:-1], -1, 2).transpose(-1, -2).reshape(x.shape)
        y = self._embed(q, cos, sin, "half")
        if self.bug == "interleaved_back":
            y = y.reshape(*x.shape[:-1], 2, -1).transpose(-1, -2).reshape(x.shape)
        return y


_CORRECT = TorchFamily()
apply_rotary_pos_emb = _CORRECT.apply_rotary_pos_emb
apply_rotary_pos_emb_v2 = _CORRECT.apply_rotary_pos_emb_v2
rope_with_sin_cos_cache = _CORRECT.rope_with_sin_cos_cache
interleave_rope = _CORRECT.interleave_rope

#: the deliberately broken variants: ``--impl torch_family.py:NAME``
BROKEN = {name: TorchFamily(name) for name in ("sin_sign", "key_untouched", "one_position_row",
                                               "pass_through_rotated", "interleaved_back")}
sin_sign = BROKEN["sin_sign"]
key_untouched = BROKEN["key_untouched"]
one_position_row = BROKEN["one_position_row"]
pass_through_rotated = BROKEN["pass_through_rotated"]
interleaved_back = BROKEN["interleaved_back"]

__all__ = ["TorchFamily", "BROKEN", "apply_rotary_pos_emb", "apply_rotary_pos_emb_v2",
           "rope_with_sin_cos_cache", "interleave_rope"]
