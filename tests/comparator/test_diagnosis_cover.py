"""The diagnosis never goes silent (docs/compare.md, "Diagnosis"): several mistakes in one output
are a cover of findings, each with the part it explains; what nothing explains is measured as
``unexplained``; the generated hypotheses name index, reduction and extent mistakes on every
operator; float16 and bfloat16 bits confused are named whatever file holds them; a large output
is diagnosed on a slice of its case.

The broken kernels here are plain NumPy transcriptions of the vendor documents' formulas
(rotate-half RoPE: y = x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1]) with one or two
mistakes each, written in this file; the golden is refspec's spec."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from refspec.cli import main
from refspec.comparator import compare
from refspec.comparator.sources.memory_case import spec_case
from refspec.goldens import GoldenFile
from refspec.spec.dtypes import bfloat16


def _rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _rope_case(B, N, S, D, dtype=np.float32, seed=7):
    """A rotate-half RotaryPositionEmbedding case (BNSD, cos/sin 11SD) computed by the spec,
    and its inputs in float64."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, N, S, D)).astype(dtype)
    theta = rng.uniform(0, 6.3, (1, 1, S, D // 2))
    theta = np.concatenate([theta, theta], -1)
    cos, sin = np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)
    case = spec_case("rope", x=x, cos=cos, sin=sin, mode=0, soc="A2")
    return case, (x.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64))


def _lines(r) -> list[str]:
    return [f.line() for f in r.diagnosis]


# --- several mistakes: a cover -------------------------------------------------------------------

