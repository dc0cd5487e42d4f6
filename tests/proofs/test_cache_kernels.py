"""Proofs for the KV-cache operators' two comparison classes (docs/compare.md, "Quantised codes"
and "Caches updated in place"): the float32 kernels of tests/impls/kv_kernels.py, which update
the caches they are given in place, pass every KV-cache case of the smoke sweep; each broken
cache kernel fails with a verdict that says what is wrong (a change outside the index stated by
its slot, or a written element named by its cache index); the quantised rule allows the
neighbouring code exactly within the arithmetic error of a rounding boundary, never a wrapped or
unsaturated code; an exported case whose kernel updates its cache files is judged on them."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

import refspec
from refspec.comparator.judging.metrics import Accumulator
from refspec.comparator.judging.quantised import arithmetic_error, judge_codes
from refspec.comparator.sources.implementation import Implementation
from refspec.spec.quant_dtypes import float8_e4m3fn, round_code

from repo_paths import REPO

NUMPY_FLOAT32 = str(REPO / "tests" / "impls" / "numpy_float32.py")
KV_OPS = ("kv_rope_cache", "kv_rope_cache_v2", "dequant_rope_kv", "qkv_rope_cache")
#: "k_cache: 3 slots outside the index were changed (192 elements), first at block 1 slot 0: ..."
OUTSIDE = re.compile(r"^\w+_cache: \d+ slots? outside the index (was|were) changed \(\d+ "
                     r"elements\), first at (block|batch) \d+ slot \d+: \w+_cache\[[^]]+\] = \S+ "
                     r"where the cache held \S+")
#: "k_cache[k=0,s=11,n=0,d=48] = 0 but should be -212.79 (128.0 ulp) [...]"
ELEMENT = re.compile(r"^\w+\[(\w=\d+,)*\w=\d+\] = \S+ but should be \S+ \(.*\) \[\w+ .*\]$")


@pytest.fixture(scope="module")
def kv_golden(tmp_path_factory):
    from refspec.goldens.engine import generate
    from refspec.goldens.sweep import load_sweep
    sweep = load_sweep("smoke")
    path = tmp_path_factory.mktemp("kv") / "kv.h5"
    generate(sweep, [c for c in sweep.cases() if c.op in KV_OPS], path)
    return path


def _run(golden, name):
    return refspec.compare(golden, Implementation(f"{NUMPY_FLOAT32}:{name}", repeat=0))


def test_correct_cache_kernels_pass_every_case(kv_golden):
    report = _run(kv_golden, "EVERY")
    bad = [f"{r.case_id} {r.output}: {r.message or r.reason}" for r in report.failures]
    assert not bad, bad[:5]
    judged = [r for r in report.results if r.comparison_class == "cache"]
    assert {r.case_id.split("/")[0] for r in judged} == set(KV_OPS)
    assert {r.dtype for r in judged} >= {"int8", "float8_e4m3fn", "float8_e5m2", "hifloat8",
                                         "float16", "bfloat16"}
    assert not report.not_run
    # the kernels' float32 values really differ from the goldens' (another order of arithmetic)
    assert any(r.metrics.max_abs.abs_err > 0 for r in report.results
               if r.comparison_class not in ("cache", "copy") and r.metrics is not None)
    assert all(r.metrics.outside["elements"] == 0 for r in judged)
    rows = report.to_dict()["results"]          # in the JSON report too, passing entries included
    assert all(r["metrics"]["outside_index"]["elements"] == 0 for r in rows
               if r["output"].endswith("cache") and r["metrics"])


OUTSIDE_BUGS = ("NEIGHBOUR_SLOT", "BLOCK_SLOT_SWAPPED", "NZ_AS_ND", "BLOCK_CLEARED")
VALUE_BUGS = ("SCALE_DIVIDED", "OFFSET_SIGN", "TRUNCATION", "WRAP")


@pytest.mark.parametrize("bug", OUTSIDE_BUGS + VALUE_BUGS)
def test_broken_cache_kernels_fail_with_a_clear_verdict(kv_golden, bug):
    report = _run(kv_golden, bug)
    failing = [r for r in report.failures if r.comparison_class == "cache"]
    assert failing, f"{bug} passed every cache"
    assert all(r.status == "fail" for r in failing)
    messages = [r.message for r in failing]
    if bug in OUTSIDE_BUGS:
        assert any(OUTSIDE.match(m) for m in messages), messages[:3]
        if bug == "NZ_AS_ND":        # only the fractal caches are written differently
            assert all("cache_mode=PA_NZ" in r.case_id or "cache_mode=PA_BLK_NZ" in r.case_id
                       or r.op == "qkv_rope_cache" for r in failing)
    else:                            # the right slots, wrong values: a written element named
        assert all(ELEMENT.match(m) for m in messages), messages[:3]
        assert not any("outside the index" in r.reason for r in failing)


#: the findings that name each broken kernel's mistake: (kind, what its detail says), any one
NAMED = {"NEIGHBOUR_SLOT": (("slot", {"moved": "+1"}), ("index", {"read": "one ahead (+1)"})),
         "BLOCK_SLOT_SWAPPED": (("slot", {"moved": ("block<->slot", "batch<->slot",
                                                    "transposed")}),),
         "NZ_AS_ND": (("layout", {"written": "ND", "layout": "NZ"}),),
         "BLOCK_CLEARED": (("outside", {"cleared": "block"}),),
         "SCALE_DIVIDED": (("quantisation", {"scale": ("divided", "multiplied")}),),
         "OFFSET_SIGN": (("quantisation", {"offset": "negated"}),),
         "TRUNCATION": (("rounding", {"mode": "toward_zero"}),),
         "WRAP": (("quantisation", {"saturation": "wrap"}),)}
#: the kinds a finding claims a mistake by (the others measure what is left)
CLAIMS = ("slot", "layout", "quantisation", "rounding", "alternative", "index", "input", "sign",
          "extent", "reduction")


def _names(finding, bug) -> bool:
    """The finding, or one named together with it (``same_as``), is one of the bug's."""
    def one(kind, detail):
        return any(kind == k and all(detail.get(key) in (v if isinstance(v, tuple) else (v,))
                                     for key, v in want.items()) for k, want in NAMED[bug])
    return one(finding.kind, finding.detail) or any(one(s["kind"], s) for s in
                                                     finding.detail.get("same_as", []))


