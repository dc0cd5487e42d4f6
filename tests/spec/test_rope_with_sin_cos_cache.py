"""RopeWithSinCosCache (docs/rope_with_sin_cos_cache.md).

Evidence that the outputs are right: a NumPy oracle written here from the document's o1/o2
lines, a torch transcription in the style of vLLM's rotary embedding with Qwen2-VL's mrope
section choice (skipped without torch), and identities (cos = 1, sin = 0 is the identity;
+theta then -theta gives the input back; mrope with three equal position rows is rope mode;
rotary_dim == head size leaves nothing to pass through; the part passed through is
bit-identical to the input). Then every validation rule of §4 (class, code, the argument the
message names, the other side of each boundary), the tolerance terms, the errata E18-E25, and a
fuzz test that nothing but an AclnnError is ever raised.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.rope_cache import rope_with_sin_cos_cache_terms
from refspec.spec.terms import ELEMENTWISE
from spec_helpers import assert_aclnn, bits

F64 = np.float64
SECTION = (16, 24, 24)


# --- oracles, from the document's formulas ---------------------------------------------------

def oracle(positions, query, key, cache, head_size, mrope_section=None, neox=True):
    """The document's lines in NumPy, float64: gather, chunk, mrope sections, o1/o2 per head."""
    cache = np.asarray(cache, F64)
    rd = cache.shape[1]
    cos_sin = cache[positions]
    cos, sin = cos_sin[..., : rd // 2], cos_sin[..., rd // 2:]
    if mrope_section is not None:
        bounds = np.cumsum((0,) + tuple(mrope_section))
        cos = np.concatenate([cos[j, :, bounds[j]:bounds[j + 1]] for j in range(3)], axis=-1)
        sin = np.concatenate([sin[j, :, bounds[j]:bounds[j + 1]] for j in range(3)], axis=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    out = []
    for x in (query, key):
        x = np.asarray(x, F64)
        h = x.reshape(x.shape[0], -1, head_size).copy()
        r = h[..., :rd]
        if neox:
            x1, x2 = r[..., : rd // 2], r[..., rd // 2:]
        else:
            x1, x2 = r[..., 0::2], r[..., 1::2]
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
        if neox:
            h[..., :rd] = np.concatenate((o1, o2), axis=-1)
        else:
            h[..., 0:rd:2], h[..., 1:rd:2] = o1, o2
        out.append(h.reshape(x.shape))
    return out


def angle_cache(theta):
    """A cache whose rows are cos(theta) then sin(theta)."""
    return np.concatenate((np.cos(theta), np.sin(theta)), axis=-1)


def inputs(rng, T=5, qn=3, kn=2, hs=16, rd=8, rows=11, dtype=F64, mrope=False):
    positions = rng.integers(0, rows, (3, T) if mrope else (T,))
    q = rng.uniform(-2, 2, (T, qn * hs)).astype(dtype)
    k = rng.uniform(-2, 2, (T, kn * hs)).astype(dtype)
    cache = rng.uniform(-1, 1, (rows, rd)).astype(dtype)
    return positions, q, k, cache


def run(positions, q, k, cache, hs=16, section=None, neox=True, **kw):
    return refspec.rope_with_sin_cos_cache(positions, q, k, cache, hs, section, neox, **kw)


# --- the outputs against the oracles -----------------------------------------------------------

@pytest.mark.parametrize("neox", (True, False))
@pytest.mark.parametrize("rd", (2, 8, 16))
def test_rope_mode_equals_the_oracle(rng, rd, neox):
    p, q, k, cache = inputs(rng, rd=rd)
    out = run(p, q, k, cache, neox=neox, out_dtype=F64)
    want = oracle(p, q, k, cache, 16, neox=neox)
    np.testing.assert_allclose(out.query, want[0], rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(out.key, want[1], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("neox", (True, False))
@pytest.mark.parametrize("section", ((16, 24, 24), (0, 8, 56), (64, 0, 0), (5, 11, 48)))
def test_mrope_mode_equals_the_oracle(rng, section, neox):
    p, q, k, cache = inputs(rng, hs=160, rd=128, rows=40, mrope=True)
    out = run(p, q, k, cache, 160, section, neox, out_dtype=F64)
    want = oracle(p, q, k, cache, 160, section, neox)
    np.testing.assert_allclose(out.query, want[0], rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(out.key, want[1], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("mrope", (False, True))
@pytest.mark.parametrize("neox", (True, False))
def test_equals_a_vllm_and_qwen2_vl_style_torch_transcription(rng, neox, mrope):
    """vLLM's rotary embedding (cos/sin from the cache's two halves, the rotary prefix of each
    head rotated, GPT-NeoX or GPT-J pairs) with Qwen2-VL's mrope choice (the angles split into
    sections, section j taken from position row j)."""
    torch = pytest.importorskip("torch")
    hs, rd = 160, 128
    p, q, k, cache = inputs(rng, hs=hs, rd=rd, rows=40, mrope=mrope)
    section = list(SECTION) if mrope else None
    cos_sin = torch.from_numpy(cache)[torch.from_numpy(p)]
    cos, sin = cos_sin.chunk(2, dim=-1)
    if mrope:
        cos = torch.cat([m[i] for i, m in enumerate(cos.split(section, dim=-1))], dim=-1)
        sin = torch.cat([m[i] for i, m in enumerate(sin.split(section, dim=-1))], dim=-1)

    def apply(x):
        x = torch.from_numpy(x).view(x.shape[0], -1, hs)
        rot, rest = x[..., :rd], x[..., rd:]
        c, s = cos.unsqueeze(-2), sin.unsqueeze(-2)
        x1, x2 = torch.chunk(rot, 2, dim=-1) if neox else (rot[..., ::2], rot[..., 1::2])
        o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
        rot = torch.cat((o1, o2), dim=-1) if neox else torch.stack((o1, o2), dim=-1).flatten(-2)
        return torch.cat((rot, rest), dim=-1).reshape(x.shape[0], -1).numpy()

    out = run(p, q, k, cache, hs, section and tuple(section), neox, out_dtype=F64)
    np.testing.assert_allclose(out.query, apply(q), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(out.key, apply(k), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("neox", (True, False))
def test_cos_1_sin_0_is_the_identity(rng, neox):
    p, q, k, _ = inputs(rng, dtype=np.float32)
    cache = np.concatenate((np.ones((11, 4)), np.zeros((11, 4))), axis=-1).astype(np.float32)
    out = run(p, q, k, cache, neox=neox)
    assert np.array_equal(bits(out.query), bits(q)) and np.array_equal(bits(out.key), bits(k))


@pytest.mark.parametrize("mrope", (False, True))
@pytest.mark.parametrize("neox", (True, False))
def test_rotating_back_by_minus_theta_gives_the_input(rng, neox, mrope):
    p, q, k, _ = inputs(rng, hs=160, rd=128, rows=40, mrope=mrope)
    theta = rng.uniform(-20, 20, (40, 64))
    section = SECTION if mrope else None
    there = run(p, q, k, angle_cache(theta), 160, section, neox, out_dtype=F64)
    back = run(p, there.query, there.key, angle_cache(-theta), 160, section, neox, out_dtype=F64)
    np.testing.assert_allclose(back.query, q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(back.key, k, rtol=0, atol=1e-12)
    assert np.abs(there.query - q).max() > 0.1


@pytest.mark.parametrize("neox", (True, False))
def test_mrope_with_three_equal_position_rows_is_rope_mode(rng, neox):
    p, q, k, cache = inputs(rng, hs=128, rd=128, rows=40, dtype=refspec.bfloat16)
    rope = run(p, q, k, cache, 128, None, neox, soc="A2")
    mrope = run(np.stack((p, p, p)), q, k, cache, 128, SECTION, neox, soc="A2")
    for a, b in zip(rope, mrope):
        assert np.array_equal(bits(a), bits(b))


@pytest.mark.parametrize("neox", (True, False))
def test_rotary_dim_equal_to_head_size_passes_nothing_through(rng, neox):
    """Every value of every head is rotated: the output is the RoPE of each whole head."""
    p, q, k, cache = inputs(rng, hs=8, rd=8)
    out = run(p, q, k, cache, 8, None, neox, out_dtype=F64)
    cos, sin = cache[p][:, None, :4], cache[p][:, None, 4:]
    pair = (lambda t: np.concatenate((t, t), -1)) if neox else (lambda t: np.repeat(t, 2, -1))
    mode = 0 if neox else 1
    whole = refspec.rotary_position_embedding(q.reshape(5, 3, 8), pair(cos), pair(sin), mode, out_dtype=F64)
    np.testing.assert_array_equal(out.query.reshape(5, 3, 8), whole)
    changed = out.query.reshape(5, 3, 8) != q.reshape(5, 3, 8)
    assert changed.any(axis=(0, 1)).all()                  # no position is left alone


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32))
def test_the_part_passed_through_is_bit_identical(rng, dtype):
    hs, rd = 64, 32
    p, q, k, cache = inputs(rng, hs=hs, rd=rd, dtype=dtype)
    out = run(p, q, k, cache, hs, soc="A3")
    for got, x in zip(out, (q, k)):
        g, x = got.reshape(5, -1, hs), x.reshape(5, -1, hs)
        assert np.array_equal(bits(g[..., rd:]), bits(x[..., rd:]))
        assert not np.array_equal(bits(g[..., :rd]), bits(x[..., :rd]))


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32))
def test_each_output_rounded_once_to_its_dtype(rng, dtype):
    p, q, k, cache = inputs(rng, hs=64, rd=32, dtype=dtype)
    exact = run(p, q, k, cache, 64, out_dtype=F64)
    out = run(p, q, k, cache, 64, soc="A2")
    assert isinstance(out, refspec.RopeWithSinCosCacheOutputs)
    for got, e in zip(out, exact):
        assert got.dtype == dtype and np.array_equal(bits(got), bits(refspec.round_to(e, dtype)))


def test_large_inputs_by_blocks_equal_the_oracle(rng):
    p, q, k, cache = inputs(rng, T=300, qn=16, kn=4, hs=128, rd=64, rows=500, dtype=np.float32)
    out = run(p, q, k, cache, 128, None, False, soc="A2", out_dtype=F64)
    want = oracle(p, q, k, cache, 128, neox=False)
    np.testing.assert_allclose(out.query, want[0], rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(out.key, want[1], rtol=1e-15, atol=1e-15)


# --- validation (docs/rope_with_sin_cos_cache.md §4) ----------------------------------------

NULL, INVALID, TILING = (ParamNullptrError, 161001), (ParamInvalidError, 161002), (TilingError, 561002)
T_, QN, KN, HS, RD = 4, 2, 1, 64, 32


def call(T=T_, qw=QN * HS, kw=KN * HS, rows=10, rd=RD, hs=HS, section=None, neox=True, dtype=np.float16,
         soc=None, mrope=None, **override):
    """Zero tensors of the given sizes (positions 0, (T,) or (3, T) when a section is given);
    ``override`` replaces a tensor (positions, query, key, cos_sin_cache) by name."""
    mrope = section is not None if mrope is None else mrope
    t = dict(positions=np.zeros((3, T) if mrope else (T,), np.int64), query=np.zeros((T, qw), dtype),
             key=np.zeros((T, kw), dtype), cos_sin_cache=np.zeros((rows, rd), dtype))
    t.update(override)
    return refspec.rope_with_sin_cos_cache(t["positions"], t["query"], t["key"], t["cos_sin_cache"], hs,
                                           section, neox, soc=soc)


def row(rule, cls_code, argument, **kw):
    return pytest.param(kw, *cls_code, argument, id=rule)


REJECTED = [
    row("positions-missing", NULL, "positions", positions=None),
    row("query-missing", NULL, "query", query=None),
    row("key-missing", NULL, "key", key=None, soc="A2"),
    row("cache-missing", NULL, "cos_sin_cache", cos_sin_cache=None),
    # dtypes -> 161002
    row("positions-int32-A2", INVALID, "positions", positions=np.zeros(T_, np.int32), soc="A2"),
    row("positions-float", INVALID, "positions", positions=np.zeros(T_)),
    row("positions-bool", INVALID, "positions", positions=np.zeros(T_, bool)),
    row("positions-ragged", INVALID, "positions", positions=[[0, 1], [2]]),
    row("query-float64-A2", INVALID, "query", dtype=F64, soc="A2"),
    row("query-complex", INVALID, "query", query=np.zeros((T_, 128), np.complex64)),
    row("key-dtype-differs-A2", INVALID, "key", key=np.zeros((T_, 64), np.float32), soc="A2"),
    row("cache-dtype-differs-A3", INVALID, "cos_sin_cache", cos_sin_cache=np.zeros((10, 32), refspec.bfloat16),
        soc="A3"),
    # the host code's shape checks -> 161002 (errata E23)
    row("query-3-D", INVALID, "query", query=np.zeros((T_, 2, 64), np.float16)),
    row("key-1-D", INVALID, "key", key=np.zeros(64, np.float16)),
    row("cache-3-D", INVALID, "cos_sin_cache", cos_sin_cache=np.zeros((10, 1, 32), np.float16)),
    row("A2-empty-query", INVALID, "query", qw=0, soc="A2"),
    row("A2-empty-positions", INVALID, "positions", T=0, soc="A2"),
    row("key-tokens-differ", INVALID, "key", key=np.zeros((T_ + 1, 64), np.float16)),
    # mropeSection and headSize -> 161002
    row("mrope-two-sections", INVALID, "mrope_section", section=(16, 16), rd=64, mrope=True),
    row("mrope-negative", INVALID, "mrope_section", section=(-16, 24, 24), rd=64, mrope=True),
    row("mrope-not-integers", INVALID, "mrope_section", section=(8.0, 4, 4), mrope=True),
    row("mrope-not-a-sequence", INVALID, "mrope_section", section=16, mrope=True),
    row("mrope-sum-is-rotary-dim", INVALID, "mrope_section", section=(8, 12, 12), rd=32),
    row("A2-mrope-other-sections", INVALID, "mrope_section", section=(32, 16, 16), rd=128, hs=128,
        qw=256, kw=128, soc="A2"),
    row("A2-mrope-first-section-0", INVALID, "mrope_section", section=(0, 32, 32), rd=128, hs=128,
        qw=256, kw=128, soc="A2"),
    row("head-size-0", INVALID, "head_size", hs=0),
    row("head-size-negative", INVALID, "head_size", hs=-64),
    row("head-size-float", INVALID, "head_size", hs=64.0),
    row("head-size-bool", INVALID, "head_size", hs=True),
    row("is-neox-style-int", INVALID, "is_neox_style", neox=1),
    row("is-neox-style-None", INVALID, "is_neox_style", neox=None),
    # the document's rules the host code does not check (errata E21) -> 561002
    row("query-width-not-heads", TILING, "query", qw=96),
    row("key-width-not-heads", TILING, "key", kw=32),
    row("rotary-dim-odd", TILING, "cos_sin_cache", rd=7),
    row("rotary-dim-0", TILING, "cos_sin_cache", rd=0),
    row("rotary-dim-above-head-size", TILING, "cos_sin_cache", rd=128),
    row("A2-head-size-48-float16", TILING, "head_size", hs=48, qw=96, kw=48, rd=32, soc="A2"),
    row("A3-rotary-dim-48-bfloat16", TILING, "cos_sin_cache", rd=48, dtype=refspec.bfloat16, soc="A3"),
    row("A2-head-size-40-float32", TILING, "head_size", hs=40, qw=80, kw=40, rd=16, dtype=np.float32, soc="A2"),
    row("A2-rotary-dim-8-float32", TILING, "cos_sin_cache", rd=8, dtype=np.float32, soc="A2"),
    row("positions-2-D-in-rope-mode", TILING, "positions", mrope=True),
    row("positions-1-D-in-mrope-mode", TILING, "positions", section=(4, 6, 6), mrope=False),
    row("positions-tokens-differ", TILING, "positions", positions=np.zeros(T_ + 1, np.int64)),
    row("positions-4-rows-mrope", TILING, "positions", section=(4, 6, 6), positions=np.zeros((4, T_), np.int64)),
    row("positions-beyond-the-cache", INVALID, "positions", positions=np.array([0, 1, 10, 2])),
    row("positions-negative", INVALID, "positions", positions=np.array([0, -1, 1, 2])),
    # the profile
    row("soc-950", INVALID, "soc", soc="950"),
    row("soc-unknown", INVALID, "soc", soc="A1"),
]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(**kw)
    assert_aclnn(excinfo, cls, code, argument)
    assert "[rope_with_sin_cos_cache" in str(excinfo.value) and str(excinfo.value).endswith("]")


def test_out_dtype_rejected():
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.rope_with_sin_cos_cache(np.zeros(2, np.int64), np.zeros((2, 8)), np.zeros((2, 8)),
                                        np.zeros((3, 8)), 8, out_dtype="int8")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-float16", dict(soc="A2")),
        ("A3-bfloat16-rotary-dim-head-size", dict(rd=64, dtype=refspec.bfloat16, soc="A3")),
        ("A2-float32-multiples-of-16", dict(hs=48, qw=96, kw=48, rd=16, dtype=np.float32, soc="A2")),
        ("A2-gpt-j", dict(neox=False, soc="A2")),
        ("A2-mrope-16-24-24", dict(section=(16, 24, 24), rd=128, hs=128, qw=256, kw=128, soc="A2")),
        ("A2-positions-last-row", dict(positions=np.array([9, 0, 9, 3]), soc="A2")),
        ("none-positions-int32", dict(positions=np.zeros(T_, np.int32))),
        ("none-positions-uint8", dict(positions=np.zeros(T_, np.uint8))),
        ("none-rotary-dim-2", dict(rd=2)),
        ("none-head-size-numpy-int", dict(hs=np.int64(64))),
        ("none-mrope-any-sections", dict(section=(0, 3, 1), rd=8)),
        ("none-mrope-list", dict(section=[4, 6, 6], rd=32)),
        ("none-neox-numpy-bool", dict(neox=np.bool_(False))),
        ("none-float64", dict(dtype=F64)),
        ("none-empty", dict(T=0)),
        ("none-no-key-heads", dict(kw=0)),
    ]
]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    out = call(**kw)
    T = kw.get("T", T_)
    assert out.query.shape == (T, kw.get("qw", QN * HS)) and out.key.shape == (T, kw.get("kw", KN * HS))


# --- tolerance terms -------------------------------------------------------------------------

@pytest.mark.parametrize("neox", (True, False))
def test_terms_are_elementwise_with_the_sum_of_absolute_products(rng, neox):
    hs, rd = 16, 8
    p, q, k, cache = inputs(rng, hs=hs, rd=rd, dtype=np.float32)
    terms = rope_with_sin_cos_cache_terms(p, q, k, cache, hs, None, neox)
    exact = run(p, q, k, cache, hs, None, neox, out_dtype=F64)
    c, s = np.abs(cache[p][:, None, :4].astype(F64)), np.abs(cache[p][:, None, 4:].astype(F64))
    for name, x, e in (("query", q, exact.query), ("key", k, exact.key)):
        t = terms[name]
        assert t.comparison_class == ELEMENTWISE and t.reduced_terms is None
        h = np.abs(x.astype(F64).reshape(5, -1, hs))
        want = h.copy()                                      # the part passed through: |x|
        r = h[..., :rd]
        x1, x2 = (r[..., :4], r[..., 4:]) if neox else (r[..., 0::2], r[..., 1::2])
        s1, s2 = x1 * c + x2 * s, x2 * c + x1 * s            # |o1| and |o2| term by term
        if neox:
            want[..., :rd] = np.concatenate((s1, s2), -1)
        else:
            want[..., 0:rd:2], want[..., 1:rd:2] = s1, s2
        np.testing.assert_allclose(t.sum_abs, want.reshape(x.shape), rtol=1e-15, atol=0)
        assert np.all(t.sum_abs >= np.abs(e) * (1 - 1e-15))


@pytest.mark.parametrize("dtype, out_dtype, given", [(np.float16, None, False), (refspec.bfloat16, None, False),
                                                     (np.float32, None, True), (refspec.bfloat16, F64, True)])
def test_terms_sum_abs_only_for_32_and_64_bit_outputs(rng, dtype, out_dtype, given):
    p, q, k, cache = inputs(rng, hs=64, rd=32, dtype=dtype)
    terms = rope_with_sin_cos_cache_terms(p, q, k, cache, 64, soc="A2", out_dtype=out_dtype)
    assert all((t.sum_abs is not None) == given for t in terms.values())


# --- errata E18-E25 ------------------------------------------------------------------------------

def test_E18_mrope_sections_sum_to_half_the_rotary_dim(rng):
    """The documents say rotaryDim = mropeSection[0] + [1] + [2], yet allow only (16, 24, 24)
    with rotaryDim 128; the host code checks the sum against rotaryDim/2, and the math needs
    that: the sections split the cos half of a cache row, rotaryDim/2 wide."""
    p, q, k, cache = inputs(rng, hs=128, rd=128, rows=40, mrope=True, dtype=np.float16)
    run(p, q, k, cache, 128, SECTION, soc="A2")
    assert sum(SECTION) == 64 == cache.shape[1] // 2
    p, q, k, cache = inputs(rng, hs=128, rd=64, rows=40, mrope=True, dtype=np.float16)
    with pytest.raises(refspec.AclnnError) as excinfo:
        run(p, q, k, cache, 128, SECTION, soc="A2")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "mrope_section")


def test_E19_positions_int64_only_and_outputs_in_the_input_dtype(rng):
    """The README lists int32 positions and an int32 keyOut; the aclnn document and the host
    code take int64 positions only, and keyOut has keyIn's dtype."""
    p, q, k, cache = inputs(rng, hs=64, rd=32, dtype=np.float16)
    out = run(p.astype(np.int64), q, k, cache, 64, soc="A2")
    assert out.key.dtype == np.float16
    with pytest.raises(refspec.AclnnError) as excinfo:
        run(p.astype(np.int32), q, k, cache, 64, soc="A2")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "positions")


def test_E20_every_head_is_rotated_not_only_the_first_columns_of_a_row(rng):
    """Read literally on the documented 2-D query (numTokens, numQHeads*headSize), queryRot =
    query[..., :rotaryDim] is the start of the first head only; the host code passes
    numQHeads = width / headSize to the kernel, which rotates each head's prefix."""
    hs, rd = 16, 8
    p, q, k, cache = inputs(rng, qn=3, hs=hs, rd=rd)
    out = run(p, q, k, cache, hs, out_dtype=F64)
    literal = oracle(p, q, q, cache, q.shape[1])[0]          # one "head" as wide as the row
    per_head = oracle(p, q, k, cache, hs)[0]
    np.testing.assert_allclose(out.query, per_head, rtol=1e-15, atol=1e-15)
    assert np.array_equal(literal[:, :rd], per_head[:, :rd])
    assert np.array_equal(literal[:, hs:], q[:, hs:])        # literally, heads 1 and 2 untouched
    assert not np.allclose(out.query[:, hs:hs + rd], q[:, hs:hs + rd])


def test_E21_document_rules_the_host_code_does_not_check():
    """headSize and rotaryDim multiples of 32 (16 for float32), rotaryDim <= headSize, widths of
    whole heads, positions of the mode's shape and below maxSeqLen: documented, unchecked by the
    host code (its numHeads = width / headSize silently drops a partial head)."""
    width, hs = 3 * 64, 128
    assert width // hs == 1 and width % hs                    # the code would rotate one head, skip 64 columns
    for kw, argument, cls in ((dict(qw=width, hs=hs, rd=32, kw=128), "query", TilingError),
                              (dict(hs=48, qw=96, kw=48, soc="A2"), "head_size", TilingError),
                              (dict(rd=128), "cos_sin_cache", TilingError),
                              (dict(positions=np.zeros(T_ + 1, np.int64)), "positions", TilingError),
                              (dict(positions=np.full(T_, 10)), "positions", ParamInvalidError)):
        with pytest.raises(refspec.AclnnError) as excinfo:
            call(**kw)
        assert type(excinfo.value) is cls and str(excinfo.value).startswith(argument + ": ")


def test_E22_a2_takes_only_the_supported_sections(rng):
    """The host code treats a first section <= 0 as rope mode and lets it through; the documents
    say a given mropeSection selects mrope mode and allow (16, 24, 24) only. refspec rejects any
    other section on A2/A3; the math takes (0, 32, 32) as mrope (rows 1 and 2), not rope mode."""
    p, q, k, cache = inputs(rng, hs=128, rd=128, rows=40, mrope=True)
    with pytest.raises(refspec.AclnnError) as excinfo:
        run(p, q.astype(np.float16), k.astype(np.float16), cache.astype(np.float16), 128, (0, 32, 32), soc="A2")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "mrope_section")
    mrope = run(p, q, k, cache, 128, (0, 32, 32), out_dtype=F64)
    np.testing.assert_allclose(mrope.query, oracle(p, q, k, cache, 128, (0, 32, 32))[0], rtol=1e-15, atol=1e-15)
    rope_row0 = run(p[0], q, k, cache, 128, None, out_dtype=F64)
    assert not np.allclose(mrope.query, rope_row0.query)


def test_E23_shape_checks_of_the_host_code_are_param_invalid():
    """The document lists 561002 for shapes that do not match between tensors; the host code's
    checks (ranks, empty tensors, the token counts of query and key) return 161002."""
    for kw, argument in ((dict(key=np.zeros((T_ + 1, 64), np.float16), soc="A2"), "key"),
                         (dict(query=np.zeros((T_, 2, 64), np.float16), soc="A2"), "query"),
                         (dict(qw=0, soc="A3"), "query")):
        with pytest.raises(refspec.AclnnError) as excinfo:
            call(**kw)
        assert_aclnn(excinfo, ParamInvalidError, 161002, argument)


def test_E24_gpt_j_pairs_are_laid_back_in_order(rng):
    """The GPT-J lines end with queryRot = stack((o1, o2), dim=-1), which has shape
    (..., rotaryDim/2, 2) and cannot be concatenated with queryPass; what is meant (and what
    vLLM and the kernel do) is the flattened stack: out[2i] = o1[i], out[2i+1] = o2[i]."""
    hs, rd = 16, 8
    p, q, k, cache = inputs(rng, qn=1, hs=hs, rd=rd)
    x = q.reshape(5, 1, hs)
    c, s = cache[p][:, None, :4], cache[p][:, None, 4:]
    o1 = x[..., 0:rd:2] * c - x[..., 1:rd:2] * s
    o2 = x[..., 1:rd:2] * c + x[..., 0:rd:2] * s
    literal = np.stack((o1, o2), axis=-1)
    assert literal.shape == (5, 1, rd // 2, 2)
    with pytest.raises(ValueError):
        np.concatenate((literal, x[..., rd:]), axis=-1)
    out = run(p, q, k, cache, hs, None, False, out_dtype=F64).query.reshape(5, 1, hs)
    np.testing.assert_allclose(out[..., :rd], literal.reshape(5, 1, rd), rtol=1e-15, atol=1e-15)


def test_E25_deterministic(rng):
    """The aclnn document's determinism note names aclnnNormRopeConcatBackward, another
    operator; RopeWithSinCosCache has no reduction, and refspec's outputs are bit-identical from
    call to call."""
    p, q, k, cache = inputs(rng, hs=64, rd=32, dtype=refspec.bfloat16)
    first = run(p, q, k, cache, 64, soc="A2")
    for _ in range(3):
        again = run(p, q, k, cache, 64, soc="A2")
        assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(first, again))


# --- fuzz: nothing but AclnnError ----------------------------------------------------------------

JUNK = [None, "tensor", [[1.0, 2.0], [3.0]], np.zeros((2, 3), np.complex64), np.zeros((0,)), 3.0,
        np.zeros((2, 2), np.int8), np.array([object()], dtype=object)]


@st.composite
def cache_args(draw):
    T, hs = draw(st.integers(0, 3)), draw(st.sampled_from([0, 2, 4, 8, 32, 3, -4]))
    rd = draw(st.sampled_from([0, 2, 4, 8, 32, 64, 3]))
    rows = draw(st.integers(0, 4))
    section = draw(st.sampled_from([None, None, (1, 1, 0), (16, 24, 24), (0, 2, 2), (1, 1), "abc", 5,
                                    (1.0, 1, 0), (-1, 2, 1)]))
    mrope = section is not None if draw(st.integers(0, 4)) else draw(st.booleans())
    dtype = draw(st.sampled_from([np.float16, refspec.bfloat16, np.float32, F64, np.int32]))
    pdtype = draw(st.sampled_from([np.int64, np.int64, np.int32, F64]))
    qn, kn = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    hs_ = max(hs, 1)
    t = [draw(st.integers(-1, rows)) * np.ones((3, T) if mrope else (T,), pdtype),
         np.ones((T, qn * hs_ + draw(st.sampled_from([0, 0, 1]))), dtype),
         np.ones((T + draw(st.sampled_from([0, 0, 1])), kn * hs_), dtype), np.ones((rows, rd), dtype)]
    t = [draw(st.sampled_from(JUNK)) if draw(st.integers(0, 9)) == 0 else a for a in t]
    neox = draw(st.sampled_from([True, False, 1, None, np.bool_(True)]))
    soc = draw(st.sampled_from([None, None, "A2", "A3", "950", "a2", "A1"]))
    out_dtype = draw(st.sampled_from([None, None, F64, "bf16", "int8"]))
    return t, hs, section, neox, soc, out_dtype


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cache_args())
def test_only_aclnn_errors_are_raised(case):
    t, hs, section, neox, soc, out_dtype = case
    try:
        out = refspec.rope_with_sin_cos_cache(*t, hs, section, neox, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    assert out.query.shape == np.shape(t[1]) and out.key.shape == np.shape(t[2])
