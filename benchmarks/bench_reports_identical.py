"""Every byte of the reports of this source tree against another's (for example the tree before a
restructuring of the comparator), and the standard sweep's comparison timed in both.

    git archive REV | tar -x -C /tmp/src
    python benchmarks/bench_reports_identical.py --against /tmp/src
    python benchmarks/bench_reports_identical.py --against /tmp/src --sweeps smoke    # quicker

This tree writes the golden files (the smoke sweep, the quick tier of the standard sweep) and
the actual outputs once; each tree then judges them in fresh processes (``python -m refspec``
with its own directory first on ``PYTHONPATH``), writing the terminal report (standard output),
``--json``, ``--junit`` and ``--html``:

- the golden itself (``refspec compare GOLDEN GOLDEN``: its rounded outputs and statuses);
- a correct kernel (``refspec run --impl tests/impls/numpy_float32.py:EVERY``);
- broken kernels: a directory tree of outputs written here, most of them right and the others
  each with one mistake (negated, doubled, zeros, halves of the last axis exchanged, one ulp
  off, a NaN fill, unwritten from element 64 on, truncated instead of rounded, the bits of the
  other 16-bit dtype, a copy of an input, a few elements far off), files missing, too short or
  of another dtype, statuses wrong, cases not run; judged under every standard (the smoke
  sweep; ``default`` and ``ascend-mixed`` on the standard sweep), with and without the HTML
  report (which collects heat maps), with ``--heatmap-axes``; the deliberately broken kernels of
  tests/impls (``refspec run``); and the Python API with ``fast=True`` and ``fast=False`` (the
  compiled pass, the NumPy pass for every output).

The kernels are this tree's files (tests/impls), the same for both trees. Masked before the
files are compared, as they differ from run to run: the JSON's ``elapsed_seconds``, the JUnit
suite's ``time``, and the HTML report's anchors and gradient ids (made from Python object ids,
renumbered in order of appearance), and the line saying that numba compiles the compiled pass
(on standard error, once after a tree's pass changed). Nothing else is masked: the paths are
the same files for both trees. The timings: one comparison of the standard sweep's tier (the
golden itself, and the broken kernel's directory; without report files and with all three) in
each tree, one after the other, after one warm-up comparison each (which loads, or compiles,
the tree's compiled pass). The script asserts nothing; it prints
each pair of files that differ with its first differing line, and exits 1 when any does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import refspec.goldens as goldens
from refspec.spec.dtypes import bfloat16, round_to

from bench_diagnosis import MISTAKES as DIAGNOSIS_MISTAKES, wrong as diagnosis_mistake
from results import print_results

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
IMPLS = os.path.join(TREE, "tests", "impls")
#: the mistakes of the broken directory, in turn over the outputs of positive cases (None: the
#: rounded golden)
MISTAKES = (None, "negated", None, "doubled", None, "zeros", None, "halves", None, "one_ulp",
            None, "nan", None, "tail", None, "truncated", None, "twin", None, "copy", None,
            "far_off", None, "missing", None, "short", None, "other_dtype")
#: broken kernels of tests/impls run through `refspec run` on the smoke sweep: (file:object, --op)
RUN_KERNELS = (("numpy_float32.py:LOST_MINUS", None),
               ("numpy_float32.py:MISSING_REJECTION", None),
               ("diagnosis_kernels.py:SIGN", "rope_grad"),
               ("diagnosis_kernels.py:SCALE", "rope_grad"))
STANDARDS = ("default", "ascend-mixed", "vendor-threshold", "torch", "ratio")


# --- the actual outputs ---------------------------------------------------------------------

def _twin_bits(exact: np.ndarray, dtype) -> np.ndarray:
    """The exact values rounded to the other 16-bit dtype, their bits read as ``dtype``."""
    twin = bfloat16 if np.dtype(dtype) == np.float16 else np.float16
    return round_to(exact, twin).view(dtype)


def _wrong(mistake: str, expected: np.ndarray, exact: np.ndarray, inputs: dict) -> np.ndarray:
    """An output of the golden's dtype with one mistake: those of bench_diagnosis.py, and more."""
    dt = expected.dtype
    with np.errstate(all="ignore"):
        if mistake in DIAGNOSIS_MISTAKES:
            return diagnosis_mistake(expected, exact, mistake)
        if mistake == "nan":
            return np.full_like(expected, np.nan)
        if mistake == "tail":
            flat = expected.reshape(-1).copy()
            flat[64:] = 0
            return flat.reshape(expected.shape)
        if mistake == "truncated":
            r = round_to(exact, dt)
            over = np.abs(r.astype(np.float64)) > np.abs(exact)
            return np.where(over, np.nextafter(r, np.zeros_like(r)), r)
        if mistake == "twin" and dt.itemsize == 2:
            return _twin_bits(exact, dt)
        if mistake == "copy":
            same = [v for v in inputs.values() if v is not None and np.size(v) == expected.size
                    and np.asarray(v).dtype.kind == "f"]
            if same:
                return np.asarray(same[0]).astype(dt).reshape(expected.shape)
        if mistake == "far_off":
            flat = expected.reshape(-1).copy()
            flat[::97] = round_to(exact.reshape(-1)[::97] + 1.0, dt)
            return flat.reshape(expected.shape)
    return round_to(2 * exact, dt)


