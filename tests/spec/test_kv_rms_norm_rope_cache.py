"""KvRmsNormRopeCache(V2) (docs/kv_rms_norm_rope_cache.md).

Evidence: a NumPy oracle written here from the documents' lines (RMSNorm as squareX, mean, rms,
y; interleaveRope as x1 = x[..., ::2], x2 = x[..., 1::2], cat(x1, x2)*cos + cat(-x2, x1)*sin;
the quantisation x*scale + offset, round, clamp; the scatter token by token into a copy of the
cache, the fractal layout through an explicit 4-D view of the block's tiles) in every cache mode,
V1 and V2, quantised and not; a torch transcription (skipped without torch); identities (RMSNorm
of a row scaled by a power of two is unchanged; quantising then dequantising is within half a
step; every index -1 leaves the caches as given; PA_NZ holds PA_BNSD's values in another order;
V2 without v is V1; V2 coincides with V1 where its kv is V1's rms part; the rotation is
RotaryPositionEmbedding mode 3 and InterleaveRope). Then every validation rule of §4 per chip
profile, the tolerance terms, the errata, and a fuzz test that nothing but an AclnnError is
ever raised.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.kv_norm_rope import kv_rms_norm_rope_cache_terms
from refspec.spec.quant_dtypes import hifloat8
from refspec.spec.terms import CACHE, COPY, ELEMENTWISE, QUANTISED, ROW_REDUCTION
from spec_helpers import assert_aclnn, bits, fuzz_test, with_junk

F64 = np.float64
F16 = np.float16
MODES = ("Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ")


# --- the oracle, from the documents' lines ----------------------------------------------------

def o_rms_norm(x, gamma, eps):
    square_x = x * x
    mean_square_x = square_x.mean(axis=-1, keepdims=True)
    rms = np.sqrt(mean_square_x + eps)
    return (x / rms) * gamma


def o_interleave_rope(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    x_part1 = np.concatenate((x1, x2), axis=-1)
    x_part2 = np.concatenate((-x2, x1), axis=-1)
    return x_part1 * cos + x_part2 * sin


def o_quant(x, scale, offset, N):
    def heads(p):
        p = np.asarray(p, F64)
        return p.reshape(N, 1, -1) if p.ndim == 2 and p.shape[0] == N and N > 1 else p
    if scale is None:
        return x
    x = x * heads(scale)
    if offset is not None:
        x = x + heads(offset)
    return x


def o_slots(index, mode, B, S, bs):
    """(b, s) -> the slot each token goes to, from the documents' index tables."""
    index = np.asarray(index)
    out = {}
    for b in range(B):
        for s in range(S):
            if mode == "Norm":
                slot = index.reshape(B, S)[b, s]
            elif mode in ("PA_BLK_BNSD", "PA_BLK_NZ"):
                start = index.reshape(B, -1)[b, s // bs]
                slot = -1 if start < 0 else start + s % bs
            else:
                slot = index.reshape(-1)[b * S + s]
            out[b, s] = int(slot)
    return out


def o_scatter(cache, values, index, mode):
    """cache[scatter_idx] = value, token by token, on a copy (float64)."""
    out = refspec.spec.quant_dtypes.decode(cache).copy()        # the codes' values
    B, N, S, D = values.shape
    bs = cache.shape[1]
    for (b, s), slot in o_slots(index, mode, B, S, bs).items():
        if slot < 0:
            continue
        if mode == "Norm":
            out[b, :, slot, :] = values[b, :, s, :]
        elif mode in ("PA_NZ", "PA_BLK_NZ"):
            c0 = 32 // cache.dtype.itemsize
            tiles = out.reshape(cache.shape[0], N * D // c0, bs, c0)     # the block's tiles
            tiles[slot // bs, :, slot % bs, :] = values[b, :, s, :].reshape(N * D // c0, c0)
        else:
            out.reshape(-1, N, D)[slot] = values[b, :, s, :]
    return out


def oracle(kv, gamma, cos, sin, index, k_cache, ckv_cache, k_scale=None, c_scale=None,
           k_offset=None, c_offset=None, v=None, eps=1e-5, mode="Norm"):
    """(k_cache, ckv_cache, k_rope, c_kv) exact: V1 when v is None, else V2."""
    kv, gamma, cos, sin = (np.asarray(t, F64) for t in (kv, gamma, cos, sin))
    N = kv.shape[1]
    if v is None:
        Dv = gamma.shape[0]
        c = o_rms_norm(kv[..., :Dv], gamma, eps)
        k = o_interleave_rope(kv[..., Dv:], cos, sin)
    else:
        y = o_rms_norm(kv, gamma, eps)
        R = cos.shape[-1]
        k = np.concatenate((o_interleave_rope(y[..., :R], cos, sin), y[..., R:]), axis=-1)
        c = np.asarray(v, F64)
    kc = o_scatter(k_cache, o_quant(k, k_scale, k_offset, N), index, mode)
    cc = o_scatter(ckv_cache, o_quant(c, c_scale, c_offset, N), index, mode)
    return kc, cc, k, c


# --- inputs ------------------------------------------------------------------------------------

def case(rng, mode="PA", B=2, N=1, S=3, Dv=512, Dk=64, block_num=4, block_size=32, Scache=8,
         dtype=F16, k_dtype=None, c_dtype=None, v=False, Dvv=128, cos_s=None, index=None):
    """Keyword arguments of a valid call (V1 unless ``v``: then kv is (B, N, S, Dk) normalised
    whole, v (B, N, S, Dvv)). Caches hold distinct sentinel values."""
    cos_s = S if cos_s is None else cos_s
    width = Dk if v else Dv + Dk
    kw = dict(kv=rng.standard_normal((B, N, S, width)).astype(dtype),
              gamma=rng.uniform(0.5, 1.5, Dk if v else Dv).astype(dtype),
              cos=rng.uniform(-1, 1, (B, N, cos_s, 64 if v else Dk)).astype(dtype),
              sin=rng.uniform(-1, 1, (B, N, cos_s, 64 if v else Dk)).astype(dtype),
              cache_mode=mode)
    dk, dv = (Dk, Dvv) if v else (Dk, Dv)
    if v:
        kw["v"] = rng.standard_normal((B, N, S, Dvv)).astype(dtype)
    shape = (lambda d: (B, N, Scache, d)) if mode == "Norm" else (lambda d: (block_num, block_size, N, d))
    for name, d, dt in (("k_cache", dk, k_dtype), ("ckv_cache", dv, c_dtype)):
        n = int(np.prod(shape(d)))
        sentinel = ((np.arange(n) % 2000) * 0.25 + 1000).reshape(shape(d))
        if dt is None:
            kw[name] = sentinel.astype(dtype)
        else:
            kw[name] = refspec.round_to(np.arange(n).reshape(shape(d)) % 200 - 100.0, dt)
            kw["k_rope_scale" if name == "k_cache" else "c_kv_scale"] = \
                rng.uniform(5, 40, (1, d)).astype(np.float32)
    if index is None:
        index = default_index(rng, mode, B, S, block_num, block_size, Scache)
    kw["index"] = np.asarray(index, np.int64)
    return kw


def default_index(rng, mode, B, S, block_num, block_size, Scache):
    """Out of order, with a skip, the first and last slot where there is room."""
    if mode == "Norm":
        idx = np.stack([rng.permutation(Scache)[:S] for _ in range(B)])
        idx[0, -1] = -1
        return idx
    if mode in ("PA_BLK_BNSD", "PA_BLK_NZ"):
        runs = -(-S // block_size)
        starts = rng.permutation(block_num)[:B * runs] * block_size
        starts[-1] = -1 if B * runs > 1 else starts[-1]
        return starts
    slots = rng.permutation(np.arange(1, block_num * block_size - 1))[:B * S]
    slots[0], slots[-1] = block_num * block_size - 1, 0
    if B * S > 2:
        slots[1] = -1
    return slots


def call(kw, fn=refspec.kv_rms_norm_rope_cache_v2, **extra):
    return fn(**{**kw, **extra})


# --- against the oracle ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("quant", ["none", "k", "both"])
def test_v1_equals_the_oracle(mode, quant):
    rng = np.random.default_rng(hash((mode, quant)) % 2**32)
    kw = case(rng, mode, k_dtype=np.int8 if quant != "none" else None,
              c_dtype=np.int8 if quant == "both" else None, block_size=32)
    exact = call(kw, out_dtype=F64, is_output_kv=True)
    want = oracle(**{k: kw[k] for k in ("kv", "gamma", "cos", "sin", "index", "k_cache",
                                         "ckv_cache")},
                  k_scale=kw.get("k_rope_scale"), c_scale=kw.get("c_kv_scale"), mode=mode)
    for got, w in zip(exact[:2], want[:2]):
        np.testing.assert_allclose(got, w, rtol=1e-13, atol=1e-12)
    rounded = call(kw, is_output_kv=True)
    for got, w, cache in zip(rounded[:2], want[:2], (kw["k_cache"], kw["ckv_cache"])):
        assert got.dtype == cache.dtype and got.shape == cache.shape
        expect = (np.clip(np.round(w), -128, 127).astype(np.int8) if cache.dtype == np.int8
                  else w.astype(cache.dtype))
        assert np.array_equal(bits(got), bits(expect)) if got.dtype != np.int8 \
            else np.array_equal(got, expect)
    if mode != "Norm":
        np.testing.assert_allclose(exact.k_rope, want[2], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(exact.c_kv, want[3], rtol=1e-13)
    else:
        assert exact.k_rope is None and exact.c_kv is None       # is_output_kv has no effect


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("N", [1, 4])
def test_v2_equals_the_oracle(mode, N):
    rng = np.random.default_rng(N + 10 * MODES.index(mode))
    kw = case(rng, mode, N=N, v=True, Dk=192, k_dtype=np.int8, block_size=32)
    kw["k_rope_scale"] = rng.uniform(5, 40, (N, 192)).astype(np.float32)
    kw["k_rope_offset"] = rng.uniform(-3, 3, (N, 192)).astype(np.float32)
    exact = call(kw, out_dtype=F64, is_output_kv=True, soc="A2")
    want = oracle(**{k: kw[k] for k in ("kv", "gamma", "cos", "sin", "index", "k_cache",
                                         "ckv_cache", "v")},
                  k_scale=kw["k_rope_scale"], k_offset=kw["k_rope_offset"], mode=mode)
    for got, w in zip(exact[:2], want[:2]):
        np.testing.assert_allclose(got, w, rtol=1e-13, atol=1e-11)
    if exact.k_rope is not None:
        np.testing.assert_allclose(exact.k_rope, want[2], rtol=1e-13, atol=1e-13)
        assert np.array_equal(exact.c_kv, np.asarray(kw["v"], F64))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, hifloat8],
                         ids=["e4m3fn", "e5m2", "hifloat8"])
def test_950_float8_caches_hold_the_rounded_values(dtype):
    rng = np.random.default_rng(3)
    kw = case(rng, "PA_NZ", Dv=256, Dk=64, k_dtype=dtype, c_dtype=dtype, block_size=32)
    kw["k_rope_offset"] = np.full((1, 64), 0.5, np.float32)
    exact = call(kw, out_dtype=F64, soc="950")
    codes = call(kw, soc="950")
    want = oracle(**{k: kw[k] for k in ("kv", "gamma", "cos", "sin", "index", "k_cache",
                                         "ckv_cache")}, k_scale=kw["k_rope_scale"],
                  c_scale=kw["c_kv_scale"], k_offset=kw["k_rope_offset"], mode="PA_NZ")
    np.testing.assert_allclose(exact.k_cache, want[0], rtol=1e-13, atol=1e-11)
    for got, w in zip(codes[:2], want[:2]):
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(refspec.spec.dtypes.to_float64(got),
                              refspec.spec.dtypes.to_float64(refspec.round_to(w, dtype)))


def test_equals_a_torch_transcription():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    kw = case(rng, "PA_BNSD", B=3, S=2)
    t = {k: torch.from_numpy(np.asarray(kw[k], F64)) for k in ("kv", "gamma", "cos", "sin")}
    x = t["kv"][..., :512]
    y = (x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)) * t["gamma"]
    r = t["kv"][..., 512:]
    x1, x2 = r[..., ::2], r[..., 1::2]
    k = torch.cat((x1, x2), -1) * t["cos"] + torch.cat((-x2, x1), -1) * t["sin"]
    kc = torch.from_numpy(np.asarray(kw["k_cache"], F64)).reshape(-1, 1, 64)
    slots = torch.from_numpy(kw["index"])
    keep = slots >= 0
    kc[slots[keep]] = k.permute(0, 2, 1, 3).reshape(-1, 1, 64)[keep]
    got = call(kw, out_dtype=F64, is_output_kv=True)
    np.testing.assert_allclose(got.k_cache.reshape(-1, 1, 64), kc.numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(got.c_kv, y.numpy(), rtol=1e-13)


# --- identities --------------------------------------------------------------------------------

def test_rms_norm_of_a_row_scaled_by_a_power_of_two_is_unchanged():
    """With eps = 0, c = 2^k scales x, x*x, the mean and the rms exactly: bit for bit. With
    eps > 0 the difference is bounded by eps/(2 mean(x^2)) relative."""
    rng = np.random.default_rng(5)
    kw = case(rng, "PA")
    base = call(kw, epsilon=0.0, out_dtype=F64, is_output_kv=True).c_kv
    for c in (2.0 ** -7, 8.0, 2.0 ** 12):
        kv = (np.asarray(kw["kv"], F64) * c)
        kv[..., 512:] = np.asarray(kw["kv"], F64)[..., 512:]
        again = call(kw, kv=kv, epsilon=0.0, out_dtype=F64, is_output_kv=True).c_kv
        assert np.array_equal(bits(base), bits(again))
    kv64 = np.asarray(kw["kv"], F64)
    ms = (kv64[..., :512] ** 2).mean(-1, keepdims=True)
    eps = 1e-5
    a = call(kw, kv=kv64, epsilon=eps, out_dtype=F64, is_output_kv=True).c_kv
    b = call(kw, kv=kv64 * 3.0, epsilon=eps, out_dtype=F64, is_output_kv=True).c_kv
    assert np.all(np.abs(a - b) <= np.abs(a) * eps / (2 * ms) + 1e-14 * np.abs(a))


def test_quantising_then_dequantising_is_within_half_a_step():
    rng = np.random.default_rng(6)
    kw = case(rng, "PA_BNSD", k_dtype=np.int8)
    kw["k_rope_scale"] = np.full((64,), 30.0, np.float32)
    kw["k_rope_offset"] = np.full((64,), 2.0, np.float32)
    exact = call(kw, out_dtype=F64, soc="950")
    codes = call(kw, soc="950")
    written = exact.k_cache != np.asarray(kw["k_cache"], F64)
    inside = written & (np.abs(exact.k_cache) < 127)
    value = (exact.k_cache[inside] - 2.0) / 30.0
    back = (codes.k_cache[inside].astype(F64) - 2.0) / 30.0
    assert inside.sum() > 100 and np.all(np.abs(back - value) <= 0.5 / 30.0 + 1e-15)


@pytest.mark.parametrize("mode", MODES)
def test_a_cache_written_with_every_index_minus_1_is_unchanged(mode):
    rng = np.random.default_rng(7)
    kw = case(rng, mode, k_dtype=np.int8)
    kw["index"] = np.full_like(kw["index"], -1)
    out = call(kw)
    assert np.array_equal(out.k_cache, kw["k_cache"])
    assert np.array_equal(bits(out.ckv_cache), bits(kw["ckv_cache"]))


@pytest.mark.parametrize("blk", [False, True])
def test_pa_nz_holds_pa_bnsd_values_in_another_order(blk):
    rng = np.random.default_rng(8)
    mode_nd, mode_nz = ("PA_BLK_BNSD", "PA_BLK_NZ") if blk else ("PA_BNSD", "PA_NZ")
    kw = case(rng, mode_nd, S=40, block_num=6)
    zeros = {n: np.zeros_like(kw[n]) for n in ("k_cache", "ckv_cache")}
    nd = call(kw, **zeros)
    nz = call(kw, **zeros, cache_mode=mode_nz)
    for a, b in zip(nd[:2], nz[:2]):
        n, bs, N, D = a.shape
        c0 = 16
        from_nz = b.reshape(n, N * D // c0, bs, c0).transpose(0, 2, 1, 3).reshape(a.shape)
        assert np.array_equal(bits(from_nz), bits(a))
        assert not np.array_equal(bits(a), bits(b))


def test_v2_without_v_is_v1():
    rng = np.random.default_rng(9)
    kw = case(rng, "PA_NZ", k_dtype=np.int8)
    one = refspec.kv_rms_norm_rope_cache(**kw, is_output_kv=True, out_dtype=F64)
    two = refspec.kv_rms_norm_rope_cache_v2(**kw, is_output_kv=True, out_dtype=F64)
    for a, b in zip(one, two):
        assert np.array_equal(bits(a), bits(b))


def test_v2_coincides_with_v1_where_its_kv_is_v1s_rms_part():
    """V2 normalises all of kv and rotates its first 64 values; V1 normalises kv[..., :Dv]. With
    V2's kv = V1's kv[..., :Dv] (Dv = Dk = 128 here, math only), V2's k_rope tail is V1's c_kv
    tail and its head the rotation of V1's c_kv head."""
    rng = np.random.default_rng(10)
    kw = case(rng, "PA", Dv=128, Dk=64)
    one = call(kw, out_dtype=F64, is_output_kv=True)
    kw2 = case(rng, "PA", v=True, Dk=128)
    kw2.update(kv=kw["kv"][..., :128], gamma=kw["gamma"], cos=kw["cos"], sin=kw["sin"],
               index=kw["index"])
    two = call(kw2, out_dtype=F64, is_output_kv=True)
    assert np.array_equal(bits(two.k_rope[..., 64:]), bits(one.c_kv[..., 64:]))
    rotated = refspec.rotary_position_embedding(one.c_kv[..., :64], np.asarray(kw["cos"], F64),
                                                np.asarray(kw["sin"], F64), mode=3)
    np.testing.assert_allclose(two.k_rope[..., :64], rotated, rtol=0, atol=0)


def test_the_rotation_is_rotary_position_embedding_mode_3_and_interleave_rope():
    rng = np.random.default_rng(11)
    kw = case(rng, "PA")
    got = call(kw, out_dtype=F64, is_output_kv=True).k_rope
    x = np.asarray(kw["kv"], F64)[..., 512:]
    c, s = np.asarray(kw["cos"], F64), np.asarray(kw["sin"], F64)
    assert np.array_equal(bits(got), bits(refspec.rotary_position_embedding(x, c, s, mode=3)))
    assert np.array_equal(bits(got), bits(refspec.interleave_rope(x, c, s, out_dtype=F64)))


def test_inputs_are_not_changed():
    rng = np.random.default_rng(12)
    kw = case(rng, "PA_NZ", k_dtype=np.int8)
    before = {k: np.array(v, copy=True) for k, v in kw.items() if isinstance(v, np.ndarray)}
    call(kw)
    call(kw, out_dtype=F64)
    for k, v in before.items():
        assert np.array_equal(v.view(np.uint8), np.asarray(kw[k]).view(np.uint8)), k


@pytest.mark.parametrize("mode", MODES)
def test_caches_as_their_writes_hold_the_whole_caches(mode):
    """whole_caches=False: each cache is the cache given (the caller's array, unchanged), the
    offsets written ascending, the oracle's exact values there, every other element the
    cache's own; ``whole(out_dtype)`` is the cache returned otherwise, bit for bit."""
    def raw(a):
        return np.ascontiguousarray(a).view(np.uint8)
    rng = np.random.default_rng(15)
    kw = case(rng, mode, k_dtype=np.int8)
    before = {k: np.array(kw[k], copy=True) for k in ("k_cache", "ckv_cache")}
    parts = call(kw, out_dtype=F64, is_output_kv=True, whole_caches=False)
    want = oracle(**{k: kw[k] for k in ("kv", "gamma", "cos", "sin", "index", "k_cache",
                                         "ckv_cache")}, k_scale=kw["k_rope_scale"], mode=mode)
    exact, rounded = call(kw, out_dtype=F64, is_output_kv=True), call(kw, is_output_kv=True)
    for i, name in enumerate(("k_cache", "ckv_cache")):
        p = getattr(parts, name)
        assert p.cache is kw[name] and np.array_equal(raw(p.cache), raw(before[name]))
        assert np.all(np.diff(p.offsets) > 0) and p.values.dtype == F64
        np.testing.assert_allclose(p.values, want[i].reshape(-1)[p.offsets], rtol=1e-13, atol=1e-12)
        others = np.delete(want[i].reshape(-1), p.offsets)
        assert np.array_equal(others, np.delete(np.asarray(before[name], F64).reshape(-1), p.offsets))
        assert np.array_equal(raw(p.whole(F64)), raw(exact[i]))
        assert np.array_equal(raw(p.whole()), raw(rounded[i])) and p.whole().dtype == before[name].dtype
    for got, w in zip(parts[2:], exact[2:]):
        assert (got is None and w is None) or np.array_equal(raw(got), raw(w))


@pytest.mark.parametrize("mode", ["Norm", "PA_BNSD", "PA_NZ"])
def test_caches_in_any_memory_order_are_written_alike(mode):
    """A cache in Fortran order or a strided view holds the same values as a C-ordered one:
    the tokens are written into it all the same (the returned cache is a new array)."""
    rng = np.random.default_rng(16)
    kw = case(rng, mode, k_dtype=np.int8)
    want = call(kw, is_output_kv=True)
    want64 = call(kw, out_dtype=F64, is_output_kv=True)
    doubled = np.repeat(kw["ckv_cache"], 2, axis=-1)
    for other in ({"k_cache": np.asfortranarray(kw["k_cache"])},
                  {"ckv_cache": doubled[..., ::2]}):
        assert not next(iter(other.values())).flags["C_CONTIGUOUS"]
        got, got64 = call({**kw, **other}, is_output_kv=True), call({**kw, **other}, out_dtype=F64,
                                                                      is_output_kv=True)
        for g, w in zip((*got[:2], *got64[:2]), (*want[:2], *want64[:2])):
            assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))


def test_norm_mode_batches_may_repeat_positions():
    rng = np.random.default_rng(13)
    kw = case(rng, "Norm", index=[[0, 1, 2], [0, 1, 2]])
    out = call(kw, out_dtype=F64)
    want = oracle(**{k: kw[k] for k in ("kv", "gamma", "cos", "sin", "index", "k_cache",
                                         "ckv_cache")}, mode="Norm")
    np.testing.assert_allclose(out.k_cache, want[0], rtol=1e-13, atol=1e-13)


# --- tolerance terms ---------------------------------------------------------------------------

def test_terms_name_the_written_elements_and_their_class():
    rng = np.random.default_rng(14)
    kw = case(rng, "PA_NZ", k_dtype=np.int8)
    t = kv_rms_norm_rope_cache_terms(**kw, is_output_kv=True)
    exact = call(kw, out_dtype=F64, is_output_kv=True)
    k = t["k_cache"]
    assert k.comparison_class == CACHE and k.written_class == QUANTISED
    changed = np.flatnonzero(exact.k_cache.reshape(-1) != np.asarray(kw["k_cache"], F64).reshape(-1))
    assert set(changed) <= set(k.written) and len(k.written) == 5 * 64   # one token skipped
    assert np.all(np.diff(k.written) > 0) and k.sum_abs.shape == k.written.shape
    scale = kw["k_rope_scale"].astype(F64).reshape(-1)
    x = np.asarray(kw["kv"], F64)[..., 512:]
    c, s = np.asarray(kw["cos"], F64), np.asarray(kw["sin"], F64)
    x1, x2 = x[..., ::2], x[..., 1::2]
    S = (np.abs(np.concatenate((x1, x2), -1) * c) + np.abs(np.concatenate((-x2, x1), -1) * s)) * scale
    tokens = np.delete(S.transpose(0, 2, 1, 3).reshape(6, -1), 1, axis=0)   # token 1 is skipped
    np.testing.assert_allclose(np.sort(k.sum_abs), np.sort(tokens.reshape(-1)), rtol=1e-14)
    c_terms = t["ckv_cache"]
    assert c_terms.written_class == ROW_REDUCTION and c_terms.reduced_terms == 512
    assert t["k_rope"].comparison_class == ELEMENTWISE and t["c_kv"].comparison_class == ROW_REDUCTION
    two = kv_rms_norm_rope_cache_terms(**case(rng, "PA", v=True, Dk=192), is_output_kv=True)
    assert two["ckv_cache"].written_class == COPY and two["c_kv"].comparison_class == COPY
    assert two["k_rope"].comparison_class == ROW_REDUCTION and two["k_rope"].reduced_terms == 192


# --- validation --------------------------------------------------------------------------------

def _a2(**changes):
    rng = np.random.default_rng(15)
    kw = case(rng, changes.pop("mode", "PA"), **changes.pop("case", {}))
    return {**kw, "soc": "A2", **changes}


def _scaled(mode="PA", **extra):
    rng = np.random.default_rng(16)
    kw = case(rng, mode, k_dtype=np.int8, c_dtype=np.int8, block_size=32)
    kw.update(extra)
    return kw


REJECTED = [
    pytest.param(kw, cls, code, arg, id=name) for name, kw, cls, code, arg in [
        ("kv-missing", _a2(kv=None), ParamNullptrError, 161001, "kv"),
        ("index-missing", _a2(index=None), ParamNullptrError, 161001, "index"),
        ("ckv_cache-missing", _a2(ckv_cache=None), ParamNullptrError, 161001, "ckv_cache"),
        ("A2-kv-float32", _a2(case=dict(dtype=np.float32)), ParamInvalidError, 161002, "kv"),
        ("A2-gamma-other-dtype", {**_a2(), "gamma": _a2()["gamma"].astype(ml_dtypes.bfloat16)},
         ParamInvalidError, 161002, "gamma"),
        ("A2-index-int32", {**_a2(), "index": _a2()["index"].astype(np.int32)}, ParamInvalidError,
         161002, "index"),
        ("epsilon-not-real", _a2(epsilon="1e-5"), ParamInvalidError, 161002, "epsilon"),
        ("is_output_kv-not-bool", _a2(is_output_kv=1), ParamInvalidError, 161002, "is_output_kv"),
        ("cache_mode-unknown", _a2(cache_mode="PA_ND"), TilingError, 561002, "cache_mode"),
        ("A2-float8-cache", {**_scaled(), "soc": "A2", "k_cache": _scaled()["k_cache"].astype(
            ml_dtypes.float8_e4m3fn)}, ParamInvalidError, 161002, "k_cache"),
        ("quant-cache-without-scale", {**_scaled(), "k_rope_scale": None}, ParamInvalidError,
         161002, "k_cache"),
        ("A2-cache-not-kv-dtype", {**_a2(), "k_cache": _a2()["k_cache"].astype(ml_dtypes.bfloat16)},
         ParamInvalidError, 161002, "k_cache"),
        ("scale-for-a-float-cache", _a2(k_rope_scale=np.ones(64, np.float32)), ParamInvalidError,
         161002, "k_rope_scale"),
        ("950-int8-with-float8", {**_scaled(), "soc": "950", "ckv_cache": _scaled()["ckv_cache"]
                                  .astype(ml_dtypes.float8_e5m2)}, ParamInvalidError, 161002,
         "ckv_cache"),
        ("kv-rank-3", {**_a2(), "kv": _a2()["kv"][0]}, TilingError, 561002, "kv"),
        ("gamma-rank-2", {**_a2(), "gamma": _a2()["gamma"][None]}, TilingError, 561002, "gamma"),
        ("sin-other-shape", {**_a2(), "sin": _a2()["sin"][:, :, :1]}, TilingError, 561002, "sin"),
        ("cos-other-batch", {**_a2(), "cos": _a2()["cos"][:1], "sin": _a2()["sin"][:1]},
         TilingError, 561002, "cos"),
        ("v-other-tokens", {**_a2(case=dict(v=True, Dk=192)),
                            "v": _a2(case=dict(v=True, Dk=192))["v"][:, :, :1]},
         TilingError, 561002, "v"),
        ("950-v-given", {**_a2(case=dict(v=True, Dk=192)), "soc": "950"}, TilingError, 561002, "v"),
        ("v1-sizes-do-not-add-up", {**_a2(), "soc": None, "gamma": _a2()["gamma"][:500]},
         TilingError, 561002, "gamma"),
        ("v2-gamma-not-kv-width", {**_a2(case=dict(v=True, Dk=192)), "soc": None,
                                   "gamma": np.ones(64, F16)}, TilingError, 561002, "gamma"),
        ("odd-rope-size", dict(_a2(case=dict(Dv=63, Dk=65)), soc=None), TilingError, 561002, "cos"),
        ("A2-rms-size-256", _a2(case=dict(Dv=256)), TilingError, 561002, "gamma"),
        ("A2-rope-size-32", _a2(case=dict(Dv=512, Dk=32)), TilingError, 561002, "cos"),
        ("A2-v2-v-width-64", _a2(case=dict(v=True, Dk=192, Dvv=64)), TilingError, 561002, "v"),
        ("A2-v1-two-heads", _a2(case=dict(N=2)), TilingError, 561002, "kv"),
        ("A2-v2-three-heads", _a2(case=dict(N=3, v=True, Dk=192)), TilingError, 561002, "kv"),
        ("A2-empty", _a2(case=dict(S=0, index=np.zeros(0))), TilingError, 561002, "kv"),
        ("A2-cos-broadcast-in-PA_BNSD", _a2(mode="PA_BNSD", case=dict(cos_s=1)), TilingError,
         561002, "cos"),
        ("cache-rank-3", {**_a2(), "k_cache": _a2()["k_cache"][0]}, TilingError, 561002, "k_cache"),
        ("cache-D-wrong", {**_a2(), "ckv_cache": _a2()["ckv_cache"][..., :256]}, TilingError,
         561002, "ckv_cache"),
        ("norm-cache-batch-wrong", {**_a2(mode="Norm"), "k_cache": _a2(mode="Norm")["k_cache"][:1]},
         TilingError, 561002, "k_cache"),
        ("norm-cache-shorter-than-S", _a2(mode="Norm", case=dict(Scache=2, index=np.zeros((2, 3)))),
         TilingError, 561002, "ckv_cache"),
        ("paged-caches-other-blocks", {**_a2(), "ckv_cache": _a2()["ckv_cache"][:3]}, TilingError,
         561002, "ckv_cache"),
        ("block_size-1", dict(_a2(case=dict(block_size=1, block_num=16)), soc=None), TilingError,
         561002, "block_size"),
        ("A2-block_size-24", _a2(case=dict(block_size=24)), TilingError, 561002, "k_cache"),
        ("A2-int8-block_size-16", {**_scaled(), "soc": "A2", "k_cache": np.zeros((8, 16, 1, 64), np.int8),
                                   "ckv_cache": np.zeros((8, 16, 1, 512), np.int8)},
         TilingError, 561002, "k_cache"),
        ("nz-width", dict(_a2(mode="PA_NZ", case=dict(Dv=520, Dk=56)), soc=None), TilingError,
         561002, "k_cache"),
        ("A2-scale-float64", {**_scaled(), "soc": "A2", "k_rope_scale": np.ones(64)},
         ParamInvalidError, 161002, "k_rope_scale"),
        ("A2-v1-scale-per-head", {**_scaled(), "soc": "A2", "k_rope_scale": np.ones((2, 64), np.float32)},
         TilingError, 561002, "k_rope_scale"),
        ("A2-v1-scale-one-value", {**_scaled(), "soc": "A2", "c_kv_scale": np.ones(1, np.float32)},
         TilingError, 561002, "c_kv_scale"),
        ("offset-without-scale", {**_a2(), "soc": "950", "k_rope_offset": np.ones(64, np.float32)},
         ParamInvalidError, 161002, "k_rope_offset"),
        ("quant-ranks-differ", {**_scaled(), "soc": "950", "c_kv_scale": np.ones(512, np.float32)},
         TilingError, 561002, "k_rope_scale"),
        ("A2-v1-norm-quantised", {**_scaled(mode="Norm"), "soc": "A2"}, TilingError, 561002,
         "cache_mode"),
        ("A2-pa-quantised-cos-broadcast", {**_scaled(), "soc": "A2", "cos": _scaled()["cos"][:, :, :1],
                                           "sin": _scaled()["sin"][:, :, :1]}, TilingError, 561002, "cos"),
        ("index-size", {**_a2(), "index": _a2()["index"][:-1]}, TilingError, 561002, "index"),
        ("blk-index-not-block-start", _a2(mode="PA_BLK_BNSD", case=dict(index=[32, 65])),
         ParamInvalidError, 161002, "index"),
        ("index-past-the-cache", _a2(case=dict(index=[0, 1, 2, 3, 4, 128])), ParamInvalidError,
         161002, "index"),
        ("index-below-minus-1", _a2(case=dict(index=[0, 1, 2, 3, 4, -2])), ParamInvalidError,
         161002, "index"),
        ("index-slot-twice", _a2(case=dict(index=[7, 1, 2, 3, 4, 7])), ParamInvalidError, 161002,
         "index"),
        ("norm-index-twice-in-a-batch", _a2(mode="Norm", case=dict(index=[[1, 1, 2], [0, 1, 2]])),
         ParamInvalidError, 161002, "index"),
        ("soc-unknown", _a2(soc="910"), ParamInvalidError, 161002, "soc"),
    ]]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(kw)
    assert_aclnn(excinfo, cls, code, argument)
    assert str(excinfo.value).endswith("]")


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-v1-PA", _a2()),
        ("A3-v1-Norm-S-broadcast", {**_a2(mode="Norm", case=dict(cos_s=1)), "soc": "A3"}),
        ("A2-v2-four-heads-quantised", {**_a2(mode="PA_NZ", case=dict(N=4, v=True, Dk=192,
                                                                       k_dtype=np.int8)),
                                         "k_rope_scale": np.ones((4, 192), np.float32),
                                         "k_rope_offset": np.ones((4, 192), np.float32)}),
        ("A2-v1-offset-ignored", {**_scaled(), "soc": "A2", "k_rope_offset": np.ones((1, 64), np.float32)}),
        ("950-scale-one-value", {**_scaled(), "soc": "950", "k_rope_scale": np.ones(1, np.float32),
                                 "c_kv_scale": np.ones(1, np.float32)}),
        ("950-D-not-A2s", dict(_a2(case=dict(Dv=128, Dk=32)), soc="950")),
        ("none-float64-odd-sizes", dict(_a2(case=dict(Dv=10, Dk=6, dtype=F64, block_size=3)),
                                        soc=None)),
    ]]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    out = call(kw)
    assert out.k_cache.shape == np.shape(kw["k_cache"])


