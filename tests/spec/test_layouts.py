"""Layout equivalence and layout naming (docs/rope.md §4: "the same logical problem laid out as BNSD,
BSND, SBND or TND must give the same numbers after transposition").

One logical (B, N, S, D) problem with a cos/sin broadcast pattern is laid out four ways with
``refspec.to_layout``; the results, brought back with ``refspec.from_layout``, must equal the
BNSD results: dx and y exactly (the same products), dcos/dsin up to summation order. For TND a cos
shared by the batch becomes T1D (one row per token), so its dcos summed over the batch equals the
shared one.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import refspec
from spec_helpers import B, N, S, pattern_label

F64 = np.float64
D = 8
LOGICAL = (B, N, S, D)
KEEPS = tuple(itertools.product((False, True), repeat=3))   # which of B, N, S cos keeps


def logical_cos_shape(keep):
    return tuple(size if k else 1 for size, k in zip(LOGICAL[:3], keep)) + (D,)


def problem(rng, keep, dtype=F64):
    """dy, x, cos, sin of the logical problem (float32 for the chip profiles, which take only
    device dtypes; the math is float64 on those exact values either way)."""
    cshape = logical_cos_shape(keep)
    return tuple(a.astype(dtype) for a in (rng.uniform(-2, 2, LOGICAL), rng.uniform(-2, 2, LOGICAL),
                                           rng.uniform(-3, 4, cshape), rng.uniform(-4, 5, cshape)))


def grad(dy, cos, sin, x, mode, soc=None):
    return refspec.rotary_position_embedding_grad(dy, cos, sin, x, mode, soc=soc, out_dtype=F64)


@pytest.mark.parametrize("mode", (0, 1, 2, 3))
@pytest.mark.parametrize("keep", KEEPS, ids=lambda k: pattern_label("BNSD", k))
@pytest.mark.parametrize("layout", ("BSND", "SBND"))
def test_4d_layouts_equal_bnsd(rng, layout, keep, mode):
    dy, x, cos, sin = problem(rng, keep)
    dx_ref, dcos_ref, dsin_ref = grad(dy, cos, sin, x, mode)
    y_ref = refspec.rotary_position_embedding(x, cos, sin, mode, out_dtype=F64)
    L = {name: refspec.to_layout(a, layout) for name, a in dict(dy=dy, x=x, cos=cos, sin=sin).items()}
    assert refspec.cos_pattern(L["cos"].shape, layout) == pattern_label(
        layout, [keep["BNS".index(letter)] for letter in layout[:3]])
    dx, dcos, dsin = grad(L["dy"], L["cos"], L["sin"], L["x"], mode)
    y = refspec.rotary_position_embedding(L["x"], L["cos"], L["sin"], mode, out_dtype=F64)
    np.testing.assert_array_equal(refspec.from_layout(dx, layout), dx_ref)
    np.testing.assert_array_equal(refspec.from_layout(y, layout), y_ref)
    np.testing.assert_allclose(refspec.from_layout(dcos, layout), dcos_ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(refspec.from_layout(dsin, layout), dsin_ref, rtol=1e-13, atol=1e-13)


# TND: patterns that keep S become T1D/TND (repeated over the batch when cos is batch-shared);
# 111D and 1N1D become 11D and 1ND; B11D and BN1D have no TND form.
TND_KEEPS = [k for k in KEEPS if k[2]] + [(False, False, False), (False, True, False)]


@pytest.mark.parametrize("mode", (0, 1, 2, 3))
@pytest.mark.parametrize("keep", TND_KEEPS, ids=lambda k: pattern_label("BNSD", k))
def test_tnd_equals_bnsd(rng, keep, mode):
    dy, x, cos, sin = problem(rng, keep)
    dx_ref, dcos_ref, dsin_ref = grad(dy, cos, sin, x, mode)
    per_token = keep[2]
    batch = B if per_token else None
    c, s = (refspec.to_layout(a, "TND", batch=batch) for a in (cos, sin))
    expected = ("T" if per_token else "1") + ("N" if keep[1] else "1") + "D"
    assert refspec.cos_pattern(c.shape, "TND") == expected
    dx, dcos, dsin = grad(refspec.to_layout(dy, "TND"), c, s, refspec.to_layout(x, "TND"), mode)
    assert dx.shape == (B * S, N, D) and dcos.shape == c.shape
    np.testing.assert_array_equal(refspec.from_layout(dx, "TND", batch=B), dx_ref)
    for got, ref in ((dcos, dcos_ref), (dsin, dsin_ref)):
        if per_token:
            got = refspec.from_layout(got, "TND", batch=B)
            if not keep[0]:
                got = got.sum(axis=0, keepdims=True)     # T1D summed over the batch = 11SD
        else:
            got = got.reshape(ref.shape)
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13)


def test_tnd_cannot_share_cos_over_s_per_batch():
    with pytest.raises(ValueError):
        refspec.to_layout(np.zeros((B, 1, 1, D)), "TND")


@pytest.mark.parametrize("layout", refspec.LAYOUTS)
def test_to_from_layout_round_trip(rng, layout):
    a = rng.standard_normal(LOGICAL)
    laid = refspec.to_layout(a, layout)
    assert laid.shape == refspec.spec.layouts.layout_shape(layout, *LOGICAL)
    np.testing.assert_array_equal(refspec.from_layout(laid, layout, batch=B), a)


def test_unknown_layout_is_rejected():
    with pytest.raises(ValueError):
        refspec.to_layout(np.zeros(LOGICAL), "NBSD")


# The documented table (docs/rope.md §4) on A2: (layout, logical keep of B, N, S) -> inferred name.
# Rule 1 names a full-shape cos "BSND" whatever the real layout (it needs no reduction).
A2_TABLE = [
    # layout, keep(B, N, S), modes, inferred (layout, pattern)
    ("BNSD", (False, False, True), (0, 1), ("BNSD", "11SD")),
    ("BNSD", (True, False, True), (0,), ("BNSD", "B1SD")),
    ("BNSD", (True, True, True), (0,), ("BSND", "BSND")),
    ("BSND", (False, False, True), (0, 1), ("BSND", "1S1D")),
    ("BSND", (True, False, True), (0,), ("BSND", "BS1D")),
    ("BSND", (True, True, True), (0,), ("BSND", "BSND")),
    ("SBND", (False, False, True), (0, 1), ("SBND", "S11D")),
    ("SBND", (True, False, True), (0,), ("SBND", "SB1D")),
    ("SBND", (True, True, True), (0,), ("BSND", "BSND")),
    ("TND", (False, False, True), (0, 1), ("TND", "T1D")),
    ("TND", (True, False, True), (0, 1), ("TND", "T1D")),
    ("TND", (True, True, True), (0,), ("TND", "TND")),
]


@pytest.mark.parametrize("layout, keep, modes, named", A2_TABLE,
                         ids=[f"{r[0]}-{pattern_label('BNSD', r[1])}" for r in A2_TABLE])
def test_documented_patterns_on_a2_name_and_match(rng, layout, keep, modes, named):
    """Each documented (layout, pattern) is accepted on A2 with the documented name, and the
    profile changes only validation: the numbers equal the math-only profile's."""
    dy, x, cos, sin = problem(rng, keep, np.float32)
    batch = B if layout == "TND" else None
    dyL, xL = refspec.to_layout(dy, layout), refspec.to_layout(x, layout)
    cL, sL = (refspec.to_layout(a, layout, batch=batch) for a in (cos, sin))
    for mode in modes:
        inferred = refspec.infer_layout(dyL.shape, cL.shape, mode, "A2")
        assert (inferred.layout, inferred.cos_pattern) == named
        for got, ref in zip(grad(dyL, cL, sL, xL, mode, soc="A2"), grad(dyL, cL, sL, xL, mode)):
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("keep", KEEPS, ids=lambda k: pattern_label("BNSD", k))
def test_950_accepts_every_4d_pattern_with_the_same_numbers(rng, keep):
    dy, x, cos, sin = problem(rng, keep, np.float32)
    for mode in (0, 1, 2, 3):
        for got, ref in zip(grad(dy, cos, sin, x, mode, soc="950"), grad(dy, cos, sin, x, mode)):
            np.testing.assert_array_equal(got, ref)
