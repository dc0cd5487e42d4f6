"""Every validation rule of docs/rope.md §5 (and the layout rules of docs/rope.md §4) triggers the documented error.

Each row calls RotaryPositionEmbedding or RotaryPositionEmbeddingGrad with exactly one rule broken
and checks the error class, the aclnn code and that the message starts with the argument's name.
The rows marked "accepted" are the other side of each boundary, so a rule that rejects too much
fails as well.
"""

from __future__ import annotations

import numpy as np
import pytest

import refspec
from refspec import ParamInvalidError, ParamNullptrError, TilingError
from spec_helpers import assert_aclnn

BNSD, C11SD = (2, 3, 5, 8), (1, 1, 5, 8)


def call(op="grad", shape=BNSD, cshape=C11SD, dtype=np.float32, mode=0, soc=None, **override):
    """Call the operator on zero tensors of the given shapes; ``override`` replaces any argument
    by name (dy, cos, sin, x; None for absent). op "fwd": x is the primary input."""
    args = dict(cos=np.zeros(cshape, dtype), sin=np.zeros(cshape, dtype), x=np.zeros(shape, dtype))
    if op == "grad":
        args["dy"] = np.zeros(shape, dtype)
    args.update(override)
    if op == "grad":
        return refspec.rotary_position_embedding_grad(args["dy"], args["cos"], args["sin"], args["x"],
                                                      mode, soc=soc)
    return refspec.rotary_position_embedding(args["x"], args["cos"], args["sin"], mode, soc=soc)


def row(rule, cls, code, argument, op="grad", **kw):
    return pytest.param(op, kw, cls, code, argument, id=f"{op}-{rule}")


NULL, INVALID, TILING = (ParamNullptrError, 161001), (ParamInvalidError, 161002), (TilingError, 561002)

