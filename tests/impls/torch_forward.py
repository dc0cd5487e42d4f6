"""A PyTorch implementation of the two forwards in the common formulation (rotate-half and
interleaved RoPE, ``torch.nn.functional.layer_norm``), for ``refspec run --framework torch
--autograd``: its backward is PyTorch autograd's. Written from the documented formulas
(docs/rope.md §2, docs/norm_rope_concat.md §1) without refspec's arithmetic.

Inputs are widened to float32 (float64 cases stay float64), computed there, and the outputs
rounded once to the case dtype, as the vendor kernels do. The argument checks of the chip
profile stand in for the aclnn front end that rejects arguments before a kernel runs; they are
the operator records' checks (``refspec.ops.get(...).check``), since the numerics are what an
implementation test is about.

``--impl tests/impls/torch_forward.py`` uses the correct functions; ``...torch_forward.py:NAME``
one of the deliberately broken variants in ``BROKEN``, or ``NN_LAYER_NORM``, the forward a model
built on ``torch.nn.LayerNorm`` has (float32 statistics, none returned).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from refspec import ops
from refspec.ops.record import Call

_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
          torch.bfloat16: ml_dtypes.bfloat16}


def _numpy_dtype(dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (bfloat16 as ml_dtypes')."""
    return _NUMPY.get(dtype) or torch.empty((), dtype=dtype).numpy().dtype


def _check(op: str, tensors: dict, attrs: dict, soc) -> None:
    """The profile's argument checks on arrays of the tensors' shapes and dtypes."""
    arrays = {k: None if t is None else np.broadcast_to(np.zeros((), _numpy_dtype(t.dtype)),
                                                        tuple(t.shape))
              for k, t in tensors.items()}
    ops.get(op).generation.check(Call(arrays, attrs, soc))


def _work(t: torch.Tensor) -> torch.Tensor:
    return t.double() if t.dtype == torch.float64 else t.float()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def layer_norm(x, weight, bias, eps):
    """LayerNorm over D with its statistics in float64, returned (and used) as float32, as the
    device forward stores them: ``(out, mean, rstd)``, mean and rstd of shape (B, S, N, 1).
    float64 keeps the variance of large inputs finite; using the float32 statistics in ``xhat``
    makes the backward autograd derives the one at the statistics the forward returns."""
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    rstd = ((x64 - mean) ** 2).mean(-1, keepdim=True).add(eps).rsqrt()
    # the float32 values, with the float64 gradient (a float32 cast in the graph would
    # overflow the gradient of rstd for inputs near the float32 maximum)
    mean_r = mean + (mean.float().double() - mean).detach()
    rstd_r = rstd + (rstd.float().double() - rstd).detach()
    out = (x64 - mean_r) * rstd_r
    if weight is not None:
        out = out * weight.double() + bias.double()
    return out.to(x.dtype), mean_r.detach().float(), rstd_r.detach().float()


