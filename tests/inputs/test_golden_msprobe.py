"""msprobe dumps in (refspec.inputs.msprobe_dump, refspec.inputs.msprobe_calls): the reader of
dump.json and its tensor files, one case per mapped call built from the dumped inputs exactly
as the spec computes them, and one clear error for every malformed dump or mapping file."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import refspec
import refspec.goldens as goldens
from refspec.inputs.msprobe_dump import Dump, DumpError, find_dumps, open_dumps
from refspec.inputs.msprobe_calls import describe_dump, load_map
from refspec.inputs.user_cases import InputError, write_user_cases

from msprobe_helpers import BF16, ROPE_MAP, DumpWriter, nrc_call, nrc_map, rope_calls

FRAMEWORKS = ["mindspore", "pytorch"]


def _needs(framework):
    if framework == "pytorch":
        pytest.importorskip("torch")


def dump_with_map(tmp_path, rng, framework="mindspore", text=None, **kw):
    w = DumpWriter(tmp_path / "dump", framework)
    made = rope_calls(w, rng, **kw)
    w.close()
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2") if text is None else text)
    return tmp_path / "dump", tmp_path / "map.toml", made


# --- the reader -------------------------------------------------------------------------------

def test_dump_folders_steps_and_ranks_as_msprobe_lays_them_out(tmp_path, rng):
    for step, rank in ((0, 0), (0, 1), (3, 0)):
        w = DumpWriter(tmp_path / "d", "mindspore", step=step, rank=rank)
        rope_calls(w, rng, calls=1)
        w.close()
    pyn = DumpWriter(tmp_path / "d2" / "pynative", "mindspore", step=1, rank=2)
    rope_calls(pyn, rng, calls=1)
    pyn.close()
    labels = [(d.label, d.step, d.rank) for d in open_dumps(tmp_path / "d")]
    assert labels == [("step0/rank0", 0, 0), ("step0/rank1", 0, 1), ("step3/rank0", 3, 0)]
    assert [(d.label, d.step, d.rank) for d in open_dumps(tmp_path / "d2")] == [
        ("pynative/step1/rank2", 1, 2)]
    one = tmp_path / "d" / "step3" / "rank0"
    assert find_dumps(one) == [str(one / "dump.json")]
    dump = Dump(one / "dump.json")
    assert dump.apis() == {"NPU.npu_rotary_position_embedding": {
        0: {"forward": "NPU.npu_rotary_position_embedding.0.forward",
            "backward": "NPU.npu_rotary_position_embedding.0.backward"}}}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bfloat16_reads_back_bit_for_bit_the_ways_msprobe_stores_it(tmp_path, rng, framework):
    _needs(framework)
    w = DumpWriter(tmp_path, framework)
    made = rope_calls(w, rng, calls=1)
    w.close()
    dump = open_dumps(tmp_path)[0]
    rec = "NPU.npu_rotary_position_embedding.0.forward"
    t = dump.tensor(rec, "input_args", 0)
    assert t.dtype == BF16 and t.shape == made[0]["x"].shape
    raw = np.load(t.path) if framework == "mindspore" else None
    if raw is not None:
        assert raw.dtype == np.float32                     # MindSpore: bfloat16 saved as float32
    x = t.load()
    assert x.dtype == BF16 and x.view(np.uint16).tobytes() == made[0]["x"].view(np.uint16).tobytes()
    assert dump.by_data_name(f"{rec}.input.0.{'npy' if framework == 'mindspore' else 'pt'}").where \
        == "input_args[0]"
    # bfloat16 as uint16 bits or as 2-byte voids (np.save of an ml_dtypes array) reads the same
    for stored in (made[0]["x"].view(np.uint16), made[0]["x"]):
        p = tmp_path / "other.npy"
        np.save(p, stored)
        t.path, t.data_name = str(p), "other.npy"
        assert t.load().view(np.uint16).tobytes() == made[0]["x"].view(np.uint16).tobytes()


def test_float32_values_that_are_not_bfloat16_are_rejected_as_inputs(tmp_path, rng):
    w = DumpWriter(tmp_path, "mindspore")
    rope_calls(w, rng, calls=1)
    w.close()
    dump = open_dumps(tmp_path)[0]
    t = dump.tensor("NPU.npu_rotary_position_embedding.0.forward", "input_args", 0)
    np.save(t.path, np.load(t.path) * np.float32(1 + 2 ** -12))
    with pytest.raises(DumpError, match="float32 values that are not bfloat16 values"):
        t.load()
    assert t.load(exact=False).dtype == BF16


# --- cases from the mapped calls --------------------------------------------------------------

@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_mapped_call_is_a_case_computed_by_the_spec_on_the_dumped_inputs(tmp_path, rng,
                                                                            framework):
    _needs(framework)
    dump, mapping, made = dump_with_map(tmp_path, rng, framework)
    cases = describe_dump(dump, mapping)
    api = "NPU.npu_rotary_position_embedding"
    assert [c.case_id for c in cases] == [f"rope_grad/msprobe/step0/rank0/{api}.0",
                                          f"rope_grad/msprobe/step0/rank0/{api}.1",
                                          f"rope/msprobe/step0/rank0/{api}.0",
                                          f"rope/msprobe/step0/rank0/{api}.1"]
    write_user_cases(tmp_path / "g.h5", cases, sweep_name="msprobe", sweep_definition="")
    with goldens.open(tmp_path / "g.h5") as gf:
        for call, t in made.items():
            case = gf[f"rope_grad/msprobe/step0/rank0/{api}.{call}"]
            assert case.params["mode"] == "half" and case.params["layout"] == "BSND"
            assert case.params["dump"]["backward"] == f"{api}.{call}.backward"
            assert case.params["dump"]["outputs"] == {"dx": "backward.output.0",
                                                      "dcos": "backward.output.1",
                                                      "dsin": "backward.output.2"}
            for name in ("dy", "cos", "sin", "x"):
                assert case.inputs[name][()].tobytes() == t[name].tobytes(), name
            want = refspec.rotary_position_embedding_grad(t["dy"], t["cos"], t["sin"], t["x"],
                                                          mode=0, soc="A2", out_dtype=np.float64)
            for name, value in zip(("dx", "dcos", "dsin"), want):
                np.testing.assert_array_equal(case.exact[name][()], value)
            fwd = gf[f"rope/msprobe/step0/rank0/{api}.{call}"]
            np.testing.assert_array_equal(fwd.exact["y"][()], refspec.rotary_position_embedding(
                t["x"], t["cos"], t["sin"], mode=0, soc="A2", out_dtype=np.float64))


MROPE_MAP = """
[[api]]
name = "npu_mrope"
operator = "rope_cache"
soc = "A2"
inputs = { positions = "forward.input.0", query = "forward.input.1", key = "forward.input.2", cos_sin_cache = "forward.input.3" }
attributes = { head_size = "forward.input.4", mrope_section = "forward.kwargs.mrope_section", is_neox_style = true }
outputs = { query_out = "forward.output.0", key_out = "forward.output.1" }
"""


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_an_integer_positions_tensor_is_read_from_the_dump(tmp_path, rng, framework):
    """npu_mrope's int64 positions (3, T) come in as they were dumped; a float positions
    tensor is one clear error naming the dtype an index tensor needs."""
    _needs(framework)
    T, H = 6, 128
    positions = rng.integers(0, 12, (3, T)).astype(np.int64)
    query = rng.standard_normal((T, 2 * H)).astype(BF16)
    key = rng.standard_normal((T, H)).astype(BF16)
    cache = rng.uniform(-1, 1, (12, 128)).astype(BF16)
    w = DumpWriter(tmp_path / "dump", framework)
    w.forward("npu_mrope", 0, [positions, query, key, cache, H],
              {"mrope_section": [16, 24, 24]}, [query, key])
    w.close()
    (tmp_path / "map.toml").write_text(MROPE_MAP)
    [case] = describe_dump(tmp_path / "dump", tmp_path / "map.toml")
    write_user_cases(tmp_path / "g.h5", [case], sweep_name="msprobe", sweep_definition="")
    with goldens.open(tmp_path / "g.h5") as gf:
        got = gf[case.case_id]
        assert got.params["dtype"] == "bfloat16" and got.params["mrope"] == "16,24,24"
        stored = got.inputs["positions"][()]
        assert stored.dtype == np.int64 and np.array_equal(stored, positions)
        want = refspec.rope_with_sin_cos_cache(positions, query, key, cache, H, (16, 24, 24),
                                               soc="A2", out_dtype=np.float64)
        np.testing.assert_array_equal(got.exact["query_out"][()], want.query)
    w = DumpWriter(tmp_path / "bad", framework)
    w.forward("npu_mrope", 0, [positions.astype(np.float32), query, key, cache, H],
              {"mrope_section": [16, 24, 24]}, [query, key])
    w.close()
    with pytest.raises(InputError, match="input positions .* has dtype .*[Ff]loat32.*, not an "
                                         "integer dtype"):
        describe_dump(tmp_path / "bad", tmp_path / "map.toml")


def test_normropeconcat_backward_takes_the_statistics_of_its_forward_record(tmp_path, rng):
    w = DumpWriter(tmp_path / "dump", "mindspore")
    t = nrc_call(w, rng)
    w.close()
    (tmp_path / "map.toml").write_text(nrc_map("A2"))
    cases = {c.op.id: c for c in describe_dump(tmp_path / "dump", tmp_path / "map.toml")}
    bwd = cases["nrc_grad"]
    assert bwd.op.attrs_of(bwd.params) == dict(norm_type=2, norm_added_type=1, rope_type=2,
                                               concat_order=0)
    inputs = bwd.load()
    for name in ("norm_query_mean", "norm_added_key_rstd", "grad_key_output", "rope_cos"):
        assert inputs[name].tobytes() == t[name].tobytes(), name
    assert "norm_added_query_weight" in inputs        # mapped; the spec ignores it for type 1
    assert cases["nrc"].params["training"] is True


# --- one clear error for each malformed dump or mapping ---------------------------------------

def _error(dump, mapping) -> str:
    with pytest.raises(InputError) as info:
        for case in describe_dump(dump, mapping):
            case.load()
    assert "\n" not in str(info.value)
    return str(info.value)


def test_malformed_dumps_and_mapping_files_are_one_clear_error(tmp_path, rng):
    dump, mapping, _ = dump_with_map(tmp_path, rng)
    rank = dump / "step0" / "rank0"
    api = "NPU.npu_rotary_position_embedding"

    def remap(text):
        (tmp_path / "m.toml").write_text(text)
        return tmp_path / "m.toml"

    base = ROPE_MAP.format(soc="A2")
    msg = _error(dump, remap(base.replace('name = "npu_rotary_position_embedding"',
                                          'name = "npu_rotary_mul"', 1)))
    assert "no API 'npu_rotary_mul' in the dump" in msg and api in msg
    msg = _error(dump, remap(base.replace('sin = "forward.input.2"', 'sin = "forward.input.5"', 1)))
    assert f"{api}.0.forward has no input_args[5] (4 entries)" in msg
    msg = _error(dump, remap(base.replace('sin = "forward.input.2"', 'sin = "forward.input.3"', 1)))
    assert "input_args[3] is not a tensor" in msg
    msg = _error(dump, remap(base.replace('operator = "rope_grad"', 'operator = "ropegrad"')))
    assert "[[api]] 1: operator 'ropegrad' is unknown" in msg
    msg = _error(dump, remap(base.replace('"backward.input.0"', '"backwards.input.0"')))
    assert "inputs.dy: 'backwards.input.0' is not a dump reference" in msg
    msg = _error(dump, remap(base.replace("dy = ", "dyy = ", 1)))
    assert "inputs.dyy: not one of RotaryPositionEmbeddingGrad's inputs (dy, cos, sin, x)" in msg
    msg = _error(dump, remap(base.replace("[[api]]", "[[apis]]", 1)))
    assert "unknown key(s) apis" in msg
    msg = _error(dump, remap("step = 4\n" + base))
    assert "no dump for step=4 rank=None (found: step0/rank0)" in msg
    msg = _error(dump, remap(base.replace('soc = "A2"\n', 'soc = "A2"\ncalls = [0, 5]\n', 1)))
    assert f"{api} has no call 5 (calls: 0, 1)" in msg
    msg = _error(dump, remap(base.replace('mode = "forward.input.3"', 'mode = "forward.input.0"', 1)))
    assert "not a value; give the attribute's value in the mapping file" in msg
    msg = _error(dump, remap("[[api]]\nname = 1\n"))
    assert "needs 'operator'" in msg

    doc = json.loads((rank / "dump.json").read_text())
    saved = json.dumps(doc)
    # a forward whose backward record is another call's
    doc["data"][f"{api}.1.backward"]["input"][0]["shape"] = [1, 2, 3, 4]
    (rank / "dump.json").write_text(json.dumps(doc))
    msg = _error(dump, mapping)
    assert f"{api}.1.forward and {api}.1.backward are not one call" in msg
    assert "input[0] of the backward has shape (1, 2, 3, 4)" in msg
    # a call without the backward record the map reads
    doc = json.loads(saved)
    del doc["data"][f"{api}.1.backward"]
    (rank / "dump.json").write_text(json.dumps(doc))
    msg = _error(dump, mapping)
    assert f"no backward record {api}.1.backward" in msg and "backward records exist for calls 0" in msg
    # statistics only: no data_name
    doc = json.loads(saved)
    del doc["data"][f"{api}.0.forward"]["input_args"][0]["data_name"]
    (rank / "dump.json").write_text(json.dumps(doc))
    assert "no data_name (the dump holds statistics only" in _error(dump, mapping)
    # a tensor file that is gone, a wrong shape, a dtype refspec does not take
    (rank / "dump.json").write_text(saved)
    dy_file = rank / "dump_tensor_data" / f"{api}.0.backward.input.0.npy"
    kept = dy_file.read_bytes()
    os.remove(dy_file)
    assert f"{api}.0.backward.input.0.npy does not exist" in _error(dump, mapping)
    dy_file.write_bytes(kept)
    doc = json.loads(saved)
    doc["data"][f"{api}.0.backward"]["input"][0]["data_name"] = f"{api}.0.forward.input.1.npy"
    doc["data"][f"{api}.0.forward"]["output"][0]["data_name"] = f"{api}.0.forward.input.1.npy"
    (rank / "dump.json").write_text(json.dumps(doc))
    assert "has shape (1, 16, 1, 32) but dump.json says (2, 16, 4, 32)" in _error(dump, mapping)
    doc = json.loads(saved)
    doc["data"][f"{api}.0.forward"]["input_args"][1]["dtype"] = "torch.int32"
    (rank / "dump.json").write_text(json.dumps(doc))
    assert "input cos (forward.input.1) has dtype 'torch.int32'" in _error(dump, mapping)
    (rank / "dump.json").write_text("{")
    assert "not a readable dump.json" in _error(dump, mapping)
    (rank / "dump.json").write_text("{}")
    assert 'not an msprobe dump.json (no "data" object)' in _error(dump, mapping)
    assert "not a directory" in _error(tmp_path / "map.toml", mapping)
    (tmp_path / "empty").mkdir()
    assert "no dump.json in it, nor in its step*/rank*/ folders" in _error(tmp_path / "empty", mapping)
    with pytest.raises(InputError, match="not valid TOML"):
        load_map(remap("[[api]\n"))


def test_a_bare_api_name_matching_two_prefixes_is_ambiguous(tmp_path, rng):
    w = DumpWriter(tmp_path / "dump", "mindspore")
    rope_calls(w, rng, calls=1)
    x = rng.standard_normal((2, 16, 4, 32)).astype(BF16)
    w.forward("npu_rotary_position_embedding", 0, [x, x, x, 0], {}, [x], prefix="MindSpeed")
    w.close()
    (tmp_path / "map.toml").write_text(ROPE_MAP.format(soc="A2"))
    msg = _error(tmp_path / "dump", tmp_path / "map.toml")
    assert "matches several APIs" in msg and "MindSpeed.npu_rotary_position_embedding" in msg
    full = ROPE_MAP.format(soc="A2").replace('"npu_rotary_position_embedding"',
                                             '"NPU.npu_rotary_position_embedding"')
    (tmp_path / "map.toml").write_text(full)
    assert len(describe_dump(tmp_path / "dump", tmp_path / "map.toml")) == 2


def test_the_mapping_files_of_docs_real_runs_read_a_dump_of_those_calls(tmp_path, rng):
    """The API examples of docs/real_runs.md section 3, on a dump of the calls they describe
    (its module example: tests/inputs/test_msprobe_real.py)."""
    import re
    from repo_paths import DOCS
    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / "real_runs.md").read_text(), re.S)
    assert len(blocks) == 4          # section 3's three, and section 5's (test_cache_kernels.py)
    blocks = blocks[:2]
    w = DumpWriter(tmp_path / "dump", "mindspore")
    rope_calls(w, rng, calls=2)
    t = nrc_call(w, rng)
    w.close()
    (tmp_path / "map.toml").write_text("\n".join(blocks))
    cases = describe_dump(tmp_path / "dump", tmp_path / "map.toml")
    assert sorted(c.case_id.split("/")[0] for c in cases) == ["nrc_grad", "rope", "rope",
                                                              "rope_grad", "rope_grad"]
    nrc = next(c for c in cases if c.op.id == "nrc_grad")
    inputs = nrc.load()
    assert inputs["norm_added_key_rstd"].tobytes() == t["norm_added_key_rstd"].tobytes()
    assert nrc.params["dump"]["outputs"]["grad_norm_key_bias"] == "backward.output.9"


def test_a_json_mapping_file_reads_the_same_and_pt_files_need_torch(tmp_path, rng, monkeypatch):
    import sys
    import tomllib
    dump, mapping, _ = dump_with_map(tmp_path, rng, "pytorch" if _has_torch() else "mindspore")
    (tmp_path / "map.json").write_text(json.dumps(tomllib.loads(mapping.read_text())))
    from_toml = [(c.case_id, c.params) for c in describe_dump(dump, mapping)]
    assert [(c.case_id, c.params) for c in describe_dump(dump, tmp_path / "map.json")] == from_toml
    if _has_torch():
        monkeypatch.setitem(sys.modules, "torch", None)        # as if PyTorch were not installed
        with pytest.raises(InputError, match=r"\.pt tensor files need PyTorch, which is not "
                                             r"installed \(refspec reads them with "
                                             r"torch.load\(weights_only=True\)\)"):
            describe_dump(dump, mapping)[0].load()


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
