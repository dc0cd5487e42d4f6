"""Sizes and generation times of the built-in sweeps: the table in the README.

    python benchmarks/bench_sizes.py                 # every tier but full/all (about 4 minutes)
    python benchmarks/bench_sizes.py --full          # also full/all, in 8 shards (about 8 minutes,
                                                     # 11 GB of free disk at a time)
    python benchmarks/bench_sizes.py --only smoke/smoke
    python benchmarks/bench_sizes.py --only full/all   # full/all alone (always in shards)

Each row runs `refspec generate --sweep S --tier T --jobs J -o FILE` in a fresh process with
--jobs 1 and --jobs 2 (whole commands, interpreter start included) and reads the cases,
negative cases, array bytes and bytes on disk from the command's summary line; the file is
removed after each run. `full`/`all` does not fit many disks whole, so with --full it is
generated as 8 shards (`--shard K/8 --jobs 2`), each removed after measuring, and the shards'
figures are added up. Prints a Markdown table. The script asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

TIERS = ["smoke/smoke", "smoke/all", "standard/quick", "standard/all", "full/quick"]
SUMMARY = re.compile(r"wrote (\d+) cases \((\d+) negative\).*: ([\d.]+) MB of arrays, "
                     r"([\d.]+) MB on disk")


def generate(out_dir: str, sweep: str, tier: str, *extra) -> tuple[float, tuple]:
    """Seconds of one `refspec generate` and (cases, negative, array MB, disk MB)."""
    path = os.path.join(out_dir, "g.h5")
    os.sync()
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "refspec", "generate", "--sweep", sweep,
                           "--tier", tier, *map(str, extra), "-o", path, "--force"],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"refspec generate --sweep {sweep} --tier {tier} failed:\n{proc.stderr}")
    found = SUMMARY.search(proc.stdout)
    if found is None:
        raise SystemExit(f"no summary line in: {proc.stdout[-500:]}")
    os.remove(path)
    shutil.rmtree(path + ".parts", ignore_errors=True)
    cases, negative, arrays, disk = found.groups()
    return elapsed, (int(cases), int(negative), float(arrays), float(disk))


def size(mb: float) -> str:
    return f"{mb / 1000:.1f} GB" if mb >= 1000 else f"{mb:.3g} MB"


def full_in_shards(out_dir: str) -> None:
    """The full/all row: 8 shards with --jobs 2, each removed after measuring."""
    total, seconds, shards = [0, 0, 0.0, 0.0], 0.0, []
    for k in range(1, 9):
        t, figures = generate(out_dir, "full", "all", "--shard", f"{k}/8", "--jobs", 2)
        seconds += t
        total = [a + b for a, b in zip(total, figures)]
        shards.append(figures[3])
    print(f"| `full` / `all` | {total[0]} ({total[1]}) | {size(total[2])} | {size(total[3])} "
          f"| | {seconds / 60:.2g} min in 8 shards of {size(min(shards))}-{size(max(shards))} |",
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="also full/all, in 8 shards")
    ap.add_argument("--only", action="append", metavar="SWEEP/TIER", help="only these rows")
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    args = ap.parse_args(argv)
    out_dir = args.dir or tempfile.mkdtemp(prefix="refspec-bench-sizes-")
    os.makedirs(out_dir, exist_ok=True)
    print(f"cpus: {os.cpu_count()}, load average at the start: {os.getloadavg()}")
    print("| sweep / tier | cases (negative) | arrays | on disk | `--jobs 1` | `--jobs 2` |")
    print("|---|---|---|---|---|---|")
    rows = (args.only or TIERS) + (["full/all"] if args.full else [])
    try:
        for row in dict.fromkeys(rows):
            if row == "full/all":
                full_in_shards(out_dir)
                continue
            sweep, tier = row.split("/")
            t1, (cases, negative, arrays, disk) = generate(out_dir, sweep, tier, "--jobs", 1)
            t2, _ = generate(out_dir, sweep, tier, "--jobs", 2)
            print(f"| `{sweep}` / `{tier}` | {cases} ({negative}) | {size(arrays)} | {size(disk)} "
                  f"| {t1:.3g} s | {t2:.3g} s |", flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(out_dir, ignore_errors=True)
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
