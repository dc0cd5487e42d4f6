"""Judging a KV cache against reading its bytes: KvRmsNormRopeCache at DeepSeek decode sizes
(bench_kv_cache.py's case: 64 tokens into a paged k_cache (1024, 128, 1, 64) and ckv_cache
(1024, 128, 1, 512) of bfloat16, 151 MB of cache), exported and answered by a kernel that
leaves the right caches (the goldens copied over the exported input files), measured in the
same run:

- bytes: the bytes such a comparison cannot do without, read as plainly as NumPy and h5py
  read them: the two cache files the kernel left (``np.fromfile``) and the two input caches of
  the golden file (``h5py``, whole datasets);
- scan: refspec's pass over the two caches alone (``caches.scan_cache``: every element's bits
  against the input cache's, the written elements gathered);
- compare: ``refspec.compare`` of the case (its four outputs, the caches judged whole).

    python benchmarks/bench_cache_compare.py            # PA_BNSD and PA_NZ (about a minute)
    python benchmarks/bench_cache_compare.py --small    # checks that it runs, measures nothing

The files are read from the page cache in every variant (each is timed after a first read);
the script prints the times and the ratios to the bytes' time, and asserts nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import h5py
import numpy as np

import refspec
from refspec import goldens
from refspec.comparator.judging.caches import scan_cache
from refspec.comparator.sources.arrays import open_bin
from refspec.goldens.export import export_cases

from bench_generate import best, case_of
from bench_kv_cache import MODES, VALUES, mode_arguments, refspec_case
from results import print_results

CACHES = ("k_cache", "ckv_cache")


def kernel_answers(folder: Path) -> dict:
    """Each output file of the exported case holds its golden (the caches: the input files,
    updated), as a right kernel leaves them; the cache files by output name."""
    doc = json.loads((folder / "case.json").read_text())
    files = {}
    for f in doc["files"]:
        if f["role"] == "golden":
            shutil.copy(folder / f["name"], folder / f["output_file"])
            files[f["python_name"]] = folder / f["output_file"]
    (folder / "status.json").write_text('{"code": 0}')
    return files


def read_bytes(golden: Path, case_id: str, files: dict) -> int:
    """The actual caches and the input caches, read whole (the bytes a comparison needs)."""
    n = 0
    for name in CACHES:
        n += np.fromfile(files[name], dtype=np.uint8).size
    with h5py.File(golden, "r") as f:
        group = f[f"cases/{case_id}/inputs"] if f"cases/{case_id}" in f else None
        for name in CACHES:
            ds = group[name] if group is not None else _find(f, name)
            n += ds[()].nbytes
    return n


def _find(f: h5py.File, name: str):
    found = []
    f.visititems(lambda path, obj: found.append(obj) if path.endswith(f"inputs/{name}")
                 and isinstance(obj, h5py.Dataset) else None)
    return found[0]


def scan(golden: Path, case_id: str, files: dict) -> None:
    with goldens.open(golden) as gf:
        case = gf[case_id]
        for name in CACHES:
            given = case.inputs[name]
            actual = open_bin(str(files[name]), given.dtype, given.shape, str(files[name]))
            scan_cache(actual, given, case.written[name][()], given.shape, "")


def bench(mode: str, shape: dict, repeat: int, tmp: Path) -> dict:
    case = case_of("kv_rope_cache", {**VALUES, "cache_mode": mode}, shape)
    golden = tmp / f"{mode}.h5"
    refspec_case(case, golden, 2)
    out = tmp / f"out-{mode}"
    folder = Path(export_cases(golden, out)[0])
    files = kernel_answers(folder)
    r = {"case": case.id,
         "cache MB (each side)": round(sum(files[n].stat().st_size for n in CACHES) / 1e6, 1)}
    read_bytes(golden, case.id, files)                       # into the page cache
    r["bytes: cache files + input caches, s"] = best(lambda: read_bytes(golden, case.id, files),
                                                     repeat)
    r["scan of the two caches, s"] = best(lambda: scan(golden, case.id, files), repeat)
    report = refspec.compare(golden, out)
    r["compare passes"] = report.passed
    r["refspec compare (whole case), s"] = best(lambda: refspec.compare(golden, out), repeat)
    base = r["bytes: cache files + input caches, s"]
    r["scan / bytes"] = r["scan of the two caches, s"] / base
    r["compare / bytes"] = r["refspec compare (whole case), s"] / base
    return r


def main(argv=None):
    args, shape = mode_arguments(__doc__, argv)
    results = {"cpus": len(os.sched_getaffinity(0)), "load average before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="refspec-bench-cache-") as tmp:
        for mode in args.only.split(","):
            results[mode] = bench(mode.strip(), shape, args.repeat, Path(tmp))
    results["load average after"] = os.getloadavg()
    print_results(results)


if __name__ == "__main__":
    main()
