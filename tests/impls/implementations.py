"""Device-like implementations of the operators, and deliberately broken variants.

Written from the documented formulas (docs/rope.md §1-§3, §6; docs/norm_rope_concat.md §1-§2), independent
of refspec's code: inputs widened to float32, float32 arithmetic in another valid order (partner
index tables instead of chunk/cat, the sin term added first, float32 reductions), one rounding
to the output dtype: half to even for RotaryPositionEmbedding(+Grad), half away from zero for
NormRopeConcat(+Backward) (errata E12).

``run(op, params, inputs, bug=None)`` returns {output name: array}. ``ROPE_BUGS`` and
``NRC_BUGS`` name the deliberate bugs; ``ln_recomputed_default_eps`` (the backward recomputes
mean and rstd with eps 1e-5 instead of taking them) is not among them: it is right wherever the
statistics were computed with that eps, and only goldens of another eps catch it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from refspec import ops

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32

ROPE_BUGS = ("swapped_halves", "wrong_sin_partner", "lost_minus", "interleave_shift",
             "dcos_wrong_axes", "dcos_dsin_swapped", "layout_transposed", "truncation")
NRC_BUGS = ("sr_off_by_one", "concat_order_reversed", "ln_recomputed_no_eps",
            "weight_grad_one_stream", "value_from_key", "truncation", "lost_minus",
            "interleave_shift")


# --- rounding float32 -> output dtype ----------------------------------------------------------

def _to16_rne(x32, dtype):
    return x32.astype(dtype)


def round_half_away(x32: np.ndarray, dtype) -> np.ndarray:
    """float32 -> dtype, to nearest, ties away from zero."""
    dtype = np.dtype(dtype)
    x32 = np.asarray(x32, dtype=F32)
    if dtype in (np.float32, np.float64):
        return x32.astype(dtype)
    if dtype == BF16:
        bits = x32.view(np.uint32)
        sign = bits & np.uint32(0x80000000)
        mag = bits & np.uint32(0x7FFFFFFF)
        nan = mag > np.uint32(0x7F800000)
        mag = (mag + np.uint32(0x8000)) & np.uint32(0xFFFF0000)
        out = ((sign | mag) >> np.uint32(16)).astype(np.uint16)
        out[nan] = np.uint16(0x7FC0)
        return out.view(BF16)
    with np.errstate(over="ignore"):
        r = x32.astype(dtype)
    x64 = x32.astype(np.float64)
    y64 = r.astype(np.float64)
    toward = np.nextafter(r, np.where(x64 > y64, np.inf, -np.inf).astype(dtype))
    z64 = toward.astype(np.float64)
    with np.errstate(invalid="ignore"):
        tie = (x64 != y64) & np.isfinite(y64) & np.isfinite(x64) & (np.abs(x64 - y64) == np.abs(z64 - x64))
        away = tie & (np.abs(z64) > np.abs(y64))
    r = r.copy()
    r[away] = toward[away]
    return r


def round_toward_zero(x32: np.ndarray, dtype) -> np.ndarray:
    """float32 -> dtype by truncation (the rounding bug)."""
    dtype = np.dtype(dtype)
    x32 = np.asarray(x32, dtype=F32)
    if dtype in (np.float32, np.float64):
        return x32.astype(dtype)
    if dtype == BF16:
        return (x32.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(BF16)
    with np.errstate(over="ignore"):
        r = x32.astype(dtype)
    over = np.abs(r.astype(np.float64)) > np.abs(x32.astype(np.float64))
    r = r.copy()
    r[over] = np.nextafter(r[over], np.zeros(1, dtype))
    return r


# --- RoPE partner tables (docs/rope.md §1-§3, read element by element) ---------------------------------

def grad_tables(mode: int, D: int):
    """dx[o] = cos[A[o]]*dy[A[o]] + sgn[o]*sin[P[o]]*dy[P[o]]."""
    h, q = D // 2, D // 4
    o = np.arange(D)
    if mode == 0:
        A = o
        P = np.where(o < h, o + h, o - h)
        sgn = np.where(o < h, 1.0, -1.0)
    elif mode == 1:
        A = o
        P = o ^ 1
        sgn = np.where(o % 2 == 0, 1.0, -1.0)
    elif mode == 2:
        A = o
        first = (o % (2 * q)) < q
        P = np.where(first, o + q, o - q)
        sgn = np.where(first, 1.0, -1.0)
    elif mode == 3:
        k = o // 2
        even = o % 2 == 0
        A = np.where(even, k, k + h)
        P = np.where(even, k + h, k)
        sgn = np.where(even, 1.0, -1.0)
    else:
        raise ValueError(mode)
    return A, P, sgn.astype(F32)


def forward_tables(mode: int, D: int):
    """y[i] = cos[i]*x[X1[i]] + sin[i]*s2[i]*x[X2[i]] (part1 = x[X1], part2 = s2*x[X2])."""
    h, q = D // 2, D // 4
    i = np.arange(D)
    if mode == 0:
        X1, X2, s2 = i, np.where(i < h, i + h, i - h), np.where(i < h, -1.0, 1.0)
    elif mode == 1:
        X1, X2, s2 = i, i ^ 1, np.where(i % 2 == 0, -1.0, 1.0)
    elif mode == 2:
        first = (i % (2 * q)) < q
        X1, X2, s2 = i, np.where(first, i + q, i - q), np.where(first, -1.0, 1.0)
    elif mode == 3:
        X1 = np.where(i < h, 2 * i, 2 * (i - h) + 1)
        X2 = np.where(i < h, 2 * i + 1, 2 * (i - h))
        s2 = np.where(i < h, -1.0, 1.0)
    else:
        raise ValueError(mode)
    return X1, X2, s2.astype(F32)


def _reduce_to(t32: np.ndarray, shape, skip_first=False) -> np.ndarray:
    """float32 sum over the axes where ``shape`` is 1 and t is not, one axis at a time from the
    last (another order than a pairwise sum over all at once)."""
    dims = [i for i, (a, b) in enumerate(zip(t32.shape, shape)) if b == 1 and a != 1]
    out = t32
    if skip_first and dims:
        first = dims.pop(0)
        out = np.take(out, [0], axis=first)
    for ax in reversed(dims):
        out = np.add.reduce(out, axis=ax, dtype=F32, keepdims=True)
    return out


def _f32(a):
    return None if a is None else np.asarray(a).astype(F32)


def rope_grad(dy, cos, sin, x=None, mode=0, bug=None):
    dt = np.asarray(dy).dtype
    dy, c, s, x32 = _f32(dy), _f32(cos), _f32(sin), _f32(x)
    D = dy.shape[-1]
    if bug == "interleave_shift":
        dy, c, s = (np.roll(t, -1, axis=-1) for t in (dy, c, s))
        x32 = None if x32 is None else np.roll(x32, -1, axis=-1)
    A, P, sgn = grad_tables(mode, D)
    SI = np.where(sgn > 0, A, P) if bug == "wrong_sin_partner" else P   # sin1 where sin2 belongs
    if bug == "lost_minus":
        sgn = np.abs(sgn)
    cb = np.broadcast_to(c, dy.shape)
    sb = np.broadcast_to(s, dy.shape)
    sin_term = (sb[..., SI] * dy[..., P]) * sgn
    dx = sin_term + cb[..., A] * dy[..., A]
    out = {"dx": dx}
    if x32 is not None:
        X1, X2, s2 = forward_tables(mode, D)
        skip = bug == "dcos_wrong_axes"
        out["dcos"] = _reduce_to(dy * x32[..., X1], c.shape, skip)
        out["dsin"] = _reduce_to(dy * (x32[..., X2] * s2), c.shape, skip)
        if bug == "dcos_dsin_swapped":
            out["dcos"], out["dsin"] = out["dsin"], out["dcos"]
    if bug == "interleave_shift":
        out = {k: np.roll(v, 1, axis=-1) for k, v in out.items()}
    if bug == "swapped_halves":
        out["dx"] = np.concatenate([out["dx"][..., D // 2:], out["dx"][..., : D // 2]], axis=-1)
    rnd = round_toward_zero if bug == "truncation" else _to16_rne
    res = {k: rnd(v, dt) for k, v in out.items()}
    if bug == "layout_transposed":
        a = res["dx"]
        res["dx"] = np.ascontiguousarray(np.swapaxes(a, 0, 1) if a.ndim == 3 else np.swapaxes(a, 1, 2)).reshape(a.shape)
    return res


def rope_forward(x, cos, sin, mode=0, bug=None):
    dt = np.asarray(x).dtype
    x32, c, s = _f32(x), _f32(cos), _f32(sin)
    X1, X2, s2 = forward_tables(mode, x32.shape[-1])
    if bug == "lost_minus":
        s2 = np.abs(s2)
    y = np.broadcast_to(s, x32.shape) * (x32[..., X2] * s2) + np.broadcast_to(c, x32.shape) * x32[..., X1]
    rnd = round_toward_zero if bug == "truncation" else _to16_rne
    return {"y": rnd(y, dt)}


# --- the RoPE family's forwards (docs/apply_rotary_pos_emb.md, ...) ---------------------------------

_ROTARY_MODE = {"half": 0, "interleave": 1, "quarter": 2}


def apply_rope(query, key, cos, sin, rotary_mode="half", bug=None):
    """ApplyRotaryPosEmb(V2): query and key each the RoPE forward of the mode, one table."""
    mode = _ROTARY_MODE[rotary_mode]
    return {"query_out": rope_forward(query, cos, sin, mode, bug)["y"],
            "key_out": rope_forward(key, cos, sin, mode, bug)["y"]}


def rope_cache(positions, query, key, cache, head_size, mrope_section=None, neox=True,
               bug=None):
    """RopeWithSinCosCache: each token's cache row, split into cos and sin halves (in mrope
    mode section j from position row j), o1 = x1*cos - x2*sin and o2 = x2*cos + x1*sin on the
    pairs of each head's rotary prefix (halves for GPT-NeoX, neighbours for GPT-J), the rest of
    the head copied (docs/rope_with_sin_cos_cache.md §1)."""
    c32 = _f32(cache)
    half = c32.shape[-1] // 2
    rows = c32[np.asarray(positions)]                    # (T, R) or (3, T, R)
    if mrope_section is not None:
        owner = np.repeat(np.arange(3), list(mrope_section))   # the position row of each angle
        rows = np.concatenate([rows[owner, :, np.arange(half)].T,
                               rows[owner, :, half + np.arange(half)].T], axis=-1)
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    outs = []
    for x in (query, key):
        dt = np.asarray(x).dtype
        h = _f32(x).reshape(x.shape[0], -1, head_size).copy()
        i1 = np.arange(half) if neox else 2 * np.arange(half)
        i2 = i1 + half if neox else i1 + 1
        x1, x2 = h[..., i1], h[..., i2]
        sign = 1 if bug == "lost_minus" else -1
        h[..., i1] = sign * (sin * x2) + cos * x1
        h[..., i2] = sin * x1 + cos * x2
        y = (round_toward_zero if bug == "truncation" else _to16_rne)(h.reshape(x.shape), dt)
        outs.append(y)
    return {"query_out": outs[0], "key_out": outs[1]}


# --- NormRopeConcat(+Backward) (docs/norm_rope_concat.md §1, §2) --------------------------------------

_STREAMS = (("query", "norm_type", "norm_query"), ("key", "norm_type", "norm_key"),
            ("encoder_query", "norm_added_type", "norm_added_query"),
            ("encoder_key", "norm_added_type", "norm_added_key"))
_ROPE_MODE = {1: 1, 2: 0}     # ropeType 1 interleave = mode 1; ropeType 2 half = mode 0


def _rope_rows_grad(g, rope_type, rcos, rsin, bug):
    """RoPE backward on the first Sr positions of a (B, N, L, D) float32 gradient."""
    if rope_type == 0:
        return g
    Sr = rcos.shape[0] - (1 if bug == "sr_off_by_one" else 0)
    if Sr <= 0:
        return g
    head = g[:, :, :Sr]
    c, s = rcos[None, None, :Sr], rsin[None, None, :Sr]
    D = g.shape[-1]
    if bug == "interleave_shift" and rope_type == 1:
        head, c, s = (np.roll(t, -1, axis=-1) for t in (head, c, s))
    A, P, sgn = grad_tables(_ROPE_MODE[rope_type], D)
    if bug == "lost_minus":
        sgn = np.abs(sgn)
    cb, sb = np.broadcast_to(c, head.shape), np.broadcast_to(s, head.shape)
    new = (sb[..., P] * head[..., P]) * sgn + cb[..., A] * head[..., A]
    if bug == "interleave_shift" and rope_type == 1:
        new = np.roll(new, 1, axis=-1)
    out = g.copy()
    out[:, :, :Sr] = new
    return out


def _split(g, s_stream, s_enc, order):
    if order == 0:
        return g[:, :, :s_stream], g[:, :, s_stream:s_stream + s_enc]
    return g[:, :, s_enc:s_enc + s_stream], g[:, :, :s_enc]


def nrc_backward(inputs: dict, attrs: dict, dtype, bug=None) -> dict:
    t = {k: _f32(v) for k, v in inputs.items() if v is not None}
    nt, nat = int(attrs.get("norm_type", 0)), int(attrs.get("norm_added_type", 0))
    rt, order = int(attrs.get("rope_type", 0)), int(attrs.get("concat_order", 0))
    if bug == "concat_order_reversed":
        order = 1 - order
    D = t["query"].shape[-1]
    Sq, Sk = t["query"].shape[1], t["key"].shape[1]
    Seq = t["encoder_query"].shape[1] if "encoder_query" in t else 0
    Sek = t["encoder_key"].shape[1] if "encoder_key" in t else 0
    rc, rs = t.get("rope_cos"), t.get("rope_sin")
    g = {}
    for out_name, stream, enc, s1, s2 in (("grad_query_output", "query", "encoder_query", Sq, Seq),
                                          ("grad_key_output", "key", "encoder_key", Sk, Sek)):
        rot = _rope_rows_grad(t[out_name], rt, rc, rs, bug)
        a, b = _split(rot, s1, s2, order)
        g[stream], g[enc] = a.transpose(0, 2, 1, 3), b.transpose(0, 2, 1, 3)
    vsrc = t["grad_key_output"] if bug == "value_from_key" else t["grad_value_output"]
    va, vb = _split(vsrc, Sk, Sek, order)
    out = {"grad_value": va.transpose(0, 2, 1, 3)}
    if Sek:
        out["grad_encoder_value"] = vb.transpose(0, 2, 1, 3)
    for stream, type_attr, prefix in _STREAMS:
        typ = nt if type_attr == "norm_type" else nat
        present = stream in t
        if typ == 2:
            out[f"grad_{prefix}_weight"] = np.zeros(D, F32)
            out[f"grad_{prefix}_bias"] = np.zeros(D, F32)
        if not present:
            continue
        gs = np.ascontiguousarray(g[stream])
        if typ == 0:
            out[f"grad_{stream}"] = gs
            continue
        x = t[stream]
        if bug in ("ln_recomputed_no_eps", "ln_recomputed_default_eps"):
            mean = np.add.reduce(x, axis=-1, dtype=F32, keepdims=True) / F32(D)
            var = np.add.reduce((x - mean) ** 2, axis=-1, dtype=F32, keepdims=True) / F32(D)
            eps = F32(1e-5 if bug == "ln_recomputed_default_eps" else 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                rstd = F32(1) / np.sqrt(var + eps)
        else:
            mean, rstd = t[f"{prefix}_mean"], t[f"{prefix}_rstd"]
        with np.errstate(invalid="ignore"):
            xhat = (x - mean) * rstd
        if typ == 2:
            gw = gs * t[f"{prefix}_weight"]
            out[f"grad_{prefix}_bias"] = np.add.reduce(gs.reshape(-1, D), axis=0, dtype=F32)
            out[f"grad_{prefix}_weight"] = np.add.reduce((gs * xhat).reshape(-1, D), axis=0, dtype=F32)
        else:
            gw = gs
        m1 = np.add.reduce(gw, axis=-1, dtype=F32, keepdims=True) / F32(D)
        m2 = np.add.reduce(gw * xhat, axis=-1, dtype=F32, keepdims=True) / F32(D)
        out[f"grad_{stream}"] = (gw - (m1 + xhat * m2)) * rstd
    if bug == "weight_grad_one_stream":
        for a, b in (("norm_query", "norm_key"), ("norm_added_query", "norm_added_key")):
            for kind in ("weight", "bias"):
                if f"grad_{a}_{kind}" in out and f"grad_{b}_{kind}" in out:
                    out[f"grad_{b}_{kind}"] = out[f"grad_{a}_{kind}"].copy()
    rnd = round_toward_zero if bug == "truncation" else round_half_away
    return {k: rnd(v, dtype) for k, v in out.items()}


def _layer_norm_stats(x, eps, D):
    """Two-pass mean and rstd in float32; rows with huge values are first scaled by their
    largest magnitude so that neither the sum nor the squares overflow (a valid float32 order)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        scale = np.max(np.abs(x), axis=-1, keepdims=True)
        big = scale > F32(2.0 ** 60)
        scale = np.where(big, scale, F32(1))
        xs = x / scale
        mean_s = np.add.reduce(xs, axis=-1, dtype=F32, keepdims=True) / F32(D)
        d = xs - mean_s
        var_s = np.add.reduce(d * d, axis=-1, dtype=F32, keepdims=True) / F32(D)
        rstd_big = (F32(1) / scale) / np.sqrt(var_s + eps / (scale * scale))
        rstd = np.where(big, rstd_big, F32(1) / np.sqrt(var_s + eps))
    return mean_s * scale, rstd.astype(F32)


