"""QkvRmsNormRopeCache (docs/qkv_rms_norm_rope_cache.md).

Evidence: a NumPy oracle written here from the README's lines (SplitVD by head counts, RmsNorm
as squareX, meanSquareX, rms, y, the half-and-half RoPE y*cos + cat(-y2, y1)*sin, Quant as
kRoPE / kScale + kOffset, rounded half to even and clamped, the scatter token by token into the
PA_NZ caches through their 4-D tile shape) in float16 and bfloat16, quantised and not, cos per
token and per batch; identities (the rotation is RotaryPositionEmbedding's half mode; every
index -1 leaves the caches; q_out does not depend on the index); every validation rule; a fuzz
test.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.qkv_norm_rope import qkv_rms_norm_rope_cache_terms
from refspec.spec.terms import CACHE, COPY, QUANTISED, ROW_REDUCTION
from spec_helpers import assert_aclnn, assert_rejected, bits, fuzz_test, valid_call, with_junk

F64 = np.float64
BF16 = ml_dtypes.bfloat16


def oracle(qkv, q_gamma, k_gamma, cos, sin, index, k_cache, v_cache, k_scale=None, v_scale=None,
           k_offset=None, v_offset=None, qkv_size=None, head_nums=None, epsilon=1e-6, **_):
    B, S, N, D = qkv_size
    Nq, Nk, Nv = head_nums
    x = np.asarray(qkv, F64).reshape(B * S, N, D)
    q, k, v = x[:, :Nq], x[:, Nq:N - Nv], x[:, N - Nv:]

    def rms_rope(y, gamma):
        y = (y / np.sqrt((y * y).mean(-1, keepdims=True) + epsilon)) * np.asarray(gamma, F64)
        c, s = (np.asarray(t, F64) for t in (cos, sin))
        if c.shape[0] != B * S:
            c, s = np.repeat(c, S, 0), np.repeat(s, S, 0)
        y1, y2 = y[..., :D // 2], y[..., D // 2:]
        return y * c[:, None] + np.concatenate((-y2, y1), -1) * s[:, None]

    q_out, k_rope = rms_rope(q, q_gamma), rms_rope(k, k_gamma)
    caches = []
    for cache, val, scale, offset in ((k_cache, k_rope, k_scale, k_offset), (v_cache, v, v_scale, v_offset)):
        if scale is not None:
            val = val / np.asarray(scale, F64)
            if offset is not None:
                val = val + np.asarray(offset, F64)
        out = np.array(cache, F64)                      # (BlockNum, heads*D/C0, BlockSize, C0)
        bs, c0 = cache.shape[2], cache.shape[3]
        for t, slot in enumerate(index):
            if slot >= 0:
                out[slot // bs, :, slot % bs, :] = val[t].reshape(-1, c0)
        caches.append(out)
    return q_out.reshape(B * S, -1), caches[0], caches[1], k_rope.reshape(B * S, -1)


def case(rng, B=2, S=3, Nq=4, Nk=2, D=128, block_num=4, block_size=32, dtype=np.float16,
         k_quant=True, v_quant=False, offsets=False, cos_rows=None):
    N = Nq + 2 * Nk
    T = B * S
    rows = T if cos_rows is None else cos_rows
    kw = dict(qkv=rng.standard_normal((T, N * D)).astype(dtype),
              q_gamma=rng.uniform(0.5, 1.5, D).astype(dtype),
              k_gamma=rng.uniform(0.5, 1.5, D).astype(dtype),
              cos=rng.uniform(-1, 1, (rows, D)).astype(dtype),
              sin=rng.uniform(-1, 1, (rows, D)).astype(dtype),
              qkv_size=[B, S, N, D], head_nums=[Nq, Nk, Nk])
    for name, quant, p in (("k_cache", k_quant, "k"), ("v_cache", v_quant, "v")):
        c0 = 32 if quant else 16
        shape = (block_num, Nk * D // c0, block_size, c0)
        n = int(np.prod(shape))
        kw[name] = ((np.arange(n) % 251 - 125).astype(np.int8) if quant
                    else (np.arange(n) % 997 * 0.5 + 1000).astype(dtype)).reshape(shape)
        if quant:
            kw[f"{p}_scale"] = rng.uniform(0.01, 0.05, (Nk, D)).astype(np.float32)
            if offsets:
                kw[f"{p}_offset"] = rng.uniform(-4, 4, (Nk, D)).astype(np.float32)
    slots = rng.permutation(np.arange(1, block_num * block_size - 1))[:T]
    slots[0], slots[-1] = block_num * block_size - 1, 0
    if T > 2:
        slots[1] = -1
    kw["index"] = slots.astype(np.int64)
    return kw


def call(kw, **extra):
    return refspec.qkv_rms_norm_rope_cache(**{**kw, **extra})


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("quant", [(False, False), (True, False), (True, True)],
                         ids=["none", "k", "k-v"])
@pytest.mark.parametrize("cos_rows", [None, 2], ids=["cos-per-token", "cos-per-batch"])
def test_equals_the_oracle(dtype, quant, cos_rows):
    rng = np.random.default_rng(1)
    kw = case(rng, dtype=dtype, k_quant=quant[0], v_quant=quant[1], offsets=True, cos_rows=cos_rows)
    exact = call(kw, soc="A2", out_dtype=F64, is_output_qkv=True)
    want = oracle(**kw)
    for got, w in zip((exact.q_out, exact.k_cache, exact.v_cache, exact.k_out_before_quant), want):
        np.testing.assert_allclose(got, w, rtol=1e-13, atol=1e-12)
    codes = call(kw, soc="A2")
    for got, w in zip(codes[1:3], want[1:3]):
        expect = np.clip(np.round(w), -128, 127).astype(np.int8) if got.dtype == np.int8 else w.astype(dtype)
        assert got.dtype == expect.dtype and np.array_equal(bits(got) if got.dtype != np.int8 else got,
                                                            bits(expect) if got.dtype != np.int8 else expect)


def test_the_rotation_is_rotary_position_embedding_half_mode():
    rng = np.random.default_rng(2)
    kw = case(rng, k_quant=False)
    got = call(kw, out_dtype=F64, is_output_qkv=True)
    T, D = 6, 128
    x = np.asarray(kw["qkv"], F64).reshape(T, 8, D)[:, :4]
    y = (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)) * np.asarray(kw["q_gamma"], F64)
    c, s = (np.asarray(kw[n], F64)[:, None] for n in ("cos", "sin"))
    ref = refspec.rotary_position_embedding(y, c, s, mode=0)
    np.testing.assert_allclose(got.q_out.reshape(T, 4, D), ref, rtol=1e-15, atol=1e-15)


def test_every_index_minus_1_leaves_the_caches_and_q_out_does_not_depend_on_it():
    rng = np.random.default_rng(3)
    kw = case(rng, v_quant=True)
    base = call(kw)
    kw2 = {**kw, "index": np.full(6, -1, np.int64)}
    out = call(kw2)
    assert np.array_equal(out.k_cache, kw["k_cache"]) and np.array_equal(out.v_cache, kw["v_cache"])
    assert np.array_equal(bits(out.q_out), bits(base.q_out))


def test_caches_as_their_writes_hold_the_whole_caches():
    """whole_caches=False: the cache given, the elements written (ascending offsets) with the
    oracle's exact values, and ``whole(out_dtype)`` the cache returned otherwise."""
    def raw(a):
        return np.ascontiguousarray(a).view(np.uint8)
    rng = np.random.default_rng(5)
    kw = case(rng, k_quant=True, v_quant=False)
    parts = call(kw, out_dtype=F64, whole_caches=False)
    want = oracle(**kw)
    exact, rounded = call(kw, out_dtype=F64), call(kw)
    for i, name in ((1, "k_cache"), (2, "v_cache")):
        p = getattr(parts, name)
        assert p.cache is kw[name] and np.all(np.diff(p.offsets) > 0)
        np.testing.assert_allclose(p.values, want[i].reshape(-1)[p.offsets], rtol=1e-13, atol=1e-12)
        assert np.array_equal(raw(p.whole(F64)), raw(exact[i]))
        assert np.array_equal(raw(p.whole()), raw(rounded[i])) and p.whole().dtype == kw[name].dtype