REJECTED = [
    # common: a required tensor missing -> 161001
    row("dy-missing", *NULL, "dy", dy=None),
    row("cos-missing", *NULL, "cos", cos=None),
    row("sin-missing", *NULL, "sin", sin=None),
    row("x-missing", *NULL, "x", op="fwd", x=None),
    row("cos-missing", *NULL, "cos", op="fwd", cos=None),
    row("sin-missing", *NULL, "sin", op="fwd", sin=None),
    # common: dtypes -> 161002
    row("dy-float64-on-A2", *INVALID, "dy", dtype=np.float64, soc="A2"),
    row("dy-int32-on-A2", *INVALID, "dy", dy=np.zeros(BNSD, np.int32), soc="A2"),
    row("dy-bool-on-950", *INVALID, "dy", dy=np.zeros(BNSD, bool), soc="950"),
    row("dy-complex", *INVALID, "dy", dy=np.zeros(BNSD, np.complex128)),
    row("dy-strings", *INVALID, "dy", dy=np.full(BNSD, "a")),
    row("dy-object", *INVALID, "dy", dy=np.zeros(BNSD, object)),
    row("dy-ragged", *INVALID, "dy", dy=[[0.0, 1.0], [2.0]]),
    row("cos-complex", *INVALID, "cos", cos=np.zeros(C11SD, np.complex64)),
    row("x-complex", *INVALID, "x", x=np.zeros(BNSD, np.complex64)),
    row("cos-dtype-differs-A2", *INVALID, "cos", cos=np.zeros(C11SD, np.float16), soc="A2"),
    row("sin-dtype-differs-A3", *INVALID, "sin", sin=np.zeros(C11SD, refspec.bfloat16), soc="A3"),
    row("x-dtype-differs-950", *INVALID, "x", x=np.zeros(BNSD, np.float16), soc="950"),
    row("x-float64-on-A2", *INVALID, "x", op="fwd", dtype=np.float64, soc="A2"),
    row("cos-dtype-differs-950", *INVALID, "cos", op="fwd", cos=np.zeros(C11SD, np.float16), soc="950"),
    # common: mode -> 561002
    row("mode-4", *TILING, "mode", mode=4),
    row("mode-minus-1", *TILING, "mode", mode=-1),
    row("mode-1.5", *TILING, "mode", mode=1.5),
    row("mode-string", *TILING, "mode", mode="1"),
    row("mode-None", *TILING, "mode", mode=None),
    row("mode-4", *TILING, "mode", op="fwd", mode=4),
    # common: ranks and shapes -> 561002
    row("cos-rank-3-vs-4", *TILING, "cos", cshape=(1, 5, 8)),
    row("cos-rank-4-vs-3", *TILING, "cos", shape=(10, 3, 8), cshape=(1, 10, 1, 8)),
    row("dy-scalar", *TILING, "dy", shape=(), cshape=()),
    row("sin-shape-differs", *TILING, "sin", sin=np.zeros((1, 1, 1, 8), np.float32)),
    row("cos-D-differs", *TILING, "cos", cshape=(1, 1, 5, 6)),
    row("x-shape-differs", *TILING, "x", x=np.zeros((2, 3, 4, 8), np.float32)),
    row("dy-D-odd", *TILING, "dy", shape=(2, 3, 5, 7), cshape=(1, 1, 5, 7)),
    row("x-D-odd", *TILING, "x", op="fwd", shape=(2, 3, 5, 9), cshape=(1, 1, 5, 9)),
    row("dy-D-6-quarter", *TILING, "dy", mode=2, shape=(2, 3, 5, 6), cshape=(1, 1, 5, 6)),
    row("x-D-6-quarter", *TILING, "x", op="fwd", mode=2, shape=(2, 3, 5, 6), cshape=(1, 1, 5, 6)),
    # common: cos not broadcastable (neither 1 nor dy's size) -> 561002
    row("cos-axis-neither-1-nor-full", *TILING, "cos", cshape=(1, 2, 5, 8)),
    row("cos-axis-neither-1-nor-full-950", *TILING, "cos", cshape=(2, 3, 4, 8), soc="950"),
    # A2/A3: modes 2, 3 -> 561002 (forward too: errata E3)
    row("mode-2-A2", *TILING, "mode", mode=2, soc="A2"),
    row("mode-3-A3", *TILING, "mode", mode=3, soc="A3"),
    row("mode-2-A2", *TILING, "mode", op="fwd", mode=2, soc="A2"),
    row("mode-3-A2", *TILING, "mode", op="fwd", mode=3, soc="A2"),
    # A2/A3: D < 896 (errata E4), rank 3 or 4
    row("D-896-A2", *TILING, "dy", shape=(1, 1, 2, 896), cshape=(1, 1, 2, 896), soc="A2"),
    row("D-896-A3-interleave", *TILING, "dy", shape=(1, 1, 2, 896), cshape=(1, 1, 2, 896), mode=1, soc="A3"),
    row("rank-5-A2", *TILING, "dy", shape=(1, 2, 3, 4, 8), cshape=(1, 1, 1, 4, 8), soc="A2"),
    row("rank-2-A2", *TILING, "dy", shape=(4, 8), cshape=(4, 8), soc="A2"),
    # A2/A3 half mode: B < 1000, N < 1000, with x B*N <= 1024 (errata E5)
    row("half-B-1000", *TILING, "dy", shape=(1000, 1, 2, 2), cshape=(1, 1, 2, 2), soc="A2"),
    row("half-N-1000", *TILING, "dy", shape=(1, 1000, 2, 2), cshape=(1, 1, 2, 2), soc="A2"),
    row("half-TND-N-1000", *TILING, "dy", shape=(2, 1000, 2), cshape=(2, 1, 2), soc="A2"),
    row("half-BxN-1025-with-x", *TILING, "dy", shape=(25, 41, 2, 2), cshape=(1, 1, 2, 2), soc="A2"),
    row("half-BSND-BxN-1025-with-x", *TILING, "dy", shape=(41, 2, 25, 2), cshape=(1, 2, 1, 2), soc="A3"),
    # A2/A3 interleave: B*N < 1000 (N < 1000 for TND)
    row("interleave-BxN-1000", *TILING, "dy", shape=(25, 40, 2, 2), cshape=(1, 1, 2, 2), mode=1, soc="A2"),
    row("interleave-BSND-BxN-1000", *TILING, "dy", shape=(10, 2, 100, 2), cshape=(1, 2, 1, 2), mode=1, soc="A2"),
    row("interleave-SBND-BxN-1000", *TILING, "dy", shape=(2, 10, 100, 2), cshape=(2, 1, 1, 2), mode=1, soc="A2",
        x=None),
    row("interleave-TND-N-1000", *TILING, "dy", shape=(2, 1000, 2), cshape=(2, 1, 2), mode=1, soc="A2"),
    # A2/A3 layout inference rejects (rule 8 / interleave's three patterns)
    row("half-B1SD-B-not-below-S", *TILING, "cos", shape=(5, 3, 2, 8), cshape=(5, 1, 2, 8), soc="A2"),
    row("half-111D-all-above-1", *TILING, "cos", cshape=(1, 1, 1, 8), soc="A2"),
    row("half-1NSD", *TILING, "cos", cshape=(1, 3, 5, 8), soc="A2"),
    row("interleave-B1SD", *TILING, "cos", shape=(2, 3, 5, 8), cshape=(2, 1, 5, 8), mode=1, soc="A2"),
    row("interleave-full", *TILING, "cos", shape=(2, 3, 5, 8), cshape=(2, 3, 5, 8), mode=1, soc="A2"),
    row("interleave-TND-full", *TILING, "cos", shape=(10, 3, 8), cshape=(10, 3, 8), mode=1, soc="A3"),
    # 950: 4-D only, D <= 1024, every dim > 0
    row("950-TND", *TILING, "dy", shape=(10, 3, 8), cshape=(10, 1, 8), soc="950"),
    row("950-rank-5", *TILING, "dy", shape=(1, 2, 3, 4, 8), cshape=(1, 1, 1, 4, 8), soc="950"),
    row("950-D-1026", *TILING, "dy", shape=(1, 1, 1, 1026), cshape=(1, 1, 1, 1026), soc="950"),
    row("950-empty-axis", *TILING, "dy", shape=(2, 0, 5, 8), cshape=(1, 1, 5, 8), soc="950"),
    row("950-D-1026", *TILING, "x", op="fwd", shape=(1, 1, 1, 1026), cshape=(1, 1, 1, 1026), soc="950"),
    # the profile and the output dtype themselves
    row("soc-unknown", *INVALID, "soc", soc="A1"),
    row("soc-910", *INVALID, "soc", op="fwd", soc="910"),
]


