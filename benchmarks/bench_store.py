"""Golden sets at scale: the standard sweep with --jobs 1 and --jobs 2, show, export and pack,
each measured against its peers in the same run (whole commands, fresh processes).

    python benchmarks/bench_store.py                      # everything (about 6 minutes)
    python benchmarks/bench_store.py --golden FILE.h5     # show/export/pack of an existing file
    python benchmarks/bench_store.py --tier quick         # a smaller sweep: checks that it runs
    python benchmarks/bench_store.py --against SRC        # (i) also an earlier source tree

(d) `refspec generate --sweep standard` with --jobs 1 and --jobs 2: wall time, the ratio, and
    whether the two files hold bit-identical datasets for every case (compared here, dataset by
    dataset, through h5py on the raw stored values).
(e) `refspec show FILE` of the --jobs 2 file (an index file with links into part files) and of
    the --jobs 1 file, against reading every case's attributes with h5py (what answering the
    same question without the root index costs).
(f) `refspec export FILE -o DIR` with --jobs 1 and --jobs 2: MB/s of bytes written, against
    copying the golden file's bytes once (`shutil.copyfile`, the sequential I/O floor of this
    disk), against `np.save` of the same arrays read through h5py (the plain way), and against
    creating as many files of the mean size with nothing else (the file-count floor).
(g) `refspec pack` of the --jobs 2 file into one self-contained file, against the --jobs 1 run.
(h) `refspec compare FILE DIR --json --junit --html` of an exported directory whose kernel
    outputs are the goldens themselves (each `golden_<output>.bin` linked as `<output>.bin`, a
    `status.json` with each case's expected code): every case and output judged, with --jobs 1
    and --jobs 2, against reading every byte compared once (the golden file's and the outputs')
    and, with `--against SRC`, against the comparator of another source tree on the same files
    (`git archive REV | tar -x -C SRC`; its reports --json and --html).
(i) with `--against SRC`: the same journey in the other source tree, on its own files (a tree
    whose golden schema differs cannot read this one's): `generate --sweep standard --jobs 1`,
    `export`, and `compare --json --junit --html` of its goldens as the outputs, side by side
    with this tree's (d), (f) and (h).

Between steps the files written are flushed (`os.sync`) so that one step's writeback does not
land in the next one's time. Directories are removed at the end, not between steps (removing
tens of thousands of files slows the file system for a while). The script asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

from results import print_results

EXE = [sys.executable, "-m", "refspec"]


def run(*args, env=None, cwd=None) -> tuple[float, str]:
    """One command, timed; ``cwd`` outside any source tree when ``env`` names another one
    (``python -m`` puts the working directory first on the module path)."""
    os.sync()
    t = time.perf_counter()
    proc = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, env=env,
                          cwd=cwd)
    elapsed = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"refspec {' '.join(map(str, args))} failed:\n{proc.stderr}")
    return elapsed, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def best(n, *args) -> float:
    return min(run(*args)[0] for _ in range(n))


def tree_bytes(path) -> tuple[int, int]:
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(root, name))
    return files, size


def same_datasets(a: str, b: str) -> str:
    """Whether two golden files hold the same case ids and bit-identical datasets."""
    import refspec.goldens as goldens
    with goldens.open(a) as fa, goldens.open(b) as fb:
        if fa.case_ids() != fb.case_ids():
            return "different case ids"
        n = 0
        for case_id in fa.case_ids():
            ga, gb = fa.case_group(case_id), fb.case_group(case_id)
            names = []
            ga.visit(lambda name: names.append(name) if isinstance(ga[name], h5py.Dataset) else None)
            other = []
            gb.visit(lambda name: other.append(name) if isinstance(gb[name], h5py.Dataset) else None)
            if names != other:
                return f"{case_id}: different datasets"
            for name in names:
                x, y = ga[name][()], gb[name][()]
                if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                    return f"{case_id}/{name} differs"
                n += 1
    return f"identical ({n} datasets)"


def attribute_walk(path: str) -> float:
    """Every case's attributes read with h5py: the per-case reading a root index avoids."""
    t = time.perf_counter()
    with h5py.File(path, "r") as f:
        for case_id in f["index"].asstr()[()]:
            dict(f["cases/" + case_id].attrs)
    return time.perf_counter() - t


