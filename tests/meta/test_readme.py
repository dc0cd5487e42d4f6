"""The README's example runs and prints what it says it prints."""

import configparser
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import refspec
from refspec import ops
from refspec.inputs.tensor_files import tensor_dtype
from refspec.spec.dtypes import bfloat16
from repo_paths import CI, README, REPO, TESTS


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_example_runs():
    blocks = _python_blocks()
    assert blocks, "README has no python example"
    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("bfloat16 (1, 1, 16, 64)")
    assert "layout='BNSD'" in lines[0] and "cos_pattern='11SD'" in lines[0]
    assert lines[1] == "561002 dy: D=63 must be even [rotary_position_embedding_grad mode=0]"


def test_readme_setup_commands_come_first():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    commands = [line for line in first_block.splitlines() if line and not line.startswith("#")]
    assert commands[0].endswith("refspec generate -o smoke.h5")
    assert "python -m pytest -q" in commands[1] and ".[test]" in commands[1]
    assert "python -m pytest -q" in CI.read_text()


def test_readme_says_how_long_the_tests_run_and_how_to_run_a_quick_subset():
    """The README says how long the test command runs on a 2-core machine, and gives a quicker
    command that leaves out the tests of a pytest marker setup.cfg declares and tests use, with
    its time too."""
    text = " ".join(README.read_text().split())
    assert re.search(r"The test command runs for about \d+ minutes on a 2-core machine", text)
    quick = re.search(r'`python -m pytest -q -m "not (\w+)"`', text)
    assert quick, "the README gives no quick subset by a marker"
    marker = quick.group(1)
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    declared = [line.split(":")[0].strip() for line in cfg["tool:pytest"]["markers"].splitlines()]
    assert marker in declared, (marker, declared)
    marked = [p.name for p in TESTS.rglob("test_*.py") if f"pytest.mark.{marker}" in p.read_text()]
    assert len(marked) >= 5, marked
    assert re.search(r"in about \d+ minutes", text[quick.end():quick.end() + 400])


def _walkthrough():
    """The command-line walkthrough's commands, as written (the optional CASE_ID left out)."""
    text = README.read_text()
    block = re.search(r"## The command line in five steps.*?```bash\n(.*?)```", text, flags=re.S).group(1)
    return [line.split("  #")[0].replace(" [CASE_ID]", "").strip()
            for line in block.splitlines() if line.startswith("refspec ")]


def _read(folder, entry):
    """An exported file as its array (bfloat16 from its bit patterns)."""
    dtype = tensor_dtype(entry["dtype"])
    stored = np.uint16 if dtype == bfloat16 else dtype
    return np.fromfile(folder / entry["name"], stored).view(dtype).reshape(entry["shape"])


def _harness(cases):
    """A kernel harness for the exported cases: each folder's inputs (as case.json names them)
    go to a correct device-like implementation (tests/impls/numpy_float32.py, behind the
    profile's argument checks); it writes each output to the file case.json names and
    status.json with 0, or with the aclnn code of the error it raised."""
    sys.path.insert(0, str(TESTS / "impls"))
    from numpy_float32 import EVERY
    for folder in sorted(p.parent for p in cases.rglob("case.json")):
        desc = json.loads((folder / "case.json").read_text())
        record = ops.get(desc["operator"])
        files = {e["python_name"]: e for e in desc["files"] if e["role"] == "input"}
        inputs = {n: _read(folder, files[n]) if n in files else None for n in record.input_names}
        try:
            result = getattr(EVERY, record.function)(**inputs, soc=desc["soc"],
                                                     **record.attrs_of(desc["parameters"]))
        except refspec.AclnnError as exc:
            (folder / "status.json").write_text(json.dumps({"code": exc.code}))
            continue
        if not isinstance(result, dict):
            result = dict(zip(record.output_names, result if isinstance(result, tuple) else (result,)))
        for e in desc["files"]:
            if e["role"] == "golden":
                a = np.asarray(result[e["python_name"]])
                (a.view(np.uint16) if a.dtype == bfloat16 else a).tofile(folder / e["output_file"])
        (folder / "status.json").write_text(json.dumps({"code": 0}))


@pytest.mark.slow
def test_readme_walkthrough_ends_in_pass_for_one_chip(tmp_path):
    """The command-line walkthrough runs as written, for one chip (--soc A2), on a tier that
    finishes in seconds; with a correct kernel in the harness step it ends in PASS with no
    rejected input and no case not run."""
    commands = _walkthrough()
    assert [c.split()[1] for c in commands] == ["list", "generate", "show", "export", "compare"]
    assert all("--soc A2" in c for c in commands if c.split()[1] in ("export", "compare"))
    for command in commands[:4]:
        out = subprocess.run([sys.executable, "-m", "refspec", *command.split()[1:]], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (command, out.stderr)
    folders = list((tmp_path / "cases").rglob("case.json"))
    assert folders and all("/soc=A2/" in str(p) for p in folders)
    _harness(tmp_path / "cases")
    out = subprocess.run([sys.executable, "-m", "refspec", *commands[4].split()[1:]], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1].startswith("PASS: ") and "rejected" not in lines[-1], lines[-1]
    assert not any(line.startswith(("REJECTED", "NOT RUN", "FAIL")) for line in lines)
    assert f"{len(folders)} cases" in lines[-1] and "negative cases judged by status" in lines[-1]
    assert (tmp_path / "report.xml").exists() and (tmp_path / "report.html").exists()
