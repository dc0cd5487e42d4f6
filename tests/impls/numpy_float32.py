"""A NumPy float32 implementation of the operators under the spec's names and signatures,
for ``refspec run --framework numpy``: the device-like implementations of
``tests/impls/implementations.py`` (float32 arithmetic in another order than the spec's, one rounding)
behind the profile's argument checks (the operator records' own, standing in for the aclnn
front end).

``--impl tests/impls/numpy_float32.py`` gives the two backward functions (the module has no
forward: its forward cases are not run); ``...numpy_float32.py:EVERY`` all of them, the
KV-cache operators too (``kv_kernels.py``: the caches updated in place);
``...numpy_float32.py:NAME`` a deliberately broken variant of all of them (``BROKEN``, and the
broken cache kernels ``CACHE_BUGS``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import implementations  # noqa: E402  (tests/impls/implementations.py)
import kv_kernels  # noqa: E402  (tests/impls/kv_kernels.py)

from refspec import ops  # noqa: E402
from refspec.ops.record import Call  # noqa: E402


class NumpyFloat32:
    def __init__(self, bug: str | None = None):
        self.bug = bug

    def _checked(self, op: str, inputs: dict, attrs: dict, soc):
        if self.bug != "missing_rejection":
            ops.get(op).generation.check(Call(inputs, attrs, soc))
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

    def rotary_position_embedding(self, x, cos, sin, mode=0, *, soc=None):
        return self._checked("rope", {"x": x, "cos": cos, "sin": sin}, {"mode": mode}, soc)["y"]

    def norm_rope_concat(self, *, soc=None, norm_type=0, norm_added_type=0, rope_type=0,
                         concat_order=0, eps=1e-5, is_training=False, **tensors):
        attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                     concat_order=concat_order, eps=eps, is_training=is_training)
        return self._checked("nrc", tensors, attrs, soc)

    def apply_rotary_pos_emb_v2(self, query, key, cos, sin, layout=1, rotary_mode="half", *,
                                soc=None):
        out = self._checked("apply_rope_v2", {"query": query, "key": key, "cos": cos, "sin": sin},
                            {"layout": layout, "rotary_mode": rotary_mode}, soc)
        return out["query_out"], out["key_out"]

    def apply_rotary_pos_emb(self, query, key, cos, sin, layout=1, *, soc=None):
        out = self._checked("apply_rope", {"query": query, "key": key, "cos": cos, "sin": sin},
                            {"layout": layout}, soc)
        return out["query_out"], out["key_out"]

    def rope_with_sin_cos_cache(self, positions, query, key, cos_sin_cache, head_size,
                                mrope_section=None, is_neox_style=True, *, soc=None):
        out = self._checked("rope_cache", {"positions": positions, "query": query, "key": key,
                                           "cos_sin_cache": cos_sin_cache},
                            {"head_size": head_size, "mrope_section": mrope_section,
                             "is_neox_style": is_neox_style}, soc)
        return out["query_out"], out["key_out"]

    def interleave_rope(self, x, cos, sin, *, soc=None):
        return self._checked("interleave_rope", {"x": x, "cos": cos, "sin": sin}, {}, soc)["y"]

    # --- the KV-cache operators: the caches given are updated in place (kv_kernels.py) -------
    def kv_rms_norm_rope_cache(self, kv, gamma, cos, sin, index, k_cache, ckv_cache,
                               k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                               c_kv_offset=None, epsilon=1e-5, cache_mode="Norm",
                               is_output_kv=False, *, soc=None):
        t = dict(kv=kv, gamma=gamma, cos=cos, sin=sin, index=index, k_cache=k_cache,
                 ckv_cache=ckv_cache, k_rope_scale=k_rope_scale, c_kv_scale=c_kv_scale,
                 k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=None)
        return kv_kernels.kv_rms_norm_rope_cache(t, epsilon, cache_mode, is_output_kv, soc,
                                                 self.bug)

    def kv_rms_norm_rope_cache_v2(self, kv, gamma, cos, sin, index, k_cache, ckv_cache,
                                  k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                                  c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                                  is_output_kv=False, *, soc=None):
        t = dict(kv=kv, gamma=gamma, cos=cos, sin=sin, index=index, k_cache=k_cache,
                 ckv_cache=ckv_cache, k_rope_scale=k_rope_scale, c_kv_scale=c_kv_scale,
                 k_rope_offset=k_rope_offset, c_kv_offset=c_kv_offset, v=v)
        return kv_kernels.kv_rms_norm_rope_cache(t, epsilon, cache_mode, is_output_kv, soc,
                                                 self.bug, v2=True)

    def dequant_rope_quant_kvcache(self, x, cos, sin, k_cache, v_cache, indices, scale_k,
                                   scale_v, offset_k=None, offset_v=None, weight_scale=None,
                                   activation_scale=None, bias=None, *, soc=None, **attrs):
        t = dict(x=x, cos=cos, sin=sin, k_cache=k_cache, v_cache=v_cache, indices=indices,
                 scale_k=scale_k, scale_v=scale_v, offset_k=offset_k, offset_v=offset_v,
                 weight_scale=weight_scale, activation_scale=activation_scale, bias=bias)
        return kv_kernels.dequant_rope_quant_kvcache(t, attrs, soc, self.bug)

    def qkv_rms_norm_rope_cache(self, qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache,
                                k_scale=None, v_scale=None, k_offset=None, v_offset=None, *,
                                soc=None, **attrs):
        t = dict(qkv=qkv, q_gamma=q_gamma, k_gamma=k_gamma, cos=cos, sin=sin, index=index,
                 k_cache=k_cache, v_cache=v_cache, k_scale=k_scale, v_scale=v_scale,
                 k_offset=k_offset, v_offset=v_offset)
        return kv_kernels.qkv_rms_norm_rope_cache(t, attrs, soc, self.bug)


EVERY = NumpyFloat32()
rotary_position_embedding_grad = EVERY.rotary_position_embedding_grad
norm_rope_concat_backward = EVERY.norm_rope_concat_backward

BROKEN = ("swapped_halves", "wrong_sin_partner", "lost_minus", "dcos_wrong_axes",
          "missing_rejection")
SWAPPED_HALVES = NumpyFloat32("swapped_halves")
WRONG_SIN_PARTNER = NumpyFloat32("wrong_sin_partner")
LOST_MINUS = NumpyFloat32("lost_minus")
DCOS_WRONG_AXES = NumpyFloat32("dcos_wrong_axes")
MISSING_REJECTION = NumpyFloat32("missing_rejection")
#: a backward that recomputes mean and rstd with eps 1e-5 instead of taking its inputs
LN_RECOMPUTED_DEFAULT_EPS = NumpyFloat32("ln_recomputed_default_eps")
#: the broken cache kernels (kv_kernels.BUGS), by their names in capitals
CACHE_BUGS = {bug.upper(): NumpyFloat32(bug) for bug in kv_kernels.BUGS}
globals().update(CACHE_BUGS)
