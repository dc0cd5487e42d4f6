"""Dumps that msprobe itself wrote (tests/msprobe_runs.py: mindstudio-probe 26.2.0's PyTorch
dumper on the CPU, a two-step bfloat16 training whose RoPE is an ``npu_rotary_mul`` stand-in
registered with ``register_custom_api``), read with mapping files written the way
docs/real_runs.md shows: backward entries msprobe leaves null, proc{PID} folders, module
records, calls the spec rejects. Skipped without PyTorch or mindstudio-probe."""

from __future__ import annotations

import json
import shutil

import pytest

import refspec.goldens as goldens
from refspec.inputs.msprobe_calls import describe_dump
from refspec.inputs.msprobe_dump import open_dumps, split_record

from cli_helpers import assert_user_error, invoke as run

pytestmark = pytest.mark.slow      # msprobe's own runs: seconds per test

API = "NPU.npu_rotary_mul"


def rope_map(name="npu_rotary_mul", mode=0, head="") -> str:
    """The mapping file of docs/real_runs.md for ``npu_rotary_mul(x, r1, r2, rotary_mode)``
    (or a module called as ``forward(x, cos, sin)``): its backward and its forward."""
    return f"""{head}
[[api]]
name = "{name}"
operator = "rope_grad"
soc = "A2"
inputs = {{ dy = "backward.input.0", x = "forward.input.0", cos = "forward.input.1", sin = "forward.input.2" }}
attributes = {{ mode = {mode} }}
outputs = {{ dx = "backward.output.0", dcos = "backward.output.1", dsin = "backward.output.2" }}

[[api]]
name = "{name}"
operator = "rope"
soc = "A2"
inputs = {{ x = "forward.input.0", cos = "forward.input.1", sin = "forward.input.2" }}
attributes = {{ mode = {mode} }}
outputs = {{ y = "forward.output.0" }}
"""


def write_map(tmp_path, text, name="map.toml"):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def check_dump(tmp_path, dump, mapping, *options):
    """`refspec check-dump` with a JSON report: (result, {(step, call, output): status})."""
    res = run("check-dump", dump, "--map", mapping, "--json", tmp_path / "r.json", *options)
    report = json.loads((tmp_path / "r.json").read_text())
    rows = {}
    for r in report["results"]:
        parts = r["case_id"].split("/")
        rows[(parts[0], parts[2], parts[-1].rsplit(".", 1)[-1], r["output"])] = r
    return res, report, rows


def status_of(rows) -> dict:
    return {k: r["status"] for k, r in rows.items()}


# --- item: backward entries msprobe leaves null ------------------------------------------------

def test_what_msprobe_writes_for_a_fused_rope_whose_tables_need_no_gradient(msprobe_run):
    dump = msprobe_run(level="L1")
    (d0, d1) = open_dumps(dump)
    assert (d0.step, d1.step) == (0, 1) and d0.label.startswith("step0/proc")
    assert d0.dir.rsplit("proc", 1)[-1].isdigit() and d0.framework == "pytorch"
    assert d0.apis()[API] == {0: {"forward": f"{API}.0.forward", "backward": f"{API}.0.backward"}}
    fwd, bwd = d0.record(f"{API}.0.forward"), d0.record(f"{API}.0.backward")
    assert [e["requires_grad"] for e in fwd["input_args"]] == [True, False, False]
    assert fwd["input_kwargs"] == {"rotary_mode": {"type": "str", "value": "half"}}
    assert bwd["output"][1:] == [None, None] and bwd["output"][0]["dtype"] == "torch.bfloat16"
    assert bwd["output"][0]["data_name"] == f"{API}.0.backward.output.0.pt"