def nrc_forward(inputs: dict, attrs: dict, dtype, bug=None) -> dict:
    t = {k: _f32(v) for k, v in inputs.items() if v is not None}
    nt, nat = int(attrs.get("norm_type", 0)), int(attrs.get("norm_added_type", 0))
    rt, order = int(attrs.get("rope_type", 0)), int(attrs.get("concat_order", 0))
    eps = F32(attrs.get("eps", 1e-5))
    training = bool(attrs.get("is_training", False))
    D = t["query"].shape[-1]
    normed, stats = {}, {}
    for stream, type_attr, prefix in _STREAMS:
        typ = nt if type_attr == "norm_type" else nat
        if stream not in t:
            continue
        x = t[stream]
        if typ == 0:
            normed[stream] = x
            continue
        mean, rstd = _layer_norm_stats(x, eps, D)
        y = (x - mean) * rstd
        if typ == 2:
            y = t[f"{prefix}_bias"] + y * t[f"{prefix}_weight"]
        normed[stream] = y
        if training:
            stats[f"{prefix}_mean"], stats[f"{prefix}_rstd"] = mean, rstd
    out = {}
    for name, stream, enc in (("query_output", "query", "encoder_query"),
                              ("key_output", "key", "encoder_key"),
                              ("value_output", "value", "encoder_value")):
        a = normed.get(stream, t.get(stream))
        b = normed.get(enc, t.get(enc))
        h = a if b is None else np.concatenate((a, b) if order == 0 else (b, a), axis=1)
        h = np.ascontiguousarray(h.transpose(0, 2, 1, 3))
        if name != "value_output" and rt:
            Sr = t["rope_cos"].shape[0]
            X1, X2, s2 = forward_tables(_ROPE_MODE[rt], D)
            c, s = t["rope_cos"][None, None], t["rope_sin"][None, None]
            head = h[:, :, :Sr]
            h[:, :, :Sr] = np.broadcast_to(s, head.shape) * (head[..., X2] * s2) + \
                np.broadcast_to(c, head.shape) * head[..., X1]
        out[name] = h
    res = {k: round_half_away(v, dtype) for k, v in out.items()}
    res.update({k: v.astype(F32) for k, v in stats.items()})
    return res


