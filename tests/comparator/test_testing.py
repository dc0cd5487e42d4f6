"""refspec.testing: the asserts raise AssertionError with the message of a failing CLI row."""

from __future__ import annotations

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.comparator import compare
from refspec.spec.dtypes import round_to
from refspec.goldens.example import rope_grad_case
from refspec.testing import assert_allclose_to_spec, assert_matches_golden

import implementations as impl
from implementations import attrs_of


def _inputs(rng, dtype="bfloat16", B=2, N=4, S=20, D=8):
    dy = round_to(rng.uniform(-2, 2, (B, N, S, D)), dtype)
    cos = round_to(np.cos(rng.uniform(-3, 3, (1, 1, S, D))), dtype)
    sin = round_to(np.sin(rng.uniform(-3, 3, (1, 1, S, D))), dtype)
    x = round_to(rng.uniform(-2, 2, (B, N, S, D)), dtype)
    return dict(dy=dy, cos=cos, sin=sin, x=x)


def test_assert_allclose_to_spec_passes_a_correct_kernel(rng):
    t = _inputs(rng)
    out = impl.rope_grad(t["dy"], t["cos"], t["sin"], t["x"], mode=0)
    for name in ("dx", "dcos", "dsin"):
        assert_allclose_to_spec(out[name], "rotary_position_embedding_grad", name, mode=0, **t)


def test_assert_allclose_to_spec_message_is_the_cli_row(rng):
    t = _inputs(rng)
    dx = impl.rope_grad(t["dy"], t["cos"], t["sin"], t["x"], mode=0)["dx"].copy()
    exact = refspec.rotary_position_embedding_grad(**t, mode=0, out_dtype=np.float64)[0]
    dx[1, 3, 17, 5] = np.float32(exact[1, 3, 17, 5] + 0.25)
    with pytest.raises(AssertionError) as info:
        assert_allclose_to_spec(dx, "rotary_position_embedding_grad", "dx", mode=0, **t)
    first = str(info.value).splitlines()[0]
    assert first.startswith("dx[b=1,n=3,s=17,d=5] = ")
    assert first.endswith("ulp) [rotary_position_embedding_grad mode=half layout=BNSD cos=11SD "
                          "dtype=bfloat16]")
    assert " but should be " in first
    should = float(first.split(" but should be ")[1].split(" ")[0])
    assert should == pytest.approx(exact[1, 3, 17, 5], rel=1e-5)


def test_assert_matches_golden_same_message_as_cli(tmp_path):
    path = tmp_path / "g.h5"
    with goldens.GoldenWriter(path, sweep_name="t", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(shape=(2, 2, 4, 8), dtype='float16', case_id='rope/1'))
    with goldens.open(path) as gf:
        case = gf["rope/1"]
        arrays = {n: case.expected[n][()].copy() for n in case.output_names}
        assert_matches_golden(case, arrays)                       # a case object
    assert_matches_golden(str(path), arrays, case="rope/1")       # a path and a case id
    arrays["dcos"][0, 0, 2, 3] = -arrays["dcos"][0, 0, 2, 3] + 1
    with pytest.raises(AssertionError) as info:
        assert_matches_golden(str(path), {"rope/1": arrays})
    row = compare(str(path), {"rope/1": arrays}).failures[0].message
    assert str(info.value).splitlines()[0] == row
    assert row.startswith("dcos[b=0,n=0,s=2,d=3] = ")


def test_assert_allclose_to_spec_nrc_and_unknown_output(rng):
    from case_grids import nrc_cases
    case = nrc_cases(backward=True, every=9)[0]
    out = impl.run(case.op, attrs_of(case), case.inputs)
    kwargs = {**case.inputs, **{k: case.params[k] for k in ("norm_type", "norm_added_type",
                                                             "rope_type", "concat_order")}}
    assert_allclose_to_spec(out["grad_query"], "norm_rope_concat_backward", "grad_query", **kwargs)
    with pytest.raises(ValueError):
        assert_allclose_to_spec(out["grad_query"], "norm_rope_concat_backward", "dx", **kwargs)