def test_null_gradients_are_not_recorded_and_a_correct_dump_passes(msprobe_run, tmp_path):
    dump = msprobe_run(level="L1")
    mapping = write_map(tmp_path, rope_map())
    res, report, rows = check_dump(tmp_path, dump, mapping)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert status_of(rows) == {
        **{("rope_grad", s, "0", o): "pass" for s in ("step0", "step1") for o in ("dx",)},
        **{("rope_grad", s, "0", o): "not_recorded" for s in ("step0", "step1")
           for o in ("dcos", "dsin")},
        **{("rope", s, "0", "y"): "pass" for s in ("step0", "step1")}}
    reason = rows[("rope_grad", "step0", "0", "dcos")]["reason"]
    assert f"{API}.0.backward output[1]: not recorded (null: msprobe recorded no tensor" in reason
    lines = res.stdout.strip().splitlines()
    assert lines[-1] == ("PASS: 4 passed, 0 failed, 0 input problems, 4 not recorded of 8 outputs "
                         "in 4 cases [standard default]")
    assert any(line.startswith("NOT RECORDED  dcos") for line in lines)
    assert "MISSING" not in res.stdout
    # the goldens are computed with x: their dcos and dsin exist, for a dump that records them
    res = run("golden", "--msprobe", dump, "--map", mapping, "-o", tmp_path / "g.h5")
    assert res.exit_code == 0, res.stderr
    with goldens.open(tmp_path / "g.h5") as gf:
        case = gf[f"rope_grad/msprobe/step0/rank0/{API}.0"]
        assert {"dx", "dcos", "dsin"} <= set(case.output_names)
    res = run("compare", tmp_path / "g.h5", "--msprobe", dump)
    assert res.exit_code == 0 and "4 not recorded" in res.stdout.splitlines()[-1]


