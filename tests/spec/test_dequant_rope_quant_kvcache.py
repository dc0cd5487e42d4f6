"""DequantRopeQuantKvcache and RopeQuantKvcache (docs/dequant_rope_quant_kvcache.md).

Evidence: a NumPy oracle written here from the document's lines (Dequant as the errata read it,
SplitTensor, ApplyRotaryPosEmb's rotate-half x*cos + cat(-x2, x1)*sin, Quant as x / scale +
offset rounded half to even and clamped, the contiguous kCacheRef[i][indices[i]] = quantK[i]
and the page view kCacheRefView[indices[i]] = quantK[i], token by token on a copy) for both
cache modes, 2-D and 3-D x, float16, bfloat16 and int32 x with every bias dtype; identities
(the rotation is ApplyRotaryPosEmb's; quantising then dequantising is within half a step;
RopeQuantKvcache is the special case it is said to be); every validation rule; the errata.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.dequant_rope import dequant_rope_quant_kvcache_terms
from refspec.spec.terms import CACHE, COPY, ELEMENTWISE, QUANTISED
from spec_helpers import assert_aclnn, assert_rejected, bits, fuzz_test, valid_call, with_junk

F64 = np.float64
BF16 = ml_dtypes.bfloat16


def o_dequant(x, ws, act, bias):
    x = np.asarray(x, F64)
    if bias is not None and np.asarray(bias).dtype.kind == "i":
        x = x + np.asarray(bias, F64)
    x = x * np.asarray(ws, F64)
    if act is not None:
        x = x * np.asarray(act, F64).reshape(x.shape[:-1] + (1,))
    if bias is not None and np.asarray(bias).dtype.kind != "i":
        x = x + np.asarray(bias, F64)
    return x


def o_rope(x, cos, sin):
    D = x.shape[-1]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return x * cos + np.concatenate((-x2, x1), -1) * sin


def oracle(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k=None, offset_v=None,
           weight_scale=None, activation_scale=None, bias=None, size_splits=None,
           cache_mode="contiguous", **_):
    x = np.asarray(x)
    X = o_dequant(x, weight_scale, activation_scale, bias) if x.dtype == np.int32 else np.asarray(x, F64)
    X = X.reshape(X.shape[0], -1, X.shape[-1])                      # (B, S, H)
    B, S, _ = X.shape
    Nkv, D = np.shape(k_cache)[2:]
    qh, kh, _ = size_splits
    q = X[..., :qh].reshape(B, S, -1, D)
    k = X[..., qh:qh + kh].reshape(B, S, Nkv, D)
    v = X[..., qh + kh:].reshape(B, S, Nkv, D)
    c, s = (np.asarray(t, F64).reshape(B, S, 1, D) for t in (cos, sin))
    q_out, k_out = o_rope(q, c, s), o_rope(k, c, s)
    out = []
    for cache, val, scale, offset in ((k_cache, k_out, scale_k, offset_k), (v_cache, v, scale_v, offset_v)):
        quant = val / np.asarray(scale, F64).reshape(Nkv, D)
        if offset is not None:
            quant = quant + np.asarray(offset, F64).reshape(Nkv, D)
        cache = np.array(cache, F64)
        for b in range(B):
            for t in range(S):
                if cache_mode == "contiguous":
                    cache[b, indices[b] + t] = quant[b, t]
                else:
                    cache.reshape(-1, Nkv, D)[indices[b * S + t]] = quant[b, t]
        out.append(cache)
    return q_out, k_out, v, out[0], out[1]


def case(rng, B=2, S=3, Nq=4, Nkv=2, D=64, C1=3, C2=16, dtype=np.float16, mode="contiguous",
         two_d=False, offsets=True, bias=None, act=True):
    H = (Nq + 2 * Nkv) * D
    if dtype == np.int32:
        x = rng.integers(-2000, 2000, (B, S, H)).astype(np.int32)
        cos_dtype = np.float16
    else:
        x = rng.standard_normal((B, S, H)).astype(dtype)
        cos_dtype = dtype
    kw = dict(x=x, cos=rng.uniform(-1, 1, (B, S, 1, D)).astype(cos_dtype),
              sin=rng.uniform(-1, 1, (B, S, 1, D)).astype(cos_dtype),
              k_cache=(np.arange(C1 * C2 * Nkv * D) % 251 - 125).astype(np.int8).reshape(C1, C2, Nkv, D),
              v_cache=(np.arange(C1 * C2 * Nkv * D) % 241 - 120).astype(np.int8).reshape(C1, C2, Nkv, D),
              scale_k=rng.uniform(0.01, 0.05, Nkv * D).astype(np.float32),
              scale_v=rng.uniform(0.01, 0.05, (Nkv, D)).astype(np.float32),
              size_splits=[Nq * D, Nkv * D, Nkv * D], cache_mode=mode)
    if offsets:
        kw["offset_k"] = rng.uniform(-5, 5, (Nkv, D)).astype(np.float32)
        kw["offset_v"] = rng.uniform(-5, 5, (Nkv, D)).astype(np.float32)
    if dtype == np.int32:
        kw["weight_scale"] = rng.uniform(5e-4, 2e-3, H).astype(np.float32)
        if act:
            kw["activation_scale"] = rng.uniform(0.5, 2, B * S).astype(np.float32)
        if bias is not None:
            kw["bias"] = (rng.integers(-50, 50, H) if bias == np.int32
                          else rng.uniform(-1, 1, H)).astype(bias)
    if mode == "contiguous":
        kw["indices"] = np.array([C2 - S, 0, 5][:B], np.int32)
    else:
        kw["indices"] = np.concatenate([[C1 * C2 - 1], rng.permutation(np.arange(1, C1 * C2 - 1))[:B * S - 2], [0]]).astype(np.int32)
    if two_d:
        kw["x"] = kw["x"][:, 0]
        kw["cos"], kw["sin"] = kw["cos"][:, 0, 0], kw["sin"][:, 0, 0]
        if "activation_scale" in kw:
            kw["activation_scale"] = kw["activation_scale"][:B]
        kw["indices"] = kw["indices"][:B] if mode == "contiguous" else np.array([C1 * C2 - 1, 0], np.int32)
    return kw


def call(kw, **extra):
    return refspec.dequant_rope_quant_kvcache(**{**kw, **extra})


@pytest.mark.parametrize("mode", ["contiguous", "page"])
@pytest.mark.parametrize("dtype, bias", [(np.float16, None), (BF16, None), (np.int32, None),
                                         (np.int32, np.int32), (np.int32, np.float32),
                                         (np.int32, np.float16), (np.int32, BF16)],
                         ids=["f16", "bf16", "int32", "int32-bias-int32", "int32-bias-f32",
                              "int32-bias-f16", "int32-bias-bf16"])
@pytest.mark.parametrize("two_d", [False, True], ids=["3d", "2d"])
def test_equals_the_oracle(mode, dtype, bias, two_d):
    rng = np.random.default_rng(1)
    kw = case(rng, dtype=dtype, bias=bias, mode=mode, two_d=two_d)
    exact = call(kw, kv_output=True, soc="A2", out_dtype=F64)
    want = oracle(**kw)
    for got, w in zip(exact, want):
        np.testing.assert_allclose(np.asarray(got, F64).reshape(w.shape), w, rtol=1e-13, atol=1e-12)
    codes = call(kw, kv_output=True, soc="A2")
    for got, w in zip(codes[3:], want[3:]):
        assert got.dtype == np.int8
        assert np.array_equal(got, np.clip(np.round(w), -128, 127).astype(np.int8))
    assert codes.q_out.dtype == kw["cos"].dtype


def test_the_rotation_is_apply_rotary_pos_emb():
    rng = np.random.default_rng(2)
    kw = case(rng)
    got = call(kw, kv_output=True, out_dtype=F64)
    q = np.asarray(kw["x"], F64)[..., :256].reshape(2, 3, 4, 64)
    k = np.asarray(kw["x"], F64)[..., 256:384].reshape(2, 3, 2, 64)
    c, s = (np.asarray(kw[n], F64) for n in ("cos", "sin"))
    q_ref, k_ref = refspec.apply_rotary_pos_emb(q, k, c, s, layout="BSND")
    assert np.array_equal(bits(got.q_out), bits(q_ref)) and np.array_equal(bits(got.k_out), bits(k_ref))


def test_quantising_then_dequantising_is_within_half_a_step():
    rng = np.random.default_rng(3)
    kw = case(rng, mode="page")
    exact = call(kw, out_dtype=F64).v_cache
    codes = call(kw).v_cache.astype(F64)
    inside = (exact != np.asarray(kw["v_cache"], F64)) & (np.abs(exact) < 127)
    scale = np.broadcast_to(kw["scale_v"].astype(F64), exact.shape)[inside]
    offset = np.broadcast_to(kw["offset_v"].astype(F64), exact.shape)[inside]
    err = np.abs((codes[inside] - offset) * scale - (exact[inside] - offset) * scale)
    assert inside.sum() > 100 and np.all(err <= 0.5 * scale * (1 + 1e-12))


def test_rows_not_named_keep_their_values():
    rng = np.random.default_rng(4)
    kw = case(rng)
    out = call(kw)
    rows = np.zeros(kw["k_cache"].shape[:2], bool)
    for b, i in enumerate(kw["indices"]):
        rows[b, i:i + 3] = True
    assert np.array_equal(out.k_cache[~rows], kw["k_cache"][~rows])
    assert not np.array_equal(out.k_cache[rows], kw["k_cache"][rows])


@pytest.mark.parametrize("mode", ["contiguous", "page"])
def test_caches_as_their_writes_hold_the_whole_caches(mode):
    """whole_caches=False: the cache given, the rows written (ascending offsets) with the
    oracle's exact values, and ``whole(out_dtype)`` the cache returned otherwise."""
    rng = np.random.default_rng(5)
    kw = case(rng, mode=mode)
    parts = call(kw, out_dtype=F64, whole_caches=False)
    want = oracle(**kw)
    for i, name in ((3, "k_cache"), (4, "v_cache")):
        p = getattr(parts, name)
        assert p.cache is kw[name] and np.all(np.diff(p.offsets) > 0)
        np.testing.assert_allclose(p.values, want[i].reshape(-1)[p.offsets], rtol=1e-13, atol=1e-12)
        assert np.array_equal(p.whole(F64), call(kw, out_dtype=F64)[i])
        assert np.array_equal(p.whole(), call(kw)[i]) and p.whole().dtype == np.int8


