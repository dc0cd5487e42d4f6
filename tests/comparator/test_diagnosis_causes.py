"""The diagnosis names mistakes inside a formula and in its arithmetic (docs/compare.md,
"Diagnosis"): a statistic taken over the wrong axis, an index input read at its first row only,
a rotation's products rounded before they are added, a float16 output accumulated in bfloat16;
and a correct kernel's noisy output gets no finding that claims a bug from a few elements a
candidate matches by chance.

The kernels are the corpus's (tests/impls/diagnosis_corpus.py: NumPy transcriptions of the
vendor documents with one mistake each) run on cases built here; the golden is refspec's
spec."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from golden_files import smoke_golden

from refspec import ops
from refspec.comparator import compare
from refspec.comparator.sources.memory_case import spec_case

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "impls"))

import diagnosis_corpus as corpus  # noqa: E402  (tests/impls/diagnosis_corpus.py)


def _run(kernel, case, **args) -> dict:
    """The kernel's outputs on the case's arguments, by output name."""
    out = getattr(kernel, ops.get(kernel.op).function)(**args)
    names = [o.name for o in ops.get(kernel.op).outputs]
    return out if isinstance(out, dict) else dict(zip(names, out if isinstance(out, tuple)
                                                       else (out,)))


def _first(r):
    return r.diagnosis[0], [f.line() for f in r.diagnosis]


def _stats(x: np.ndarray):
    """LayerNorm's mean and rstd over D (the forward's statistics, eps 1e-5)."""
    mean = x.mean(axis=-1, keepdims=True)
    return mean, 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)


def test_layer_norm_means_taken_over_the_wrong_axis_are_named():
    """NormRopeConcatBackward whose LayerNorm backward takes mean_D over N: a ``reduction``
    over N, from the record's ``other_axes`` hypothesis evaluated by the spec."""
    rng = np.random.default_rng(11)
    B, S, N, D = 2, 3, 4, 8
    q, k = (rng.standard_normal((B, S, N, D)).astype(np.float32) for _ in range(2))
    (qm, qr), (km, kr) = _stats(q), _stats(k)
    args = dict(grad_query_output=rng.standard_normal((B, N, S, D)).astype(np.float32),
                grad_key_output=rng.standard_normal((B, N, S, D)).astype(np.float32),
                grad_value_output=rng.standard_normal((B, N, S, D)).astype(np.float32),
                query=q, key=k, norm_query_mean=qm, norm_query_rstd=qr, norm_key_mean=km,
                norm_key_rstd=kr, norm_type=1)
    case = spec_case("nrc_grad", soc="A2", **args)
    actual = _run(corpus.nrcg_mean_over_n, case, **args)
    failures = {r.output: r for r in compare(case, actual).failures}
    assert set(failures) == {"grad_query", "grad_key"}
    for r in failures.values():
        first, lines = _first(r)
        assert (first.kind, first.detail.get("axes"), first.agreement) == ("reduction", ["N"], 1.0), \
            lines