def test_a_tensor_that_is_really_missing_still_fails(msprobe_run, tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(msprobe_run(level="L1"), dump)
    (d0, _) = open_dumps(dump)
    (dump / d0.label / "dump_tensor_data" / f"{API}.0.backward.output.0.pt").unlink()
    res, _, rows = check_dump(tmp_path, dump, write_map(tmp_path, rope_map()))
    assert res.exit_code == 1
    assert rows[("rope_grad", "step0", "0", "dx")]["status"] == "missing"
    assert rows[("rope_grad", "step1", "0", "dx")]["status"] == "pass"
    beyond = rope_map().replace('dsin = "backward.output.2"', 'dsin = "backward.output.3"')
    res, _, rows = check_dump(tmp_path, msprobe_run(level="L1"), write_map(tmp_path, beyond))
    assert res.exit_code == 1
    dsin = rows[("rope_grad", "step0", "0", "dsin")]
    assert dsin["status"] == "missing" and "has no output[3] (3 entries)" in dsin["reason"]


def test_tables_that_need_a_gradient_have_dcos_and_dsin_judged(msprobe_run, tmp_path):
    """A single-process gloo group: the folders are rank0; interleave mode."""
    dump = msprobe_run(level="L1", distributed=True, tables_grad=True, mode="interleave")
    assert [d.label for d in open_dumps(dump)] == ["step0/rank0", "step1/rank0"]
    res, _, rows = check_dump(tmp_path, dump, write_map(tmp_path, rope_map(mode=1)))
    assert res.exit_code == 0, res.stdout
    assert set(status_of(rows).values()) == {"pass"} and len(rows) == 8


def test_a_report_of_nothing_but_unrecorded_outputs_judged_nothing():
    from refspec.comparator import OutputResult, Report
    report = Report(golden="g.h5", actual="dump", standard="default")
    report.results.append(OutputResult("c", "rope_grad", "dcos", "ctx").problem(
        "not_recorded", "null"))
    assert report.results[0].passed and not report.passed
    assert report.summary_line().endswith("; nothing was judged")


def test_the_kwarg_of_torch_npus_spelling_is_in_the_dump(msprobe_run):
    """rotary_mode="half" as msprobe records it."""
    (d0, _) = open_dumps(msprobe_run(level="L1"))
    entry = d0.item(f"{API}.0.forward", "input_kwargs", "rotary_mode")
    assert entry == {"type": "str", "value": "half"}


@pytest.mark.parametrize("mode", ['"forward.kwargs.rotary_mode"', '"half"', "0"])
def test_torch_npus_mode_labels_are_read_from_the_dump_and_the_mapping_file(msprobe_run, tmp_path,
                                                                            mode):
    """``mode = "forward.kwargs.rotary_mode"`` reads the label msprobe recorded; a label or
    the number in the mapping file reads the same: every case has mode half, and passes."""
    dump = msprobe_run(level="L1")
    mapping = write_map(tmp_path, rope_map(mode=mode))
    cases = describe_dump(dump, mapping)
    assert cases and {c.params["mode"] for c in cases} == {"half"}
    assert {c.op.attrs_of(c.params)["mode"] for c in cases} == {0}
    res, _, rows = check_dump(tmp_path, dump, mapping)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert {r["status"] for r in rows.values()} == {"pass", "not_recorded"}


def test_a_mode_label_no_axis_reads_is_one_clear_error(msprobe_run, tmp_path):
    dump = msprobe_run(level="L1")
    res = run("golden", "--msprobe", dump, "--map", write_map(tmp_path, rope_map(mode='"spiral"')),
              "-o", tmp_path / "g.h5")
    assert_user_error(res, "attributes.mode: unknown value 'spiral'; allowed: half, interleave")


# --- item: proc{PID} folders are ranks ------------------------------------------------------------

def test_a_one_process_dump_is_rank_0_and_its_cases_name_no_pid(msprobe_run, tmp_path):
    dump = msprobe_run(level="L1")
    pid = open_dumps(dump)[0].label.split("proc")[1]
    cases = describe_dump(dump, write_map(tmp_path, rope_map(head="rank = 0\nstep = 1")))
    assert [c.case_id for c in cases] == [f"rope_grad/msprobe/step1/rank0/{API}.0",
                                          f"rope/msprobe/step1/rank0/{API}.0"]
    info = cases[0].params["dump"]
    assert (info["step"], info["rank"], info["path"]) == (1, 0, "step1/rank0")
    assert pid not in json.dumps(cases[0].params)
    assert len(describe_dump(dump, write_map(tmp_path, rope_map()))) == 4     # every step
    msg = run("golden", "--msprobe", dump, "--map",
              write_map(tmp_path, rope_map(head="rank = 1")), "-o", tmp_path / "g.h5")
    assert_user_error(msg, "no dump for step=None rank=1", f"step0/proc{pid} (rank 0)")


def test_proc_folders_are_numbered_after_the_rank_folders_in_pid_order(tmp_path, rng):
    """As msprobe's own tooling numbers them (core/dump/dump2db/dump2db.py)."""
    from msprobe_helpers import DumpWriter, rope_calls
    for rank in (0, 1, 30, 500, 7):
        w = DumpWriter(tmp_path / "d", step=0, rank=rank)
        rope_calls(w, rng, calls=1, shape=(1, 2, 1, 4))
        w.close()
    for pid in (30, 500, 7):
        (tmp_path / "d" / "step0" / f"rank{pid}").rename(tmp_path / "d" / "step0" / f"proc{pid}")
    found = [(d.label, d.rank, d.name) for d in open_dumps(tmp_path / "d")]
    assert sorted(found, key=lambda f: f[1]) == [
        ("step0/rank0", 0, "step0/rank0"), ("step0/rank1", 1, "step0/rank1"),
        ("step0/proc7", 2, "step0/rank2"), ("step0/proc30", 3, "step0/rank3"),
        ("step0/proc500", 4, "step0/rank4")]


def test_goldens_of_one_run_find_a_rerun_under_another_pid(msprobe_run, tmp_path):
    from msprobe_runs import run_msprobe
    first = msprobe_run(level="L1")
    again = run_msprobe(tmp_path / "again", level="L1")
    assert open_dumps(first)[0].label != open_dumps(again)[0].label      # another PID
    mapping = write_map(tmp_path, rope_map(head="rank = 0"))
    assert run("golden", "--msprobe", first, "--map", mapping,
               "-o", tmp_path / "g.h5").exit_code == 0
    res = run("compare", tmp_path / "g.h5", "--msprobe", again)
    assert res.exit_code == 0, res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("PASS: 4 passed, 0 failed, 0 input "
                                                          "problems, 4 not recorded")


# --- item: module-level records --------------------------------------------------------------

def test_module_records_are_calls_with_their_gradients_placed(msprobe_run, tmp_path):
    """Level mix, the model given as itself: Module.rope.ApplyRope.forward.N / .backward.N;
    its backward lists dx alone (cos and sin need no gradient)."""
    dump = msprobe_run(level="mix")
    (d0, _) = open_dumps(dump)
    module = "Module.rope.ApplyRope"
    assert split_record(f"{module}.backward.0") == (module, 0, "backward")
    assert split_record("Module.proj.Linear.parameters_grad.0") is None
    assert len(d0.record(f"{module}.backward.0")["output"]) == 1
    placed = d0.entries(f"{module}.backward.0", "output")
    assert placed[0]["data_name"] == f"{module}.backward.0.output.0.pt"
    assert placed[1:] == [None, None]
    res, _, rows = check_dump(tmp_path, dump, write_map(tmp_path, rope_map("rope.ApplyRope")))
    assert res.exit_code == 0, res.stdout
    assert status_of(rows)[("rope_grad", "step1", "0", "dx")] == "pass"
    dcos = rows[("rope_grad", "step0", "0", "dcos")]
    assert dcos["status"] == "not_recorded"
    assert f"{module}.forward.0 input_args[1] does not require grad" in dcos["reason"]
    assert rows[("rope", "step0", "0", "y")]["case_id"] == f"rope/msprobe/step0/rank0/{module}.0"


def test_the_module_example_of_docs_real_runs_reads_a_mix_dump(msprobe_run, tmp_path):
    import re
    from repo_paths import DOCS
    block = re.findall(r"```toml\n(.*?)```", (DOCS / "real_runs.md").read_text(), re.S)[2]
    res, _, rows = check_dump(tmp_path, msprobe_run(level="mix"), write_map(tmp_path, block))
    assert res.exit_code == 0, res.stdout
    assert status_of(rows) == {("rope_grad", s, "0", o): st for s in ("step0", "step1")
                               for o, st in (("dx", "pass"), ("dcos", "not_recorded"),
                                             ("dsin", "not_recorded"))}


def test_module_records_of_level_l0_with_gradients_for_every_input(msprobe_run, tmp_path):
    """Level L0, the model given as a list: Module.0.rope.ApplyRope; rank folders (gloo)."""
    dump = msprobe_run(level="L0", distributed=True, tables_grad=True, mode="interleave")
    mapping = write_map(tmp_path, rope_map("Module.0.rope.ApplyRope", mode=1))
    res, _, rows = check_dump(tmp_path, dump, mapping)
    assert res.exit_code == 0, res.stdout
    assert set(status_of(rows).values()) == {"pass"} and len(rows) == 8
    assert ("rope_grad", "step0", "0", "dsin") in rows


def test_a_module_backward_is_placed_by_the_forwards_requires_grad_flags(tmp_path):
    """Only cos needs a gradient: the backward's one entry is forward input 1's."""
    from refspec.inputs.msprobe_dump import Dump, DumpError

    def t(name, rg, shape=(1, 2)):
        return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape),
                "requires_grad": rg, "data_name": f"{name}.pt"}

    m = "Module.rope.ApplyRope"
    data = {f"{m}.forward.0": {"input_args": [t("x", False), t("cos", True), t("sin", False), 3],
                               "input_kwargs": {}, "output": [t("y", True)]},
            f"{m}.backward.0": {"input": [t("dy", False)], "output": [t("dcos", False)]}}
    (tmp_path / "dump.json").write_text(json.dumps({"framework": "pytorch", "data": data}))
    d = Dump(tmp_path / "dump.json")
    placed = d.entries(f"{m}.backward.0", "output")
    assert placed[0] is None and placed[1]["data_name"] == "dcos.pt" and placed[2:] == [None, None]
    assert d.entries(f"{m}.backward.0", "input")[0]["data_name"] == "dy.pt"
    data[f"{m}.backward.0"]["output"].append(t("dsin", False))
    (tmp_path / "dump.json").write_text(json.dumps({"framework": "pytorch", "data": data}))
    with pytest.raises(DumpError, match="output lists 2 gradients but .* has 1 tensors that "
                                        "require grad: not one call"):
        Dump(tmp_path / "dump.json").entries(f"{m}.backward.0", "output")