def test_terms():
    rng = np.random.default_rng(4)
    kw = case(rng, k_quant=True, v_quant=False)
    t = qkv_rms_norm_rope_cache_terms(**kw, is_output_qkv=True)
    assert t["q_out"].comparison_class == ROW_REDUCTION and t["q_out"].reduced_terms == 128
    assert t["k_cache"].comparison_class == CACHE and t["k_cache"].written_class == QUANTISED
    assert t["v_cache"].written_class == COPY and t["v_out_before_quant"].comparison_class == COPY
    assert t["k_cache"].written.shape == (5 * 2 * 128,) == t["k_cache"].sum_abs.shape
    exact = call(kw, out_dtype=F64)
    assert np.all(np.abs(exact.k_cache.reshape(-1)[t["k_cache"].written]) <= t["k_cache"].sum_abs * (1 + 1e-12))
    assert np.all(np.abs(exact.q_out) <= t["q_out"].sum_abs * (1 + 1e-12))


_base = valid_call(case, 5, "A2")


REJECTED = [
    pytest.param(kw, cls, code, arg, id=name) for name, kw, cls, code, arg in [
        ("qkv-missing", _base(qkv=None), ParamNullptrError, 161001, "qkv"),
        ("head_nums-missing", _base(head_nums=None), ParamNullptrError, 161001, "head_nums"),
        ("soc-950", _base(soc="950"), ParamInvalidError, 161002, "soc"),
        ("qkv_size-three", _base(qkv_size=[2, 3, 8]), TilingError, 561002, "qkv_size"),
        ("qkv_size-zero", _base(qkv_size=[2, 0, 8, 128]), TilingError, 561002, "qkv_size"),
        ("A2-D-64", _base(case=dict(D=64)), TilingError, 561002, "qkv_size"),
        ("heads-not-summing", _base(head_nums=[3, 2, 2]), TilingError, 561002, "head_nums"),
        ("Nk-not-Nv", _base(head_nums=[2, 2, 4]), TilingError, 561002, "head_nums"),
        ("A2-Nq-not-multiple-of-Nk", _base(case=dict(Nq=3)), TilingError, 561002, "head_nums"),
        ("epsilon-not-real", _base(epsilon=None), ParamInvalidError, 161002, "epsilon"),
        ("is_output_qkv-not-bool", _base(is_output_qkv=0), ParamInvalidError, 161002, "is_output_qkv"),
        ("cache_mode-PA", _base(cache_mode="PA"), TilingError, 561002, "cache_mode"),
        ("qkv-float32", _base(case=dict(dtype=np.float32)), TilingError, 561002, "qkv"),
        ("qkv-shape", {**_base(), "qkv": _base()["qkv"][:5]}, TilingError, 561002, "qkv"),
        ("gamma-shape", {**_base(), "k_gamma": _base()["k_gamma"][:64]}, TilingError, 561002, "k_gamma"),
        ("gamma-dtype", {**_base(), "q_gamma": _base()["q_gamma"].astype(BF16)}, TilingError,
         561002, "q_gamma"),
        ("cos-three-rows", {**_base(), "cos": _base()["cos"][:3], "sin": _base()["sin"][:3]},
         TilingError, 561002, "cos"),
        ("sin-not-cos", {**_base(), "sin": _base()["sin"][:2]}, TilingError, 561002, "sin"),
        ("index-int32", {**_base(), "index": _base()["index"].astype(np.int32)}, TilingError,
         561002, "index"),
        ("index-shape", {**_base(), "index": _base()["index"][:4]}, TilingError, 561002, "index"),
        ("cache-bfloat16-for-float16", {**_base(case=dict(k_quant=False)),
                                        "k_cache": _base(case=dict(k_quant=False))["k_cache"].astype(BF16)},
         TilingError, 561002, "k_cache"),
        ("cache-tile-width", {**_base(), "k_cache": np.zeros((4, 16, 32, 16), np.int8)}, TilingError,
         561002, "k_cache"),
        ("v-cache-other-blocks", {**_base(), "v_cache": _base()["v_cache"][:3]}, TilingError, 561002,
         "v_cache"),
        ("A2-block-size-16", _base(case=dict(block_size=16, block_num=8, k_quant=False)), TilingError,
         561002, "k_cache"),
        ("too-few-blocks", {**_base(case=dict(block_num=8, block_size=2)), "soc": None,
                            "k_cache": _base(case=dict(block_num=8, block_size=2))["k_cache"][:3],
                            "v_cache": _base(case=dict(block_num=8, block_size=2))["v_cache"][:3],
                            "index": np.arange(6)}, TilingError, 561002, "k_cache"),
        ("scale-missing", {**_base(), "k_scale": None}, TilingError, 561002, "k_scale"),
        ("scale-for-float-cache", {**_base(), "v_scale": np.ones((2, 128), np.float32)}, TilingError,
         561002, "v_scale"),
        ("scale-shape", {**_base(), "k_scale": np.ones(128, np.float32)}, TilingError, 561002, "k_scale"),
        ("offset-shape", {**_base(), "k_offset": np.ones((1, 128), np.float32)}, TilingError, 561002,
         "k_offset"),
        ("scale-dtype", {**_base(), "k_scale": np.ones((2, 128))}, TilingError, 561002, "k_scale"),
        ("scale-zero", {**_base(), "k_scale": np.zeros((2, 128), np.float32)}, ParamInvalidError,
         161002, "k_scale"),
        ("index-past-the-cache", {**_base(), "index": np.array([0, 1, 2, 3, 4, 128])}, ParamInvalidError,
         161002, "index"),
        ("index-twice", {**_base(), "index": np.array([0, 1, 2, 3, 4, 0])}, ParamInvalidError, 161002,
         "index"),
    ]]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    assert_rejected(refspec.qkv_rms_norm_rope_cache, kw, cls, code, argument)


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-cos-per-batch", _base(case=dict(cos_rows=2))),
        ("A3-offsets", {**_base(case=dict(offsets=True, v_quant=True)), "soc": "A3"}),
        ("A2-exactly-enough-blocks", _base(case=dict(block_num=2, S=33, B=1))),
        ("none-D-8-block-size-3", dict(_base(case=dict(D=16, block_size=3, k_quant=False)), soc=None)),
    ]]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    out = call(kw)
    assert out.k_cache.shape == kw["k_cache"].shape


