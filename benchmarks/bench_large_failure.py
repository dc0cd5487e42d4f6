"""Peak memory and time of `refspec compare` on one large failing output whose first axis is 1.

    python benchmarks/bench_large_failure.py                    # B1N128S8192D128: 2^27 elements
    python benchmarks/bench_large_failure.py --shape B1N64S8192D128 --dir /tmp/big
    python benchmarks/bench_large_failure.py --golden big.h5    # a file written before

Writes a sweep of one RotaryPositionEmbeddingGrad case (A2, rotate-half, BNSD, cos 11SD,
bfloat16, with x) and generates it (unless ``--golden`` names the file), then two actual trees,
block by block: the rounded golden (passing), and the same with the sign of the second half of D
of dx flipped (failing: half of its elements wrong). Each is judged by ``refspec compare`` in
its own process under ``/usr/bin/time -v``; printed are the peak resident memory, the wall
time, the verdict line and the diagnosis lines, and the failing run's ratios to the passing one.
It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from refspec.goldens import GoldenFile

SWEEP = """name = "large-failure"
description = "one large RotaryPositionEmbeddingGrad case whose first axis is 1"
seed = 1

[[block]]
name = "rope_grad-large"
op = "rope_grad"
expect = "accept"
[block.axes]
soc = "A2"
mode = "half"
layout = "BNSD"
cos = "11SD"
dtype = "bfloat16"
x = true
shape = "{shape}"
"""


def write_tree(golden: str, root: str, wrong: bool) -> str:
    """The case's outputs as .bin files under ``root`` (dx with the second half of D negated
    when ``wrong``), read and written one head at a time; the case id."""
    with GoldenFile(golden) as gf:
        (cid,) = list(gf.case_ids())
        case = gf[cid]
        folder = os.path.join(root, cid)
        os.makedirs(folder, exist_ok=True)
        for name in case.output_names:
            arr = case.expected[name]
            with open(os.path.join(folder, name + ".bin"), "wb") as fh:
                if name != "dx":
                    np.ascontiguousarray(np.asarray(arr[()])).view(np.uint16).tofile(fh)
                    continue
                for n in range(arr.shape[1]):
                    words = np.ascontiguousarray(np.asarray(arr[0, n])).view(np.uint16).copy()
                    if wrong:
                        words[..., words.shape[-1] // 2:] ^= 0x8000       # the sign bit
                    words.tofile(fh)
    return cid


def timed_compare(golden: str, tree: str) -> dict:
    """`refspec compare` under /usr/bin/time -v: peak RSS (MB), wall seconds, report lines."""
    run = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "refspec", "compare",
                          golden, tree], capture_output=True, text=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", run.stderr).group(1)
    seconds = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall.split(":"))))
    lines = [line.strip() for line in run.stdout.splitlines()
             if line.startswith(("FAIL", "PASS")) or "diagnosis:" in line]
    return {"rss_mb": rss / 1024, "seconds": seconds, "exit": run.returncode, "lines": lines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="B1N128S8192D128")
    ap.add_argument("--golden", help="a golden file of one such case, written before")
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="refspec-large-", dir=args.dir) as tmp:
        golden = args.golden
        if golden is None:
            sweep = os.path.join(tmp, "sweep.toml")
            with open(sweep, "w") as fh:
                fh.write(SWEEP.format(shape=args.shape))
            golden = os.path.join(tmp, "large.h5")
            subprocess.run([sys.executable, "-m", "refspec", "generate", "--sweep", sweep, "-o",
                            golden], check=True, capture_output=True)
        print(f"load average at the start: {os.getloadavg()[0]:.2f}")
        results = {}
        for label, wrong in (("passing", False), ("failing", True)):
            tree = os.path.join(tmp, label)
            cid = write_tree(golden, tree, wrong)
            results[label] = r = timed_compare(golden, tree)
            print(f"{label}: peak RSS {r['rss_mb']:.0f} MB, {r['seconds']:.1f} s, exit {r['exit']}")
            for line in r["lines"]:
                print("   ", line[:300])
        print(f"case: {cid}")
        p, f = results["passing"], results["failing"]
        print(f"failing / passing: memory {f['rss_mb'] / p['rss_mb']:.2f}x, "
              f"time {f['seconds'] / p['seconds']:.2f}x")
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