def test_module_records_without_requires_grad_flags_are_read_as_written(tmp_path):
    """MindSpore's Cell records carry no requires_grad: their lists are taken as they are."""
    from refspec.inputs.msprobe_dump import Dump
    t = {"type": "mindspore.Tensor", "dtype": "Float32", "shape": [1, 2], "data_name": "t.npy"}
    c = "Cell.rope.ApplyRope"
    data = {f"{c}.forward.0": {"input_args": [t, t, t], "input_kwargs": {}, "output": [t]},
            f"{c}.backward.0": {"input": [t], "output": [t, None, dict(t, data_name="s.npy")]}}
    (tmp_path / "dump.json").write_text(json.dumps({"framework": "mindspore", "data": data}))
    d = Dump(tmp_path / "dump.json")
    assert d.apis() == {c: {0: {"forward": f"{c}.forward.0", "backward": f"{c}.backward.0"}}}
    assert d.entries(f"{c}.backward.0", "output") == data[f"{c}.backward.0"]["output"]


def test_a_name_no_record_has_lists_the_apis_and_modules_there_are(msprobe_run, tmp_path):
    mapping = write_map(tmp_path, rope_map("Module.0.rope.Rope"))
    for level, fragments in (("L1", ("records; APIs ", f"{API},", "Functional.linear")),
                             ("mix", ("; modules ", "Module.rope.ApplyRope", f"{API},"))):
        res = run("check-dump", msprobe_run(level=level), "--map", mapping)
        assert_user_error(res, "no API 'Module.0.rope.Rope' in the dump", *fragments)
        assert "none" not in res.stderr


