"""Judging an msprobe dump against goldens built from it: the dumped outputs of a float32
implementation written for the tests (tests/impls/implementations.py) pass, those of deliberately
broken ones fail with the element named; the comparator reads the dump through the goldens
layer's reader and finds each output by the dump record its case names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from refspec.comparator import CompareUsageError, compare
from refspec.comparator.sources.msprobe_dumps import golden_mapping, msprobe_source
from refspec.goldens.example import rope_grad_case
from refspec.inputs.msprobe_calls import describe_dump
from refspec.inputs.user_cases import write_user_cases
import refspec.goldens as goldens

from msprobe_helpers import BF16, ROPE_MAP, DumpWriter, nrc_call, nrc_map, rope_calls

API = "NPU.npu_rotary_position_embedding"


def build(tmp_path, framework="mindspore", rope_bug=None, nrc_bug=None, nrc_dtype=np.float16,
          mode=0):
    if framework == "pytorch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    w = DumpWriter(tmp_path / "dump", framework)
    rope_calls(w, rng, calls=2, bug=rope_bug, mode=mode)
    nrc_call(w, rng, dtype=nrc_dtype, bug=nrc_bug)
    w.close()
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2") + nrc_map("A2"))
    cases = describe_dump(tmp_path / "dump", tmp_path / "map.toml")
    write_user_cases(tmp_path / "g.h5", cases, sweep_name="msprobe", sweep_definition="",
                     force=True)
    return tmp_path / "g.h5", tmp_path / "dump"


def judge(golden, dump):
    return compare(golden, msprobe_source(golden, dump))


@pytest.mark.parametrize("framework", ["mindspore", "pytorch"])
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_a_correct_float32_implementation_passes_call_by_call(tmp_path, framework, dtype):
    golden, dump = build(tmp_path, framework, nrc_dtype=dtype, mode=1 if dtype == BF16 else 0)
    report = judge(golden, dump)
    assert report.passed, str(report)
    judged = {(r.case_id.split("/")[0], r.output) for r in report.results}
    assert ("rope_grad", "dcos") in judged and ("rope", "y") in judged
    assert ("nrc_grad", "grad_norm_query_weight") in judged and ("nrc", "norm_key_rstd") in judged
    assert len({r.case_id for r in report.results}) == 6
    assert all(r.source.endswith((".npy", ".pt")) for r in report.results)


@pytest.mark.parametrize("bug", ["lost_minus", "wrong_sin_partner", "dcos_dsin_swapped",
                                 "truncation"])
def test_a_broken_rope_backward_fails_with_the_call_and_the_element_named(tmp_path, bug):
    golden, dump = build(tmp_path, rope_bug=bug)
    report = judge(golden, dump)
    failed = {(r.case_id, r.output) for r in report.failures}
    assert failed and all(cid.startswith(f"rope_grad/msprobe/step0/rank0/{API}.") for cid, _ in failed)
    first = report.failures[0]
    assert first.message.startswith(f"{first.output}[b=") and " ulp) [" in first.message
    assert "rotary_position_embedding_grad mode=half layout=BSND" in first.message


@pytest.mark.parametrize("bug", ["concat_order_reversed", "value_from_key", "lost_minus",
                                 "weight_grad_one_stream", "sr_off_by_one"])
def test_a_broken_normropeconcat_backward_fails(tmp_path, bug):
    golden, dump = build(tmp_path, nrc_bug=bug)
    report = judge(golden, dump)
    failed = {r.case_id for r in report.failures}
    assert failed == {"nrc_grad/msprobe/step0/rank0/NPU.npu_norm_rope_concat.0"}
    assert report.failures[0].message.startswith(f"{report.failures[0].output}[")


def test_a_dumped_output_of_another_shape_or_dtype_is_an_input_problem(tmp_path):
    golden, dump = build(tmp_path)
    path = dump / "step0" / "rank0" / "dump.json"
    doc = json.loads(path.read_text())
    doc["data"][f"{API}.0.backward"]["output"][1]["dtype"] = "BFloat16"
    doc["data"][f"{API}.0.backward"]["output"][0]["dtype"] = "Float16"
    doc["data"][f"{API}.1.backward"]["output"][0]["shape"] = [2, 16, 4, 16]
    path.write_text(json.dumps(doc))
    status = {(r.case_id.rsplit(".", 1)[-1], r.output): r.status for r in judge(golden, dump).results
              if r.case_id.startswith("rope_grad")}
    assert status[("0", "dx")] == "dtype_mismatch" and status[("1", "dx")] == "shape_mismatch"
    assert status[("0", "dcos")] == "pass"


def test_the_golden_names_its_dump_records_and_other_goldens_need_a_mapping(tmp_path):
    golden, dump = build(tmp_path)
    mapping = golden_mapping(golden)
    entry = mapping.entry(f"rope_grad/msprobe/step0/rank0/{API}.1", "dsin")
    assert entry == {"api": f"{API}.1.backward", "field": "output", "index": 2,
                     "case": f"rope_grad/msprobe/step0/rank0/{API}.1", "output": "dsin",
                     "step": 0, "rank": 0}
    plain = tmp_path / "plain.h5"
    with goldens.GoldenWriter(plain, sweep_name="x", sweep_definition="", sweep_seed=0) as w:
        w.write_case(rope_grad_case(case_id='rope_grad/one'))
    with pytest.raises(CompareUsageError, match="no case names an msprobe dump record"):
        msprobe_source(plain, dump)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareUsageError, match="not an msprobe dump"):
        msprobe_source(golden, tmp_path / "empty")
    with pytest.raises(CompareUsageError, match="not both"):
        msprobe_source(golden, dump, actual=str(dump))