def test_two_mistakes_in_one_output_are_two_findings_each_with_its_part():
    """cos and sin exchanged, and the second half of D never written: the first finding names
    the exchange on d = 0..31, the second the zeros on d = 32..63, and no element is claimed
    twice (their agreements add up to one)."""
    B, N, S, D = 1, 3, 16, 64                          # 1,536 elements in each half of D
    case, (x, cos, sin) = _rope_case(B, N, S, D)
    y = (x * sin + _rotate_half(x) * cos).astype(np.float32)      # cos and sin exchanged
    y[..., D // 2:] = 0                                            # the second half unwritten
    (r,) = compare(case, {"y": y}).failures
    lines = _lines(r)
    assert lines[:2] == [
        "alternative: cos and sin exchanged on d = 0..31 (all 1,536 elements there)",
        "zero: d = 32..63 zero (unwritten; all 1,536 elements there)"], lines
    first, second = r.diagnosis[:2]
    assert first.detail["part"] == {"axes": {"D": [[0, 32]]}}
    assert second.detail["part"] == {"axes": {"D": [[32, 64]]}}
    assert abs(first.agreement + second.agreement - 1.0) < 1e-9, lines
    assert len(r.diagnosis) == 2, lines                  # nothing left unexplained


# --- never silent: unexplained, measured ------------------------------------------------------------

def test_what_nothing_explains_is_measured_and_located():
    """Rows s = 8..15 of every head hold garbage no hypothesis makes: the last (here the only)
    finding is ``unexplained`` with the count, the error's size and where the elements lie."""
    B, N, S, D = 1, 2, 16, 32
    case, (x, cos, sin) = _rope_case(B, N, S, D)
    y = (x * cos + _rotate_half(x) * sin).astype(np.float32)
    y[:, :, 8:, :] = np.random.default_rng(1).standard_normal(y[:, :, 8:, :].shape) * 3
    (r,) = compare(case, {"y": y}).failures
    last = r.diagnosis[-1]
    assert last.kind == "unexplained", _lines(r)
    d = last.detail
    assert d["failing"] == r.metrics.failures == B * N * 8 * D
    assert set(d["ulps"]) == {"median", "p99", "worst"} and d["ulps"]["median"] > 1e3
    assert set(d["of_sum_abs"]) == {"median", "p99", "worst"}
    assert d["spread"] == "structured" and d["part"] == {"axes": {"S": [[8, 16]]}}, d
    assert "structured: they lie at s = 8..15" in last.summary, last.summary
    assert f"{B * N * 8 * D} failing elements" in last.summary


def test_noise_on_every_element_is_spread_like_rounding():
    """A float32 output off by a few units of 2^-12 relative everywhere (a sum accumulated in
    a narrower type) fails with no position preferred: ``unexplained``, spread like rounding,
    never a logic error."""
    case, (x, cos, sin) = _rope_case(2, 4, 32, 64)
    rng = np.random.default_rng(2)
    exact = x * cos + _rotate_half(x) * sin
    y = (exact * (1 + 2.0 ** -12 * rng.standard_normal(exact.shape))).astype(np.float32)
    (r,) = compare(case, {"y": y}).failures
    assert [f.kind for f in r.diagnosis] == ["unexplained"], _lines(r)
    d = r.diagnosis[0].detail
    assert d["spread"] == "rounding", r.diagnosis[0].summary
    assert "spread like rounding" in r.diagnosis[0].summary
    assert d["of_sum_abs"]["worst"] < 2.0 ** -8


# --- hypotheses generated from the record ---------------------------------------------------------

def test_the_rotation_partner_read_one_element_off_is_named():
    """rotate_half reading x one element ahead: the generated ``index`` hypotheses name it."""
    case, (x, cos, sin) = _rope_case(2, 2, 8, 16)
    y = (x * cos + _rotate_half(np.roll(x, -1, axis=-1)) * sin).astype(np.float32)
    (r,) = compare(case, {"y": y}).failures
    first = r.diagnosis[0]
    assert first.kind == "index" and first.agreement == 1.0, _lines(r)
    assert first.detail.get("partner") == "next" or any(
        d.get("partner") == "next" for d in first.detail.get("same_as", [])), first.detail


def test_dcos_summed_without_one_of_its_factors_is_named():
    """RotaryPositionEmbeddingGrad's dcos = sum over the broadcast axes of dy * x, accumulated
    without x: the generated ``input`` hypotheses say x's factor was left out."""
    rng = np.random.default_rng(3)
    B, N, S, D = 2, 2, 8, 16
    dy = rng.standard_normal((B, N, S, D)).astype(np.float32)
    x = rng.standard_normal((B, N, S, D)).astype(np.float32)
    theta = rng.uniform(0, 6.3, (1, 1, S, D))
    cos, sin = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    case = spec_case("rope_grad", dy=dy, cos=cos, sin=sin, x=x, mode=0, soc="A2")
    actual = {k: np.array(case.expected[k][()], copy=True) for k in case.output_names}
    actual["dcos"] = dy.astype(np.float64).sum(axis=(0, 1), keepdims=True).astype(np.float32)
    (r,) = compare(case, actual).failures
    assert r.output == "dcos"
    first = r.diagnosis[0]
    assert (first.kind, first.detail.get("input"), first.detail.get("value")) == ("input", "x", 1), \
        _lines(r)


def test_rotary_dim_below_head_size_rotating_the_whole_head_is_named():
    """RopeWithSinCosCache with rotary_dim < head_size: a kernel that rotates the whole head
    (GPT-NeoX pairs d and d + head_size/2, no pass-through) is named ``extent`` by the hypotheses
    generated from the record's rotation declaration, with no code for this operator."""
    rng = np.random.default_rng(4)
    T, H, R, M = 8, 32, 16, 16
    positions = rng.integers(0, M, T)
    q = rng.standard_normal((T, 2 * H)).astype(np.float32)
    k = rng.standard_normal((T, H)).astype(np.float32)
    cache = rng.standard_normal((M, R)).astype(np.float32)
    case = spec_case("rope_cache", positions=positions, query=q, key=k, cos_sin_cache=cache,
                     head_size=H, is_neox_style=True, soc="A2")

    def whole_head(t):
        heads = t.astype(np.float64).reshape(T, -1, H)
        c = cache[positions, :R // 2].astype(np.float64)
        s_ = cache[positions, R // 2:].astype(np.float64)
        c = np.concatenate([c, np.ones((T, (H - R) // 2))], -1)[:, None, :]   # cos 1, sin 0
        s_ = np.concatenate([s_, np.zeros((T, (H - R) // 2))], -1)[:, None, :]
        c, s_ = np.concatenate([c, c], -1), np.concatenate([s_, s_], -1)
        return (heads * c + _rotate_half(heads) * s_).reshape(t.shape).astype(np.float32)

    failures = compare(case, {"query_out": whole_head(q), "key_out": whole_head(k)}).failures
    assert {r.output for r in failures} == {"query_out", "key_out"}
    for r in failures:
        first = r.diagnosis[0]
        assert (first.kind, first.detail.get("extent")) == ("extent", "whole head"), _lines(r)


# --- float16 and bfloat16 bits confused, in every file format -------------------------------------

@pytest.fixture(scope="module")
def sixteen(tmp_path_factory):
    """The smoke sweep's 16-bit RotaryPositionEmbeddingGrad cases."""
    path = tmp_path_factory.mktemp("twins") / "smoke.h5"
    result = CliRunner().invoke(main, ["generate", "-o", str(path), "--op", "rope_grad",
                                       "--dtype", "float16", "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    return path


TWIN = {"float16": bfloat16, "bfloat16": np.float16}


def _twin_bits(exact: np.ndarray, dtype: str) -> np.ndarray:
    """The exact values rounded to the other 16-bit dtype, as raw 16-bit words."""
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(exact.astype(TWIN[dtype])).view(np.uint16)


def _write(kind: str, golden: Path, out: Path) -> Path:
    """Every output of every positive case as the other 16-bit dtype's bits, in ``kind``
    files (a tree of .bin or .npy, or one plain HDF5 file); the path to compare."""
    with GoldenFile(golden) as gf:
        cases = [gf[c] for c in gf.case_ids() if not gf[c].is_negative]
        if kind == "hdf5":
            path = out / "actual.h5"
            with h5py.File(path, "w") as h5:
                for c in cases:
                    for name in c.output_names:
                        words = _twin_bits(np.asarray(c.exact[name][()]), c.params["dtype"])
                        # bfloat16 is stored as uint16 words, float16 as float16
                        h5[f"{c.case_id}/{name}"] = (words if c.params["dtype"] == "bfloat16"
                                                     else words.view(np.float16))
            return path
        for c in cases:
            folder = out / "tree" / c.case_id
            folder.mkdir(parents=True, exist_ok=True)
            for name in c.output_names:
                words = _twin_bits(np.asarray(c.exact[name][()]), c.params["dtype"])
                if kind == "bin":
                    words.tofile(folder / f"{name}.bin")
                else:
                    np.save(folder / f"{name}.npy", words if c.params["dtype"] == "bfloat16"
                            else words.view(np.float16))
        return out / "tree"


@pytest.mark.parametrize("kind", ["bin", "npy", "hdf5"])
def test_the_other_16_bit_dtype_is_named_in_every_direction_and_file(sixteen, tmp_path, kind):
    """float16 bits where bfloat16 is expected and bfloat16 bits where float16 is: each failing
    output's first finding is ``dtype`` naming the dtype written, with the terminal's hint
    where its test (the first elements) holds, special values included."""
    actual = _write(kind, sixteen, tmp_path)
    report = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["compare", str(sixteen), str(actual), "--json",
                                       str(report)])
    assert result.exit_code == 1, result.output[-2000:]
    failing = [r for r in json.loads(report.read_text())["results"] if r["status"] == "fail"]
    assert {r["dtype"] for r in failing} == {"float16", "bfloat16"}
    for r in failing:
        first = r["diagnosis"][0]
        assert first["kind"] == "dtype", (r["case_id"], r["output"], r["diagnosis"])
        assert first["detail"]["as"] == {"float16": "bfloat16", "bfloat16": "float16"}[r["dtype"]]
    hinted = [r for r in failing if r["hint"].startswith("read as ")]
    assert len(hinted) >= 0.9 * len(failing)
    assert "diagnosis: dtype: the bits are " in result.output


# --- a large output: a slice of its case --------------------------------------------------------

def test_a_large_output_gets_the_spec_hypotheses_on_a_slice(tmp_path):
    """An output of 2^21 elements whose first axis is 1 (cos and sin exchanged on the first
    half of D, the rest right) is diagnosed on a slice of its case along heads and tokens: the
    spec's hypotheses name the exchange and its part of D, as on a small case, whether the
    output is an array or a ``.bin`` file read in runs."""
    B, N, S, D = 1, 16, 1024, 128
    case, (x, cos, sin) = _rope_case(B, N, S, D, seed=9)
    y = np.array(case.expected["y"][()], copy=True)
    y[..., :D // 2] = (x * sin + _rotate_half(x) * cos)[..., :D // 2].astype(np.float32)
    folder = tmp_path / case.case_id
    folder.mkdir(parents=True)
    y.tofile(folder / "y.bin")
    for actual in ({"y": y}, str(tmp_path)):
        (r,) = compare(case, actual).failures
        first = r.diagnosis[0]
        assert first.kind == "alternative" and first.detail["value"] == "cos<->sin", _lines(r)
        assert first.detail["part"]["axes"]["D"] == [[0, D // 2]], first.detail
        assert "elements read there" in first.summary, first.summary
        assert len(r.diagnosis) == 1, _lines(r)
