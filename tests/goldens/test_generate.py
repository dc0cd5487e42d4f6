"""The generation engine: stored data equals what the public spec functions give on the stored
inputs; one case regenerates alone bit for bit; --jobs, --shard + merge and --resume do not
change the content."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.spec.apply_rope import apply_rotary_pos_emb_terms
from refspec.spec.dequant_rope import dequant_rope_quant_kvcache_terms
from refspec.spec.irope import interleave_rope_terms
from refspec.spec.kv_norm_rope import kv_rms_norm_rope_cache_terms
from refspec.spec.qkv_norm_rope import qkv_rms_norm_rope_cache_terms
from refspec.spec.rope_cache import rope_with_sin_cos_cache_terms
from refspec import ops
from refspec.goldens.engine import GenerateError, Run, check_expectations, generate
from refspec.goldens.selection import shard
from refspec.goldens.sweep import load_sweep, parse_sweep
from refspec.spec.errors import AclnnError
from refspec.spec.terms import (norm_rope_concat_backward_terms, norm_rope_concat_terms,
                                rope_grad_terms, rope_terms)

from golden_files import file_content


@pytest.fixture(scope="module")
def smoke():
    return load_sweep("smoke")


@pytest.fixture(scope="module")
def selection(smoke):
    """Every 8th smoke case: every operator, positive and negative cases."""
    cases = smoke.cases()[::8]
    assert {c.op for c in cases} == set(ops.OPERATORS)
    return cases


@pytest.fixture(scope="module")
def golden(smoke, selection, tmp_path_factory):
    path = tmp_path_factory.mktemp("gen") / "sel.h5"
    summary = generate(smoke, selection, path)
    assert summary.cases == len(selection) and summary.negative > 0
    return path


#: the RoPE family's records: (the spec module's tolerance terms, the outputs' names in the
#: golden file, in the order the spec function returns them)
FAMILY = {"apply_rope": (apply_rotary_pos_emb_terms, ("query_out", "key_out")),
          "apply_rope_v2": (apply_rotary_pos_emb_terms, ("query_out", "key_out")),
          "rope_cache": (rope_with_sin_cos_cache_terms, ("query_out", "key_out")),
          "interleave_rope": (interleave_rope_terms, ("y",)),
          "kv_rope_cache": (kv_rms_norm_rope_cache_terms, ("k_cache", "ckv_cache", "k_rope", "c_kv")),
          "kv_rope_cache_v2": (kv_rms_norm_rope_cache_terms, ("k_cache", "ckv_cache", "k_rope", "c_kv")),
          "dequant_rope_kv": (dequant_rope_quant_kvcache_terms,
                              ("q_out", "k_out", "v_out", "k_cache", "v_cache")),
          "qkv_rope_cache": (qkv_rms_norm_rope_cache_terms,
                             ("q_out", "k_cache", "v_cache", "q_out_before_quant",
                              "k_out_before_quant", "v_out_before_quant"))}
#: the axes the KV-cache operators' outputs are stored with (a cache: none)
KV_AXES = {"k_rope": "BNSD", "c_kv": "BNSD", "q_out": "TH", "q_out_before_quant": "TH",
           "k_out_before_quant": "TH", "v_out_before_quant": "TH"}


def stored_axes(p: dict, name: str) -> str:
    """The axes an output is stored with (docs/goldens.md): RoPE's the case's layout, the
    family's those of their tensors, NormRopeConcat's by tensor, a KV cache's by its cache mode
    (docs/compare.md, "Caches updated in place")."""
    fixed = {"rope_cache": "TD", "interleave_rope": "BNSD"}
    if name.endswith("_cache"):       # B batch, K block, S slot, F and C the fractal's tiles
        mode = p.get("cache_mode", "PA_NZ")
        return {"Norm": "BNSD", "contiguous": "BSND", "PA_NZ": "KFSC",
                "PA_BLK_NZ": "KFSC"}.get(mode, "KSND")
    if p["op"] in ("kv_rope_cache", "kv_rope_cache_v2", "dequant_rope_kv", "qkv_rope_cache"):
        return KV_AXES.get(name, "") if p["op"] != "dequant_rope_kv" else ""
    if p["op"] in fixed:
        return fixed[p["op"]]
    if p["op"].startswith(("rope", "apply_rope")):
        return p["layout"]
    if name.endswith(("weight", "bias")):
        return "D"
    if name.endswith(("mean", "rstd")):
        return "BSN1"
    return "BNSD" if p["op"] == "nrc" else "BSND"


def spec_outputs(case):
    """Call the public spec function on the stored inputs (rounded and exact outputs)."""
    p = case.params
    a = ops.get(p["op"]).attrs_of(p)              # the spec's attribute values
    x = {k: case.inputs[k].read() for k in case.inputs}
    soc = p["soc"]
    if p["op"] == "rope_grad":
        def f(od):
            return dict(zip(("dx", "dcos", "dsin"), refspec.rotary_position_embedding_grad(
                x["dy"], x.get("cos"), x.get("sin"), x.get("x"), a["mode"], soc=soc, out_dtype=od)))
    elif p["op"] == "rope":
        def f(od):
            return {"y": refspec.rotary_position_embedding(x["x"], x.get("cos"), x.get("sin"),
                                                           a["mode"], soc=soc, out_dtype=od)}
    elif p["op"] in FAMILY:
        fn, names = getattr(refspec, ops.get(p["op"]).function), FAMILY[p["op"]][1]

        def f(od):
            out = fn(**x, **a, soc=soc, out_dtype=od)
            return dict(zip(names, (out,) if isinstance(out, np.ndarray) else out))
    else:
        attrs = dict(norm_type=a["norm_type"], norm_added_type=a["norm_added_type"],
                     rope_type=a["rope_type"], concat_order=a["concat_order"])
        if p["op"] == "nrc":
            attrs.update(eps=a["eps"], is_training=a["is_training"])
            fn = refspec.norm_rope_concat
        else:
            fn = refspec.norm_rope_concat_backward

        def f(od):
            return fn(**x, **attrs, soc=soc, out_dtype=od)._asdict()
    return f


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_stored_outputs_are_the_spec_functions_on_the_stored_inputs(golden):
    checked = 0
    with goldens.open(golden) as gf:
        for case in gf:
            f = spec_outputs(case)
            if case.is_negative:
                with pytest.raises(AclnnError) as info:
                    f(None)
                assert info.value.code == case.expected_error
                assert str(info.value) == case.expected_error_message
                assert not case.output_names
                continue
            rounded = {k: v for k, v in f(None).items() if v is not None}
            exact = {k: v for k, v in f(np.float64).items() if v is not None}
            assert set(case.output_names) == set(rounded) == set(exact)
            for name in rounded:
                assert same_bits(case.expected[name].read(), rounded[name]), (case.case_id, name)
                if name in case.written:            # a cache: the exact values it is written
                    exact[name] = exact[name].reshape(-1)[case.written[name].read()]
                assert same_bits(case.exact[name].read(), exact[name]), (case.case_id, name)
            checked += 1
    assert checked > 10


def test_tolerance_metadata_and_axes(golden):
    with goldens.open(golden) as gf:
        for case in gf:
            if case.is_negative:
                continue
            p = case.params
            a = ops.get(p["op"]).attrs_of(p)          # the spec's attribute values
            x = {k: case.inputs[k].read() for k in case.inputs}
            if p["op"] == "rope_grad":
                terms = rope_grad_terms(x["dy"], x["cos"], x["sin"], x.get("x"), a["mode"], p["soc"])
            elif p["op"] == "rope":
                terms = rope_terms(x["x"], x["cos"], x["sin"], a["mode"], p["soc"])
            elif p["op"] == "nrc":
                terms = norm_rope_concat_terms(a["norm_type"], a["norm_added_type"], a["rope_type"], p["D"])
            elif p["op"] in FAMILY:
                found, names = FAMILY[p["op"]][0](**x, **a, soc=p["soc"]), FAMILY[p["op"]][1]
                terms = found if set(found) <= set(names) else dict(zip(names, found.values()))
            else:
                attrs = {k: a[k] for k in ("norm_type", "norm_added_type", "rope_type", "concat_order")}
                params = inspect.signature(refspec.norm_rope_concat_backward).parameters
                names = list(params)[:list(params).index("norm_type")]
                terms = norm_rope_concat_backward_terms({n: x.get(n) for n in names}, attrs, p["soc"])
            for name in case.output_names:
                meta = case.output_meta(name)
                assert meta["comparison_class"] == terms[name].comparison_class
                assert meta["reduced_terms"] == terms[name].reduced_terms
                if terms[name].sum_abs is not None:
                    assert same_bits(case.sum_abs[name].read(), terms[name].sum_abs)
                else:
                    assert name not in case.sum_abs
                assert meta["axes"] == stored_axes(p, name)


def test_backward_statistics_come_from_the_forward_in_float32(golden):
    seen = 0
    with goldens.open(golden) as gf:
        for case in gf:
            p = case.params
            if p["op"] != "nrc_grad" or case.is_negative or not (p["norm_type"] or p["norm_added_type"]):
                continue
            x = {k: case.inputs[k].read() for k in case.inputs}
            D = p["D"]
            dt = x["query"].dtype
            kw = {}
            for w, b, t in (("norm_query_weight", "norm_query_bias", p["norm_type"]),
                            ("norm_key_weight", "norm_key_bias", p["norm_type"]),
                            ("norm_added_query_weight", "norm_added_query_bias", p["norm_added_type"]),
                            ("norm_added_key_weight", "norm_added_key_bias", p["norm_added_type"])):
                if t == 2:
                    kw[w], kw[b] = np.ones(D, dt), np.zeros(D, dt)
            fwd = refspec.norm_rope_concat(x["query"], x["key"], x["key"], x.get("encoder_query"),
                                           x.get("encoder_key"), x.get("encoder_key"), **kw,
                                           norm_type=p["norm_type"], norm_added_type=p["norm_added_type"],
                                           eps=p["eps"], is_training=True)._asdict()
            for name in x:
                if name.endswith(("_mean", "_rstd")):
                    assert x[name].dtype == np.float32
                    assert same_bits(x[name], fwd[name])
                    seen += 1
    assert seen > 0


def test_case_attributes_and_regenerate_command(golden, smoke, selection):
    with goldens.open(golden) as gf:
        assert gf.case_ids() == [c.id for c in selection]
        assert gf.attrs["sweep_name"] == "smoke" and gf.attrs["sweep_seed"] == smoke.seed
        assert gf.attrs["sweep_definition"] == smoke.definition
        for c in selection:
            case = gf[c.id]
            assert case.seed == c.seed and case.params["op"] == c.op
            assert case.soc == (c.params["soc"] or "") and case.distribution == c.params["dist"]
            assert f"--case '{c.id}'" in case.regenerate or f"--case {c.id}" in case.regenerate
            assert "--sweep smoke" in case.regenerate and f"--seed {smoke.seed}" in case.regenerate


def test_one_case_regenerates_alone_with_identical_bits(golden, smoke, selection, tmp_path):
    content = file_content(golden)
    for c in (selection[3], selection[-2]):
        out = tmp_path / f"one-{selection.index(c)}.h5"
        generate(smoke, [smoke.case(c.id)], out)
        alone = file_content(out)
        assert list(alone) == [c.id] and alone[c.id] == content[c.id]


def test_jobs_do_not_change_the_content(golden, smoke, selection, tmp_path):
    out = tmp_path / "jobs2.h5"
    generate(smoke, selection, out, jobs=2)
    assert file_content(out) == file_content(golden)
    with goldens.open(out) as gf:
        assert gf.case_ids() == [c.id for c in selection]       # written in case order


def test_shards_merged_equal_the_unsharded_file(golden, smoke, selection, tmp_path):
    parts = []
    for k in (1, 2, 3):
        part = tmp_path / f"shard{k}.h5"
        generate(smoke, shard(selection, k, 3), part)
        parts.append(part)
    merged = tmp_path / "merged.h5"
    goldens.merge(merged, parts)
    whole = file_content(golden)
    joined = file_content(merged)
    assert set(joined) == set(whole) and len(joined) == len(whole)
    for cid in whole:
        assert joined[cid] == whole[cid], cid


class Interrupt(Exception):
    pass


def test_resume_after_interruption(golden, smoke, selection, tmp_path):
    out = tmp_path / "resumed.h5"
    written = []

    def stop_after_7(n):
        written.append(n)
        if len(written) == 7:
            raise Interrupt

    with pytest.raises(Interrupt):
        generate(smoke, selection, out, progress=stop_after_7)
    assert not out.exists()
    part = goldens.part_path(out)
    with goldens.open(part, allow_incomplete=True) as gf:
        assert not gf.complete and len(gf.case_ids()) == 7
    with pytest.raises(goldens.GoldenFileExistsError):
        generate(smoke, selection, out)
    summary = generate(smoke, selection, out, resume=True)
    assert summary.skipped == 7 and summary.cases == len(selection) - 7
    assert file_content(out) == file_content(golden)
    with goldens.open(out) as gf:
        assert gf.complete and gf.case_ids() == [c.id for c in selection]
    again = generate(smoke, selection, out, resume=True)      # nothing left to do
    assert again.cases == 0 and again.skipped == len(selection)


def test_force_replaces_and_seed_changes_the_data(smoke, selection, tmp_path):
    out = tmp_path / "f.h5"
    pick = [c for c in selection if c.op == "rope_grad" and c.params["dist"] == "random"][:2]
    assert pick
    generate(smoke, pick, out)
    first = file_content(out)
    reseeded = [smoke.case(c.id, seed=12345) for c in pick]
    generate(Run.of(smoke, seed=12345), reseeded, out, force=True)
    second = file_content(out)
    for c in pick:
        assert second[c.id]["inputs/dy"][2] != first[c.id]["inputs/dy"][2]
    with goldens.open(out) as gf:
        assert gf.attrs["sweep_seed"] == 12345 and "--seed 12345" in gf[pick[0].id].regenerate


def test_special_distribution_stays_finite(smoke):
    from refspec.goldens.cases import build_case
    for c in smoke.cases("all")[::7]:
        if c.params["dist"] != "special":
            continue
        data = build_case(c)
        for name, v in data.expected.items():
            assert np.all(np.isfinite(v.astype(np.float64))), (c.id, name)


def test_block_expectations_are_enforced():
    sweep = parse_sweep("""