def _mrope_case():
    rng = np.random.default_rng(12)
    T, H, R, M = 4, 128, 128, 8
    positions = np.stack([rng.permutation(M)[:T] for _ in range(3)]).astype(np.int64)
    theta = rng.uniform(0, 6.3, (M, R // 2))
    args = dict(positions=positions,
                query=rng.standard_normal((T, 2 * H)).astype(np.float32),
                key=rng.standard_normal((T, H)).astype(np.float32),
                cos_sin_cache=np.concatenate([np.cos(theta), np.sin(theta)], -1).astype(np.float32),
                head_size=H, mrope_section=[16, 24, 24], is_neox_style=True)
    return spec_case("rope_cache", soc="A2", **args), args


def test_positions_read_at_their_first_row_only_are_named():
    """mrope with every section's angles from positions row 0: the generated ``index``
    hypothesis of an integer input of several rows read at its first row only."""
    case, args = _mrope_case()
    actual = _run(corpus.rc_mrope_first_row, case, **args)
    failures = compare(case, actual).failures
    assert failures
    for r in failures:
        first, lines = _first(r)
        assert (first.kind, first.detail.get("input"), first.detail.get("read")) == \
            ("index", "positions", "read at its first row only"), lines


def _rope_args(dtype, seed=13):
    rng = np.random.default_rng(seed)
    B, N, S, D = 2, 3, 16, 32
    theta = rng.uniform(0, 6.3, (1, 1, S, D // 2))
    theta = np.concatenate([theta, theta], -1)
    return dict(x=rng.standard_normal((B, N, S, D)).astype(dtype),
                cos=np.cos(theta).astype(dtype), sin=np.sin(theta).astype(dtype), mode=0)


def test_products_rounded_before_the_sum_are_a_cause():
    """A float32 RoPE rounding x*cos and rotate_half(x)*sin to bfloat16 before adding them:
    ``precision`` with the cause ``products rounded to bfloat16`` (the spec's cos and sin terms
    evaluated apart, each rounded)."""
    args = _rope_args(np.float32)
    case = spec_case("rope", soc="A2", **args)
    (r,) = compare(case, _run(corpus.rope_products_bf16, case, **args)).failures
    first, lines = _first(r)
    assert (first.kind, first.detail.get("cause")) == ("precision", "products rounded to bfloat16"), \
        lines
    assert first.detail["elements_agreeing"] >= 0.9, first.detail


def test_a_float16_output_accumulated_in_bfloat16_is_named_though_within_float16_bounds():
    """dcos and dsin of a float16 RotaryPositionEmbeddingGrad summed in bfloat16: errors within
    what float16 arithmetic on their terms allows, yet the size of a bfloat16 accumulation, which
    the diagnosis names (a bfloat16 output's own arithmetic stays plain ``precision``)."""
    rng = np.random.default_rng(14)
    B, N, S, D = 4, 8, 4, 16
    theta = rng.uniform(0, 6.3, (1, 1, S, D))
    args = dict(dy=rng.standard_normal((B, N, S, D)).astype(np.float16),
                cos=np.cos(theta).astype(np.float16), sin=np.sin(theta).astype(np.float16),
                x=rng.standard_normal((B, N, S, D)).astype(np.float16), mode=0)
    case = spec_case("rope_grad", soc="A2", **args)
    failures = compare(case, _run(corpus.rg_bf16_accumulation, case, **args)).failures
    assert {r.output for r in failures} == {"dcos", "dsin"}
    for r in failures:
        first, lines = _first(r)
        assert (first.kind, first.detail.get("cause")) == ("precision", "bfloat16 accumulation"), \
            lines


#: a correct float16 NormRopeConcat on the smoke sweep whose LayerNorm in float16 arithmetic
#: leaves errors of hundreds of ulps over query_output (nearly equal position-coded values)
NOISY = ("nrc/soc=A2/norm_type=1/norm_added_type=1/rope_type=half/concat_order=0/training=1/"
         "dtype=float16/dist=position-coded/B1N2Sq3Sk4Seq2Sek2D8Sr5")


def test_a_few_elements_matched_by_chance_on_a_noisy_correct_output_are_no_bug(tmp_path):
    """A correct kernel computing in float16 fails a badly conditioned case with errors spread
    over the output; a candidate (the tables read at their first S) agreeing with 8 of its 80
    failing elements, a small clean part, is chance among hundreds of candidates, no finding:
    every failing element is measured as ``unexplained``."""
    report = corpus.judge(corpus.nrc_correct_io, smoke_golden(tmp_path, "nrc"), case_ids=[NOISY])
    failures = [r for r in report.failures if r.output == "query_output"]
    assert failures
    for r in failures:
        assert [f.kind for f in r.diagnosis] == ["unexplained"], [f.line() for f in r.diagnosis]
        assert r.diagnosis[0].detail["failing"] == r.metrics.failures


def test_a_tie_with_a_hypothesis_evaluated_for_another_output_is_broken_by_the_vocabulary():
    """NormRopeConcatBackward rotating Sr - 1 positions: grad_encoder_key's stream lies wholly
    at the last position, so `rope_type none` (the record's own hypothesis, asked first)
    explains it exactly as the rotated part one row short does; grad_key's search evaluated the
    latter, and the tie goes to it (``extent`` ranks first), the other named with it."""
    rng = np.random.default_rng(16)
    B, N, D, Sq, Sk, Seq, Sek, Sr = 1, 2, 8, 3, 4, 2, 2, 5
    theta = rng.uniform(0, 6.3, (Sr, D // 2))
    theta = np.concatenate([theta, theta], -1)
    args = dict(grad_query_output=rng.standard_normal((B, N, Sq + Seq, D)).astype(np.float32),
                grad_key_output=rng.standard_normal((B, N, Sk + Sek, D)).astype(np.float32),
                grad_value_output=rng.standard_normal((B, N, Sk + Sek, D)).astype(np.float32),
                query=rng.standard_normal((B, Sq, N, D)).astype(np.float32),
                key=rng.standard_normal((B, Sk, N, D)).astype(np.float32),
                encoder_query=rng.standard_normal((B, Seq, N, D)).astype(np.float32),
                encoder_key=rng.standard_normal((B, Sek, N, D)).astype(np.float32),
                rope_cos=np.cos(theta).astype(np.float32), rope_sin=np.sin(theta).astype(np.float32),
                rope_type=2)
    case = spec_case("nrc_grad", soc="A2", **args)
    actual = _run(corpus.nrcg_sr_off_by_one, case, **args)
    failures = {r.output: r for r in compare(case, actual).failures}
    first, lines = _first(failures["grad_encoder_key"])
    assert (first.kind, first.detail.get("extent"), first.agreement) == ("extent", "one short", 1.0), \
        lines
    assert "rope_type none" in first.summary, lines