def test_rope_quant_kvcache_is_the_special_case():
    rng = np.random.default_rng(5)
    kw = case(rng, S=1, offsets=False)
    scale = rng.uniform(0.01, 0.05, 64).astype(np.float32)
    offset = rng.integers(-5, 5, 64).astype(np.int32)
    got = refspec.rope_quant_kvcache(kw["x"], kw["cos"], kw["sin"], scale, offset, kw["k_cache"],
                                     kw["v_cache"], kw["indices"], size_splits=kw["size_splits"],
                                     kv_output=True, soc="A2", out_dtype=F64)
    want = oracle(**{**kw, "scale_k": np.tile(scale, 2), "scale_v": np.tile(scale, 2),
                     "offset_k": np.tile(offset, 2).astype(F64), "offset_v": np.tile(offset, 2).astype(F64)})
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, F64).reshape(w.shape), w, rtol=1e-13, atol=1e-12)


def test_terms():
    rng = np.random.default_rng(6)
    kw = case(rng, dtype=np.int32, bias=np.float32, mode="page")
    t = dequant_rope_quant_kvcache_terms(**kw, kv_output=True, soc="A2")
    assert t["q_out"].comparison_class == ELEMENTWISE and t["v_out"].comparison_class == ELEMENTWISE
    assert t["k_cache"].comparison_class == CACHE and t["k_cache"].written_class == QUANTISED
    assert t["k_cache"].written.shape == t["k_cache"].sum_abs.shape == (6 * 2 * 64,)
    exact = call(kw, out_dtype=F64)
    flat_exact = exact.v_cache.reshape(-1)[t["v_cache"].written]
    assert np.all(np.abs(flat_exact) <= t["v_cache"].sum_abs * (1 + 1e-12))
    plain = dequant_rope_quant_kvcache_terms(**case(rng), kv_output=True)
    assert plain["v_out"].comparison_class == COPY