def numpy_export(path: str, out: str) -> tuple[float, int]:
    """Each case's inputs and expected outputs read through h5py and written with np.save."""
    os.sync()
    t = time.perf_counter()
    written = 0
    with h5py.File(path, "r") as f:
        for k, case_id in enumerate(f["index"].asstr()[()]):
            group = f["cases/" + case_id]
            d = os.path.join(out, str(k))
            os.makedirs(d, exist_ok=True)
            for sub in ("inputs", "expected"):
                if sub in group:
                    for name, ds in group[sub].items():
                        target = os.path.join(d, f"{sub}-{name}.npy")
                        np.save(target, ds[()], allow_pickle=False)
                        written += os.path.getsize(target)
    os.sync()
    return time.perf_counter() - t, written


def golden_outputs_as_actuals(export_dir: str) -> list[str]:
    """A kernel that returns the goldens: each case folder gets its outputs and status.json.
    Returns the output files."""
    outputs = []
    for root, _, names in os.walk(export_dir):
        if "case.json" not in names:
            continue
        with open(os.path.join(root, "case.json")) as fh:
            case = json.load(fh)
        for entry in case["files"]:
            if entry["role"] == "golden":
                target = os.path.join(root, entry["output_file"])
                if not os.path.exists(target):
                    os.link(os.path.join(root, entry["name"]), target)
                outputs.append(target)
        with open(os.path.join(root, "status.json"), "w") as fh:
            json.dump({"code": case["expected_code"]}, fh)
    return outputs


def small_files(directory: str, count: int, size: int) -> float:
    """Seconds per file of writing ``count`` files of ``size`` bytes the way export does
    (create, write, close, rename into place; a new folder every 11 files), flushed."""
    data = b"\0" * size
    os.sync()
    t = time.perf_counter()
    for i in range(count):
        if i % 11 == 0:
            folder = os.path.join(directory, str(i))
            os.makedirs(folder)
        path = os.path.join(folder, f"{i}.bin")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        os.write(fd, data)
        os.close(fd)
        os.replace(path + ".tmp", path)
    os.sync()
    return (time.perf_counter() - t) / count


def read_once(paths) -> float:
    """Seconds to read these files' bytes once, in 16 MiB blocks."""
    t = time.perf_counter()
    for path in paths:
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass
    return time.perf_counter() - t