name = "x"
[[block]]
op = "rope_grad"
expect = "reject"
[block.axes]
soc = "A2"
dtype = "float32"
shape = "B2N3S4D8"
""", "x.toml")
    with pytest.raises(GenerateError, match="expects the profile to reject it"):
        check_expectations(sweep, sweep.cases())
    accept = parse_sweep("""
name = "x"
[[block]]
op = "rope_grad"
expect = "accept"
[block.axes]
soc = "A2"
mode = "quarter"
dtype = "float32"
shape = "B2N3S4D8"
""", "x.toml")
    with pytest.raises(GenerateError, match="expects the profile to accept it, but the spec raises 561002"):
        check_expectations(accept, accept.cases())


def test_threads_do_not_change_a_large_case():
    """A case above THREADED_ELEMENTS built with a thread pool (tensors drawn side by side,
    exact outputs beside the tolerance terms) holds the same bits as built in one thread."""
    from refspec.goldens.cases import THREADED_ELEMENTS, build_case
    sweep = parse_sweep("""
name = "big"
[[block]]
op = "rope_grad"
[block.axes]
soc = "A2"
dtype = "bfloat16"
shape = ["B2N8S256D128"]
[[block]]
op = "nrc_grad"
[block.axes]
soc = "A2"
norm_type = 2
norm_added_type = 1
rope_type = "half"
dtype = "float16"
shape = ["B1N8Sq512Sk384Seq64Sek32D128"]
""", "big.toml")
    for case in sweep.cases():
        one, two = build_case(case), build_case(case, threads=2)
        assert sum(a.size for a in one.inputs.values()) >= THREADED_ELEMENTS
        for group in ("inputs", "expected", "exact"):
            a, b = getattr(one, group), getattr(two, group)
            assert list(a) == list(b)
            assert all(a[k].tobytes() == b[k].tobytes() for k in a), (case.id, group)
        for k, t in one.terms.items():
            u = two.terms[k]
            assert (u.comparison_class, u.reduced_terms) == (t.comparison_class, t.reduced_terms)
            assert (t.sum_abs is None and u.sum_abs is None) or t.sum_abs.tobytes() == u.sum_abs.tobytes()


HUGE = """
name = "huge"
seed = 0
[[block]]
name = "huge"
op = "rope_grad"
[block.axes]
soc = "A2"
mode = "half"
layout = "BNSD"
cos = "11SD"
dtype = "float32"
shape = ["B2N8S16D32", "B64N128S65536D128"]
"""


def test_a_case_that_would_not_fit_in_memory_is_refused_before_anything_is_written(tmp_path):
    """B64 N128 S65536 D128: 2^36 elements of dy and of x, about 1.5 TiB to compute; refused
    with the size it needs, before any array exists or any file is made."""
    from cli_helpers import assert_user_error, invoke
    from refspec.goldens.engine import MEMORY_PER_ELEMENT, check_memory, memory_needed
    sweep_file = tmp_path / "huge.toml"
    sweep_file.write_text(HUGE)
    out = tmp_path / "h.h5"
    result = invoke("generate", "--sweep", sweep_file, "--tier", "all", "-o", out)
    assert_user_error(result, "B64N128S65536D128", "needs about", "GiB of memory", "this machine")
    assert os.listdir(tmp_path) == ["huge.toml"]
    cases = load_sweep(str(sweep_file)).cases("all")
    small, huge = sorted(cases, key=memory_needed)
    assert memory_needed(huge) >= MEMORY_PER_ELEMENT * 2 * 2 ** 36
    check_memory([small])
    with pytest.raises(GenerateError, match="needs about .* more than the 0.0 GiB"):
        check_memory([small], available=1)