def _write_output(folder: str, name: str, mistake, expected, exact, inputs) -> None:
    """One output file (or none, or a broken one)."""
    path = os.path.join(folder, name)
    if mistake == "missing":
        return
    if mistake == "short":
        np.asarray(expected).reshape(-1)[:-1].tofile(path + ".bin")
        return
    if mistake == "other_dtype":
        np.save(path + ".npy", np.asarray(exact, np.float64))
        return
    values = expected if mistake is None else _wrong(mistake, expected, exact, inputs)
    if values.dtype == bfloat16:
        values.view(np.uint16).tofile(path + ".bin")
    else:
        np.save(path + ".npy", values)


def _status(k: int, case) -> int | None:
    """The status written for the ``k``-th case: mostly the right one; sometimes an accepted
    negative case, another code, a rejected valid input, or none at all."""
    expected = case.expected_error
    if expected is not None:
        return 0 if k % 7 == 3 else expected + 1 if k % 11 == 5 else expected
    return 561002 if k % 13 == 6 else None if k % 19 == 9 else 0


def write_broken(golden: str, root: str) -> dict:
    """The broken kernel's directory tree for ``golden``; returns the mistakes' counts."""
    counts: dict = {}
    n = 0
    with goldens.open(golden) as gf:
        for k, case_id in enumerate(gf.case_ids()):
            case = gf[case_id]
            folder = os.path.join(root, *case_id.split("/"))
            if case.expected_error is None and k % 17 == 8:
                continue                                         # not run
            os.makedirs(folder, exist_ok=True)
            code = _status(k, case)
            if code is not None:
                with open(os.path.join(folder, "status.json"), "w") as fh:
                    json.dump({"code": code}, fh)
            if case.expected_error is not None:
                continue
            inputs = case.input_arrays()
            for name in case.output_names:
                mistake = MISTAKES[n % len(MISTAKES)]
                n += 1
                counts[mistake or "right"] = counts.get(mistake or "right", 0) + 1
                _write_output(folder, name, mistake, case.expected[name][()],
                              np.asarray(case.exact[name][()], np.float64), inputs)
    return counts


# --- the runs -------------------------------------------------------------------------------

