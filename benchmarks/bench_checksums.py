"""What the golden files' checksums cost (docs/goldens.md, "Checksums and checks"): this tree,
whose writer puts HDF5's Fletcher32 filter on every chunked dataset and a CRC-32 per contiguous
dataset and index row, and whose reader checks them, against a source tree from before them
(`git archive REV | tar -x -C SRC`), each on its own files, steps alternated.

    python benchmarks/bench_checksums.py --against SRC                     # standard/quick
    python benchmarks/bench_checksums.py --against SRC --tier all --repeat 1   # 3.4 GB

Steps, in fresh processes, best of ``--repeat``:
- ``generate --jobs 1``: wall time and file size;
- reading every dataset of every case through refspec.goldens in 64 MiB blocks (this tree checks
  every checksum on the way);
- reading every dataset with h5py alone (the Fletcher32 filter's own cost: HDF5 checks it);
- ``export`` of every case (--jobs 1) and ``compare FILE FILE --json`` (every output judged
  against the file's own expected outputs);
- this tree only: ``show --verify`` (every dataset and every expected output against its exact
  value rounded once).
The files are flushed (``os.sync``) between steps. The script asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

READ_REFSPEC = """
import sys, refspec.goldens as goldens
n = 0
with goldens.open(sys.argv[1]) as gf:
    for case in gf:
        for sub in ("inputs", "expected", "exact", "sum_abs"):
            arrays = getattr(case, sub)
            for name in arrays:
                for _, block in arrays[name].blocks(64 << 20):
                    n += block.nbytes
print(n)
"""

READ_H5PY = """
import sys, h5py
n = 0
def visit(name, obj):
    global n
    if isinstance(obj, h5py.Dataset) and name.startswith("cases/"):
        n += obj[()].nbytes
with h5py.File(sys.argv[1], "r") as f:
    f.visititems(visit)
print(n)
"""


def timed(cmd, env) -> tuple[float, str]:
    os.sync()
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)}: {done.stderr.strip()[-400:]}")
    return seconds, done.stdout.strip()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, metavar="SRC")
    ap.add_argument("--sweep", default="standard")
    ap.add_argument("--tier", default="quick")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="robust-checksums-", dir=args.dir)
    trees = {"checksums": HERE, "before": os.path.abspath(args.against)}
    envs = {k: {**os.environ, "PYTHONPATH": v} for k, v in trees.items()}
    py = sys.executable
    rows: dict = {}
    load = os.getloadavg()[0]

    def step(name, tree, cmd):
        seconds, out = timed(cmd, envs[tree])
        best = rows.setdefault(name, {}).get(tree)
        if best is None or seconds < best[0]:
            rows[name][tree] = (seconds, out)

    for k in range(args.repeat):
        for tree in ("checksums", "before") if k % 2 == 0 else ("before", "checksums"):
            golden = os.path.join(tmp, f"{tree}.h5")
            step("generate --jobs 1", tree, [py, "-m", "refspec", "generate", "--sweep",
                                             args.sweep, "--tier", args.tier, "--force",
                                             "-o", golden])
            step("read every dataset through refspec.goldens", tree,
                 [py, "-c", READ_REFSPEC, golden])
            step("read every dataset with h5py alone", tree, [py, "-c", READ_H5PY, golden])
            out = os.path.join(tmp, f"{tree}-export")
            step("export --jobs 1", tree, [py, "-m", "refspec", "export", golden, "-o", out,
                                           "--force"])
            step("compare FILE FILE --json", tree,
                 [py, "-m", "refspec", "compare", golden, golden, "--json",
                  os.path.join(tmp, f"{tree}.json")])
            if tree == "checksums":
                step("show --verify", tree, [py, "-m", "refspec", "show", "--verify", golden])
    sizes = {t: os.path.getsize(os.path.join(tmp, f"{t}.h5")) for t in trees}
    print(f"{args.sweep}/{args.tier}; best of {args.repeat}; load average {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end; file {sizes['checksums'] / 1e6:.1f} MB with "
          f"checksums, {sizes['before'] / 1e6:.1f} MB before ({sizes['checksums'] / sizes['before']:.3f}x)")
    print("| step | with checksums | before | ratio |")
    print("|---|---|---|---|")
    for name, got in rows.items():
        a, b = got.get("checksums"), got.get("before")
        ratio = f"{a[0] / b[0]:.2f}" if a and b else "-"
        print(f"| {name} | {a[0]:.2f} s | {b[0]:.2f} s | {ratio} |" if b else
              f"| {name} | {a[0]:.2f} s | - | - |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
