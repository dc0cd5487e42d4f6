"""The KV-cache operators as records (refspec.ops.kv_cache_records, dequant_rope_records,
qkv_cache_records): the smoke sweep's blocks go through list, generate, show and export with no
operator-specific code outside the records; the goldens are the spec functions on the stored
inputs; a cache's golden is the whole cache, every slot the index does not name holding its
sentinel; the index patterns hold what they promise (out of order, the cache's ends, a block's
last slot, -1, untouched neighbours, vLLM's slot mapping, a partly full last block); every fault
is rejected with its code; export marks the caches as updated in place."""

from __future__ import annotations

import json

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec import ops
from refspec.goldens.cases import build_case
from refspec.goldens.sweep import Case, load_sweep
from refspec.ops.kv_cache_records import slots_of
from refspec.ops.sampling import sentinels
from refspec.spec.dtypes import to_float64
from refspec.spec.quant_dtypes import hifloat8
from cli_helpers import invoke as run

KV_OPS = ("kv_rope_cache", "kv_rope_cache_v2", "dequant_rope_kv", "qkv_rope_cache")


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = tmp_path_factory.mktemp("kv") / "kv.h5"
    args = ["generate", "-o", out]
    for op in KV_OPS:
        args += ["--op", op]
    res = run(*args)
    assert res.exit_code == 0, res.stderr
    return out


def test_the_smoke_sweep_covers_modes_dtypes_patterns_and_faults():
    cases = [c.params for c in load_sweep("smoke").cases() if c.op in KV_OPS]
    v1 = [p for p in cases if p["op"] == "kv_rope_cache"]
    assert {p["cache_mode"] for p in v1} == {"Norm", "PA", "PA_BNSD", "PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"}
    assert {p["kcache"] for p in v1} | {p["ckvcache"] for p in v1} == \
        {"kv", "int8", "float8_e4m3fn", "float8_e5m2", "hifloat8"}
    assert {p["index"] for p in v1} == {"scattered", "sequential", "decode"}
    assert {p["soc"] for p in v1} == {"A2", "950", None}
    assert {p["S"] for p in v1} >= {3, 40}                       # a partly full last block
    assert {p["fault"] for p in v1} >= {"kv_dtype", "no_scale", "block_size", "index_range",
                                        "index_twice"}
    assert {p["N"] for p in cases if p["op"] == "kv_rope_cache_v2"} == {1, 3, 4}
    dq = [p for p in cases if p["op"] == "dequant_rope_kv"]
    assert {p["cache_mode"] for p in dq} == {"contiguous", "page"} and {p["x"] for p in dq} == {"BSH", "BH"}
    assert {p["bias"] for p in dq} == {"none", "int32", "float32", "float16", "bfloat16"}
    qkv = [p for p in cases if p["op"] == "qkv_rope_cache"]
    assert {p["cos"] for p in qkv} == {"token", "batch"} and {p["kcache"] for p in qkv} == {"qkv", "int8"}


def test_list_filters_by_the_new_axes():
    listed = run("list", "--op", "kv_rope_cache", "--where", "kcache=hifloat8").output.split()
    assert listed and all("/kcache=hifloat8/" in i for i in listed)
    listed = run("list", "--op", "dequant_rope_kv", "--where", "cache_mode=page").output.split()
    assert listed and all("/cache_mode=page/" in i for i in listed)


def _spec(case):
    x = {n: case.inputs[n][()] for n in case.input_names}
    record = ops.get(case.op)
    return record, x, record.attrs_of(case.params)


def test_goldens_are_the_spec_functions_on_the_stored_inputs(golden):
    seen = negative = 0
    with goldens.open(golden) as gf:
        for case in gf:
            record, x, attrs = _spec(case)
            if case.is_negative:
                negative += 1
                with pytest.raises(refspec.AclnnError) as info:
                    record.spec(**x, **attrs, soc=case.params["soc"])
                assert info.value.code == case.expected_error
                continue
            out = dict(zip(record.output_names, record.spec(**x, **attrs, soc=case.params["soc"])))
            exact = dict(zip(record.output_names,
                             record.spec(**x, **attrs, soc=case.params["soc"], out_dtype=np.float64)))
            for name in case.output_names:
                got = case.expected[name][()]
                assert got.dtype == out[name].dtype and got.tobytes() == out[name].tobytes(), name
                want = exact[name]
                if name in record.in_place:
                    want = want.reshape(-1)[case.written[name][()]]
                assert np.array_equal(case.exact[name][()], want), name
            seen += 1
    assert seen > 30 and negative > 10


def test_slots_the_index_does_not_name_keep_their_sentinels(golden):
    checked = 0
    with goldens.open(golden) as gf:
        for case in gf:
            if case.is_negative:
                continue
            record = ops.get(case.op)
            for name in record.in_place:
                before = case.inputs[name][()].view(np.uint8).reshape(-1, case.inputs[name].dtype.itemsize)
                after = case.expected[name][()].view(np.uint8).reshape(before.shape)
                untouched = np.ones(len(before), bool)
                untouched[case.written[name][()]] = False
                assert np.array_equal(before[untouched], after[untouched])
                meta = case.output_meta(name)
                assert meta["comparison_class"] == "cache"
                assert case.expected[name].attrs["written_class"] in ("quantised", "elementwise",
                                                                     "row_reduction", "copy")
                checked += 1
    assert checked > 60