@pytest.mark.parametrize("op, kw, cls, code, argument", REJECTED)
def test_rule_rejects(op, kw, cls, code, argument):
    with pytest.raises(refspec.AclnnError) as excinfo:
        call(op, **kw)
    assert_aclnn(excinfo, cls, code, argument)


@pytest.mark.parametrize("op", ("fwd", "grad"))
def test_out_dtype_rejected(op):
    with pytest.raises(refspec.AclnnError) as excinfo:
        if op == "fwd":
            refspec.rotary_position_embedding(np.zeros(BNSD), np.zeros(C11SD), np.zeros(C11SD), out_dtype="int8")
        else:
            refspec.rotary_position_embedding_grad(np.zeros(BNSD), np.zeros(C11SD), np.zeros(C11SD),
                                                   out_dtype=np.complex64)
    assert_aclnn(excinfo, ParamInvalidError, 161002, "out_dtype")


ACCEPTED = [
    pytest.param(kw, id=name) for name, kw in [
        ("D-894-A2", dict(shape=(1, 1, 2, 894), cshape=(1, 1, 2, 894), soc="A2")),
        ("half-B-999", dict(shape=(999, 1, 2, 2), cshape=(1, 1, 2, 2), soc="A2", x=None)),
        ("half-N-999", dict(shape=(1, 999, 2, 2), cshape=(1, 1, 2, 2), soc="A2", x=None)),
        ("half-BxN-1025-without-x", dict(shape=(25, 41, 2, 2), cshape=(1, 1, 2, 2), soc="A2", x=None)),
        ("half-TND-T1D-T-1", dict(shape=(1, 3, 8), cshape=(1, 1, 8), soc="A2")),
        ("half-BxN-1024-with-x", dict(shape=(32, 32, 2, 2), cshape=(1, 1, 2, 2), soc="A2")),
        ("half-TND-N-999", dict(shape=(2, 999, 2), cshape=(2, 1, 2), soc="A2")),
        ("interleave-BxN-999", dict(shape=(27, 37, 2, 2), cshape=(1, 1, 2, 2), mode=1, soc="A2")),
        ("interleave-TND-N-999", dict(shape=(2, 999, 2), cshape=(2, 1, 2), mode=1, soc="A3")),
        ("half-B1SD-B-below-S", dict(shape=(2, 3, 5, 8), cshape=(2, 1, 5, 8), soc="A2")),
        ("950-D-1024", dict(shape=(1, 1, 1, 1024), cshape=(1, 1, 1, 1024), soc="950")),
        ("950-mode-2", dict(mode=2, soc="950")),
        ("950-mode-3", dict(mode=3, soc="950")),
        ("950-111D", dict(cshape=(1, 1, 1, 8), soc="950")),
        ("950-1NSD", dict(cshape=(1, 3, 5, 8), soc="950")),
        ("none-float64", dict(dtype=np.float64)),
        ("none-ints-widened", dict(dtype=np.int32)),
        ("none-D-896", dict(shape=(1, 1, 2, 896), cshape=(1, 1, 2, 896))),
        ("none-mode-numpy-int", dict(mode=np.int64(3))),
        ("soc-lowercase-ascend-prefix", dict(soc="ascendA2")),
    ]
]