@pytest.mark.parametrize("bug", OUTSIDE_BUGS + VALUE_BUGS)
def test_broken_cache_kernels_are_diagnosed_with_their_mistake(kv_golden, bug):
    """Every failing cache has findings; the first names the kernel's mistake on nearly every
    one (what is left: the fractal caches of KvRmsNormRopeCache whose D is one tile wide, named
    in another view by the cache comparison, and NaN codes; those get ``outside`` and
    ``unexplained`` findings, never another mistake)."""
    report = _run(kv_golden, bug)
    failing = [r for r in report.failures if r.comparison_class == "cache"]
    assert failing and all(r.diagnosis for r in failing)
    named = [r for r in failing if _names(r.diagnosis[0], bug)]
    assert len(named) >= 0.9 * len(failing), [(r.case_id, r.output, r.diagnosis[0].line())
                                              for r in failing if r not in named][:3]
    wrong = [(r.case_id, r.diagnosis[0].line()) for r in failing if r not in named
             and r.diagnosis[0].kind in CLAIMS]
    assert not wrong, wrong[:3]
    first = named[0].diagnosis[0]
    assert first.agreement == 1 and "every other element of the cache" in first.summary, first


def test_a_cache_finding_says_what_the_kernel_did(kv_golden):
    report = _run(kv_golden, "NEIGHBOUR_SLOT")
    row = next(r for r in report.failures if "/cache_mode=PA/" in r.case_id and
               r.output == "k_cache")
    assert re.match(r"^slot: each token written one slot later \(slot \+ 1\): all [\d,]+ failing "
                    r"elements \(\d+ slots\) agree with it, and every other element of the cache$",
                    row.diagnosis[0].line()), row.diagnosis[0].line()
    assert row.to_dict()["diagnosis"][0]["detail"]["moved"] == "+1"