_base = valid_call(case, 7, "A2")


REJECTED = [
    pytest.param(kw, cls, code, arg, id=name) for name, kw, cls, code, arg in [
        ("x-missing", _base(x=None), ParamNullptrError, 161001, "x"),
        ("scale_v-missing", _base(scale_v=None), ParamNullptrError, 161001, "scale_v"),
        ("size_splits-missing", _base(size_splits=None), ParamNullptrError, 161001, "size_splits"),
        ("weight_scale-missing-for-int32", {**_base(case=dict(dtype=np.int32)), "weight_scale": None},
         ParamNullptrError, 161001, "weight_scale"),
        ("x-float32", _base(case=dict(dtype=np.float32)), ParamInvalidError, 161002, "x"),
        ("sin-other-dtype", {**_base(), "sin": _base()["sin"].astype(BF16)}, ParamInvalidError,
         161002, "sin"),
        ("cache-int16", {**_base(), "k_cache": _base()["k_cache"].astype(np.int16)},
         ParamInvalidError, 161002, "k_cache"),
        ("indices-int64", {**_base(), "indices": _base()["indices"].astype(np.int64)},
         ParamInvalidError, 161002, "indices"),
        ("scale-float16", {**_base(), "scale_k": _base()["scale_k"].astype(np.float16)},
         ParamInvalidError, 161002, "scale_k"),
        ("bias-int8", {**_base(case=dict(dtype=np.int32)), "bias": np.zeros(512, np.int8)},
         ParamInvalidError, 161002, "bias"),
        ("kv_output-not-bool", _base(kv_output="yes"), ParamInvalidError, 161002, "kv_output"),
        ("soc-950", _base(soc="950"), ParamInvalidError, 161002, "soc"),
        ("size_splits-two", _base(size_splits=[256, 128]), TilingError, 561002, "size_splits"),
        ("size_splits-k-not-v", _base(size_splits=[256, 128, 64]), TilingError, 561002, "size_splits"),
        ("quant_mode-dynamic", _base(quant_mode="dynamic"), TilingError, 561002, "quant_mode"),
        ("layout-BNSD", _base(layout="BNSD"), TilingError, 561002, "layout"),
        ("cache_mode-unknown", _base(cache_mode="paged"), TilingError, 561002, "cache_mode"),
        ("x-rank-4", {**_base(), "x": _base()["x"][None]}, TilingError, 561002, "x"),
        ("cache-rank-3", {**_base(), "k_cache": _base()["k_cache"][0]}, TilingError, 561002, "k_cache"),
        ("x-width-not-the-splits", _base(size_splits=[192, 128, 128]), TilingError, 561002, "x"),
        ("A2-width-above-4096", _base(case=dict(Nq=64, Nkv=1)), TilingError, 561002, "x"),
        ("heads-not-the-k-split", {**_base(), "k_cache": np.zeros((3, 16, 1, 64), np.int8),
                                   "v_cache": np.zeros((3, 16, 1, 64), np.int8)}, TilingError,
         561002, "k_cache"),
        ("A2-head-size-40", _base(case=dict(D=40, Nq=6, Nkv=1)), TilingError, 561002, "k_cache"),
        ("q-split-not-heads", dict(_base(size_splits=[160, 128, 128], x=np.zeros((2, 3, 416), np.float16)),
                                   soc=None), TilingError, 561002, "size_splits"),
        ("v_cache-other-shape", {**_base(), "v_cache": _base()["v_cache"][:2]}, TilingError, 561002,
         "v_cache"),
        ("cos-other-shape", {**_base(), "cos": _base()["cos"][:, :1]}, TilingError, 561002, "cos"),
        ("indices-page-shape-in-contiguous", {**_base(), "indices": np.zeros(6, np.int32)},
         TilingError, 561002, "indices"),
        ("contiguous-cache-fewer-batches", {**_base(case=dict(B=2, C1=1)), "indices": np.zeros(2, np.int32)},
         TilingError, 561002, "k_cache"),
        ("scale-size", {**_base(), "scale_k": np.ones(64, np.float32)}, TilingError, 561002, "scale_k"),
        ("A2-one-offset", {**_base(), "offset_v": None}, TilingError, 561002, "offset_k"),
        ("weight_scale-shape", {**_base(case=dict(dtype=np.int32)), "weight_scale": np.ones(8, np.float32)},
         TilingError, 561002, "weight_scale"),
        ("activation_scale-shape", {**_base(case=dict(dtype=np.int32)),
                                    "activation_scale": np.ones(2, np.float32)}, TilingError,
         561002, "activation_scale"),
        ("contiguous-index-past-the-end", {**_base(), "indices": np.array([14, 0], np.int32)},
         ParamInvalidError, 161002, "indices"),
        ("contiguous-index-negative", {**_base(), "indices": np.array([-1, 0], np.int32)},
         ParamInvalidError, 161002, "indices"),
        ("page-index-twice", {**_base(case=dict(mode="page")), "indices": np.array([3, 4, 5, 6, 7, 3], np.int32)},
         ParamInvalidError, 161002, "indices"),
        ("page-index-negative", {**_base(case=dict(mode="page")), "indices": np.array([3, 4, 5, 6, 7, -1], np.int32)},
         ParamInvalidError, 161002, "indices"),
        ("page-index-past-the-cache", {**_base(case=dict(mode="page")), "indices": np.array([3, 4, 5, 6, 7, 48], np.int32)},
         ParamInvalidError, 161002, "indices"),
    ]]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    assert_rejected(refspec.dequant_rope_quant_kvcache, kw, cls, code, argument)


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-contiguous-index-at-the-end", {**_base(), "indices": np.array([13, 0], np.int32)}),
        ("A3-page-2d", {**_base(case=dict(mode="page", two_d=True)), "soc": "A3"}),
        ("A2-width-4096", _base(case=dict(Nq=62, Nkv=1))),
        ("A2-cache-exactly-B", {**_base(case=dict(C1=2))}),
        ("A2-float16-ignores-dequant-inputs", {**_base(), "weight_scale": np.ones(3, np.float32)}),
        ("none-one-offset", {**_base(), "offset_v": None, "soc": None}),
        ("none-float64-head-size-6", dict(_base(case=dict(D=6, dtype=F64)), soc=None)),
    ]]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    out = call(kw)
    assert out.k_cache.shape == np.shape(kw["k_cache"])