@pytest.mark.parametrize("kw", ACCEPTED)
def test_boundary_accepted(kw):
    dx, dcos, dsin = call("grad", **kw)
    shape = kw.get("shape", BNSD)
    assert dx.shape == shape
    if "x" in kw and kw["x"] is None:
        assert dcos is None and dsin is None
    else:
        assert dcos.shape == kw.get("cshape", C11SD)


# --- the A2/A3 layout inference rules of docs/rope.md §4, one by one ------------------------------

HALF_RULES = [
    # rule, dy shape, cos shape, (layout, pattern) or None for rejected
    ("1-full", (4, 3, 5, 8), (4, 3, 5, 8), ("BSND", "BSND")),
    ("2-1S1D", (4, 5, 3, 8), (1, 5, 1, 8), ("BSND", "1S1D")),
    ("3-BS1D", (2, 5, 3, 8), (2, 5, 1, 8), ("BSND", "BS1D")),
    ("3-before-7", (2, 3, 3, 8), (2, 3, 1, 8), ("BSND", "BS1D")),
    ("4-11SD", (4, 3, 5, 8), (1, 1, 5, 8), ("BNSD", "11SD")),
    ("5-B1SD", (2, 3, 5, 8), (2, 1, 5, 8), ("BNSD", "B1SD")),
    ("6-S11D", (5, 2, 3, 8), (5, 1, 1, 8), ("SBND", "S11D")),
    ("7-SB1D", (5, 2, 3, 8), (5, 2, 1, 8), ("SBND", "SB1D")),
    ("7-when-3-fails-B-ge-S", (4, 3, 3, 8), (4, 3, 1, 8), ("SBND", "SB1D")),
    ("2-before-4", (4, 1, 1, 8), (1, 1, 1, 8), ("BSND", "1S1D")),
    ("8-B1SD-B-ge-S", (5, 3, 2, 8), (5, 1, 2, 8), None),
    ("8-111D", (2, 3, 4, 8), (1, 1, 1, 8), None),
    ("8-1NSD", (2, 3, 4, 8), (1, 3, 4, 8), None),
    ("8-B11D-with-N-gt-1", (2, 3, 4, 8), (2, 1, 1, 8), ("SBND", "S11D")),
    ("TND-T1D", (10, 3, 8), (10, 1, 8), ("TND", "T1D")),
    ("TND-full", (10, 3, 8), (10, 3, 8), ("TND", "TND")),
    # TND is looked at as (1, T, N, D): rules 5 and 6 also accept 1ND and 11D, which the
    # documented table does not list (the rules are what the kernel runs)
    ("TND-1ND-by-rule-5", (10, 3, 8), (1, 3, 8), ("TND", "1ND")),
    ("TND-11D-by-rule-6", (10, 3, 8), (1, 1, 8), ("TND", "11D")),
    ("TND-1ND-T-le-N", (2, 3, 8), (1, 3, 8), ("TND", "1ND")),
    ("TND-T-1", (1, 3, 8), (1, 1, 8), ("TND", "11D")),
]