def test_a_case_too_large_for_the_hypotheses_points_to_its_verdict(kv_golden, monkeypatch):
    from refspec.comparator.diagnosis import cache_outputs
    monkeypatch.setattr(cache_outputs, "SPEC_ELEMENTS", 100)
    report = _run(kv_golden, "NEIGHBOUR_SLOT")
    failing = [r for r in report.failures if r.comparison_class == "cache"]
    assert failing and all(len(r.diagnosis) == 1 and r.diagnosis[0].kind == "unexplained" and
                           "from its verdict only" in r.diagnosis[0].summary for r in failing)


@pytest.mark.parametrize("bug", ("NEIGHBOUR_SLOT", "BLOCK_CLEARED", "SCALE_DIVIDED", "WRAP"))
def test_a_cache_compared_at_the_offsets_touched_or_whole_gives_one_diagnosis(kv_golden, bug,
                                                                              monkeypatch):
    """The diagnosis compares two caches only where they touch them when that is a small part
    (``SPARSE``); forced to either way, every finding of every failing cache is the same."""
    from refspec.comparator.diagnosis import cache_outputs
    lines = {}
    for sparse in (0, 1 << 40):                   # never / always at the offsets touched
        monkeypatch.setattr(cache_outputs, "SPARSE", sparse)
        report = _run(kv_golden, bug)
        lines[sparse] = [(r.case_id, r.output, [f.line() for f in r.diagnosis])
                         for r in report.failures if r.comparison_class == "cache"]
    assert lines[0] and lines[0] == lines[1 << 40]


@pytest.mark.parametrize("bug", ("NEIGHBOUR_SLOT", "NZ_AS_ND", "OFFSET_SIGN", "TRUNCATION"))
def test_a_large_failing_cache_screens_its_candidates_on_a_sample(kv_golden, bug, monkeypatch):
    """With many failing elements a candidate is judged over the whole cache only when the
    kernel agrees with it on a sample of them (``SCREENED``, ``SAMPLE``): screening every
    cache on 64 elements leaves each first finding as it was."""
    from refspec.comparator.diagnosis import cache_outputs
    firsts = {}
    for screened in (1 << 40, 0):
        monkeypatch.setattr(cache_outputs, "SCREENED", screened)
        monkeypatch.setattr(cache_outputs, "SAMPLE", 64)
        report = _run(kv_golden, bug)
        firsts[screened] = [(r.case_id, r.output, r.diagnosis[0].line())
                            for r in report.failures if r.comparison_class == "cache"]
    assert firsts[0] and firsts[0] == firsts[1 << 40]


def test_truncated_and_wrapped_codes_of_the_spec_rounding():
    """round_value's mistaken roundings against numbers worked by hand: toward zero drops the
    fraction; an int8 code wraps as two's complement (-300 = -256 - 44 keeps its low byte -44,
    130 becomes 130 - 256); a float8 beyond its largest value overflows."""
    from refspec.spec.quant_dtypes import float8_e5m2, int8, round_value
    x = np.array([2.7, -2.7, 2.5, 130.4, -300.2, 127.6])
    assert round_value(x, int8).tolist() == [3, -3, 2, 127, -128, 127]
    assert round_value(x, int8, "toward_zero").tolist() == [2, -2, 2, 127, -128, 127]
    assert round_value(x, int8, saturate=False).tolist() == [3, -3, 2, -126, -44, -128]
    assert round_value(np.array([1.3]), float8_e4m3fn, "toward_zero").tolist() == [1.25]
    assert round_value(np.array([1.3]), float8_e4m3fn).tolist() == [1.25]
    assert round_value(np.array([1.4]), float8_e4m3fn, "toward_zero").tolist() == [1.375]
    assert round_value(np.array([1.45]), float8_e4m3fn).tolist() == [1.5]
    assert np.isnan(round_value(np.array([500.0]), float8_e4m3fn, saturate=False)).all()
    assert round_value(np.array([-1e6]), float8_e5m2, saturate=False).tolist() == [-np.inf]
    assert round_value(np.array([-1e6]), float8_e5m2).tolist() == [-57344.0]
    with pytest.raises(ValueError, match="rounding 'up'"):
        round_value(x, int8, "up")