REJECTED_RQK = [
    pytest.param(kw, cls, code, arg, id=name) for name, kw, cls, code, arg in [
        ("quant_offset-missing", dict(quant_offset=None), ParamNullptrError, 161001, "quant_offset"),
        ("quant_offset-float", dict(quant_offset=np.zeros(64, np.float32)), ParamInvalidError, 161002,
         "quant_offset"),
        ("qkv-bfloat16", dict(qkv=np.zeros((2, 1, 512), BF16)), ParamInvalidError, 161002, "qkv"),
        ("A3", dict(soc="A3"), ParamInvalidError, 161002, "soc"),
        ("scale-per-head", dict(quant_scale=np.ones(128, np.float32)), TilingError, 561002,
         "quant_scale"),
    ]]


@pytest.mark.parametrize("changes, cls, code, argument", REJECTED_RQK)
def test_rope_quant_kvcache_rejects(changes, cls, code, argument):
    kw = case(np.random.default_rng(8), S=1, offsets=False)
    args = dict(qkv=kw["x"], cos=kw["cos"], sin=kw["sin"], quant_scale=np.ones(64, np.float32),
                quant_offset=np.zeros(64, np.int32), k_cache=kw["k_cache"], v_cache=kw["v_cache"],
                indice=kw["indices"], size_splits=kw["size_splits"], soc="A2")
    assert_rejected(refspec.rope_quant_kvcache, {**args, **changes}, cls, code, argument)