def test_a2_v1_ignores_the_offsets_math_applies_them():
    """A2/A3 V1 quantise symmetrically whatever offset is given (the documents); the math-only
    profile and 950 add it."""
    kw = {**_scaled(), "k_rope_offset": np.full((1, 64), 3.0, np.float32)}
    a2 = call(kw, soc="A2", out_dtype=F64).k_cache
    plain = call({**kw, "k_rope_offset": None}, soc="A2", out_dtype=F64).k_cache
    math = call(kw, soc=None, out_dtype=F64).k_cache
    assert np.array_equal(a2, plain) and np.any(math != a2)


def test_out_dtype_rejected():
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(_a2(), out_dtype="int8")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


@st.composite
def junk(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    mode = draw(st.sampled_from(MODES))
    kw = case(rng, mode, Dv=draw(st.sampled_from([8, 512])), Dk=draw(st.sampled_from([4, 64])),
              B=draw(st.integers(1, 2)), S=draw(st.integers(1, 3)), block_size=draw(st.sampled_from([1, 16, 32])),
              k_dtype=draw(st.sampled_from([None, np.int8])))
    return with_junk(draw, kw, (None, "A2", "950"))


test_only_aclnn_errors_are_raised = fuzz_test(refspec.kv_rms_norm_rope_cache_v2, junk())


# --- errata (docs/errata.md) ------------------------------------------------------------------

def test_E28_int8_quantisation_rounds_half_to_even_and_saturates():
    """The documents write round(x).clamp(-128, 127) (KvRmsNormRopeCache, PyTorch's round: half
    to even), nothing (QkvRmsNormRopeCache) or an undefined Quant (DequantRopeQuantKvcache): all
    three take half to even, clamped. Values x*scale = 2.5, 3.5, -2.5, 300 -> 2, 4, -2, 127."""
    kw = _scaled(mode="PA_BNSD")
    kv = np.zeros_like(kw["kv"], dtype=F64)
    kv[..., 512:] = 1.0
    c, s = np.ones_like(kw["cos"], F64), np.zeros_like(kw["sin"], F64)
    scale = np.array([[2.5, 3.5, -2.5, 300.0] * 16], np.float32)
    out = call(kw, kv=kv, cos=c, sin=s, k_rope_scale=scale, soc=None, index=np.arange(6))
    assert out.k_cache.reshape(-1, 64)[0, :4].tolist() == [2, 4, -2, 127]


def test_E30_offsets_checked_like_the_scales_and_ignored_by_a2_v1():
    bad = {**_scaled(), "soc": "A2", "k_rope_offset": np.ones((3, 64), np.float32)}
    with pytest.raises(TilingError) as info:
        call(bad)
    assert_aclnn(info, TilingError, 561002, "k_rope_offset")
    test_a2_v1_ignores_the_offsets_math_applies_them()


def test_E31_the_fractal_width_is_32_bytes_of_each_caches_dtype():
    """One cache int8 (tiles of 32), the other float16 (tiles of 16), in one call."""
    rng = np.random.default_rng(20)
    kw = case(rng, "PA_NZ", k_dtype=np.int8)
    zeros = {"k_cache": np.zeros_like(kw["k_cache"]), "ckv_cache": np.zeros_like(kw["ckv_cache"])}
    nz = call(kw, **zeros, out_dtype=F64)
    nd = call(kw, **zeros, cache_mode="PA_BNSD", out_dtype=F64)
    for got, want, c0 in ((nz.k_cache, nd.k_cache, 32), (nz.ckv_cache, nd.ckv_cache, 16)):
        n, bs, N, D = want.shape
        assert np.array_equal(got.reshape(n, N * D // c0, bs, c0).transpose(0, 2, 1, 3).reshape(want.shape), want)


def test_E32_blocked_modes_take_block_starts():
    with pytest.raises(ParamInvalidError) as info:
        call(_a2(mode="PA_BLK_NZ", case=dict(index=[33, 64])))
    assert_aclnn(info, ParamInvalidError, 161002, "index")
    call(_a2(mode="PA_BLK_NZ", case=dict(index=[32, 64])))


def test_E33_float8_caches_saturate_at_their_largest_finite_value():
    kw = _scaled(mode="PA")
    big = {"k_rope_scale": np.full((1, 64), 1e6, np.float32), "c_kv_scale": np.full((1, 512), 1e6, np.float32)}
    for dtype, top in ((ml_dtypes.float8_e4m3fn, 448.0), (ml_dtypes.float8_e5m2, 57344.0), (hifloat8, 2.0 ** 15)):
        caches = {n: refspec.round_to(np.zeros(np.shape(kw[n])), dtype) for n in ("k_cache", "ckv_cache")}
        out = call({**kw, **caches, **big}, soc="950")
        v = refspec.spec.dtypes.to_float64(out.k_cache)
        assert np.all(np.isfinite(v)) and np.abs(v).max() == top


def test_E34_the_index_decides_how_many_blocks_are_needed():
    """B = 2, S = 40, blocks of 32: the aclnn document's Floor(S/bs)*B = 2 blocks, torch_npu's
    Ceil = 4. With 3 blocks PA mode holds the 80 tokens; PA_BLK needs 4 distinct blocks, which
    3 cannot give."""
    ok = case(np.random.default_rng(21), "PA", S=40, block_num=3, index=np.arange(80))
    call(ok, soc="A2")
    blk = case(np.random.default_rng(21), "PA_BLK_BNSD", S=40, block_num=3, index=[0, 32, 64, 64])
    with pytest.raises(ParamInvalidError) as info:
        call(blk, soc="A2")
    assert_aclnn(info, ParamInvalidError, 161002, "index")


def test_E35_torch_npus_example_2_is_rejected_k_and_v_quantise_independently():
    """torch_npu's example 2: an int8 k_cache with k_rope_scale [64] and a float16 ckv_cache with
    c_kv_scale [512]. The aclnn rules: a scale needs a quantised cache (161002)."""
    kw = _a2()
    kw.update(k_cache=np.zeros((4, 32, 1, 64), np.int8), k_rope_scale=np.ones(64, np.float32),
              c_kv_scale=np.ones(512, np.float32))
    with pytest.raises(ParamInvalidError) as info:
        call(kw)
    assert_aclnn(info, ParamInvalidError, 161002, "c_kv_scale")
    del kw["c_kv_scale"]
    assert call(kw).k_cache.dtype == np.int8                 # k alone quantised: accepted


def test_E36_norm_mode_repeats_positions_across_batches():
    test_norm_mode_batches_may_repeat_positions()


def test_E37_is_output_kv_takes_effect_in_norm_mode_with_v2_quantisation():
    rng = np.random.default_rng(22)
    kw = case(rng, "Norm", v=True, Dk=192, k_dtype=np.int8)
    kw["k_rope_scale"] = np.ones((1, 192), np.float32)
    out = call(kw, is_output_kv=True)
    assert out.k_rope is not None and out.c_kv is not None
    plain = case(rng, "Norm", v=True, Dk=192)
    assert call(plain, is_output_kv=True).k_rope is None


def test_E38_v2s_gamma_is_the_rms_size_192():
    kw = _a2(case=dict(v=True, Dk=192))
    assert kw["gamma"].shape == (192,)
    call(kw)
    with pytest.raises(TilingError) as info:
        call({**kw, "gamma": np.ones(128, np.float16)})
    assert_aclnn(info, TilingError, 561002, "gamma")


def test_E39_950_checks_that_the_two_parts_fill_kv():
    kw = dict(_a2(case=dict(Dv=128, Dk=32)), soc="950")
    call(kw)
    with pytest.raises(TilingError) as info:
        call({**kw, "kv": np.zeros((2, 1, 3, 170), np.float16)})
    assert_aclnn(info, TilingError, 561002, "gamma")


def test_E40_950_rejects_v():
    kw = {**_a2(case=dict(v=True, Dk=192)), "soc": "950"}
    with pytest.raises(TilingError) as info:
        call(kw)
    assert_aclnn(info, TilingError, 561002, "v")


def test_E41_unknown_cache_modes_and_norm_cache_batches_rejected():
    with pytest.raises(TilingError) as info:
        call(_a2(cache_mode="pa"))
    assert_aclnn(info, TilingError, 561002, "cache_mode")
    kw = _a2(mode="Norm")
    with pytest.raises(TilingError) as info:
        call({**kw, "k_cache": np.concatenate([kw["k_cache"]] * 2), "ckv_cache": np.concatenate([kw["ckv_cache"]] * 2)})
    assert_aclnn(info, TilingError, 561002, "k_cache")