def test_wrapped_codes_are_named_with_the_value_they_should_saturate_to(kv_golden):
    report = _run(kv_golden, "WRAP")
    text = " ".join(r.message for r in report.failures)
    assert re.search(r"_cache\[[^]]+\] = -1[0-9]{2} but should be 1[2-9][0-9]\.", text), text[:500]


# --- the quantised rule on its own --------------------------------------------------------------

def _codes(actual, x, S, dtype=np.int8, K=None):
    acc = Accumulator((0.0, 0.0))
    flat = np.arange(len(x))
    boundary = judge_codes(acc, flat, np.asarray(actual, dtype), np.asarray(x, float),
                           np.asarray(S, float), K)
    return acc.finish(), boundary


def test_the_neighbouring_code_is_allowed_only_within_the_arithmetic_error():
    S = np.full(4, 100.0)
    e = arithmetic_error(S, None, 4)[0]
    x = [2.5 + e / 2, 2.5 - e / 2, 2.5 + 3 * e, 7.0]
    m, boundary = _codes([2, 3, 2, 7], x, S)            # each the other side of a boundary
    assert boundary == 2 and m.failures == 1 and m.worst[0].flat == 2
    m, boundary = _codes([3, 2, 3, 7], x, S)            # the exact values' own codes
    assert boundary == 0 and m.failures == 0 and m.max_badness == 0
    m, _ = _codes([3, 2, 3, 6], x, S)                   # a whole step off
    assert m.failures == 1 and m.worst[0].flat == 3 and m.worst[0].ulps == 1


def test_saturation_is_exact_and_a_wrapped_code_fails():
    x, S = [130.0, -300.0, 127.4], [100.0, 100.0, 100.0]
    assert _codes([127, -128, 127], x, S)[0].failures == 0
    m, _ = _codes([-126, 127, 127], x, S)               # wrapped instead of saturated
    assert m.failures == 2 and m.max_badness > 1e3
    assert _codes([126, -128, 127], x, S)[0].failures == 1     # one below the saturated code


def test_float8_codes_are_judged_on_their_own_grid():
    x = np.array([1.0625 + 1e-7, 460.0, -0.3])         # a tie of e4m3fn's grid, beyond 448
    S = np.abs(x)
    exact = round_code(x, float8_e4m3fn)
    m, boundary = _codes(exact, x, S, float8_e4m3fn)
    assert m.failures == 0 and boundary == 0
    neighbour = exact.copy()
    neighbour[0] = np.asarray(1.0, float8_e4m3fn)      # the other side of the tie
    m, boundary = _codes(neighbour, x, S, float8_e4m3fn)
    assert m.failures == 0 and boundary == 1
    nan = exact.copy()
    nan[1] = np.asarray(np.nan, float8_e4m3fn)          # NaN where the value saturates
    m, _ = _codes(nan, x, S, float8_e4m3fn)
    assert m.failures == 1 and m.nan_mismatches == 1


# --- caches in files: the in-place output's file is the input's ---------------------------------

def _kernel_writes_goldens(folder, case_json):
    """What a correct kernel leaves: each output file holds the golden (the in-place ones the
    input file's name), and status.json."""
    for f in case_json["files"]:
        if f["role"] == "golden":
            shutil.copy(folder / f["name"], folder / f["output_file"])
    (folder / "status.json").write_text('{"code": 0}')


