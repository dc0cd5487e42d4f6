"""``refspec run`` and the pytest plugin against real implementations written in the tests
(tests/impls/): a PyTorch forward in the common formulation judged through autograd, a NumPy
float32 backward, and deliberately broken variants of both. Correct ones pass every case of the
smoke sweep in every dtype; each broken one fails with a message naming an element (or, for the
missing rejection, the status it should have returned)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import refspec
from refspec.cli import main
from refspec.comparator.sources.base import UNKNOWN_CODE
from refspec.comparator.sources.implementation import (Implementation, ImplementationError,
                                                       aclnn_code, load_implementation)
from refspec.spec.dtypes import bfloat16
from refspec.spec.errors import TilingError

IMPLS = Path(__file__).resolve().parent.parent / "impls"
TORCH_FORWARD = str(IMPLS / "torch_forward.py")
NUMPY_FLOAT32 = str(IMPLS / "numpy_float32.py")
#: "dx[b=1,n=2,s=0,d=5] = 2.3262 but should be -7.995575 (2.64e+03 ulp) [...]"
ELEMENT = re.compile(r"^\s*\w+\[(\w=\d+,)*\w=\d+\] = \S+ but should be \S+ \(.*\) \[\w+ .*\]$", re.M)
STATUS = re.compile(r"^\s*\(status\) = 0 but should be \d{6} \[", re.M)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "smoke.h5"
    result = CliRunner().invoke(main, ["generate", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def run(*args):
    result = CliRunner().invoke(main, ["run", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def dtypes_judged(report_json: Path, op_prefix: str) -> set:
    doc = json.loads(report_json.read_text())
    return {r["dtype"] for r in doc["results"] if r["case_id"].startswith(op_prefix)
            and r["output"] != "(status)"}


#: the operators of the module tests/impls/torch_forward.py has (and their backwards)
FOUR_OPS = ("--op", "rope_grad", "--op", "nrc_grad", "--op", "rope", "--op", "nrc")


def test_torch_forwards_through_autograd_pass_every_case_in_every_dtype(smoke, tmp_path):
    res = run(smoke, "--impl", TORCH_FORWARD, "--framework", "torch", "--autograd",
              "--json", tmp_path / "r.json", *FOUR_OPS)
    assert res.exit_code == 0, res.output[-3000:]
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("PASS: ") and " 0 failed" in last
    for op in ("rope_grad/", "nrc_grad/", "rope/", "nrc/"):
        assert dtypes_judged(tmp_path / "r.json", op) >= {"float16", "bfloat16", "float32"}, op
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["timings"]["median_of_calls"], "the runner times every case"
    assert all(t > 0 for t in doc["timings"]["median_of_calls"].values())
    # the backward's own negative cases are not run through the forward, and say why
    assert {n["reason"].split(":")[0] for n in doc["not_run"]} == {
        "a negative case of rotary_position_embedding_grad",
        "a negative case of norm_rope_concat_backward"}


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["SWAPPED_HALVES", "WRONG_SIN_PARTNER", "LOST_MINUS"])
def test_broken_torch_forwards_fail_naming_an_element(smoke, bug):
    res = run(smoke, "--impl", f"{TORCH_FORWARD}:{bug}", "--framework", "torch", "--autograd",
              "--failures-only")
    assert res.exit_code == 1
    assert ELEMENT.search(res.output), res.output[-2000:]
    # the backward cases fail too: autograd carries the forward's bug into the gradients
    assert re.search(r"^FAIL .*rope_grad/", res.output, re.M)


def test_a_missing_rejection_fails_the_negative_cases(smoke):
    res = run(smoke, "--impl", f"{TORCH_FORWARD}:MISSING_REJECTION", "--framework", "torch",
              "--autograd", "--failures-only")
    assert res.exit_code == 1
    assert STATUS.search(res.output), res.output[-2000:]
    assert not ELEMENT.search(res.output)        # the numbers themselves are right


@pytest.mark.slow
def test_numpy_backwards_pass_and_their_broken_variants_fail(smoke, tmp_path):
    res = run(smoke, "--impl", NUMPY_FLOAT32, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output[-3000:]
    assert dtypes_judged(tmp_path / "r.json", "rope_grad/") >= {"float16", "bfloat16", "float32"}
    for bug in ("SWAPPED_HALVES", "WRONG_SIN_PARTNER", "LOST_MINUS", "DCOS_WRONG_AXES"):
        res = run(smoke, "--impl", f"{NUMPY_FLOAT32}:{bug}", "--failures-only")
        assert res.exit_code == 1 and ELEMENT.search(res.output), (bug, res.output[-2000:])
    res = run(smoke, "--impl", f"{NUMPY_FLOAT32}:DCOS_WRONG_AXES", "--failures-only")
    assert re.search(r"^\s*dcos\[", res.output, re.M)         # the reduction is what is wrong
    res = run(smoke, "--impl", f"{NUMPY_FLOAT32}:MISSING_REJECTION", "--failures-only")
    assert res.exit_code == 1 and STATUS.search(res.output)


def test_functions_the_module_lacks_leave_their_cases_not_run(smoke):
    res = run(smoke, "--impl", NUMPY_FLOAT32, "--op", "rope", "--op", "rope_grad")
    assert res.exit_code == 0
    assert re.search(r"^NOT RUN +21 x rope: \S+numpy_float32.py has no "
                     r"rotary_position_embedding", res.output, re.M), res.output[-1500:]
    assert run(smoke, "--impl", NUMPY_FLOAT32, "--op", "rope", "--require-all").exit_code == 1


def test_a_function_that_raises_is_reported_as_raising(smoke, tmp_path):
    """A valid input the function raises on: the report says which function raised what (and
    the aclnn code, when the exception carries one), not that a kernel returned an error."""
    impl = tmp_path / "raising.py"
    impl.write_text("def rotary_position_embedding(x, cos, sin, mode=0):\n"
                    "    raise RuntimeError('out of device memory')\n"
                    "def rotary_position_embedding_grad(dy, cos, sin, x=None, mode=0):\n"
                    "    raise ValueError('bad tiling (error code 561002)')\n")
    res = run(smoke, "--impl", impl, "--case", "rope/soc=A2/*", "--case", "rope_grad/soc=A2/*")
    assert res.exit_code == 1
    assert re.search(r"^\s*\(status\): \S*raising\.py\.rotary_position_embedding raised "
                     r"RuntimeError: out of device memory but should return the outputs \[",
                     res.output, re.M), res.output[-2000:]
    assert re.search(r"rotary_position_embedding_grad raised ValueError: bad tiling \(error code "
                     r"561002\) \(aclnn 561002\) but should return", res.output), res.output[-2000:]
    assert "without an aclnn code" not in res.output and "the kernel returned" not in res.output


def test_a_forward_without_statistics_is_judged_on_what_it_returns(smoke, tmp_path):
    """A training-mode NormRopeConcat forward that returns no mean/rstd (one built on a
    LayerNorm that does not return them): its three outputs are judged, each statistic is "not
    recorded" with the reason, and the run passes; one that returns some statistics but not
    all lacks the others (missing)."""
    impl = tmp_path / "no_stats.py"
    impl.write_text(f"import sys\nsys.path.insert(0, {str(IMPLS)!r})\n"
                    "from numpy_float32 import EVERY\n"
                    "def norm_rope_concat(**kw):\n"
                    "    out = EVERY.norm_rope_concat(**kw)\n"
                    "    return out['query_output'], out['key_output'], out['value_output']\n"
                    "class Partial:\n"
                    "    def norm_rope_concat(self, **kw):\n"
                    "        out = EVERY.norm_rope_concat(**kw)\n"
                    "        return {k: v for k, v in out.items() if not k.endswith('_rstd')}\n"
                    "PARTIAL = Partial()\n")
    res = run(smoke, "--impl", impl, "--op", "nrc", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output[-3000:]
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    stats = [r for r in rows if r["output"].endswith(("_mean", "_rstd"))]
    assert stats and {r["status"] for r in stats} == {"not_recorded"}
    assert all("returned no statistics" in r["reason"] for r in stats)
    judged = {r["output"] for r in rows if r["status"] == "pass"}
    assert judged >= {"query_output", "key_output", "value_output"}
    res = run(smoke, "--impl", f"{impl}:PARTIAL", "--op", "nrc", "--failures-only")
    assert res.exit_code == 1 and re.search(r"^MISSING +norm_\w+_rstd ", res.output, re.M)


def test_soc_runs_one_chip_profile(smoke, tmp_path):
    res = run(smoke, "--impl", NUMPY_FLOAT32, "--soc", "A2", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    ids = {r["case_id"] for r in doc["results"]} | {n["case_id"] for n in doc["not_run"]}
    assert ids and all("/soc=A2/" in i for i in ids)
    res = run(smoke, "--impl", NUMPY_FLOAT32, "--soc", "A9")
    assert res.exit_code == 2 and "--soc: unknown value 'A9'; allowed: A2, A3, 950, none" in res.output


ISSUE_CASE = ("nrc/soc=A2/norm_type=1/norm_added_type=1/rope_type=none/concat_order=0/"
              "training=0/dtype=float32/dist=special/B2N2Sq3Sk3Seq0Sek0D8")


def test_a_float32_layer_norm_attains_the_special_goldens(tmp_path):
    """NormRopeConcat's special values stay where a float32 LayerNorm is finite: a forward
    built on torch.nn.functional.layer_norm in float32 (no statistics returned) passes the
    special cases with normalised streams in every dtype, the case that made it NaN included."""
    from refspec.goldens.engine import generate
    from refspec.goldens.sweep import load_sweep
    sweep = load_sweep("smoke")
    special = [c for c in sweep.all_cases() if c.op == "nrc" and c.params["dist"] == "special"
               and c.params["norm_type"] and c.params["fault"] == "none"]
    cases = [sweep.case(ISSUE_CASE)] + special[::11]
    assert {c.params["dtype"] for c in cases} == {"float16", "bfloat16", "float32"}
    path = tmp_path / "special.h5"
    generate(sweep, cases, path)
    report = refspec.compare(path, Implementation(f"{TORCH_FORWARD}:NN_LAYER_NORM", "torch",
                                                  repeat=0))
    assert report.passed, [f"{r.case_id} {r.output}: {r.message}" for r in report.failures][:5]
    judged = {r.case_id for r in report.results if r.status == "pass"}
    assert ISSUE_CASE in judged and len(judged) == len(cases)


@pytest.mark.parametrize("eps", ["1E_5", "1E_6"])
def test_a_forward_with_a_hard_coded_eps_fails_the_smoke_set(smoke, eps, tmp_path):
    """The smoke set sweeps NormRopeConcat's eps (1e-5, 1e-6, 0.1): a forward that ignores the
    case's eps fails, and not only on position-coded values; the same forward with the case's
    eps passes."""
    res = run(smoke, "--impl", f"{TORCH_FORWARD}:NN_LAYER_NORM", "--framework", "torch",
              "--op", "nrc")
    assert res.exit_code == 0, res.output[-2000:]
    res = run(smoke, "--impl", f"{TORCH_FORWARD}:NN_LAYER_NORM_EPS_{eps}", "--framework",
              "torch", "--op", "nrc", "--json", tmp_path / "r.json")
    assert res.exit_code == 1 and ELEMENT.search(res.output)
    failed = {r["case_id"] for r in json.loads((tmp_path / "r.json").read_text())["results"]
              if r["status"] == "fail"}
    if eps == "1E_5":              # right where the case's eps is the default
        assert failed and all("/eps=" in c for c in failed)
    else:                          # and not only on position-coded values
        assert any("/eps=0.1/" in c and "/dist=random/" in c for c in failed)


def test_a_backward_that_recomputes_its_statistics_fails_the_eps_cases(smoke, tmp_path):
    """The backward's statistics are inputs; the smoke set has some computed with eps 1e-6 and
    0.1, so a backward that recomputes them with the default eps fails there (on random values
    too, where it passes every case of the default eps)."""
    res = run(smoke, "--impl", f"{NUMPY_FLOAT32}:LN_RECOMPUTED_DEFAULT_EPS", "--op", "nrc_grad",
              "--json", tmp_path / "r.json")
    assert res.exit_code == 1 and ELEMENT.search(res.output)
    failed = {r["case_id"] for r in json.loads((tmp_path / "r.json").read_text())["results"]
              if r["status"] == "fail"}
    random = {c for c in failed if "/dist=random/" in c}
    assert random and all("/eps=" in c for c in random)


def test_usage_errors_are_one_line(smoke, tmp_path):
    for args, needle in (
            (["--impl", "no_such_module_xyz"], "no module named 'no_such_module_xyz'"),
            (["--impl", str(tmp_path / "missing.py")], "no such file"),
            (["--impl", smoke], "not a Python source file"),
            (["--impl", str(tmp_path)], "not a Python source file"),
            (["--impl", f"{NUMPY_FLOAT32}:NOPE"], "has no attribute 'NOPE'"),
            (["--impl", NUMPY_FLOAT32, "--autograd"], "--autograd needs --framework torch"),
            (["--impl", NUMPY_FLOAT32, "--device", "cuda"], "--device cuda needs --framework torch"),
            (["--impl", TORCH_FORWARD, "--framework", "torch", "--device", "nonsense"],
             "device 'nonsense' cannot be used by torch")):
        res = run(smoke, *args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.count("\n") == 1 and needle in res.stderr, (args, res.stderr)


@pytest.mark.slow
def test_jobs_and_a_dask_cluster_give_the_serial_report(smoke):
    distributed = pytest.importorskip("distributed")
    impl = Implementation(f"{NUMPY_FLOAT32}:LOST_MINUS", repeat=0)

    def content(report):
        doc = report.to_dict()
        doc["summary"].pop("elapsed_seconds")
        doc.pop("judged_at")                      # when each run ended
        return doc
    serial = content(refspec.compare(smoke, impl))
    assert serial["summary"]["fail"] > 0
    assert content(refspec.compare(smoke, impl, jobs=2)) == serial
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert content(refspec.compare(smoke, impl, scheduler=cluster.scheduler_address)) == serial


@pytest.mark.slow
def test_the_pytest_plugin_makes_one_item_per_case(smoke, tmp_path):
    def pytest_run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--rootdir", str(tmp_path), "--refspec-golden", str(smoke), *args],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600)
    four = [arg.replace("--op", "--refspec-op") for arg in FOUR_OPS]
    good = pytest_run("--refspec-impl", TORCH_FORWARD, "--refspec-framework", "torch",
                      "--refspec-autograd", *four)
    assert good.returncode == 0, good.stdout[-3000:]
    assert re.search(r"^177 passed, 37 skipped", good.stdout.splitlines()[-1])
    bad = pytest_run("--refspec-impl", f"{TORCH_FORWARD}:LOST_MINUS", "--refspec-framework",
                     "torch", "--refspec-autograd", "--refspec-op", "rope_grad",
                     "--refspec-case", "*/dtype=float16/*", "-k", "BNSD")
    assert bad.returncode == 1
    failed = re.findall(r"^FAILED \S*smoke\.h5::(\S+)", bad.stdout, re.M)
    assert failed and all(f.startswith("rope_grad/") and "/dtype=float16/" in f and "BNSD" in f
                          for f in failed), bad.stdout[-3000:]
    assert ELEMENT.search(bad.stdout), bad.stdout[-3000:]
    usage = pytest_run()
    assert usage.returncode == 4 and "--refspec-golden needs --refspec-impl" in usage.stderr


def test_aclnn_codes_are_read_from_exceptions():
    assert aclnn_code(TilingError("x")) == 561002
    assert aclnn_code(RuntimeError("aclnnRotaryPositionEmbeddingGrad failed, error code 161002")) == 161002
    assert aclnn_code(ValueError("shape mismatch")) == UNKNOWN_CODE


def test_torch_tensors_carry_the_stored_bits(rng):
    from refspec.comparator.sources.frameworks import TorchFramework
    fw = TorchFramework("cpu")
    for dtype in (np.float16, bfloat16, np.float32, np.float64):
        bits = rng.integers(0, 2 ** 16, 64, dtype=np.uint16)
        a = (bits.view(np.float16) if dtype == np.float16 else bits.view(bfloat16)
             if dtype == bfloat16 else rng.standard_normal(64).astype(dtype))
        t = fw.tensor(a)
        assert t.dtype == {np.float16: torch.float16, bfloat16: torch.bfloat16,
                           np.float32: torch.float32, np.float64: torch.float64}[dtype]
        back = fw.array(t)
        assert back.dtype == a.dtype and back.tobytes() == a.tobytes()


def test_nothing_imports_torch_unless_asked(smoke):
    code = ("import sys, refspec; from refspec.comparator.sources.implementation import Implementation; "
            f"r = refspec.compare({str(smoke)!r}, Implementation({NUMPY_FLOAT32!r}, repeat=0), "
            "operators=['rope_grad']); print(r.passed, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "False"], out.stderr


def test_load_implementation_takes_modules_files_and_objects(tmp_path, monkeypatch):
    (tmp_path / "mykernels.py").write_text("def rotary_position_embedding(x, cos, sin, mode=0):\n"
                                           "    return x\nclass K:\n    pass\nOBJ = K()\n")
    monkeypatch.chdir(tmp_path)
    assert load_implementation("mykernels").rotary_position_embedding
    assert load_implementation(str(tmp_path / "mykernels.py")).OBJ is not None
    assert type(load_implementation("mykernels:OBJ")).__name__ == "K"
    with pytest.raises(ImplementationError, match="no module named"):
        load_implementation("mykernels_nope")


def test_a_kernel_file_imports_the_modules_beside_it(smoke, tmp_path):
    """``--impl path/to/kernels.py`` puts the file's folder on the import path, as ``python
    path/to/kernels.py`` does: a module beside it imports from any working directory."""
    folder = tmp_path / "vendor_rope"
    folder.mkdir()
    (folder / "rope_helpers_beside_the_kernel.py").write_text(
        "from numpy_float32 import EVERY as KERNELS\n")
    (folder / "kernels.py").write_text(
        "from rope_helpers_beside_the_kernel import KERNELS\n"
        "rotary_position_embedding_grad = KERNELS.rotary_position_embedding_grad\n")
    res = run(smoke, "--impl", folder / "kernels.py", "--op", "rope_grad", "--case",
              "rope_grad/soc=A2/mode=half/*", "--repeat", "0")
    assert res.exit_code == 0, res.output[-2000:]
    assert re.search(r"^PASS: [1-9]\d* passed, 0 failed", res.output, re.M), res.output[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_forwards_on_cuda(smoke):
    res = run(smoke, "--impl", TORCH_FORWARD, "--framework", "torch", "--device", "cuda",
              "--autograd", "--op", "rope_grad")
    assert res.exit_code == 0, res.output[-2000:]
