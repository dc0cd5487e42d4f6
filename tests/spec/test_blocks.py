"""The stated order of the spec's sums, and block-by-block evaluation with the whole-array bits.

``sum(t, dims)`` adds by pairwise halving along each reduced axis, innermost first
(refspec.spec.reduce); the operator functions apply their formula blocks to blocks of the
leading axes (refspec.spec.blocks). Checked here: the order itself against a plain Python
transcription, the property that aligned blocks of 2^k terms are subtrees of the whole sum, the
block plans, and that every operator function and tolerance term equals its formula applied to
whole arrays, bit for bit, on data where any change of order or of a zero's sign would show.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import refspec
from refspec.spec import blocks, nrc
from refspec.spec.nrc_checks import STREAMS
from refspec.spec.reduce import sum_rows, sum_to_shape, tree_sum
from refspec.spec.rope import ROPE_BACKWARD, ROPE_FORWARD
from refspec.spec.terms import norm_rope_concat_backward_terms, rope_grad_terms, upstream_abs
from spec_helpers import bits, nasty


def pairwise(terms: list):
    """The documented order, transcribed: add terms 2i and 2i+1, carry an odd last one."""
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return terms[0]


@pytest.mark.parametrize("n", list(range(1, 20)) + [31, 32, 33, 100])
def test_tree_sum_adds_in_the_documented_order(rng, n):
    t = nasty(rng, (n, 3), np.float64)
    got = tree_sum(t, 0)
    assert got.shape == (1, 3)
    want = pairwise([t[i] for i in range(n)])
    assert np.array_equal(bits(got[0]), bits(want))


def test_tree_sum_of_nothing_is_plus_zero_and_keeps_negative_zeros():
    assert bits(tree_sum(np.zeros((0, 2)), 0)).tolist() == [[0, 0]]
    assert np.signbit(tree_sum(np.full((5, 2), -0.0), 0)).all()      # -0 + -0 = -0


def test_the_order_differs_from_a_sequential_sum():
    u = 2.0 ** -53
    t = np.array([1.0, u, u, u])
    assert tree_sum(t[:, None], 0)[0, 0] == 1 + 2 * u                   # (1 + u) + (u + u)
    assert ((t[0] + t[1]) + t[2]) + t[3] == 1.0                         # each + u rounds away


@pytest.mark.parametrize("n, k", [(1, 0), (7, 1), (8, 2), (9, 2), (37, 3), (64, 4), (100, 5), (5, 4)])
def test_aligned_blocks_are_subtrees(rng, n, k):
    t = nasty(rng, (n, 4), np.float64)
    run = 1 << k
    partial = np.concatenate([tree_sum(t[j:j + run], 0) for j in range(0, n, run)])
    assert np.array_equal(bits(tree_sum(partial, 0)), bits(tree_sum(t, 0)))


def test_sum_to_shape_sums_innermost_reduced_axis_first(rng):
    t = nasty(rng, (3, 5, 4, 2), np.float64)
    want = tree_sum(tree_sum(t, 2), 0)
    assert np.array_equal(bits(sum_to_shape(t, (1, 5, 1, 2))), bits(want))
    assert np.array_equal(bits(sum_rows(t)), bits(tree_sum(tree_sum(tree_sum(t, 2), 1), 0)[0, 0, 0]))


@pytest.mark.parametrize("shape, dims", [((3, 4, 5, 6), (0, 1)), ((3, 4, 5, 6), (0, 2)),
                                         ((3, 4, 5, 6), (1,)), ((3, 4, 5, 6), (0, 1, 2)),
                                         ((3, 4, 5, 6), ()), ((40, 3, 2), (0,)), ((7, 9), (0,))])
@pytest.mark.parametrize("target", [1, 7, 30, 120, 500, 10 ** 6])
def test_plans_cover_once_hold_rows_whole_and_cut_in_aligned_runs(shape, dims, target):
    p = blocks.plan(shape, dims, target)
    seen = np.zeros(shape, int)
    for index in p.blocks:
        assert index[-1] == slice(None)                                  # D is never cut
        seen[index] += 1
        if p.cut is None:
            assert all(index[a] == slice(None) for a in dims)            # sums final per block
        else:
            axis, run = p.cut
            assert run & (run - 1) == 0
            start = index[axis].start or 0
            assert start % run == 0
            assert all(index[a] == slice(None) for a in dims if a > axis)
            assert all(index[a].stop - index[a].start == 1 for a in dims if a < axis)
    assert np.all(seen == 1)
    assert len(p.partial_shape) == len(shape)


def layouts_and_patterns():
    """Every layout with every cos/sin broadcast pattern (D = 8)."""
    for full in ((4, 3, 8, 8), (8, 3, 4, 8), (3, 5, 8)):
        for mask in itertools.product((False, True), repeat=len(full) - 1):
            yield full, tuple(n if keep else 1 for keep, n in zip(mask, full[:-1])) + (8,)


@pytest.mark.parametrize("full, cshape", list(layouts_and_patterns()),
                         ids=lambda v: "x".join(map(str, v)))
def test_rope_blocks_equal_the_formula_on_whole_arrays(rng, full, cshape):
    dy, x = nasty(rng, full), nasty(rng, full)
    cos, sin = nasty(rng, cshape), nasty(rng, cshape)
    w = [a.astype(np.float64) for a in (dy, cos, sin, x)]
    for mode in (0, 1, 2, 3):
        whole = ROPE_BACKWARD[mode](*w)
        for target in (1, 13, 200, blocks.BLOCK_ELEMENTS):
            got = blocks.by_blocks(ROPE_BACKWARD[mode], dy, (cos, sin), x,
                                   reduced=(False, True, True), target=target)
            for g, r in zip(got, whole):
                assert g.shape == r.shape and np.array_equal(bits(g), bits(r)), (mode, target)
        y = blocks.by_blocks(ROPE_FORWARD[mode], x, (cos, sin), target=13)[0]
        assert np.array_equal(bits(y), bits(ROPE_FORWARD[mode](w[3], w[1], w[2])))
        public = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=np.float64)
        for g, r in zip(public, whole):
            assert np.array_equal(bits(g), bits(r))


@pytest.mark.parametrize("dtype", [np.float16, refspec.bfloat16, np.float32])
def test_large_rope_cases_in_every_dtype_and_their_terms(rng, dtype):
    """Arrays of several default blocks: the public functions and the tolerance terms equal
    the formula blocks on whole float64 arrays."""
    full, cshape = (8, 16, 64, 32), (1, 1, 64, 32)
    dy, x = nasty(rng, full, dtype), nasty(rng, full, dtype)
    cos, sin = nasty(rng, cshape, dtype), nasty(rng, cshape, dtype)
    assert len(blocks.plan(full, (0, 1)).blocks) > 1
    w = [a.astype(np.float64) for a in (dy, cos, sin, x)]
    exact = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 0, soc="A2", out_dtype=np.float64)
    for g, r in zip(exact, ROPE_BACKWARD[0](*w)):
        assert np.array_equal(bits(g), bits(r))
    terms = rope_grad_terms(dy, cos, sin, x, 0, "A2")
    ones, zeros = np.ones(32), np.zeros(32)
    for name, p in (("dcos", ROPE_FORWARD[0](w[3], ones, zeros)), ("dsin", ROPE_FORWARD[0](w[3], zeros, ones))):
        whole = sum_to_shape(np.abs(w[0] * p), cshape)
        assert np.array_equal(bits(terms[name].sum_abs), bits(whole))
    no_x = refspec.rotary_position_embedding_grad(dy, cos, sin, None, 0, out_dtype=np.float64)
    assert no_x[1:] == (None, None) and np.array_equal(bits(no_x[0]), bits(exact[0]))


# --- NormRopeConcatBackward ---------------------------------------------------------------------

def whole_array_backward(t: dict, a: dict) -> dict:
    """The §3 steps applied to whole float64 arrays: RoPE backward on the concatenated
    gradients, split, transposed, LayerNorm backward per stream, value gradients split."""
    t = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in t.items()}
    seq = {s: (0 if t[s] is None else t[s].shape[1]) for s in STREAMS}
    g = {}
    for out_name, stream, enc in (("grad_query_output", "query", "encoder_query"),
                                  ("grad_key_output", "key", "encoder_key")):
        rotated = nrc.rope_positions_grad(t[out_name], a["rope_type"], t["rope_cos"], t["rope_sin"])
        part, part_enc = nrc.split_seq(rotated, seq[stream], seq[enc], a["concat_order"])
        g[stream], g[enc] = nrc.bnsd_to_bsnd(part), nrc.bnsd_to_bsnd(part_enc)
    pv, pev = nrc.split_seq(t["grad_value_output"], seq["key"], seq["encoder_key"], a["concat_order"])
    out = {"grad_value": nrc.bnsd_to_bsnd(pv),
           "grad_encoder_value": None if t["encoder_key"] is None else nrc.bnsd_to_bsnd(pev)}
    D = t["query"].shape[-1]
    for s, (type_attr, w, b, m, r) in STREAMS.items():
        if t[s] is None:
            zeros = np.zeros(D) if a[type_attr] == 2 else None
            out[f"grad_{s}"], out[f"grad_{w}"], out[f"grad_{b}"] = None, zeros, zeros
            continue
        out[f"grad_{s}"], out[f"grad_{w}"], out[f"grad_{b}"] = nrc.layer_norm_backward(
            g[s], t[s], t[m], t[r], a[type_attr], t[w])
    return out


def nrc_case(rng, B, N, Sq, Sk, Seq, Sek, D, nt, nat, rt, order, dtype=np.float32):
    def r(*shape):
        return nasty(rng, shape, dtype)
    t = dict(grad_query_output=r(B, N, Sq + Seq, D), grad_key_output=r(B, N, Sk + Sek, D),
             grad_value_output=r(B, N, Sk + Sek, D), query=r(B, Sq, N, D), key=r(B, Sk, N, D),
             encoder_query=r(B, Seq, N, D) if Seq else None,
             encoder_key=r(B, Sek, N, D) if Sek else None)
    for s, (type_attr, w, _b, m, rs) in STREAMS.items():
        typ = nt if type_attr == "norm_type" else nat
        if t[s] is None:
            continue
        if typ == 2:
            t[w] = r(D)
        if typ >= 1:
            _, mean, rstd = nrc.layer_norm(t[s].astype(np.float64), 1)
            t[m], t[rs] = mean.astype(np.float32), rstd.astype(np.float32)
    if rt:
        t["rope_cos"], t["rope_sin"] = r(min(Sq + Seq, Sk + Sek), D), r(min(Sq + Seq, Sk + Sek), D)
    return t, dict(norm_type=nt, norm_added_type=nat, rope_type=rt, concat_order=order)


NRC_SHAPES = [(2, 3, 5, 4, 3, 2, 8), (1, 2, 3, 4, 2, 0, 6), (2, 8, 300, 260, 40, 33, 16)]


@pytest.mark.parametrize("nt, nat", list(itertools.product((0, 1, 2), (0, 1, 2))))
def test_nrc_backward_by_row_blocks_equals_the_steps_on_whole_arrays(rng, nt, nat):
    for shape, rt, order in itertools.product(NRC_SHAPES, (0, 1, 2), (0, 1)):
        if shape[2] > 100 and (rt, order) not in ((2, 1), (1, 0)):
            continue                    # the multi-block shape for two of the six combinations
        t, attrs = nrc_case(rng, *shape, nt, nat, rt, order)
        arrays, a, _ = nrc.backward_args(t, attrs)
        got = refspec.norm_rope_concat_backward(**t, **attrs, out_dtype=np.float64)._asdict()
        want = whole_array_backward(arrays, a)
        for k, v in got.items():
            assert (v is None) == (want[k] is None), k
            if v is not None:
                w = np.ascontiguousarray(want[k])
                assert v.shape == w.shape and np.array_equal(bits(v), bits(w)), (shape, rt, order, k)


def test_multi_block_streams_cut_the_sequence_axis():
    p = blocks.plan((2, 300, 8, 16), (0, 1, 2))
    assert p.cut is not None and p.cut[0] == 1 and len(p.blocks) > 2


@pytest.mark.parametrize("rt", [0, 2])
def test_nrc_terms_by_row_blocks_equal_the_whole_array_terms(rng, rt):
    t, attrs = nrc_case(rng, 2, 8, 300, 260, 40, 33, 16, 2, 1, rt, 1)
    arrays, a, _ = nrc.backward_args(t, attrs)
    terms = norm_rope_concat_backward_terms(t, attrs)
    w = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
    seq = {s: (0 if w[s] is None else w[s].shape[1]) for s in STREAMS}
    A = {}
    for out_name, stream, enc in (("grad_query_output", "query", "encoder_query"),
                                  ("grad_key_output", "key", "encoder_key")):
        whole = upstream_abs(w[out_name], rt, w["rope_cos"], w["rope_sin"])
        part, part_enc = nrc.split_seq(whole, seq[stream], seq[enc], 1)
        A[stream], A[enc] = nrc.bnsd_to_bsnd(part), nrc.bnsd_to_bsnd(part_enc)
    weight, mean, rstd = "norm_query_weight", "norm_query_mean", "norm_query_rstd"
    abs_xhat = np.abs((w["query"] - w[mean]) * w[rstd])
    assert np.array_equal(bits(terms["grad_norm_query_bias"].sum_abs), bits(sum_rows(A["query"])))
    assert np.array_equal(bits(terms["grad_norm_query_weight"].sum_abs),
                          bits(sum_rows(A["query"] * abs_xhat)))
    gw = A["query"] * np.abs(w[weight])
    s_dx = np.abs(w[rstd]) * (gw + gw.mean(axis=-1, keepdims=True)
                              + abs_xhat * (gw * abs_xhat).mean(axis=-1, keepdims=True))
    assert np.array_equal(bits(terms["grad_query"].sum_abs), bits(np.ascontiguousarray(s_dx)))


@pytest.mark.parametrize("dtype", [np.float16, refspec.bfloat16, np.float32, np.float64])
def test_blocks_rounded_to_a_dtype_equal_the_whole_result_rounded(rng, dtype):
    """``dtypes``: each block rounded once into the output gives the bits of the whole float64
    result rounded with ``round_to`` (ties and overflow included: the values span float16's range)."""
    full, cshape = (6, 5, 4, 8), (6, 1, 4, 8)
    x, cos, sin = nasty(rng, full), nasty(rng, cshape), nasty(rng, cshape)
    for mode in (0, 1, 2, 3):
        whole, = blocks.by_blocks(ROPE_FORWARD[mode], x, (cos, sin))
        for target in (1, 13, blocks.BLOCK_ELEMENTS):
            got, = blocks.by_blocks(ROPE_FORWARD[mode], x, (cos, sin), target=target, dtypes=(dtype,))
            assert got.dtype == dtype
            assert np.array_equal(bits(got), bits(refspec.round_to(whole, dtype))), (mode, target)