def test_an_exported_case_is_judged_on_the_cache_files_its_kernel_updates(kv_golden, tmp_path):
    import refspec.goldens as goldens
    from refspec.goldens.export import export_cases
    with goldens.open(kv_golden) as gf:
        ids = [i for i in gf.case_ids() if gf[i].expected_error is None and
               ("kcache=float8_e4m3fn" in i or "kcache=hifloat8" in i or "index=scattered" in i)]
    assert len(ids) > 3
    export_cases(kv_golden, tmp_path / "out", case_ids=ids)
    # before the kernel runs the cache files are there (exported), but the cases are not run
    report = refspec.compare(kv_golden, tmp_path / "out", case_ids=ids)
    assert len(report.not_run) == len(ids) and not report.results
    folders = [p.parent for p in (tmp_path / "out").rglob("case.json")]
    for folder in folders:
        doc = json.loads((folder / "case.json").read_text())
        cache = next(f for f in doc["files"] if f.get("in_place"))
        assert (folder / cache["output_file"]).exists()          # the input file, updated
        _kernel_writes_goldens(folder, doc)
    report = refspec.compare(kv_golden, tmp_path / "out", case_ids=ids)
    assert report.passed, [r.message or r.reason for r in report.failures][:3]
    # a slot outside the index changed in one cache file
    folder = folders[0]
    doc = json.loads((folder / "case.json").read_text())
    cache = next(f for f in doc["files"] if f.get("in_place"))
    path = folder / cache["output_file"]
    data = bytearray(path.read_bytes())
    case_id = doc["case_id"]
    with goldens.open(kv_golden) as gf:
        written = set(gf[case_id].written[cache["python_name"]][()].tolist())
    item = cache["data_bytes"] // int(np.prod(cache["shape"]))
    outside = next(i for i in range(len(data) // item - 1, -1, -1) if i not in written)
    data[outside * item] ^= 0x5A
    path.write_bytes(bytes(data))
    report = refspec.compare(kv_golden, tmp_path / "out", case_ids=[case_id])
    row = next(r for r in report.results if r.output == cache["python_name"])
    assert row.status == "fail" and "1 slot outside the index was changed (1 elements)" in \
        row.message, row.message


# --- refspec run with torch: judged on the caches the function leaves behind -----------------

def test_a_torch_kernel_is_judged_on_the_caches_it_updates_in_place(kv_golden, tmp_path):
    pytest.importorskip("torch")
    impls = str(REPO / "tests" / "impls")
    torch_kv = f"{impls}/torch_kv.py"
    ops_ = ["kv_rope_cache", "kv_rope_cache_v2"]
    report = refspec.compare(kv_golden, Implementation(torch_kv, "torch", repeat=0))
    assert report.passed and not report.not_run, [r.message for r in report.failures][:3]
    assert {r.op for r in report.results} == set(KV_OPS)
    assert {r.dtype for r in report.results if r.output.endswith("cache")} >= {
        "int8", "float8_e4m3fn", "float8_e5m2", "hifloat8", "bfloat16"}
    # returning nothing for the caches: what it left in them is judged
    (tmp_path / "leaves.py").write_text(
        f"import sys\nsys.path.insert(0, {impls!r})\nfrom torch_kv import EVERY\n"
        "def kv_rms_norm_rope_cache(**kw):\n"
        "    k_cache, ckv_cache, k_rope, c_kv = EVERY.kv_rms_norm_rope_cache(**kw)\n"
        "    return None, None, k_rope, c_kv\n"
        "def untouched(**kw):\n"
        "    kw['k_cache'], kw['ckv_cache'] = kw['k_cache'].clone(), kw['ckv_cache'].clone()\n"
        "    return kv_rms_norm_rope_cache(**kw)\n"
        "class Untouched:\n"
        "    kv_rms_norm_rope_cache = staticmethod(untouched)\n"
        "UNTOUCHED = Untouched()\n")
    leaves = Implementation(str(tmp_path / "leaves.py"), "torch", repeat=0)
    assert refspec.compare(kv_golden, leaves, operators=["kv_rope_cache"]).passed
    report = refspec.compare(kv_golden, Implementation(f"{tmp_path / 'leaves.py'}:UNTOUCHED",
                                                       "torch", repeat=0),
                             operators=["kv_rope_cache"])
    failed = {r.output for r in report.failures}
    assert failed == {"k_cache", "ckv_cache"}, failed       # the caches it was given: unwritten
    report = refspec.compare(kv_golden, Implementation(f"{torch_kv}:NEIGHBOUR_SLOT", "torch",
                                                       repeat=0), operators=ops_)
    assert any(OUTSIDE.match(r.message) for r in report.failures)


def test_cache_contents_moved_outside_the_index_are_traced_to_where_they_were(kv_golden):
    """The caches hold sentinels that encode their offsets: a slot outside the index that now
    holds another slot's values is stated with the element whose value it holds."""
    import refspec.goldens as goldens
    with goldens.open(kv_golden) as gf:
        case_id = next(i for i in gf.case_ids() if "/cache_mode=PA_BNSD/kcache=kv/" in i
                       and gf[i].expected_error is None)
        case = gf[case_id]
        outputs = {n: case.expected[n][()] for n in case.output_names}
        given = case.inputs["k_cache"][()]
        written = set(case.written["k_cache"][()].tolist())
    slot = given.shape[2] * given.shape[3]                  # elements of a slot (N*D)
    free = [s for s in range(given.shape[0] * given.shape[1])
            if not written & set(range(s * slot, (s + 1) * slot))]
    to, src = free[-1], free[-2]                            # the last two slots not written
    moved = outputs["k_cache"].reshape(-1).copy()
    moved[to * slot:(to + 1) * slot] = given.reshape(-1)[src * slot:(src + 1) * slot]
    outputs["k_cache"] = moved.reshape(given.shape)
    report = refspec.compare(kv_golden, outputs, cases=case_id, status=0)
    row = next(r for r in report.results if r.output == "k_cache")
    blocks, slots = divmod(to, given.shape[1])
    assert row.status == "fail" and row.message.startswith(
        f"k_cache: 1 slot outside the index was changed ({slot} elements), first at block "
        f"{blocks} slot {slots}: "), row.message
    assert ", the input's value at k_cache[" in row.message, row.message


# --- an msprobe dump of npu_kv_rmsnorm_rope_cache (docs/real_runs.md, section 5) ----------------

def _kv_dump(tmp_path, case, bug=None):
    """A dump (msprobe's layout, MindSpore's .npy files) of one npu_kv_rmsnorm_rope_cache call
    on the case's inputs: the caches as given among the inputs, as the call left them among the
    outputs (the float32 kernels of kv_kernels.py, ``bug`` one of its bugs)."""
    import implementations as impl
    from msprobe_helpers import DumpWriter
    inputs = case.input_arrays()
    attrs = impl.attrs_of(case)
    out = impl.run(case.op, attrs, inputs, bug, soc=case.soc or None)
    w = DumpWriter(tmp_path / "dump", "mindspore")
    args = [inputs[n] for n in ("kv", "gamma", "cos", "sin", "index", "k_cache", "ckv_cache")]
    w.forward("npu_kv_rmsnorm_rope_cache", 0, args,
              {"epsilon": float(attrs.get("epsilon", 1e-5)), "cache_mode": attrs["cache_mode"]},
              [out["k_cache"], out["ckv_cache"], out.get("k_rope"), out.get("c_kv")])
    w.close()
    return tmp_path / "dump"


def test_the_kv_mapping_of_docs_real_runs_makes_cases_of_a_dump(kv_golden, tmp_path):
    from click.testing import CliRunner

    import refspec.goldens as goldens
    from refspec.cli import main
    text = (REPO / "docs" / "real_runs.md").read_text()
    mapping = re.findall(r"```toml\n(.*?)```", text, re.S)[3]
    (tmp_path / "map.toml").write_text(mapping)
    with goldens.open(kv_golden) as gf:
        case = gf[next(i for i in gf.case_ids() if i.startswith("kv_rope_cache/soc=A2/cache_mode=PA")
                       and "/kcache=kv/ckvcache=kv/" in i and gf[i].expected_error is None)]
        dump = _kv_dump(tmp_path / "good", case)
        bad = _kv_dump(tmp_path / "bad", case, "neighbour_slot")
    res = CliRunner().invoke(main, ["check-dump", str(dump), "--map", str(tmp_path / "map.toml")])
    assert res.exit_code == 0, res.output[-2000:]
    assert re.search(r"^PASS: 2 passed", res.output.strip().splitlines()[-1]), res.output[-800:]
    res = CliRunner().invoke(main, ["check-dump", str(bad), "--map", str(tmp_path / "map.toml"),
                                    "--failures-only"])
    assert res.exit_code == 1 and re.search(r"k_cache: 1 slot outside the index was changed",
                                            res.output), res.output[-2000:]