def runs(data: str, sweeps: list[str]) -> dict[str, list]:
    """{name: the arguments of `python -m refspec`} of every comparison."""
    out = {}
    for sweep in sweeps:
        golden = os.path.join(data, f"{sweep}.h5")
        broken = os.path.join(data, f"broken-{sweep}")
        out[f"{sweep} golden"] = ["compare", golden, golden]
        out[f"{sweep} correct"] = ["run", golden, "--impl", f"{IMPLS}/numpy_float32.py:EVERY",
                                   "--repeat", "0"]
        out[f"{sweep} broken default"] = ["compare", golden, broken]
        out[f"{sweep} broken ascend-mixed"] = ["compare", golden, broken, "--standard",
                                               "ascend-mixed"]
        if sweep != "smoke":
            continue
        for standard in STANDARDS[2:]:
            out[f"{sweep} broken {standard}"] = ["compare", golden, broken, "--standard", standard]
        out[f"{sweep} broken heat map SD"] = ["compare", golden, broken, "--heatmap-axes", "SD"]
        for impl, op in RUN_KERNELS:
            out[f"{sweep} run {impl}"] = ["run", golden, "--impl", f"{IMPLS}/{impl}",
                                          "--repeat", "0"] + (["--op", op] if op else [])
    return out


#: the comparisons also run without --html (no heat map collected): the terminal report alone
WITHOUT_HTML = ("smoke broken default", "smoke broken ascend-mixed")
#: the Python API: compare(...) with fast=True and fast=False, the reports rendered by the tree
DRIVER = r"""
import importlib, json, sys
import refspec
golden, actual, fast, out = sys.argv[1], sys.argv[2], sys.argv[3] == "True", sys.argv[4]
report = refspec.compare(golden, actual, fast=fast, heatmaps=True)
def module(name):
    for where in ("refspec.comparator.reports.", "refspec.comparator."):
        try:
            return importlib.import_module(where + name)
        except ModuleNotFoundError:
            pass
open(out + ".txt", "w").write(str(report) + "\n")
open(out + ".json", "w").write(module("render_json").render_json(report))
open(out + ".xml", "w").write(module("render_junit").render_junit(report))
open(out + ".html", "w").write(module("render_html").render_html(report))
"""


def judge_all(tree: str, data: str, out: str, commands: dict) -> dict:
    """Every comparison in ``tree``; the seconds each took."""
    env = {**os.environ, "PYTHONPATH": tree}
    os.makedirs(out, exist_ok=True)
    seconds = {}
    for name, args in commands.items():
        stem = os.path.join(out, name.replace(" ", "_").replace("/", "_").replace(":", "_"))
        reports = [f"--json={stem}.json", f"--junit={stem}.xml", f"--html={stem}.html"]
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "refspec", *args, *reports],
                              capture_output=True, text=True, env=env, cwd=data)
        seconds[name] = time.perf_counter() - t
        with open(stem + ".txt", "w") as fh:
            fh.write(proc.stdout + f"exit code {proc.returncode}\n" + proc.stderr)
        if name in WITHOUT_HTML:
            proc = subprocess.run([sys.executable, "-m", "refspec", *args,
                                   f"--json={stem}-alone.json"],
                                  capture_output=True, text=True, env=env, cwd=data)
            with open(stem + "-alone.txt", "w") as fh:
                fh.write(proc.stdout + f"exit code {proc.returncode}\n" + proc.stderr)
    smoke = os.path.join(data, "smoke.h5")
    for fast in (True, False):
        subprocess.run([sys.executable, "-c", DRIVER, smoke, os.path.join(data, "broken-smoke"),
                        str(fast), os.path.join(out, f"smoke_broken_api_fast={fast}")],
                       check=True, env=env, cwd=data)
    return seconds


# --- comparing ------------------------------------------------------------------------------

_NOTICE = "compiling the comparison pass for large outputs"
_IDS = re.compile(r"(?<=id='r)\d+|(?<=href='#r)\d+|(?<=blues)\d+")