@st.composite
def junk(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kw = case(rng, dtype=draw(st.sampled_from([np.float16, np.int32])),
              mode=draw(st.sampled_from(["contiguous", "page"])), two_d=draw(st.booleans()))
    return with_junk(draw, kw, (None, "A2"))


test_only_aclnn_errors_are_raised = fuzz_test(refspec.dequant_rope_quant_kvcache, junk())


# --- errata (docs/errata.md) ------------------------------------------------------------------

def test_E29_dequant_and_quant_as_read():
    """x = 10, weight scale 0.5, activation scale 2, bias 3: an int32 bias is added first
    ((10 + 3)*0.5*2 = 13), a float one last (10*0.5*2 + 3 = 13 as well, but with x = 10 and
    weight scale 0.25: 8 against 5.5); Quant divides: 13 / 0.5 + 1 = 27."""
    kw = case(np.random.default_rng(30), dtype=np.int32, S=1, offsets=True, act=True, bias=np.int32)
    H = kw["x"].shape[-1]
    kw.update(x=np.full_like(kw["x"], 10), weight_scale=np.full(H, 0.25, np.float32),
              activation_scale=np.full(2, 2.0, np.float32), bias=np.full(H, 6, np.int32),
              scale_k=np.full(128, 0.5, np.float32), scale_v=np.full((2, 64), 0.5, np.float32),
              offset_k=np.ones((2, 64), np.float32), offset_v=np.ones((2, 64), np.float32))
    v_int = call(kw, kv_output=True, out_dtype=F64).v_out
    assert np.all(v_int == 8.0)                                   # (10 + 6)*0.25*2
    v_float = call({**kw, "bias": np.full(H, 6, np.float32)}, kv_output=True, out_dtype=F64).v_out
    assert np.all(v_float == 11.0)                                # 10*0.25*2 + 6
    rows = call(kw, out_dtype=F64).v_cache[[0, 1], kw["indices"][:2]]
    assert np.all(rows == 8.0 / 0.5 + 1)                          # v / scale + offset


def test_E41_unknown_cache_mode_rejected():
    with pytest.raises(TilingError) as info:
        call(_base(cache_mode="Page"))
    assert_aclnn(info, TilingError, 561002, "cache_mode")


def test_E42_x_is_float16_bfloat16_or_int32_not_float32():
    call(_base(case=dict(dtype=np.int32)))
    with pytest.raises(ParamInvalidError) as info:
        call(_base(case=dict(dtype=np.float32)))
    assert_aclnn(info, ParamInvalidError, 161002, "x")


def test_E43_the_scales_have_nkv_times_d_values_in_any_shape():
    kw = _base()
    for shape in ((128,), (2, 64), (1, 128)):
        call({**kw, "scale_k": np.ones(shape, np.float32)})
    with pytest.raises(TilingError) as info:
        call({**kw, "scale_k": np.ones(6, np.float32)})           # the indices' shape, [B*S]
    assert_aclnn(info, TilingError, 561002, "scale_k")


def test_E44_a_contiguous_cache_may_have_exactly_xs_batches():
    call(_base(case=dict(C1=2)))


def test_E45_one_offset_alone_rejected_on_a2_applied_math_only():
    kw = {**_base(), "offset_v": None}
    with pytest.raises(TilingError) as info:
        call(kw)
    assert_aclnn(info, TilingError, 561002, "offset_k")
    with_k = call(kw, soc=None, out_dtype=F64).k_cache
    without = call({**kw, "offset_k": None}, soc=None, out_dtype=F64).k_cache
    assert np.any(with_k != without)


def test_E46_xs_last_axis_at_most_4096_and_a_multiple_of_64():
    call(_base(case=dict(Nq=62, Nkv=1)))                          # (62 + 2)*64 = 4096
    for changes in (dict(Nq=64, Nkv=1), dict(D=16, Nq=3, Nkv=1)):   # 4224; 80
        with pytest.raises(TilingError) as info:
            call(_base(case=changes))
        assert_aclnn(info, TilingError, 561002, "x")


def test_E47_shape_rules_are_tiling_errors():
    with pytest.raises(TilingError) as info:
        call({**_base(), "v_cache": _base()["v_cache"][:2]})
    assert info.value.code == 561002


def test_E48_rope_quant_kvcache_is_dequant_rope_quant_kvcache_with_one_scale_and_offset():
    test_rope_quant_kvcache_is_the_special_case()