# --- item: check-dump says why the spec rejects a call -------------------------------------------

def test_check_dump_says_which_rule_rejects_a_call(msprobe_run, tmp_path):
    """D = 1024: A2 takes D < 896 (docs/rope.md section 5)."""
    dump = msprobe_run(level="L1", shape=[1, 2, 1, 1024])
    res = run("check-dump", dump, "--map", write_map(tmp_path, rope_map()),
              "--json", tmp_path / "r.json")
    lines = res.stdout.strip().splitlines()
    rule = ("the profile rejects it with 561002 ACLNN_ERR_INNER_TILING_ERROR: dy: D=1024 must "
            "be < 896 on A2")
    assert any(line.startswith(f"negative case rope_grad/msprobe/step0/rank0/{API}.0: {rule} [")
               for line in lines), lines
    assert "goldens: 4 calls (4 rejected by their profile)" in lines
    not_run = [line for line in lines if line.startswith("NOT RUN")]
    assert len(not_run) == 2 and "the spec rejects it with aclnn 561002 " \
        "ACLNN_ERR_INNER_TILING_ERROR: dy: D=1024 must be < 896 on A2" in not_run[0]
    report = json.loads((tmp_path / "r.json").read_text())
    assert {"x: D=1024 must be < 896 on A2" in n["reason"] for n in report["not_run"]
            if n["op"] == "rope"} == {True}
    assert res.exit_code == 1                               # nothing was judged
