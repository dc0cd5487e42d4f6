"""Adding an operator takes one record and one sweep: a small operator defined in this file only,
with an axis of its own (``scale``, read by its own normalizer), goes through ``refspec list``,
``generate``, ``export``, ``compare`` and ``run`` without any change to the package
(docs/architecture.md, "Adding an operator")."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import numpy as np
import pytest

import refspec.goldens as goldens
from refspec import ops
from refspec.ops.axes import Axis, Shape, dist_axis, dtype_axis, fault_axis, soc_axis
from refspec.ops.record import Call, Comparison, Generation, Output, Tensor, Tensors
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
    """dx = dy*w; dw = sum over rows of dy*x (the scale is applied by the caller)."""
    return dy * w, sum_rows(dy * x).reshape(w.shape)


def check_scale_grad(dy, x, w, scale, soc):
    ctx = "scale_grad"
    soc = check_soc(soc, ctx)
    arrays = [as_tensor(require(v, n, ctx), n, ctx, soc) for v, n in ((dy, "dy"), (x, "x"), (w, "w"))]
    if arrays[2].shape != arrays[0].shape[-1:] or arrays[1].shape != arrays[0].shape:
        raise TilingError(f"w: shape {arrays[2].shape} must be (D,) = {arrays[0].shape[-1:]} [{ctx}]")
    if not scale > 0:
        raise TilingError(f"scale: {scale!r} must be > 0 [{ctx}]")
    return arrays


def scale_grad(dy, x, w, scale=1.0, *, soc=None, out_dtype=None):
    """The backward of y = scale*x*w over rows: (dx, dw) = (scale*dy*w, scale*sum_rows(dy*x))."""
    out_dtype = check_out_dtype(out_dtype, "scale_grad")
    d, x64, w64 = check_scale_grad(dy, x, w, scale, soc)
    dx, dw = by_blocks(scale_grad_formula, d, (w64[None], w64[None]), x64, reduced=(False, True))
    dtype = output_dtype(d.dtype, out_dtype)
    return round_to(dx * scale, dtype), round_to(dw.reshape(-1) * scale, dtype)


# --- its record -------------------------------------------------------------------------------

def fraction(v) -> float:
    """The scale axis's own normalizer: a number, or a fraction written "1/4"; a power of two
    (so that scaling is exact)."""
    try:
        value = float(Fraction(str(v).strip())) if not isinstance(v, bool) else None
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or value <= 0 or np.frexp(value)[0] != 0.5:
        raise ValueError(f"{v!r} is not a power of two > 0 (write it as 0.25 or 1/4)")
    return value


def plan(p):
    dt = resolve_dtype(p["dtype"])
    wlen = p["D"] + (p["fault"] == "w_shape")
    return {"dy": ops.TensorPlan((p["R"], p["D"]), dt, "grad"),
            "x": ops.TensorPlan((p["R"], p["D"]), dt, "data"),
            "w": ops.TensorPlan((wlen,), dt, "weight")}


def sample(p, seed, pool=None):
    return {n: draw(p["dist"], t.role, t.shape, t.dtype, seed, n) for n, t in plan(p).items()}


def terms(call: Call):
    dy, x = (np.asarray(call.inputs[n], dtype=np.float64) for n in ("dy", "x"))
    scale = call.attrs.get("scale", 1.0)
    return {"dx": OutputTerms(ELEMENTWISE),
            "dw": OutputTerms(REDUCTION, dy.shape[0], sum_rows(np.abs(dy * x)) * scale)}


def check(call: Call):
    t = call.inputs
    check_scale_grad(t.get("dy"), t.get("x"), t.get("w"), call.attrs.get("scale", 1.0), call.soc)


SCALE_GRAD = ops.Operator(
    id="scale_grad", aclnn="aclnnScaleGrad", title="ScaleGrad", spec=scale_grad,
    tensors=Tensors(inputs=(Tensor("dy", "dy", "grad"), Tensor("x", "x", "data"),
                            Tensor("w", "w", "weight")),
                    outputs=(Output("dx", "dx", axes="RD"), Output("dw", "dw", axes="D"))),
    sweep=ops.SweepAxes(
        axes=(soc_axis(), Axis("scale", fraction, (1.0,), attr="scale"), dtype_axis(),
              dist_axis(), fault_axis(("none", "w_shape"))),
        shape=Shape(("R", "D"), "R16D8", lambda s: f"R{s['R']}D{s['D']}")),
    generation=Generation(plan=plan, sample=sample, check=check, terms=terms, socs=("A2", None)),
    comparison=Comparison(context=("scale", "dtype")))

SWEEP = """
name = "scale"
seed = 5
[[block]]
op = "scale_grad"
[block.axes]
soc = ["A2", "none"]
scale = [1, "1/4"]
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