def attrs_of(case) -> dict:
    """The spec's attribute values of a golden case (its record converts its parameters)."""
    return ops.get(case.op).attrs_of(case.params)


def run(op: str, attrs: dict, inputs: dict, bug=None, soc=None) -> dict:
    """Outputs of the device-like implementation of ``op`` (an operator's id or function name)
    with the spec's attributes ``attrs`` (on the chip profile ``soc``, which the KV-cache
    operators' front end needs). Cases in float64 (the math-only profile; no device has it)
    run the same code in float64 arithmetic."""
    global F32
    inputs = {k: v for k, v in inputs.items() if v is not None}
    record = ops.get(op)
    if record.in_place:                       # kv_kernels.py: the caches updated in place
        return _run_kv(record, attrs, inputs, bug, soc)
    wide = any(np.asarray(v).dtype == np.float64 for v in inputs.values())
    saved, F32 = F32, (np.float64 if wide else np.float32)
    try:
        return _run(record.function, attrs, inputs, bug)
    finally:
        F32 = saved


def _run_kv(record, attrs: dict, inputs: dict, bug, soc) -> dict:
    """A KV-cache operator of kv_kernels.py on copies of the caches; its outputs by name."""
    import kv_kernels
    t = {n: inputs.get(n) for n in record.input_names}
    for name in record.in_place:
        t[name] = np.array(t[name], copy=True)
    fn = record.function
    if fn.startswith("kv_rms_norm_rope_cache"):
        out = kv_kernels.kv_rms_norm_rope_cache(
            {**t, "v": t.get("v")}, attrs.get("epsilon", 1e-5), attrs.get("cache_mode", "Norm"),
            attrs.get("is_output_kv", False), soc, bug, v2=fn.endswith("_v2"))
    elif fn == "dequant_rope_quant_kvcache":
        out = kv_kernels.dequant_rope_quant_kvcache(t, attrs, soc, bug)
    else:
        out = kv_kernels.qkv_rms_norm_rope_cache(t, attrs, soc, bug)
    return {n: v for n, v in zip(record.output_names, out) if v is not None}


