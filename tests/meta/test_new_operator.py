"""Adding an operator takes one record and one sweep: a small operator defined in this file only
goes through ``refspec list``, ``generate``, ``export`` and ``compare`` without any change to the
package (docs/architecture.md, "Adding an operator")."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import refspec.goldens as goldens
from refspec import ops
from refspec.ops.sampling import draw
from refspec.spec.blocks import by_blocks
from refspec.spec.checks import as_tensor, check_out_dtype, check_soc, output_dtype, require
from refspec.spec.dtypes import resolve_dtype, round_to
from refspec.spec.errors import TilingError
from refspec.spec.reduce import sum_rows
from refspec.spec.terms import ELEMENTWISE, REDUCTION, OutputTerms
from cli_helpers import invoke as run


# --- the operator: its spec function ---------------------------------------------------------

def scale_grad_formula(dy, w, _unused, x):
    """dx = dy*w; dw = sum over rows of dy*x."""
    return dy * w, sum_rows(dy * x).reshape(w.shape)


def check_scale_grad(dy, x, w, soc):
    ctx = "scale_grad"
    soc = check_soc(soc, ctx)
    arrays = [as_tensor(require(v, n, ctx), n, ctx, soc) for v, n in ((dy, "dy"), (x, "x"), (w, "w"))]
    if arrays[2].shape != arrays[0].shape[-1:] or arrays[1].shape != arrays[0].shape:
        raise TilingError(f"w: shape {arrays[2].shape} must be (D,) = {arrays[0].shape[-1:]} [{ctx}]")
    return arrays


def scale_grad(dy, x, w, *, soc=None, out_dtype=None):
    """The backward of y = x*w over rows: (dx, dw)."""
    out_dtype = check_out_dtype(out_dtype, "scale_grad")
    d, x64, w64 = check_scale_grad(dy, x, w, soc)
    dx, dw = by_blocks(scale_grad_formula, d, (w64[None], w64[None]), x64, reduced=(False, True))
    dtype = output_dtype(d.dtype, out_dtype)
    return round_to(dx, dtype), round_to(dw.reshape(-1), dtype)


# --- its record -------------------------------------------------------------------------------

def plan(p):
    dt = resolve_dtype(p["dtype"])
    wlen = p["D"] + (p["fault"] == "w_shape")
    return {"dy": ops.TensorPlan((p["R"], p["D"]), dt, "grad"),
            "x": ops.TensorPlan((p["R"], p["D"]), dt, "data"),
            "w": ops.TensorPlan((wlen,), dt, "weight")}


def sample(p, seed, pool=None):
    return {n: draw(p["distribution"], t.role, t.shape, t.dtype, seed, n) for n, t in plan(p).items()}


def terms(inputs, attrs, soc):
    dy, x = (np.asarray(inputs[n], dtype=np.float64) for n in ("dy", "x"))
    return {"dx": OutputTerms(ELEMENTWISE),
            "dw": OutputTerms(REDUCTION, dy.shape[0], sum_rows(np.abs(dy * x)))}


SCALE_GRAD = ops.Operator(
    id="scale_grad", function="scale_grad", aclnn="aclnnScaleGrad", title="ScaleGrad",
    spec=scale_grad,
    inputs=(ops.Tensor("dy", "dy", "grad"), ops.Tensor("x", "x", "data"),
            ops.Tensor("w", "w", "weight")),
    outputs=(ops.Output("dx", "dx"), ops.Output("dw", "dw")),
    attributes=(), socs=("A2", None),
    sweep=ops.SweepAxes(
        axes=("soc", "dtype", "dist", "fault"), shape_keys=("R", "D"), shape_example="R16D8",
        params=lambda v, s: {"soc": None if v["soc"] == "none" else v["soc"], "dtype": v["dtype"],
                             "distribution": v["dist"], "fault": v["fault"], **s},
        label=lambda s: f"R{s['R']}D{s['D']}", faults=("none", "w_shape")),
    attrs_of=lambda p: {}, plan=plan, sample=sample,
    check=lambda inputs, attrs, soc: check_scale_grad(inputs.get("dy"), inputs.get("x"),
                                                      inputs.get("w"), soc),
    terms=terms, output_axes=lambda p, name: "RD" if name == "dx" else "D")

SWEEP = """
name = "scale"
seed = 5
[[block]]
op = "scale_grad"
[block.axes]
soc = ["A2", "none"]
dtype = ["float16", "float32"]
dist = ["random", "position-coded"]
shape = ["R300D8", "R5000D16"]
[[block]]
op = "scale_grad"
expect = "reject"
[block.axes]
soc = "A2"
dtype = "float32"
fault = "w_shape"
shape = "R4D8"
"""


@pytest.fixture
def registered():
    ops.register(SCALE_GRAD)
    yield SCALE_GRAD
    ops.unregister(SCALE_GRAD.id)


def kernel(dy, x, w, bug=False):
    """An independent float32 implementation (row sums one row after another)."""
    dy, x, w = (a.astype(np.float32) for a in (dy, x, w))
    dw = np.zeros(w.shape, np.float32)
    for row in dy * x:
        dw += row
    dx = dy * (-w if bug else w)
    return dx, dw


def test_a_new_operator_needs_only_its_record_and_a_sweep(registered, tmp_path):
    sweep = tmp_path / "scale.toml"
    sweep.write_text(SWEEP)
    ids = run("list", "--sweep", sweep).output.split()
    assert len(ids) == 17 and ids[0] == "scale_grad/soc=A2/dtype=float16/dist=random/R300D8"
    listed = json.loads(run("list", "--sweep", sweep, "--json").output)
    assert [c["expected_error_code"] for c in listed["cases"]][-1] == 561002

    out = tmp_path / "scale.h5"
    assert run("generate", "--sweep", sweep, "-o", out).exit_code == 0
    with goldens.open(out) as gf:
        case = gf[ids[0]]
        dy, x, w = (case.inputs[n][()] for n in ("dy", "x", "w"))
        dx, dw = scale_grad(dy, x, w, out_dtype=np.float64)
        assert np.array_equal(case.exact["dw"][()], dw) and np.array_equal(case.exact["dx"][()], dx)
        assert case.output_meta("dw") == {"comparison_class": "reduction", "reduced_terms": 300,
                                          "axes": "D", "dtype": "float16"}

    cases = tmp_path / "cases"
    assert run("export", out, "-o", cases).exit_code == 0
    for folder in sorted(p.parent for p in cases.rglob("case.json")):
        desc = json.loads((folder / "case.json").read_text())
        assert desc["aclnn_operator"] == "aclnnScaleGrad"
        if desc["expected_error"]:
            continue
        dt = resolve_dtype(desc["parameters"]["dtype"])
        D = desc["parameters"]["D"]
        dy, x = (np.fromfile(folder / f"{n}.bin", dt).reshape(-1, D) for n in ("dy", "x"))
        dxk, dwk = kernel(dy, x, np.fromfile(folder / "w.bin", dt), bug="R5000D16" in str(folder))
        dxk.astype(dt).tofile(folder / "dx.bin")
        dwk.astype(dt).tofile(folder / "dw.bin")
    report = run("compare", out, cases, "--case", "*R300D8")
    assert report.exit_code == 0, report.output
    report = run("compare", out, cases)
    assert report.exit_code == 1
    assert re.search(r"dx\[r=\d+,d=\d+\] = \S+ but should be \S+ \(\S+ ulp\) \[scale_grad", report.output)