def kernel(dy, x, w, scale=1.0, bug=False):
    """An independent float32 implementation (row sums one row after another)."""
    dy, x, w = (a.astype(np.float32) for a in (dy, x, w))
    dw = np.zeros(w.shape, np.float32)
    for row in dy * x:
        dw += row
    dx = dy * (-w if bug else w)
    return dx * np.float32(scale), dw * np.float32(scale)


IMPL = """
import numpy as np

def scale_grad(dy, x, w, scale=1.0):
    dtype = np.asarray(dy).dtype
    dy, x, w = (np.asarray(a, np.float32) for a in (dy, x, w))
    dw = np.zeros(w.shape, np.float32)
    for row in dy * x:
        dw += row
    s = np.float32(scale)
    return (dy * w * s).astype(dtype), (dw * s).astype(dtype)
"""


def test_a_new_operator_needs_only_its_record_and_a_sweep(registered, tmp_path):
    sweep = tmp_path / "scale.toml"
    sweep.write_text(SWEEP)
    ids = run("list", "--sweep", sweep).output.split()
    assert len(ids) == 33 and ids[0] == "scale_grad/soc=A2/scale=1.0/dtype=float16/dist=random/R300D8"
    assert any("/scale=0.25/" in i for i in ids)
    listed = json.loads(run("list", "--sweep", sweep, "--json").output)
    assert [c["expected_error_code"] for c in listed["cases"]][-1] == 561002
    assert {c["params"]["scale"] for c in listed["cases"]} == {1.0, 0.25}
    bad = tmp_path / "bad.toml"
    bad.write_text(SWEEP.replace('scale = [1, "1/4"]', 'scale = ["1/3"]'))
    res = run("list", "--sweep", bad)
    assert res.exit_code == 2 and "axis 'scale': '1/3' is not a power of two" in res.stderr

    out = tmp_path / "scale.h5"
    assert run("generate", "--sweep", sweep, "-o", out).exit_code == 0
    quarter = next(i for i in ids if "/scale=0.25/" in i)
    with goldens.open(out) as gf:
        for cid, scale in ((ids[0], 1.0), (quarter, 0.25)):
            case = gf[cid]
            dy, x, w = (case.inputs[n][()] for n in ("dy", "x", "w"))
            dx, dw = scale_grad(dy, x, w, scale, out_dtype=np.float64)
            assert np.array_equal(case.exact["dw"][()], dw) and np.array_equal(case.exact["dx"][()], dx)
            assert case.params["scale"] == scale and case.op == "scale_grad"
        assert case.output_meta("dw") == {"comparison_class": "reduction", "reduced_terms": 300,
                                          "axes": "D", "dtype": "float16"}

    cases = tmp_path / "cases"
    assert run("export", out, "-o", cases).exit_code == 0
    for folder in sorted(p.parent for p in cases.rglob("case.json")):
        desc = json.loads((folder / "case.json").read_text())
        assert desc["aclnn_operator"] == "aclnnScaleGrad" and desc["operator"] == "scale_grad"
        if desc["expected_error"]:
            continue
        p = desc["parameters"]
        dt = resolve_dtype(p["dtype"])
        dy, x = (np.fromfile(folder / f"{n}.bin", dt).reshape(-1, p["D"]) for n in ("dy", "x"))
        dxk, dwk = kernel(dy, x, np.fromfile(folder / "w.bin", dt), p["scale"],
                          bug="R5000D16" in str(folder))
        dxk.astype(dt).tofile(folder / "dx.bin")
        dwk.astype(dt).tofile(folder / "dw.bin")
    report = run("compare", out, cases, "--case", "*R300D8")
    assert report.exit_code == 0, report.output
    report = run("compare", out, cases)
    assert report.exit_code == 1
    assert re.search(r"dx\[r=\d+,d=\d+\] = \S+ but should be \S+ \(\S+ ulp\) \[scale_grad "
                     r"scale=0.25 dtype=float", report.output)

    impl = tmp_path / "scale_impl.py"
    impl.write_text(IMPL)
    report = run("run", out, "--impl", impl, "--case", "*R300D8")
    assert report.exit_code == 0, report.output
    broken = tmp_path / "scale_broken.py"
    broken.write_text(IMPL.replace("dy * w * s", "dy * w"))
    report = run("run", out, "--impl", broken, "--case", "*R300D8")
    failed = [line for line in report.output.splitlines() if line.startswith("FAIL ")]
    assert report.exit_code == 1 and len(failed) == 8          # dx of the eight scaled cases
    assert all("/scale=0.25/" in line and " dx " in line for line in failed)