INTERLEAVE_RULES = [
    ("BSND-1S1D", (4, 5, 3, 8), (1, 5, 1, 8), ("BSND", "1S1D")),
    ("TND-T1D", (10, 3, 8), (10, 1, 8), ("TND", "T1D")),
    ("BNSD-11SD", (4, 3, 5, 8), (1, 1, 5, 8), ("BNSD", "11SD")),
    ("SBND-S11D", (5, 2, 3, 8), (5, 1, 1, 8), ("SBND", "S11D")),
    ("1S1D-before-11SD", (4, 1, 1, 8), (1, 1, 1, 8), ("BSND", "1S1D")),
    ("B1SD", (2, 3, 5, 8), (2, 1, 5, 8), None),
    ("BS1D", (2, 5, 3, 8), (2, 5, 1, 8), None),
    ("full", (2, 3, 5, 8), (2, 3, 5, 8), None),
    ("SB1D", (5, 2, 3, 8), (5, 2, 1, 8), None),
    ("TND-full", (10, 3, 8), (10, 3, 8), None),
]


def check_rule(shape, cshape, mode, soc, expected):
    if expected is None:
        with pytest.raises(refspec.AclnnError) as excinfo:
            refspec.infer_layout(shape, cshape, mode, soc)
        assert_aclnn(excinfo, TilingError, 561002, "cos")
        with pytest.raises(refspec.AclnnError) as excinfo:
            call(shape=shape, cshape=cshape, mode=mode, soc=soc, x=None)
        assert_aclnn(excinfo, TilingError, 561002, "cos")
    else:
        inferred = refspec.infer_layout(shape, cshape, mode, soc)
        assert (inferred.layout, inferred.cos_pattern) == expected
        assert inferred.reduce_dims == tuple(i for i, (a, b) in enumerate(zip(shape, cshape)) if b == 1 and a > 1)
        call(shape=shape, cshape=cshape, mode=mode, soc=soc, x=None)


@pytest.mark.parametrize("soc", ("A2", "A3"))
@pytest.mark.parametrize("rule, shape, cshape, expected", HALF_RULES, ids=[r[0] for r in HALF_RULES])
def test_a2_half_layout_rules(rule, shape, cshape, expected, soc):
    check_rule(shape, cshape, 0, soc, expected)


@pytest.mark.parametrize("soc", ("A2", "A3"))
@pytest.mark.parametrize("rule, shape, cshape, expected", INTERLEAVE_RULES, ids=[r[0] for r in INTERLEAVE_RULES])
def test_a2_interleave_layout_rules(rule, shape, cshape, expected, soc):
    check_rule(shape, cshape, 1, soc, expected)


def test_infer_layout_modes_2_3_have_no_a2_kernel():
    for mode in (2, 3):
        with pytest.raises(refspec.AclnnError) as excinfo:
            refspec.infer_layout(BNSD, C11SD, mode, "A2")
        assert_aclnn(excinfo, TilingError, 561002, "mode")


def test_infer_layout_950_and_math_only():
    assert refspec.infer_layout(BNSD, (1, 1, 1, 8), 3, "950").reduce_dims == (0, 1, 2)
    assert refspec.infer_layout((10, 3, 8), (1, 1, 8), 0, None).reduce_dims == (0, 1)
    with pytest.raises(refspec.AclnnError) as excinfo:
        refspec.infer_layout((10, 3, 8), (10, 1, 8), 0, "950")
    assert_aclnn(excinfo, TilingError, 561002, "dy")


@pytest.mark.parametrize("vendor, profile", [("ascend910b", "A2"), ("Ascend910_93", "A3"),
                                             ("ascend910_95", "950")])
def test_vendor_soc_names_select_the_profile(vendor, profile):
    dy = np.zeros((1, 1, 2, 4), np.float32)
    cos = np.zeros((1, 1, 2, 4), np.float32)
    # mode 2 separates the profiles: A2/A3 have no quarter kernel, 950 has one.
    if profile == "950":
        refspec.rotary_position_embedding_grad(dy, cos, cos, mode=2, soc=vendor)
    else:
        with pytest.raises(refspec.TilingError, match=rf"^mode: 2 .*{profile}"):
            refspec.rotary_position_embedding_grad(dy, cos, cos, mode=2, soc=vendor)


@pytest.mark.parametrize("mode", [True, False, np.bool_(True)])
def test_bool_mode_is_rejected(mode):
    z = np.zeros((1, 1, 2, 4))
    with pytest.raises(refspec.TilingError, match="^mode: .*bool") as info:
        refspec.rotary_position_embedding_grad(z, z, z, mode=mode)
    assert info.value.code == 561002