def masked(path: str) -> str:
    """A report's text with what differs from run to run replaced (see the module docstring)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".txt"):                 # numba compiling the pass, logged once per tree
        text = "".join(ln for ln in text.splitlines(True) if _NOTICE not in ln)
    elif path.endswith(".json"):
        text = re.sub(r'"elapsed_seconds": [0-9.e+-]+', '"elapsed_seconds": _', text)
    elif path.endswith(".xml"):
        text = re.sub(r'(<testsuite [^>]*?)time="[0-9.]+"', r'\1time="_"', text)
    elif path.endswith(".html"):
        order: dict[str, str] = {}
        text = _IDS.sub(lambda m: order.setdefault(m.group(0), f"_{len(order)}"), text)
    return text


def differences(a: str, b: str) -> tuple[int, list[str]]:
    """(files compared, one line per pair of files that differ)."""
    found, out = 0, []
    for name in sorted(os.listdir(b)):
        found += 1
        other = os.path.join(a, name)
        if not os.path.exists(other):
            out.append(f"{name}: only in this tree")
            continue
        x, y = masked(other), masked(os.path.join(b, name))
        if x != y:
            xs, ys = x.splitlines(), y.splitlines()
            k = next((i for i, (p, q) in enumerate(zip(xs, ys)) if p != q), min(len(xs), len(ys)))
            out.append(f"{name} line {k + 1}:\n    other: {xs[k] if k < len(xs) else '(end)'}"
                       f"\n    this:  {ys[k] if k < len(ys) else '(end)'}")
    return found, out


def timed(tree: str, data: str, args: list) -> float:
    """Seconds of one ``python -m refspec ARGS`` in ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "refspec", *args], capture_output=True, env=env, cwd=data)
    return time.perf_counter() - t


def side_by_side(other: str, data: str) -> dict:
    """The standard sweep's comparison, one run each in the other tree and this one, one after
    the other: the golden itself and the broken kernel's directory, with no report file and
    with all three (after one warm-up comparison in each tree)."""
    golden = os.path.join(data, "standard.h5")
    reports = [f"--{kind}={os.path.join(data, 'timed.' + kind)}"
               for kind in ("json", "junit", "html")]
    for tree in (other, TREE):
        timed(tree, data, ["compare", golden, golden])
    t = {}
    for label, actual in (("golden", golden), ("broken", os.path.join(data, "broken-standard"))):
        for extra, what in (([], ""), (reports, " --json --junit --html")):
            o = timed(other, data, ["compare", golden, actual, *extra])
            n = timed(TREE, data, ["compare", golden, actual, *extra])
            t[f"compare {label}{what}: other s, this s, this / other"] = (o, n, n / o)
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, metavar="SRC", help="the other source tree")
    ap.add_argument("--sweeps", nargs="+", default=["smoke", "standard"],
                    choices=("smoke", "standard"))
    ap.add_argument("--tier", default="quick", help="tier of the standard sweep")
    ap.add_argument("--dir", help="where to write (default: a temporary directory, removed)")
    args = ap.parse_args(argv)
    data = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="refspec-bench-reports-"))
    os.makedirs(data, exist_ok=True)
    results: dict = {"load average at the start": os.getloadavg()[0]}
    try:
        mistakes = {}
        for sweep in args.sweeps:
            golden = os.path.join(data, f"{sweep}.h5")
            tier = ["--tier", args.tier] if sweep == "standard" else []
            subprocess.run([sys.executable, "-m", "refspec", "generate", "--sweep", sweep, *tier,
                            "-o", golden, "--force"], check=True, stdout=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": TREE})
            mistakes[sweep] = write_broken(golden, os.path.join(data, f"broken-{sweep}"))
        results["outputs of the broken kernel"] = mistakes
        commands = runs(data, args.sweeps)
        other = judge_all(os.path.abspath(args.against), data, os.path.join(data, "other"),
                          commands)
        this = judge_all(TREE, data, os.path.join(data, "this"), commands)
        found, diff = differences(os.path.join(data, "other"), os.path.join(data, "this"))
        results["report files compared"] = found
        results["files that differ"] = len(diff)
        results["seconds of every comparison, other / this"] = (sum(other.values()),
                                                                sum(this.values()))
        if "standard" in args.sweeps:
            results[f"the standard sweep's tier {args.tier}, one run each"] = side_by_side(
                os.path.abspath(args.against), data)
        results["load average at the end"] = os.getloadavg()[0]
        print_results(results)
        for line in diff:
            print(line)
        return 1 if diff else 0
    finally:
        if not args.dir:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
