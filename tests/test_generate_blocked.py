"""Blocked evaluation returns the same bits as the unblocked public spec functions.

The premise is checked first: NumPy's multi-axis sums over leading axes (every reduction of the
spec keeps D, the innermost axis) add the slices sequentially in C order from +0. Then the
blocked RoPE functions are compared bit for bit with the spec on every layout, broadcast
pattern and mode, with data chosen so that any change of summation order, or of the sign of a
zero, shows.
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest

import refspec
from refspec import blocked, forked
from refspec.blocked import (blocks, nrc_grad_blocked, reducing_blocks, rope_blocked,
                             rope_grad_blocked)
from refspec.cases import build_case
from refspec.layouts import layout_shape
from refspec.cases import draw_inputs
from refspec.sweep import Case, _case_params, parse_sweep
from refspec.terms import rope_grad_terms, rope_terms


def bits(a):
    return np.asarray(a).view(np.uint64)


def nasty(rng, shape, dtype=np.float32):
    """Wide dynamic range (sums depend on their order), signed zeros, exact cancellations."""
    span = 25 if np.dtype(dtype) == np.float32 else 5
    a = rng.standard_normal(shape) * np.exp(rng.uniform(-span, span, shape))
    a = a.astype(dtype)
    flat = a.reshape(-1)
    flat[::7] = -0.0
    flat[3::11] = 0.0
    return a


def sequential_sum(a, axes):
    acc = None
    ranges = [range(n) if i in axes else [slice(None)] for i, n in enumerate(a.shape)]
    for idx in itertools.product(*ranges):
        sl = tuple(slice(i, i + 1) if isinstance(i, int) else i for i in idx)
        acc = 0.0 + a[sl] if acc is None else acc + a[sl]
    return acc


@pytest.mark.parametrize("shape, axes", [((6, 5, 7, 4), (0, 1)), ((6, 7, 5, 4), (0, 2)),
                                         ((7, 6, 5, 4), (1, 2)), ((3, 4, 5, 2), (0, 1, 2)),
                                         ((9, 5, 6), (1,)), ((2, 300, 2), (0, 1))])
def test_numpy_sums_over_leading_axes_are_sequential_from_plus_zero(rng, shape, axes):
    a = rng.standard_normal(shape) * np.exp(rng.uniform(-30, 30, shape))
    a.reshape(-1)[::5] = -0.0
    assert np.array_equal(bits(a.sum(axis=axes, keepdims=True)), bits(sequential_sum(a, axes)))
    zeros = np.full(shape, -0.0)
    assert not np.signbit(zeros.sum(axis=axes)).any()            # starts from +0


def test_blocks_cover_the_array_once_in_c_order():
    shape = (3, 4, 5, 6)
    for target in (1, 7, 30, 120, 10 ** 6):
        seen = np.zeros(shape, int)
        order = []
        for index in blocks(shape, target):
            assert index[-1] == slice(None)                        # D is never cut
            seen[index] += 1
            order.append(np.ravel_multi_index([s.start or 0 for s in index], shape))
        assert np.all(seen == 1) and order == sorted(order)


def test_reducing_blocks_hold_the_reduced_axes_whole_and_cover_once():
    shape = (3, 4, 5, 6)
    for dims in ((0, 1), (0, 2), (1,), (0, 1, 2), (2,)):
        for target in (6 * 60, 200, 500, 10 ** 6):
            plan = reducing_blocks(shape, dims, target)
            if np.prod([shape[i] for i in dims]) * 6 > target:
                assert plan is None
                continue
            seen = np.zeros(shape, int)
            for index in plan:
                assert all(index[i] == slice(None) for i in dims) and index[-1] == slice(None)
                assert seen[index].size <= max(target, np.prod([shape[i] for i in dims]) * 6)
                seen[index] += 1
            assert np.all(seen == 1)
    assert reducing_blocks(shape, (), 10 ** 6) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
@pytest.mark.parametrize("readv", [True, False], ids=["copied-back", "shared-memory"])
def test_forked_parts_give_the_same_bits_both_ways_of_returning_outputs(rng, monkeypatch, readv):
    if readv and not forked._probe_readv():
        pytest.skip("process_vm_readv is not permitted here")
    monkeypatch.setattr(forked, "_readv_ok", readv)
    monkeypatch.setattr(forked, "PROCESSES", 2)
    full, cshape = (4, 3, 8, 8), (1, 1, 8, 8)
    dy, x, cos, sin = nasty(rng, full), nasty(rng, full), nasty(rng, cshape), nasty(rng, cshape)
    ref = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 1, out_dtype=np.float64)
    for target in (8, 100, 10 ** 4):
        exact, _ = rope_grad_blocked(dy, cos, sin, x, 1, target=target)
        for name, r in zip(("dx", "dcos", "dsin"), ref):
            assert np.array_equal(bits(exact[name]), bits(r)), (target, name)
        y, _ = rope_blocked(x, cos, sin, 3, target=target)
        assert np.array_equal(bits(y["y"]), bits(refspec.rotary_position_embedding(
            x, cos, sin, 3, out_dtype=np.float64)))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_failing_forked_part_is_an_error_not_a_wrong_result(monkeypatch, capfd):
    monkeypatch.setattr(forked, "PROCESSES", 2)
    out = forked.output_empty((4, 8))

    def fn(i):
        if i == 1:
            raise ValueError("part 1 broke")
        out[i] = i

    with pytest.raises(RuntimeError, match="1 of 2 forked part"):
        forked.run_parts(fn, [0, 1, 2], lambda i: [out[i]])
    assert "part 1 broke" in capfd.readouterr().err

    def parent_fails(i):
        if i == 0:
            raise KeyError("parent")
        out[i] = i

    with pytest.raises(KeyError):
        forked.run_parts(parent_fails, [0, 1], lambda i: [out[i]])


def test_segments_are_the_contiguous_runs_of_a_view():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    for view in (a, a[1], a[:, 1:3], a[:, :, 2:], a[:, 1:2, :, :], a[1:, :, 1:3]):
        segs = forked._segments(view)
        got = np.concatenate([np.frombuffer((np.ctypeslib.as_array(
            (__import__("ctypes").c_double * (n // 8)).from_address(addr)))) for addr, n in segs])
        assert np.array_equal(got, view.reshape(-1))
        assert sum(n for _, n in segs) == view.nbytes
    assert forked._segments(a[:0]) == []


def layouts_and_patterns():
    for layout in ("BNSD", "BSND", "SBND", "TND"):
        full = layout_shape(layout, 3, 4, 5, 6)
        for mask in itertools.product((0, 1), repeat=len(full) - 1):
            yield layout, full, tuple(1 if m else n for m, n in zip(mask, full[:-1])) + (6,)


@pytest.mark.parametrize("layout, full, cshape", list(layouts_and_patterns()),
                         ids=lambda v: str(v) if isinstance(v, str) else "x".join(map(str, v)))
def test_rope_grad_blocked_equals_the_spec_bit_for_bit(rng, monkeypatch, layout, full, cshape):
    for mode in (0, 1, 2, 3):
        if mode == 2 and full[-1] % 4:
            continue
        dy, x = nasty(rng, full), nasty(rng, full)
        cos, sin = nasty(rng, cshape), nasty(rng, cshape)
        ref = refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, out_dtype=np.float64)
        ref_terms = rope_grad_terms(dy, cos, sin, x, mode)
        # target 200 holds the reduced axes whole (reducing_blocks) for most patterns, 1 and 13
        # never; processes > 1 cut the case into forked parts
        for target, threads, processes in ((1, 1, 1), (13, 2, 1), (200, 1, 1), (13, 1, 2),
                                           (200, 1, 3)):
            monkeypatch.setattr(forked, "PROCESSES", processes)
            exact, terms = rope_grad_blocked(dy, cos, sin, x, mode, target=target, threads=threads)
            for name, r in zip(("dx", "dcos", "dsin"), ref):
                assert np.array_equal(bits(exact[name]), bits(r)), (mode, target, name)
            for name in ("dcos", "dsin"):
                assert terms[name].comparison_class == ref_terms[name].comparison_class
                assert terms[name].reduced_terms == ref_terms[name].reduced_terms
                assert np.array_equal(bits(terms[name].sum_abs), bits(ref_terms[name].sum_abs))
            assert terms["dx"] == ref_terms["dx"]
        no_x, _ = rope_grad_blocked(dy, cos, sin, None, mode, target=13)
        assert set(no_x) == {"dx"} and np.array_equal(bits(no_x["dx"]), bits(ref[0]))


@pytest.mark.parametrize("dtype", [np.float16, refspec.bfloat16, np.float32])
def test_blocked_in_every_dtype_and_forward(rng, dtype):
    full, cshape = (4, 3, 8, 8), (1, 1, 8, 8)
    dy, x = nasty(rng, full, dtype), nasty(rng, full, dtype)
    cos, sin = nasty(rng, cshape, dtype), nasty(rng, cshape, dtype)
    exact, _ = rope_grad_blocked(dy, cos, sin, x, 0, soc="A2", target=16)
    ref = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 0, soc="A2", out_dtype=np.float64)
    for name, r in zip(("dx", "dcos", "dsin"), ref):
        assert np.array_equal(bits(exact[name]), bits(r))
    for mode in (0, 1, 2, 3):
        y, terms = rope_blocked(x, cos, sin, mode, target=16)
        assert np.array_equal(bits(y["y"]), bits(refspec.rotary_position_embedding(
            x, cos, sin, mode, out_dtype=np.float64)))
        assert terms == rope_terms(x, cos, sin, mode)


def test_blocked_validates_like_the_spec():
    dy = np.zeros((2, 3, 4, 8), np.float32)
    cos = np.zeros((1, 1, 4, 8), np.float32)
    for kwargs in ({"mode": 2, "soc": "A2"}, {"mode": 0, "soc": "950"}):
        try:
            refspec.rotary_position_embedding_grad(dy, cos, cos, dy[:1], **kwargs)
        except refspec.AclnnError as exc:
            with pytest.raises(type(exc)) as info:
                rope_grad_blocked(dy, cos, cos, dy[:1], **kwargs)
            assert str(info.value) == str(exc)


def test_the_engine_uses_blocks_for_large_cases_with_the_same_bits(monkeypatch):
    sweep = parse_sweep("""