class TorchForwards:
    """The forwards, correct or with one deliberate ``bug``. ``nn_layer_norm``: LayerNorm by
    ``torch.nn.functional.layer_norm`` in float32 (float64 for float64 cases), as a model's
    ``torch.nn.LayerNorm`` computes it: it gives no statistics, so a training-mode forward
    returns none."""

    def __init__(self, bug: str | None = None, nn_layer_norm: bool = False):
        self.bug = bug
        self.nn_layer_norm = nn_layer_norm

    def _rotate(self, x, mode):
        if self.bug == "swapped_halves" and mode == 0:
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((x1, -x2), dim=-1)
        if self.bug == "lost_minus" and mode in (0, 1):
            return _lost_minus(x, mode)
        if mode == 0:
            return rotate_half(x)
        if mode == 1:
            return rotate_interleaved(x)
        if mode == 2:                                   # quarter: rotate each half by halves
            h1, h2 = x.chunk(2, dim=-1)
            return torch.cat((rotate_half(h1), rotate_half(h2)), dim=-1)
        raise ValueError(f"mode {mode}")

    def _rope(self, x, cos, sin, mode):
        if mode == 3:                                   # interleave-half: even positions first
            parts = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
            sin_part = rotate_half(parts)
            if self.bug == "wrong_sin_partner":
                sin = sin.roll(1, dims=-1)
            return parts * cos + sin_part * sin
        rot = self._rotate(x, mode)
        if self.bug == "wrong_sin_partner":
            sin = sin.flip(-1)
        return x * cos + rot * sin

    def rotary_position_embedding(self, x, cos, sin, mode=0, *, soc=None):
        _check("rope", {"x": x, "cos": cos, "sin": sin}, {"mode": mode}, soc) \
            if self.bug != "missing_rejection" else None
        y = self._rope(_work(x), _work(cos), _work(sin), int(mode))
        return y.to(x.dtype)

    def norm_rope_concat(self, query, key, value, encoder_query=None, encoder_key=None,
                         encoder_value=None, norm_query_weight=None, norm_query_bias=None,
                         norm_key_weight=None, norm_key_bias=None, norm_added_query_weight=None,
                         norm_added_query_bias=None, norm_added_key_weight=None,
                         norm_added_key_bias=None, rope_sin=None, rope_cos=None, norm_type=0,
                         norm_added_type=0, rope_type=0, concat_order=0, eps=1e-5,
                         is_training=False, *, soc=None):
        args = {k: v for k, v in locals().items() if isinstance(v, torch.Tensor) or v is None}
        args.pop("soc", None)
        attrs = dict(norm_type=norm_type, norm_added_type=norm_added_type, rope_type=rope_type,
                     concat_order=concat_order, eps=eps, is_training=is_training)
        if self.bug != "missing_rejection":
            _check("nrc", args, attrs, soc)
        D = query.shape[-1]
        if self.bug in ("eps_1e-5", "eps_1e-6"):        # eps hard-coded, the case's ignored
            eps = float(self.bug[4:])

        stats = []

        def norm(x, kind, w, b):
            if x is None:
                return None
            x = _work(x)
            if kind == 0:
                return x
            if self.nn_layer_norm:
                return torch.nn.functional.layer_norm(
                    x, (D,), _work(w) if kind == 2 else None, _work(b) if kind == 2 else None, eps)
            out, mean, rstd = layer_norm(x, w if kind == 2 else None, b if kind == 2 else None,
                                         eps)
            stats.extend((mean, rstd))
            return out

        def concat(a, b):
            parts = [p for p in ((a, b) if concat_order == 0 else (b, a)) if p is not None]
            return torch.cat(parts, dim=1).transpose(1, 2)        # BSND -> BNSD

        def rope(h):
            if rope_type == 0:
                return h
            Sr = rope_sin.shape[0]
            cos, sin = _work(rope_cos), _work(rope_sin)
            head = self._rope(h[:, :, :Sr], cos, sin, 1 if rope_type == 1 else 0)
            return torch.cat((head, h[:, :, Sr:]), dim=2)

        q = rope(concat(norm(query, norm_type, norm_query_weight, norm_query_bias),
                        norm(encoder_query, norm_added_type, norm_added_query_weight,
                             norm_added_query_bias)))
        k = rope(concat(norm(key, norm_type, norm_key_weight, norm_key_bias),
                        norm(encoder_key, norm_added_type, norm_added_key_weight,
                             norm_added_key_bias)))
        v = concat(_work(value), None if encoder_value is None else _work(encoder_value))
        outputs = tuple(t.to(query.dtype) for t in (q, k, v))
        if not is_training or self.nn_layer_norm:
            return outputs
        named = dict(zip(_stat_names(norm_type, norm_added_type, encoder_query, encoder_key),
                         stats))
        return {**dict(zip(("query_output", "key_output", "value_output"), outputs)), **named}


def _stat_names(norm_type, norm_added_type, encoder_query, encoder_key):
    """The statistics' names in the order ``norm`` above computes them."""
    names = []
    for stream, kind, present in (("query", norm_type, True),
                                  ("added_query", norm_added_type, encoder_query is not None),
                                  ("key", norm_type, True),
                                  ("added_key", norm_added_type, encoder_key is not None)):
        if kind and present:
            names += [f"norm_{stream}_mean", f"norm_{stream}_rstd"]
    return names


def _lost_minus(x, mode):
    """The rotation with its minus sign lost: cat(x2, x1) instead of cat(-x2, x1)."""
    if mode == 1:
        return torch.stack((x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x2, x1), dim=-1)


CORRECT = TorchForwards()
rotary_position_embedding = CORRECT.rotary_position_embedding
norm_rope_concat = CORRECT.norm_rope_concat

BROKEN = ("swapped_halves", "wrong_sin_partner", "lost_minus", "missing_rejection", "eps_1e-5",
          "eps_1e-6")
#: a forward whose LayerNorm is torch.nn.functional.layer_norm in float32 (no statistics)
NN_LAYER_NORM = TorchForwards(nn_layer_norm=True)
#: the same with eps hard-coded to 1e-5 or 1e-6 instead of the case's
NN_LAYER_NORM_EPS_1E_5 = TorchForwards("eps_1e-5", nn_layer_norm=True)
NN_LAYER_NORM_EPS_1E_6 = TorchForwards("eps_1e-6", nn_layer_norm=True)
SWAPPED_HALVES = TorchForwards("swapped_halves")
WRONG_SIN_PARTNER = TorchForwards("wrong_sin_partner")
LOST_MINUS = TorchForwards("lost_minus")
MISSING_REJECTION = TorchForwards("missing_rejection")
