"""PyTorch autograd as an independent oracle (skipped when torch is not installed).

The forwards below are written directly from the documented formulas in torch (docs/rope.md §2 "Forward, per
mode"; docs/norm_rope_concat.md §1 "Forward dataflow"), without calling refspec; their gradients come from
autograd. Everything is float64 and compared with refspec's forward and backward: RoPE for every
mode and every layout/cos pattern, NormRopeConcat for all 54 attribute combinations with and
without encoder streams.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from spec_helpers import NRC_ATTRS, NRC_STREAMS, attrs_dict, nrc_forward_inputs, rope_case_params

torch = pytest.importorskip("torch")

F64 = np.float64
TOL = dict(rtol=1e-12, atol=1e-12)


# --- the forwards, from the spec text --------------------------------------------------------

def torch_rope(x, cos, sin, mode):
    if mode == 0:                                   # half
        x1, x2 = x.chunk(2, dim=-1)
        rot = torch.cat((-x2, x1), dim=-1)
        return x * cos + rot * sin
    if mode == 1:                                   # interleave
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rot = torch.stack((-x2, x1), dim=-1).reshape(x.shape)
        return x * cos + rot * sin
    if mode == 2:                                   # quarter
        x1, x2, x3, x4 = x.chunk(4, dim=-1)
        rot = torch.cat((-x2, x1, -x4, x3), dim=-1)
        return x * cos + rot * sin
    x1, x2 = x[..., 0::2], x[..., 1::2]             # interleave-half
    part1 = torch.cat((x1, x2), dim=-1)
    part2 = torch.cat((-x2, x1), dim=-1)
    return part1 * cos + part2 * sin


def torch_norm(x, norm_type, weight, bias, eps):
    if norm_type == 0:
        return x, None, None
    D = x.shape[-1]
    mean = x.sum(dim=-1, keepdim=True) / D
    var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / D
    rstd = 1.0 / torch.sqrt(var + eps)
    xhat = (x - mean) * rstd
    return (xhat * weight + bias if norm_type == 2 else xhat), mean, rstd


def torch_concat_rope(stream, encoder, order, rope_type, cos, sin):
    if encoder is not None:
        stream = torch.cat((stream, encoder) if order == 0 else (encoder, stream), dim=1)
    h = stream.permute(0, 2, 1, 3)                  # BSND -> BNSD
    if rope_type == 0 or cos is None:
        return h
    sr = cos.shape[0]
    mode = {1: 1, 2: 0}[rope_type]                  # ropeType 1 interleave, 2 half
    head = torch_rope(h[:, :, :sr], cos, sin, mode)
    return torch.cat((head, h[:, :, sr:]), dim=2)


def torch_nrc(t, a, eps=1e-5):
    normed, stats = {}, {}
    for stream, (attr, w, b, mean, rstd) in NRC_STREAMS.items():
        if t.get(stream) is None:
            normed[stream] = None
            continue
        normed[stream], stats[mean], stats[rstd] = torch_norm(t[stream], a[attr], t.get(w), t.get(b), eps)
    cos, sin = t.get("rope_cos"), t.get("rope_sin")
    q = torch_concat_rope(normed["query"], normed["encoder_query"], a["concat_order"], a["rope_type"], cos, sin)
    k = torch_concat_rope(normed["key"], normed["encoder_key"], a["concat_order"], a["rope_type"], cos, sin)
    v = torch_concat_rope(t["value"], t.get("encoder_value"), a["concat_order"], 0, None, None)
    return q, k, v, stats


# --- RoPE ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", (0, 1, 2, 3))
@pytest.mark.parametrize("layout, shape, cshape", rope_case_params(8))
def test_rope_against_autograd(rng, mode, layout, shape, cshape):
    x_np, dy_np = rng.uniform(-2, 2, shape), rng.uniform(-2, 2, shape)
    cos_np, sin_np = rng.uniform(-3, 4, cshape), rng.uniform(-4, 5, cshape)
    x, cos, sin = (torch.tensor(a, requires_grad=True) for a in (x_np, cos_np, sin_np))
    y = torch_rope(x, cos, sin, mode)
    y.backward(torch.tensor(dy_np))
    np.testing.assert_allclose(
        refspec.rotary_position_embedding(x_np, cos_np, sin_np, mode, out_dtype=F64),
        y.detach().numpy(), **TOL)
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy_np, cos_np, sin_np, x_np, mode,
                                                            out_dtype=F64)
    np.testing.assert_allclose(dx, x.grad.numpy(), **TOL)
    np.testing.assert_allclose(dcos, cos.grad.numpy(), **TOL)
    np.testing.assert_allclose(dsin, sin.grad.numpy(), **TOL)


# --- NormRopeConcat --------------------------------------------------------------------------

def nrc_case(rng, attrs_tuple, enc):
    a = attrs_dict(*attrs_tuple)
    inputs = nrc_forward_inputs(rng, b=2, n=3, d=8, sq=3, seq=2 * enc, sk=4, sek=3 * enc,
                                sr=3 if enc else 2, rope_type=a["rope_type"])
    return a, inputs


@pytest.mark.parametrize("enc", (False, True), ids=("noenc", "enc"))
@pytest.mark.parametrize("attrs", NRC_ATTRS, ids=lambda a: "nt{}-nat{}-rt{}-co{}".format(*a))
def test_norm_rope_concat_against_autograd(rng, attrs, enc):
    a, inputs = nrc_case(rng, attrs, enc)
    t = {k: torch.tensor(v, requires_grad=not k.startswith("rope_")) for k, v in inputs.items()}
    q, k, v, stats = torch_nrc(t, a)

    fwd = refspec.norm_rope_concat(**inputs, **a, is_training=True, out_dtype=F64)
    np.testing.assert_allclose(fwd.query_output, q.detach().numpy(), **TOL)
    np.testing.assert_allclose(fwd.key_output, k.detach().numpy(), **TOL)
    np.testing.assert_array_equal(fwd.value_output, v.detach().numpy())
    for name in refspec.NormRopeConcatOutputs._fields[3:]:
        got = getattr(fwd, name)
        assert (got is None) == (stats.get(name) is None), name
        if got is not None:
            np.testing.assert_allclose(got, stats[name].detach().numpy(), **TOL)

    grads = {f"grad_{n}_output": rng.standard_normal(o.shape) for n, o in
             (("query", q), ("key", k), ("value", v))}
    torch.autograd.backward((q, k, v), tuple(torch.tensor(g) for g in grads.values()))

    # the backward takes the statistics torch computed (an independent source of mean/rstd)
    kw = {n: inputs[n] for n in ("query", "key", "encoder_query", "encoder_key", "rope_sin",
                                 "rope_cos", "norm_query_weight", "norm_key_weight",
                                 "norm_added_query_weight", "norm_added_key_weight") if n in inputs}
    kw.update({n: s.detach().numpy() for n, s in stats.items() if s is not None})
    bwd = refspec.norm_rope_concat_backward(**kw, **grads, **a, out_dtype=F64)
    for name, tensor in t.items():
        if name.startswith("rope_"):
            continue
        got = getattr(bwd, f"grad_{name}")
        auto = tensor.grad
        if got is None:      # not produced: the forward does not use that tensor
            assert auto is None or not auto.any(), name
        else:
            expected = np.zeros(got.shape) if auto is None else auto.numpy()
            np.testing.assert_allclose(got, expected, **TOL, err_msg=name)