def against(args, tmp: str, results: dict) -> dict:
    """(i): generate, export and compare with the source tree ``args.against``, on its own
    files, against this tree's times of the same steps."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.against)}
    golden, export = os.path.join(tmp, "against.h5"), os.path.join(tmp, "against-export")
    i = {}
    i["generate --jobs 1 s"], i["generate summary"] = run(
        "generate", "--sweep", "standard", "--tier", args.tier, "--jobs", 1, "-o", golden,
        "--force", env=env, cwd=tmp)
    i["export --jobs 1 s"], _ = run("export", golden, "-o", export, "--force", env=env, cwd=tmp)
    golden_outputs_as_actuals(export)
    reports = [f"--{kind}={os.path.join(tmp, f'against.{kind}')}" for kind in ("json", "junit", "html")]
    i["compare --jobs 1 s"], i["compare verdict"] = run("compare", golden, export, *reports,
                                                        env=env, cwd=tmp)
    mine = {"generate --jobs 1 s": results.get("(d) generate", {}).get("--jobs 1 s"),
            "export --jobs 1 s": results["(f) export"]["export --jobs 1 s"],
            "compare --jobs 1 s": results["(h) compare"]["compare --jobs 1 s"]}
    for step, t in mine.items():
        if t:
            i[f"{step.rsplit(' ', 1)[0]}: other / this"] = i[step] / t
    return i


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", default="all", help="tier of the standard sweep")
    ap.add_argument("--golden", help="skip (d): measure show/export/pack of this --jobs file")
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    ap.add_argument("--against", metavar="SRC",
                    help="(i) also the journey with this source tree (e.g. `git archive REV`)")
    args = ap.parse_args(argv)
    results = {"cpus": os.cpu_count(), "numpy": np.__version__, "h5py": h5py.__version__,
               "load average": os.getloadavg()}
    tmp = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="refspec-bench-store-"))
    os.makedirs(tmp, exist_ok=True)
    try:
        if args.golden:
            j2 = j1 = args.golden
        else:
            j1, j2 = os.path.join(tmp, "standard-j1.h5"), os.path.join(tmp, "standard-j2.h5")
            d = {}
            for jobs, path in ((1, j1), (2, j2)):
                d[f"--jobs {jobs} s"], d[f"--jobs {jobs} summary"] = run(
                    "generate", "--sweep", "standard", "--tier", args.tier, "--jobs", jobs,
                    "-o", path, "--force")
            d["speed-up (target >= 1.6)"] = d["--jobs 1 s"] / d["--jobs 2 s"]
            d["datasets of --jobs 2 vs --jobs 1"] = same_datasets(j2, j1)
            results["(d) generate"] = d
        e = {"show, --jobs 2 file s": best(3, "show", j2),
             "show, --jobs 1 file s": best(3, "show", j1),
             "h5py reads every case's attributes s": attribute_walk(j1)}
        e["attribute walk / show"] = e["h5py reads every case's attributes s"] / e["show, --jobs 1 file s"]
        results["(e) show (target <= 2 s)"] = e
        f = {}
        for jobs in (1, 2):
            out = os.path.join(tmp, f"export-j{jobs}")
            f[f"export --jobs {jobs} s"], _ = run("export", j2, "-o", out, "--jobs", jobs, "--force")
            files, size = tree_bytes(out)
            f[f"export --jobs {jobs} MB/s (target >= 300)"] = size / 1e6 / f[f"export --jobs {jobs} s"]
        f["files, MB written"] = f"{files}, {size / 1e6:.0f}"
        golden_size = os.path.getsize(j1)
        os.sync()
        t = time.perf_counter()
        shutil.copyfile(j1, os.path.join(tmp, "copy.h5"))
        os.sync()
        f["copyfile of the golden MB/s"] = golden_size / 1e6 / (time.perf_counter() - t)
        secs, written = numpy_export(j1, os.path.join(tmp, "export-numpy"))
        f["h5py + np.save MB/s"] = written / 1e6 / secs
        per_file = small_files(tempfile.mkdtemp(prefix="small-files-", dir=tmp), files, size // files)
        f["one file of the mean size, created and renamed, us"] = per_file * 1e6
        f["that for every exported file s"] = per_file * files
        results["(f) export"] = f
        g = {"pack of the --jobs 2 file s": run("pack", j2, "-o", os.path.join(tmp, "packed.h5"),
                                                 "--force")[0]}
        if "(d) generate" in results:
            d = results["(d) generate"]
            g["--jobs 2 + pack vs --jobs 1"] = d["--jobs 1 s"] / (d["--jobs 2 s"] + g["pack of the --jobs 2 file s"])
            g["packed vs --jobs 1 datasets"] = same_datasets(os.path.join(tmp, "packed.h5"), j1)
        results["(g) pack"] = g
        actual = os.path.join(tmp, "export-j1")
        outputs = golden_outputs_as_actuals(actual)
        h = {"output files, MB": f"{len(outputs)}, {sum(map(os.path.getsize, outputs)) / 1e6:.0f}"}
        for jobs in (1, 2):
            reports = [f"--{kind}={os.path.join(tmp, f'report-j{jobs}.{kind}')}"
                       for kind in ("json", "junit", "html")]
            h[f"compare --jobs {jobs} s"], h[f"compare --jobs {jobs} verdict"] = run(
                "compare", j1, actual, "--jobs", jobs, *reports)
        h["compare speed-up"] = h["compare --jobs 1 s"] / h["compare --jobs 2 s"]
        h["reading the golden file and the outputs once s"] = read_once([j1] + outputs)
        h["compare --jobs 2 / reading once"] = (h["compare --jobs 2 s"]
                                                / h["reading the golden file and the outputs once s"])
        results["(h) compare"] = h
        if args.against:
            results["(i) the other source tree"] = against(args, tmp, results)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
    results["load average after"] = os.getloadavg()
    print_results(results)

if __name__ == "__main__":
    main()