name = "b"
[[block]]
op = "rope_grad"
[block.axes]
soc = ["A2", "950"]
mode = ["half", "interleave"]
layout = ["BSND", "TND"]
dtype = ["bfloat16"]
dist = ["special"]
shape = ["B3N4S6D8"]
[[block]]
op = "rope"
[block.axes]
soc = "950"
mode = "quarter"
layout = "SBND"
cos = "S11D"
dtype = "float16"
shape = ["B3N4S6D8"]
[[block]]
op = "nrc_grad"
[block.axes]
soc = "A2"
norm_type = [1, 2]
norm_added_type = [2]
rope_type = ["interleave", "half"]
concat_order = [1]
dtype = "bfloat16"
dist = ["special", "position-coded"]
shape = ["B2N3Sq5Sk4Seq3Sek2D8"]
""", "b.toml")
    cases = [c for c in sweep.cases() if not (c.params["soc"] == "950" and c.params["layout"] == "TND")]
    plain = [build_case(c) for c in cases]
    calls = []
    real = blocked.rope_grad_blocked

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, target=5, **{k: v for k, v in kwargs.items() if k != "target"})

    monkeypatch.setattr(blocked, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(blocked, "rope_grad_blocked", spy)
    for case, ref in zip(cases, plain):
        data = build_case(case)
        for group in ("expected", "exact"):
            a, b = getattr(data, group), getattr(ref, group)
            assert a.keys() == b.keys()
            for k in a:
                assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), (case.id, k)
        for k, t in ref.terms.items():
            u = data.terms[k]
            assert (u.comparison_class, u.reduced_terms) == (t.comparison_class, t.reduced_terms)
            assert (u.sum_abs is None) == (t.sum_abs is None)
            if t.sum_abs is not None:
                assert u.sum_abs.tobytes() == t.sum_abs.tobytes()
    assert calls


# --- NormRopeConcatBackward ---------------------------------------------------------------------

def orders(B, S, N):
    return {"bsn": [(b, s, n) for b in range(B) for s in range(S) for n in range(N)],
            "bns": [(b, s, n) for b in range(B) for n in range(N) for s in range(S)]}


def test_the_spec_sums_over_bsn_in_two_orders(rng):
    """The premise of nrc_grad_blocked: with g' a BSND view of BNSD data (as backward_exact
    makes it), g'.sum(axis=(0, 1, 2)) adds rows in (b, n, s) order, (g'*xhat).sum(...) in
    (b, s, n) order."""
    B, N, S, D = 2, 3, 7, 4
    g = (rng.standard_normal((B, N, S, D)) * np.exp(rng.uniform(-4, 4, (B, N, S, D)))).transpose(0, 2, 1, 3)
    xhat = rng.standard_normal((B, S, N, D)) * np.exp(rng.uniform(-4, 4, (B, S, N, D)))

    def seq(arr, order):
        acc = 0.0
        for idx in order:
            acc = acc + arr[idx]
        return acc

    o = orders(B, S, N)
    assert np.array_equal(bits(g.sum(axis=(0, 1, 2))), bits(seq(g, o["bns"])))
    assert not np.array_equal(bits(g.sum(axis=(0, 1, 2))), bits(seq(g, o["bsn"])))
    p = g * xhat
    assert np.array_equal(bits(p.sum(axis=(0, 1, 2))), bits(seq(p, o["bsn"])))
    assert not np.array_equal(bits(p.sum(axis=(0, 1, 2))), bits(seq(p, o["bns"])))


NRC_NAMES = list(inspect.signature(refspec.norm_rope_concat_backward).parameters)[:21]


def nrc_inputs(rng, nt, nat, rt, order, shape, dtype="float32"):
    values = dict(soc="A2", norm_type=nt, norm_added_type=nat, rope_type=["none", "interleave", "half"][rt],
                  concat_order=order, dtype=dtype, dist="random", fault="none")
    shape = dict(shape, Sr=shape["Sr"] if rt else 0)
    p = _case_params("nrc_grad", values, shape)
    inputs = draw_inputs(Case("x", "nrc_grad", p, int(rng.integers(1 << 62))))
    for k in ("grad_query_output", "grad_key_output"):      # order-sensitive sums, signed zeros
        v = inputs[k].astype(np.float64) * np.exp(rng.uniform(-6, 6, inputs[k].shape))
        v.reshape(-1)[::5] = -0.0
        inputs[k] = refspec.round_to(v, inputs[k].dtype)
    return {n: inputs.get(n) for n in NRC_NAMES}


SHAPES = [dict(B=2, N=3, Sq=5, Sk=4, Seq=3, Sek=2, D=8, Sr=6),
          dict(B=2, N=3, Sq=5, Sk=4, Seq=0, Sek=0, D=8, Sr=2),
          dict(B=1, N=2, Sq=3, Sk=4, Seq=2, Sek=0, D=6, Sr=1)]


@pytest.mark.parametrize("nt, nat", list(itertools.product((0, 1, 2), (0, 1, 2))))
def test_nrc_grad_blocked_equals_the_spec_bit_for_bit(rng, monkeypatch, nt, nat):
    for rt, order, shape in itertools.product((0, 1, 2), (0, 1), SHAPES):
        tensors = nrc_inputs(rng, nt, nat, rt, order, shape)
        attrs = dict(norm_type=nt, norm_added_type=nat, rope_type=rt, concat_order=order)
        ref = refspec.norm_rope_concat_backward(**tensors, **attrs, soc="A2", out_dtype=np.float64)._asdict()
        # one process with 1 or 2 threads, or the query and key sides in two processes (outputs
        # copied back from the child, or written by it into shared memory)
        for target, threads, processes, readv in ((1, 1, 1, None), (20, 2, 1, None),
                                                  (10 ** 6, 1, 1, None), (20, 1, 2, None),
                                                  (7, 1, 2, False)):
            monkeypatch.setattr(forked, "PROCESSES", processes)
            monkeypatch.setattr(forked, "_readv_ok", readv)
            got = nrc_grad_blocked(tensors, attrs, "A2", target=target, threads=threads)
            assert got.keys() == ref.keys()
            for k, v in ref.items():
                if v is None:
                    assert got[k] is None, k
                else:
                    assert got[k].shape == v.shape
                    assert np.array_equal(bits(np.ascontiguousarray(got[k])), bits(np.ascontiguousarray(v))), \
                        (rt, order, shape, target, k)


def test_nrc_grad_blocked_validates_like_the_spec(rng):
    tensors = nrc_inputs(rng, 2, 1, 2, 0, SHAPES[0], dtype="bfloat16")
    tensors["norm_query_mean"] = tensors["norm_query_mean"].astype(refspec.bfloat16)
    attrs = dict(norm_type=2, norm_added_type=1, rope_type=2, concat_order=0)
    with pytest.raises(refspec.ParamInvalidError) as spec_err:
        refspec.norm_rope_concat_backward(**tensors, **attrs, soc="A2")
    with pytest.raises(refspec.ParamInvalidError) as blocked_err:
        nrc_grad_blocked(tensors, attrs, "A2")
    assert str(spec_err.value) == str(blocked_err.value)
