"""ApplyRotaryPosEmb and ApplyRotaryPosEmbV2 (docs/apply_rotary_pos_emb.md).

Evidence that the outputs are right: an index-table oracle written here from the document's
formulas (each mode's rotate step as a permutation with signs), a torch transcription of the
document's lines (skipped without torch), and identities (cos = 1, sin = 0 is the identity;
+theta then -theta gives the input back; V2 "half" is V1; the layouts agree). Then every
validation rule of §4 per chip profile (class, code, the argument the message names, and the
other side of each boundary), the tolerance terms, the errata E13-E17, and a fuzz test that
nothing but an AclnnError is ever raised.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from refspec.spec.apply_rope import apply_rotary_pos_emb_terms
from refspec.spec.terms import ELEMENTWISE
from spec_helpers import assert_aclnn, bits

F64 = np.float64
MODES = ("half", "interleave", "quarter")
#: layout number -> (axis letters, the rank)
LETTERS = {1: "BSND", 2: "SBND", 3: "BNSD", 4: "TND"}


# --- oracles, from the document's formulas ---------------------------------------------------

def rotate_table(mode: str, D: int):
    """(source index, sign) of every position of query_rotate, read off the document:
    half: cat(-q2, q1); quarter: cat(-q2, q1, -q4, q3); interleave: position 2i takes -q[2i+1],
    position 2i+1 takes q[2i]."""
    i = np.arange(D)
    if mode == "half":
        h = D // 2
        return np.where(i < h, i + h, i - h), np.where(i < h, -1.0, 1.0)
    if mode == "quarter":
        q = D // 4
        part = i // q                                # which quarter
        src = np.where(part % 2 == 0, i + q, i - q)
        return src, np.where(part % 2 == 0, -1.0, 1.0)
    return np.where(i % 2 == 0, i + 1, i - 1), np.where(i % 2 == 0, -1.0, 1.0)


def oracle(x, cos, sin, mode):
    """embed = x*cos + rotate(x)*sin in float64, rotate from the index table."""
    x, cos, sin = (np.asarray(a, F64) for a in (x, cos, sin))
    src, sign = rotate_table(mode, x.shape[-1])
    return x * cos + sign * x[..., src] * sin


def angle_tables(theta, mode):
    """cos/sin tables of a true rotation by ``theta`` (…, D/2 angles): each angle shared by the
    two positions that the mode rotates together."""
    c, s = np.cos(theta), np.sin(theta)
    if mode == "half":
        return np.concatenate((c, c), -1), np.concatenate((s, s), -1)
    if mode == "interleave":
        return np.repeat(c, 2, -1), np.repeat(s, 2, -1)
    q = theta.shape[-1] // 2
    return (np.concatenate((c[..., :q], c[..., :q], c[..., q:], c[..., q:]), -1),
            np.concatenate((s[..., :q], s[..., :q], s[..., q:], s[..., q:]), -1))


def shapes(layout, B=2, S=3, qn=4, kn=2, D=8, cos_b=None):
    """query, key and cos shapes of one problem in ``layout`` (TND: T = B*S)."""
    cos_b = B if cos_b is None else cos_b
    if layout == 4:
        return (B * S, qn, D), (B * S, kn, D), (B * S, 1, D)
    order = {1: lambda b, s, n: (b, s, n, D), 2: lambda b, s, n: (s, b, n, D),
             3: lambda b, s, n: (b, n, s, D)}[layout]
    return order(B, S, qn), order(B, S, kn), order(cos_b, S, 1)


def inputs(rng, layout=1, dtype=F64, scale=2.0, **kw):
    qs, ks, cs = shapes(layout, **kw)
    draw = lambda s: rng.uniform(-scale, scale, s).astype(dtype)  # noqa: E731
    return draw(qs), draw(ks), draw(cs), draw(cs)


def v2(q, k, c, s, layout=1, mode="half", **kw):
    return refspec.apply_rotary_pos_emb_v2(q, k, c, s, layout, mode, **kw)


# --- the outputs against the oracles -----------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", (1, 2, 3, 4))
def test_outputs_equal_the_index_table_oracle(rng, layout, mode):
    q, k, c, s = inputs(rng, layout)
    out = v2(q, k, c, s, layout, mode, out_dtype=F64)
    np.testing.assert_allclose(out.query, oracle(q, c, s, mode), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(out.key, oracle(k, c, s, mode), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("mode", MODES)
def test_outputs_equal_a_torch_transcription_of_the_document(rng, mode):
    torch = pytest.importorskip("torch")

    def rotate(x):                                   # the document's lines, in torch
        D = x.shape[-1]
        if mode == "half":
            x1, x2 = x[..., : D // 2], x[..., D // 2:]
            return torch.cat((-x2, x1), dim=-1)
        if mode == "quarter":
            x1, x2 = x[..., : D // 4], x[..., D // 4: D // 2]
            x3, x4 = x[..., D // 2: D // 4 * 3], x[..., D // 4 * 3:]
            return torch.cat((-x2, x1, -x4, x3), dim=-1)
        x1, x2 = x[..., ::2].reshape(-1, 1), x[..., 1::2].reshape(-1, 1)
        return torch.cat((-x2, x1), dim=-1).view(x.shape)

    q, k, c, s = inputs(rng, 1, D=16)
    tq, tk, tc, ts = (torch.from_numpy(a) for a in (q, k, c, s))
    out = v2(q, k, c, s, 1, mode, out_dtype=F64)
    np.testing.assert_array_equal(out.query, (tq * tc + rotate(tq) * ts).numpy())
    np.testing.assert_array_equal(out.key, (tk * tc + rotate(tk) * ts).numpy())


@pytest.mark.parametrize("mode", MODES)
def test_cos_1_sin_0_is_the_identity(rng, mode):
    q, k, c, s = inputs(rng, 1, dtype=np.float32)
    out = v2(q, k, np.ones_like(c), np.zeros_like(s), 1, mode)
    assert np.array_equal(bits(out.query), bits(q)) and np.array_equal(bits(out.key), bits(k))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", (1, 4))
def test_rotating_back_by_minus_theta_gives_the_input(rng, layout, mode):
    q, k, c, _ = inputs(rng, layout, D=16)
    theta = rng.uniform(-10, 10, c.shape[:-1] + (8,))
    cos, sin = angle_tables(theta, mode)
    there = v2(q, k, cos, sin, layout, mode, out_dtype=F64)
    back = v2(there.query, there.key, cos, -sin, layout, mode, out_dtype=F64)
    np.testing.assert_allclose(back.query, q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(back.key, k, rtol=0, atol=1e-12)
    assert np.abs(there.query - q).max() > 0.1         # it did rotate


@pytest.mark.parametrize("soc", (None, "A2", "950"))
@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32))
def test_v2_half_is_v1(rng, dtype, soc):
    q, k, c, s = inputs(rng, 1, dtype, D=64)
    one = refspec.apply_rotary_pos_emb(q, k, c, s, 1, soc=soc)
    two = v2(q, k, c, s, 1, "half", soc=soc)
    for a, b in zip(one, two):
        assert a.dtype == dtype and np.array_equal(bits(a), bits(b))


@pytest.mark.parametrize("dtype", (np.float16, refspec.bfloat16, np.float32))
def test_each_output_rounded_once_to_its_dtype(rng, dtype):
    q, k, c, s = inputs(rng, 4, dtype, D=64)
    exact = refspec.apply_rotary_pos_emb(q, k, c, s, 4, out_dtype=F64)
    out = refspec.apply_rotary_pos_emb(q, k, c, s, 4, soc="A3")
    assert isinstance(out, refspec.ApplyRotaryPosEmbOutputs)
    for got, e in zip(out, exact):
        assert got.dtype == dtype
        assert np.array_equal(bits(got), bits(refspec.round_to(e, dtype)))


def test_large_inputs_by_blocks_equal_the_oracle(rng):
    """Many blocks: the blocked evaluation is the formula on the whole arrays."""
    q, k, c, s = inputs(rng, 4, np.float32, B=4, S=64, qn=16, kn=8, D=64)
    out = refspec.apply_rotary_pos_emb(q, k, c, s, 4, soc="A2", out_dtype=F64)
    assert np.array_equal(out.query, oracle(q, c, s, "half"))
    assert np.array_equal(out.key, oracle(k, c, s, "half"))


def test_the_layouts_are_one_problem(rng):
    """The same logical (B, S, N, D) problem in BSND, SBND, BNSD and TND gives the same values."""
    q, k, c, s = inputs(rng, 1)                      # BSND
    want = v2(q, k, c, s, 1, "interleave", out_dtype=F64)
    perm = {2: (1, 0, 2, 3), 3: (0, 2, 1, 3)}
    for layout, p in perm.items():
        got = v2(*(a.transpose(p) for a in (q, k, c, s)), layout, "interleave", out_dtype=F64)
        assert np.array_equal(got.query.transpose(p), want.query)
        assert np.array_equal(got.key.transpose(p), want.key)
    flat = [a.reshape((-1,) + a.shape[2:]) for a in (q, k, c, s)]
    got = v2(*flat, "TND", "interleave", out_dtype=F64)
    assert np.array_equal(got.query, want.query.reshape(flat[0].shape))


def test_inputs_are_not_modified(rng):
    """The API updates queryRef and keyRef in place; refspec returns new arrays instead."""
    q, k, c, s = inputs(rng, 1, np.float32)
    before = [a.copy() for a in (q, k, c, s)]
    v2(q, k, c, s)
    for a, b in zip((q, k, c, s), before):
        assert np.array_equal(bits(a), bits(b))


def test_cos_broadcast_over_batch_on_950_and_math_only(rng):
    q, k, c, s = inputs(rng, 1, np.float32, cos_b=1, D=64)
    for soc in (None, "950"):
        out = v2(q, k, c, s, 1, "quarter", soc=soc, out_dtype=F64)
        np.testing.assert_allclose(out.query, oracle(q, c, s, "quarter"), rtol=1e-15, atol=1e-15)


# --- validation (docs/apply_rotary_pos_emb.md §4) -------------------------------------------

NULL, INVALID, TILING = (ParamNullptrError, 161001), (ParamInvalidError, 161002), (TilingError, 561002)
BSND_Q, BSND_K, BSND_C = (2, 3, 4, 64), (2, 3, 2, 64), (2, 3, 1, 64)


def call(q=BSND_Q, k=BSND_K, c=BSND_C, layout=1, mode="V1", dtype=np.float16, soc=None, **override):
    """V1 (``mode`` "V1") or V2 on zero tensors of the given shapes; ``override`` replaces a
    tensor (query, key, cos, sin) by name."""
    t = dict(query=np.zeros(q, dtype), key=np.zeros(k, dtype), cos=np.zeros(c, dtype), sin=np.zeros(c, dtype))
    t.update(override)
    if mode == "V1":
        return refspec.apply_rotary_pos_emb(t["query"], t["key"], t["cos"], t["sin"], layout, soc=soc)
    return refspec.apply_rotary_pos_emb_v2(t["query"], t["key"], t["cos"], t["sin"], layout, mode, soc=soc)


def row(rule, cls_code, argument, **kw):
    return pytest.param(kw, *cls_code, argument, id=rule)


def tnd(qn, kn, D, T=2):
    return dict(q=(T, qn, D), k=(T, kn, D), c=(T, 1, D), layout=4)


REJECTED = [
    # every profile: required tensors, dtypes
    row("query-missing", NULL, "query", query=None),
    row("key-missing", NULL, "key", key=None),
    row("cos-missing", NULL, "cos", cos=None),
    row("sin-missing", NULL, "sin", sin=None, soc="950"),
    row("query-int32-A2", INVALID, "query", query=np.zeros(BSND_Q, np.int32), soc="A2"),
    row("query-float64-A3", INVALID, "query", dtype=np.float64, soc="A3"),
    row("query-complex", INVALID, "query", query=np.zeros(BSND_Q, np.complex64)),
    row("key-dtype-differs-A2", INVALID, "key", key=np.zeros(BSND_K, np.float32), soc="A2"),
    row("cos-dtype-differs-950", INVALID, "cos", cos=np.zeros(BSND_C, refspec.bfloat16), soc="950"),
    row("sin-dtype-differs-A3", INVALID, "sin", sin=np.zeros(BSND_C, np.float32), soc="A3"),
    # every profile: layout and rotary mode values (E13: 561002 for the layout)
    row("layout-0", TILING, "layout", layout=0),
    row("layout-5-A2", TILING, "layout", layout=5, soc="A2"),
    row("layout-name-unknown", TILING, "layout", layout="NSBD"),
    row("layout-bool", TILING, "layout", layout=True),
    row("layout-1.5", TILING, "layout", layout=1.5, soc="950"),
    row("rotary-mode-unknown", INVALID, "rotary_mode", mode="rotate"),
    row("rotary-mode-case", INVALID, "rotary_mode", mode="Half", soc="A2"),
    row("rotary-mode-None", INVALID, "rotary_mode", mode=None),
    row("rotary-mode-int", INVALID, "rotary_mode", mode=0),
    row("rotary-mode-unknown-950", TILING, "rotary_mode", mode="rotate", soc="950"),
    # every profile: ranks, shapes, D
    row("query-rank-3-for-BSND", TILING, "query", q=(3, 4, 64), k=(3, 2, 64), c=(3, 1, 64)),
    row("cos-rank-3-for-BSND", TILING, "cos", c=(3, 1, 64)),
    row("key-rank-4-for-TND", TILING, "key", **{**tnd(4, 2, 64), "k": (1, 2, 2, 64)}),
    row("sin-shape-differs", TILING, "sin", sin=np.zeros((2, 3, 1, 32), np.float16)),
    row("key-D-differs", TILING, "key", k=(2, 3, 2, 32)),
    row("cos-D-differs", TILING, "cos", c=(2, 3, 1, 32)),
    row("D-odd", TILING, "query", q=(2, 3, 4, 7), k=(2, 3, 2, 7), c=(2, 3, 1, 7)),
    row("D-6-quarter", TILING, "query", q=(2, 3, 4, 6), k=(2, 3, 2, 6), c=(2, 3, 1, 6), mode="quarter"),
    # math only: cos must broadcast to query and to key
    row("cos-axis-neither-1-nor-query's", TILING, "cos", c=(2, 2, 1, 64)),
    row("cos-axis-neither-1-nor-key's", TILING, "cos", k=(2, 3, 3, 64), c=(2, 3, 4, 64)),
    # A2/A3
    row("A2-layout-SBND", TILING, "layout", layout=2, soc="A2"),
    row("A3-layout-BNSD", TILING, "layout", layout=3, soc="A3"),
    row("A2-interleave", INVALID, "rotary_mode", mode="interleave", soc="A2"),
    row("A3-quarter", INVALID, "rotary_mode", mode="quarter", soc="A3"),
    row("A2-empty", TILING, "query", q=(2, 3, 0, 64), soc="A2"),
    row("A2-key-B-differs", TILING, "key", k=(1, 3, 2, 64), soc="A2"),
    row("A2-cos-B-1", TILING, "cos", c=(1, 3, 1, 64), soc="A2"),
    row("A2-cos-S-differs", TILING, "cos", c=(2, 1, 1, 64), soc="A2"),
    row("A3-key-T-differs", TILING, "key", **{**tnd(4, 2, 64), "k": (3, 2, 64)}, soc="A3"),
    row("A2-D-96", TILING, "query", q=(2, 3, 4, 96), k=(2, 3, 2, 96), c=(2, 3, 1, 96), soc="A2"),
    row("A2-D-256", TILING, "query", q=(2, 3, 4, 256), k=(2, 3, 2, 256), c=(2, 3, 1, 256), soc="A2"),
    row("A2-cos-N-2", TILING, "cos", c=(2, 3, 2, 64), soc="A2"),
    row("A2-heads-256", TILING, "query", **tnd(200, 56, 64), soc="A2"),
    row("A2-UB-float32-D128-77-heads", TILING, "query", **tnd(40, 37, 128), dtype=np.float32, soc="A2"),
    row("A2-UB-bfloat16-D128-77-heads", TILING, "query", **tnd(60, 17, 128), dtype=refspec.bfloat16, soc="A2"),
    row("A3-UB-float16-D128-153-heads", TILING, "query", **tnd(100, 53, 128), soc="A3"),
    # 950
    row("950-TND", TILING, "layout", **tnd(4, 2, 64), soc="950"),
    row("950-cos-N-2", TILING, "cos", c=(2, 3, 2, 64), soc="950"),
    row("950-BNSD-cos-N-2", TILING, "cos", q=(2, 4, 3, 64), k=(2, 2, 3, 64), c=(2, 2, 3, 64), layout=3,
        soc="950"),
    row("950-cos-S-differs", TILING, "cos", c=(2, 1, 1, 64), soc="950"),
    row("950-key-S-differs", TILING, "key", k=(2, 1, 2, 64), soc="950"),
    row("950-key-B-differs", TILING, "key", k=(1, 3, 2, 64), soc="950"),
    row("950-SBND-cos-B-neither", TILING, "cos", q=(3, 4, 2, 64), k=(3, 4, 1, 64), c=(3, 2, 1, 64), layout=2,
        soc="950"),
    row("950-D-1026", TILING, "query", q=(1, 1, 1, 1026), k=(1, 1, 1, 1026), c=(1, 1, 1, 1026), soc="950"),
    row("950-empty", TILING, "key", k=(2, 3, 0, 64), soc="950"),
    # the profile itself
    row("soc-unknown", INVALID, "soc", soc="A1"),
]


@pytest.mark.parametrize("kw, cls, code, argument", REJECTED)
def test_rule_rejects(kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(**kw)
    assert_aclnn(excinfo, cls, code, argument)
    assert str(excinfo.value).endswith("]") and "[apply_rotary_pos_emb" in str(excinfo.value)


def test_out_dtype_rejected():
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.apply_rotary_pos_emb(*(np.zeros(s) for s in (BSND_Q, BSND_K, BSND_C, BSND_C)), out_dtype="int8")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("A2-BSND-D64", dict(soc="A2")),
        ("A3-TND-D128", dict(**tnd(4, 2, 128), soc="A3")),
        ("A2-layout-name", dict(layout="BSND", soc="A2")),
        ("A2-heads-255", dict(**tnd(200, 55, 64), soc="A2")),
        ("A2-UB-float32-D128-76-heads", dict(**tnd(40, 36, 128), dtype=np.float32, soc="A2")),
        ("A2-UB-bfloat16-D128-76-heads", dict(**tnd(60, 16, 128), dtype=refspec.bfloat16, soc="A2")),
        ("A3-UB-float16-D128-152-heads", dict(**tnd(100, 52, 128), soc="A3")),
        ("950-SBND-cos-B-1", dict(q=(3, 2, 4, 64), k=(3, 2, 2, 64), c=(3, 1, 1, 64), layout=2, soc="950")),
        ("950-BNSD-quarter-D-4", dict(q=(2, 4, 3, 4), k=(2, 2, 3, 4), c=(1, 1, 3, 4), layout=3,
                                       mode="quarter", soc="950")),
        ("950-D-1024-interleave", dict(q=(1, 1, 1, 1024), k=(1, 1, 1, 1024), c=(1, 1, 1, 1024),
                                       mode="interleave", soc="950")),
        ("950-D-96", dict(q=(2, 3, 4, 96), k=(2, 3, 2, 96), c=(2, 3, 1, 96), soc="950")),
        ("none-float64", dict(dtype=np.float64)),
        ("none-ints-widened", dict(dtype=np.int32)),
        ("none-D-2", dict(q=(2, 3, 4, 2), k=(2, 3, 2, 2), c=(2, 3, 1, 2))),
        ("none-cos-per-head", dict(k=(2, 3, 4, 64), c=(2, 3, 4, 64))),
        ("none-cos-111D", dict(c=(1, 1, 1, 64), layout=3, mode="interleave")),
        ("none-empty", dict(q=(2, 0, 4, 64), k=(2, 0, 2, 64), c=(1, 0, 1, 64))),
        ("none-layout-numpy-int", dict(layout=np.int64(4), **{k: v for k, v in tnd(4, 2, 64).items()
                                                              if k != "layout"})),
    ]
]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    out = call(**kw)
    assert out.query.shape == kw.get("q", BSND_Q) and out.key.shape == kw.get("k", BSND_K)


# --- tolerance terms ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_terms_are_elementwise_with_the_sum_of_absolute_products(rng, mode):
    q, k, c, s = inputs(rng, 3, np.float32)
    terms = apply_rotary_pos_emb_terms(q, k, c, s, 3, mode)
    exact = v2(q, k, c, s, 3, mode, out_dtype=F64)
    for name, x, e in (("query", q, exact.query), ("key", k, exact.key)):
        t = terms[name]
        assert t.comparison_class == ELEMENTWISE and t.reduced_terms is None
        src, _ = rotate_table(mode, x.shape[-1])
        x64 = x.astype(F64)
        want = np.abs(x64 * c) + np.abs(x64[..., src] * s)      # |x*cos| + |rotate(x)*sin|
        np.testing.assert_allclose(t.sum_abs, want, rtol=1e-15, atol=0)
        assert np.all(t.sum_abs >= np.abs(e) * (1 - 1e-15))


@pytest.mark.parametrize("dtype, out_dtype, given", [(np.float16, None, False), (refspec.bfloat16, None, False),
                                                     (np.float32, None, True), (np.float16, F64, True),
                                                     (np.float32, "bf16", False)])
def test_terms_sum_abs_only_for_32_and_64_bit_outputs(rng, dtype, out_dtype, given):
    q, k, c, s = inputs(rng, 1, dtype, D=64)
    terms = apply_rotary_pos_emb_terms(q, k, c, s, soc="A2", out_dtype=out_dtype)
    assert all((t.sum_abs is not None) == given for t in terms.values())


# --- errata E13-E17 ----------------------------------------------------------------------------

def test_E13_layout_and_shape_rules_are_tiling_errors_not_param_invalid():
    """The documents list 161002 for an unsupported layout and for mismatched shapes; the checks
    are in the tiling code, whose failure the API reports as 561002."""
    for kw, argument in ((dict(layout=2, soc="A2"), "layout"), (dict(k=(1, 3, 2, 64), soc="A2"), "key"),
                         (dict(layout=4, soc="950", **{k: v for k, v in tnd(4, 2, 64).items() if k != "layout"}),
                          "layout")):
        with pytest.raises(refspec.AclnnError) as excinfo:
            call(**kw)
        assert_aclnn(excinfo, TilingError, 561002, argument)
    with pytest.raises(refspec.AclnnError) as excinfo:           # dtypes stay 161002
        call(key=np.zeros(BSND_K, np.float32), soc="A2")
    assert_aclnn(excinfo, ParamInvalidError, 161002, "key")


def test_E14_a2_takes_half_only_math_and_950_compute_the_other_modes(rng):
    """A2/A3: the document supports "half" only, and the A2/A3 tiling never reads rotaryMode (its
    kernel rotates half whatever the mode): refspec rejects the other modes there. The math and
    950 compute them, and they are not half mode."""
    q, k, c, s = inputs(rng, 1, np.float16, D=64)
    half = v2(q, k, c, s, 1, "half", soc="950", out_dtype=F64)
    for mode in ("interleave", "quarter"):
        with pytest.raises(refspec.AclnnError) as excinfo:
            v2(q, k, c, s, 1, mode, soc="A2")
        assert_aclnn(excinfo, ParamInvalidError, 161002, "rotary_mode")
        other = v2(q, k, c, s, 1, mode, soc="950", out_dtype=F64)
        assert np.array_equal(other.query, v2(q, k, c, s, 1, mode, out_dtype=F64).query)
        assert np.abs(other.query - half.query).max() > 0.1


def test_E15_a2_query_and_key_heads_at_most_255():
    """The A2/A3 tiling rejects q_n + k_n > 255 (the kernel passes it as a uint8 repeat count);
    no document states it. float16, D = 64: the Unified Buffer bound allows 306 heads, so 255 is
    the binding limit."""
    call(**tnd(200, 55, 64), soc="A2")
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(**tnd(200, 56, 64), soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "query")


def test_E16_unified_buffer_bound_of_the_document_even_for_a_single_token():
    """The document rejects shapes whose ub_required exceeds the Unified Buffer (192 KiB); the
    A2/A3 tiling first tries a one-token-per-core plan that needs less, (q_n+k_n)*D*castSize*4 +
    D*DtypeSize*2 + cast*D*8 bytes, and accepts those shapes when B*S is at most the number of
    vector cores. refspec follows the document, which does not depend on the core count."""
    ub = 192 * 1024
    n, D, size = 77, 128, 4                                  # float32: cast 0, castSize = DtypeSize = 4
    document = n * D * size * 2 + D * size * 4 + n * D * size + n * D * size * 2
    one_token_plan = n * D * size * 4 + D * size * 2
    assert one_token_plan <= ub < document
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(**tnd(40, 37, 128, T=1), dtype=np.float32, soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "query")
    call(**tnd(40, 36, 128, T=1), dtype=np.float32, soc="A2")  # 76 heads: exactly 192 KiB


def test_E17_950_profile_follows_the_host_code(rng):
    """The documents name A2/A3 only, with BSND and TND; the 950 (arch35) tiling in the host
    code takes BSND, SBND and BNSD (not TND), every rotary mode, any even D up to 1024 and a cos
    shared by the batch."""
    for layout in (1, 2, 3):
        q, k, c, s = inputs(rng, layout, np.float32, cos_b=1, D=96)
        for mode in MODES:
            out = v2(q, k, c, s, layout, mode, soc="950", out_dtype=F64)
            np.testing.assert_allclose(out.query, oracle(q, c, s, mode), rtol=1e-15, atol=1e-15)
    with pytest.raises(refspec.AclnnError) as excinfo:
        v2(*inputs(rng, 4, np.float32, D=64), 4, soc="950")
    assert_aclnn(excinfo, TilingError, 561002, "layout")
    with pytest.raises(refspec.AclnnError) as excinfo:
        v2(*inputs(rng, 1, np.float32, D=96), 1, soc="A2")
    assert_aclnn(excinfo, TilingError, 561002, "query")


# --- fuzz: nothing but AclnnError ----------------------------------------------------------------

JUNK = [None, "tensor", [[1.0, 2.0], [3.0]], np.zeros((2, 3), np.complex64), np.zeros((0,)), 3.0,
        np.zeros((1, 1, 1, 1), np.int8), np.array([object()], dtype=object)]


@st.composite
def apply_args(draw):
    layout = draw(st.sampled_from([1, 2, 3, 4, "TND", "BSND", 0, 5, None, 1.5, "x", [1]]))
    rank = 3 if layout in (4, "TND") else draw(st.sampled_from([4, 4, 3, 2, 5]))
    D = draw(st.sampled_from([0, 2, 4, 6, 8, 64, 3]))
    lead = [draw(st.integers(0, 3)) for _ in range(rank - 1)]
    q = tuple(lead) + (D,)
    k = tuple(n if draw(st.booleans()) else draw(st.integers(0, 3)) for n in lead) + (D,)
    c = tuple(n if draw(st.booleans()) else 1 for n in lead) + (D,)
    dtype = draw(st.sampled_from([np.float16, refspec.bfloat16, np.float32, F64, np.int32, bool]))
    t = [np.ones(shape, dtype) for shape in (q, k, c, c)]
    t = [draw(st.sampled_from(JUNK)) if draw(st.integers(0, 9)) == 0 else a for a in t]
    mode = draw(st.sampled_from(["half", "interleave", "quarter", "Half", None, 0, [1]]))
    soc = draw(st.sampled_from([None, None, "A2", "A3", "950", "ascend910b", "A1", 3]))
    out_dtype = draw(st.sampled_from([None, None, F64, "bf16", "int8"]))
    return t, layout, mode, soc, out_dtype


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(apply_args())
def test_only_aclnn_errors_are_raised(case):
    t, layout, mode, soc, out_dtype = case
    try:
        out = refspec.apply_rotary_pos_emb_v2(*t, layout, mode, soc=soc, out_dtype=out_dtype)
    except refspec.AclnnError:
        return
    assert out.query.shape == np.shape(t[0]) and out.key.shape == np.shape(t[1])