@st.composite
def junk(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kw = case(rng, k_quant=draw(st.booleans()), v_quant=draw(st.booleans()))
    return with_junk(draw, kw, (None, "A2"))


test_only_aclnn_errors_are_raised = fuzz_test(refspec.qkv_rms_norm_rope_cache, junk())


# --- errata (docs/errata.md) ------------------------------------------------------------------

def test_E49_dtype_and_shape_rules_are_tiling_errors():
    for bad in ({"q_gamma": _base()["q_gamma"].astype(BF16)}, {"qkv": _base()["qkv"].astype(np.float32)},
                {"index": _base()["index"].astype(np.int32)}):
        with pytest.raises(TilingError) as info:
            call({**_base(), **bad})
        assert info.value.code == 561002


def test_E50_block_size_a_multiple_of_32_whatever_the_caches_dtype():
    with pytest.raises(TilingError) as info:
        call(_base(case=dict(block_size=16, block_num=8, k_quant=False)))
    assert_aclnn(info, TilingError, 561002, "k_cache")
    call(_base(case=dict(block_size=32, k_quant=False)))


def test_E51_cos_per_batch_is_taken_for_every_token_of_the_batch():
    rng = np.random.default_rng(40)
    kw = case(rng, cos_rows=2)
    per_token = {**kw, "cos": np.repeat(kw["cos"], 3, 0), "sin": np.repeat(kw["sin"], 3, 0)}
    a, b = call(kw, out_dtype=F64), call(per_token, out_dtype=F64)
    assert np.array_equal(a.q_out, b.q_out) and np.array_equal(a.k_cache, b.k_cache)


def test_E52_index_below_the_slot_count_and_outputs_before_quant_per_head_count():
    kw = _base()
    with pytest.raises(ParamInvalidError) as info:
        call({**kw, "index": np.array([0, 1, 2, 3, 4, 128])})      # BlockNum*BlockSize itself
    assert_aclnn(info, ParamInvalidError, 161002, "index")
    out = call(kw, is_output_qkv=True)
    assert out.k_out_before_quant.shape == (6, 2 * 128) and out.q_out_before_quant.shape == (6, 4 * 128)


def test_E53_nq_a_multiple_of_nk():
    with pytest.raises(TilingError) as info:
        call(_base(case=dict(Nq=3)))
    assert_aclnn(info, TilingError, 561002, "head_nums")


def test_E54_offsets_shapes_checked():
    with pytest.raises(TilingError) as info:
        call({**_base(), "k_offset": np.ones((2, 64), np.float32)})
    assert_aclnn(info, TilingError, 561002, "k_offset")