def _params(**changes):
    base = dict(op="kv_rope_cache", soc="A2", cache_mode="PA", kcache="kv", ckvcache="kv", scale="d",
                offset=False, index="scattered", output_kv=True, dtype="float16", dist="random",
                fault="none", B=2, S=5, N=1, Dv=512, Dk=64, blocks=4, slots=32)
    return {**base, **changes}


def test_scattered_index_names_the_ends_a_blocks_last_slot_a_skip_out_of_order():
    p = _params(B=4, S=5)
    idx = slots_of(p, np.random.default_rng(0))
    total = p["blocks"] * p["slots"]
    assert {0, total - 1, p["slots"] - 1} <= set(idx.tolist()) and -1 in idx
    assert list(idx) != sorted(idx)
    written = set(idx[idx >= 0].tolist()) - {0, total - 1, p["slots"] - 1}
    assert all(s + 1 not in written and s - 1 not in written for s in written)   # neighbours untouched


def test_decode_index_is_vllms_slot_mapping():
    p = _params(index="decode", B=2, S=40, blocks=8)
    idx = slots_of(p, np.random.default_rng(1)).reshape(2, 40)
    for row in idx:
        blocks, offsets = row // 32, row % 32
        steps = np.diff(offsets)
        assert np.all((steps == 1) | ((steps == -31) & (np.diff(blocks) != 0)))   # in order, block to block
    assert not set((idx[0] // 32).tolist()) & set((idx[1] // 32).tolist())       # each batch its blocks


def test_blocked_modes_leave_the_last_block_partly_full():
    p = _params(cache_mode="PA_BLK_NZ", S=40, blocks=6, index="sequential")
    d = build_case(Case("x", "kv_rope_cache", p, 3))
    assert d.error is None and len(d.written()["k_cache"]) == 2 * 40 * 64
    per_block = np.bincount(d.written()["k_cache"] // (32 * 64), minlength=6)   # elements per block
    assert sorted(per_block.tolist()) == [0, 0, 8 * 64, 8 * 64, 32 * 64, 32 * 64]


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn", "float8_e5m2", "hifloat8", "float16"])
def test_sentinels_are_finite_distinct_codes(dtype):
    dt = refspec.hifloat8 if dtype == "hifloat8" else np.dtype(dtype) if dtype != "float16" else np.float16
    if dtype.startswith("float8"):
        import ml_dtypes
        dt = getattr(ml_dtypes, dtype)
    a = sentinels((3, 50), dt, "k_cache")
    v = to_float64(a).reshape(-1)
    assert np.all(np.isfinite(v)) and np.all(v != 0)
    n = 253 if dt == hifloat8 else 150
    assert len(np.unique(v[:min(n, 150)])) == min(n, 150)


FAULTS = [("kv_rope_cache", f, c) for f, c in [("kv_dtype", 161002), ("index_dtype", 161002),
                                               ("cache_dtype", 161002), ("no_scale", 161002),
                                               ("block_size", 561002), ("index_size", 561002),
                                               ("heads", 561002), ("index_range", 161002),
                                               ("index_twice", 161002)]]


@pytest.mark.parametrize("op, fault, code", FAULTS)
def test_every_fault_is_rejected_with_its_code(op, fault, code):
    p = _params(fault=fault, kcache="int8" if fault in ("no_scale", "block_size") else "kv")
    d = build_case(Case("x", op, p, 5))
    assert d.error is not None and d.error.code == code


def test_export_marks_the_caches_in_place(golden, tmp_path):
    with goldens.open(golden) as gf:
        ids = [c for c in gf.case_ids() if not gf[c].is_negative][:6]
    res = run("export", golden, "-o", tmp_path, *sum((["--case", i] for i in ids), []))
    assert res.exit_code == 0, res.stderr
    for cid in ids:
        doc = json.loads((tmp_path.joinpath(*cid.split("/")) / "case.json").read_text())
        op = ops.get(doc["operator"])
        entries = {f["name"]: f for f in doc["files"]}
        for name in op.in_place:
            golden_entry = entries[op.golden_file(name)]
            assert golden_entry["in_place"] is True
            assert golden_entry["output_file"] == op.tensor_file(name) in entries   # the input file
            assert entries[op.tensor_file(name)]["role"] == "input"


def test_show_prints_a_cache_case(golden):
    with goldens.open(golden) as gf:
        cid = next(c for c in gf.case_ids() if "kcache=hifloat8" in c and not gf[c].is_negative)
    res = run("show", golden, cid)
    assert res.exit_code == 0, res.stderr
    assert "hifloat8" in res.output and "cache" in res.output