def _run(op, attrs, inputs, bug):
    if op == "rotary_position_embedding_grad":
        return rope_grad(inputs["dy"], inputs["cos"], inputs["sin"], inputs.get("x"),
                         int(attrs["mode"]), bug)
    if op == "rotary_position_embedding":
        return rope_forward(inputs["x"], inputs["cos"], inputs["sin"], int(attrs["mode"]), bug)
    if op == "norm_rope_concat_backward":
        return nrc_backward(inputs, attrs, np.asarray(inputs["grad_query_output"]).dtype, bug)
    if op == "norm_rope_concat":
        return nrc_forward(inputs, attrs, np.asarray(inputs["query"]).dtype, bug)
    if op in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_v2"):
        return apply_rope(inputs["query"], inputs["key"], inputs["cos"], inputs["sin"],
                          attrs.get("rotary_mode", "half"), bug)
    if op == "interleave_rope":       # mode 3: the pairs apart, then rotate half (docs/interleave_rope.md §1)
        return rope_forward(inputs["x"], inputs["cos"], inputs["sin"], 3, bug)
    if op == "rope_with_sin_cos_cache":
        return rope_cache(inputs["positions"], inputs["query"], inputs["key"],
                          inputs["cos_sin_cache"], int(attrs["head_size"]),
                          attrs.get("mrope_section"), attrs.get("is_neox_style", True), bug)
    raise ValueError(f"unknown operator {op}")
