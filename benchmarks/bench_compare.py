"""Streaming comparison of a large golden/actual pair: throughput and peak memory, whole
process and in process, beside NumPy, h5py and msprobe on the same pair.

    python benchmarks/bench_compare.py                       # 2^26 float32 elements (256 MiB)
    python benchmarks/bench_compare.py --elements 28         # 2^28 (1 GiB of float32 output)
    python benchmarks/bench_compare.py --dtype bfloat16      # a 2-byte output (float16 likewise)
    python benchmarks/bench_compare.py --reference           # also the reference step, same report?

Writes into a temporary directory (removed at the end): a golden HDF5 file with one
RotaryPositionEmbedding case whose output ``y`` (elementwise; float32 unless ``--dtype`` says
otherwise) has the exact float64 values and the rounded ones, stored as the golden store writes
them by default (no compression, its chunking), and two kernels' ``y.bin`` in the export layout:
*sparse* (the rounded values, one element in 997 off by one ulp) and *dense* (every element off
by one ulp, up or down at random). A 16-bit output one ulp off exceeds the default standard, so
those reports fail: only their speed matters. Each measurement runs in a fresh child process:

1. ``refspec compare GOLDEN ACTUAL`` through the command line (``refspec.cli.main``): the wall
   time of the whole process (interpreter start, imports, loading the compiled kernel, the
   comparison, the terminal report) and its peak RSS (``VmHWM``); sparse and dense;
2. the same once more with an empty numba cache (``NUMBA_CACHE_DIR`` set to a fresh directory):
   the cold start, compiling the fused kernel;
3. ``refspec.compare(golden, actual)`` timed in a process that has imported refspec and run a
   tiny comparison first: the comparison alone; with ``--reference`` also
   ``compare(..., fast=False)`` on the sparse actual and whether its report equals the fused
   one (every count, maximum, element and histogram bin; the float sums within 1e-12);
4. NumPy reading the actual's bytes once and h5py reading the golden's exact and rounded
   datasets once (what any comparison must at least read);
5. msprobe (mindstudio-probe, where installed): its compare's per-tensor metrics
   (``msprobe.core.compare.npy_compare.compare_ops_apply``: cosine, max abs error, ...) on the
   same pair, read whole as msprobe does, in process; skipped with a note where not installed.

The files are freshly written, so all reads come from a warm page cache. Run it alone on the
machine (the load average is printed); the comparison uses every CPU it may.
"""

from __future__ import annotations

from refspec.goldens.cases import CaseData
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

DTYPES = ("float32", "float16", "bfloat16")


def case_id(dtype: str) -> str:
    return f"rope/bench/mode=half/layout=BNSD/cos=11SD/dtype={dtype}"


def one_ulp(bits: np.ndarray, away) -> np.ndarray:
    """The bit patterns of the neighbours one ulp away from zero (``away``) or towards it
    (never across zero: a zero moves away)."""
    magnitude = bits & bits.dtype.type((1 << (8 * bits.itemsize - 1)) - 1)
    step = np.where(away | (magnitude == 0), 1, -1)
    return (bits.astype(np.int64) + step).astype(bits.dtype)


def write_pair(d: str, n_log2: float, dtype: str = "float32") -> tuple[str, int]:
    """A golden file with one RotaryPositionEmbedding output of about 2^n_log2 elements (random
    exact values, rounded to ``dtype``), written by refspec's GoldenWriter, and two actual
    directories: ``sparse`` (1 element in 997 one ulp away) and ``dense`` (every element)."""
    import refspec
    import refspec.goldens as goldens
    from refspec.spec.dtypes import resolve_dtype
    from refspec.spec.terms import ELEMENTWISE, OutputTerms

    B, N, D = 8, 32, 128
    S = max(1, int(round(2 ** n_log2 / (B * N * D))))
    shape = (B, N, S, D)
    n = B * N * S * D
    path = os.path.join(d, "golden.h5")
    cid = case_id(dtype)
    dt = np.dtype(resolve_dtype(dtype))
    rng = np.random.default_rng(1)
    exact = rng.standard_normal(shape)
    rounded = refspec.round_to(exact, dt)
    params = {"op": "rope", "mode": "half", "layout": "BNSD", "cos": "11SD",
              "dtype": dtype, "B": B, "N": N, "S": S, "D": D}
    with goldens.GoldenWriter(path, sweep_name="bench", sweep_definition="", sweep_seed=0) as w:
        w.write_case(CaseData(cid, 'rotary_position_embedding', params, 0, {},
                              expected={'y': rounded}, exact={'y': exact},
                              terms={'y': OutputTerms(ELEMENTWISE)}, axes={'y': 'BNSD'},
                              regenerate='benchmarks/bench_compare.py'))
    del exact
    flat = np.ascontiguousarray(rounded).reshape(-1).view(f"u{dt.itemsize}")
    up = rng.integers(0, 2, flat.size).astype(bool)
    for kind, bits in (("dense", one_ulp(flat, up)), ("sparse", flat)):
        if kind == "sparse":
            bits[::997] = one_ulp(bits[::997], True)
        out_dir = os.path.join(d, kind, *cid.split("/"))
        os.makedirs(out_dir)
        bits.tofile(os.path.join(out_dir, "y.bin"))
    return path, n


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: reset by exec, so the parent's size does not
    count)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(kind: str, golden: str, actual: str, dtype: str) -> dict:
    info = {}
    if kind == "cli":
        from refspec.cli import main
        try:
            main(["compare", golden, actual], prog_name="refspec")
        except SystemExit as exc:
            info["exit"] = exc.code
    elif kind in ("api", "reference"):
        import dataclasses

        from refspec.comparator import compare
        from refspec.comparator.sources.memory_case import spec_case
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
        warm = spec_case("rotary_position_embedding", x=x, cos=x, sin=x, mode=0)
        compare(warm, {"y": warm.expected["y"]})                  # loads the compiled kernel
        t0 = time.perf_counter()
        report = compare(golden, actual, fast=kind == "api")
        info["seconds"] = time.perf_counter() - t0
        r = report.results[0]
        info.update(status=r.status, summary=report.summary_line(),
                    metrics=dataclasses.asdict(r.metrics))
    elif kind == "numpy":
        path = os.path.join(actual, *case_id(dtype).split("/"), "y.bin")
        t0 = time.perf_counter()
        buf = np.empty(1 << 24, np.uint8)
        with open(path, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass
        info["seconds"] = time.perf_counter() - t0
    elif kind == "h5py":
        import refspec.goldens as goldens
        t0 = time.perf_counter()
        with goldens.open(golden) as gf:
            case = gf[case_id(dtype)]
            for arr in (case.exact["y"], case.expected["y"]):
                for _ in arr.blocks(64 << 20):
                    pass
        info["seconds"] = time.perf_counter() - t0
    elif kind == "msprobe":
        import logging
        logging.disable(logging.WARNING)
        from msprobe.core.compare.npy_compare import compare_ops_apply

        import refspec.goldens as goldens
        from refspec.spec.dtypes import resolve_dtype
        t0 = time.perf_counter()
        with goldens.open(golden) as gf:
            g = gf[case_id(dtype)].exact["y"].read()
        a = np.fromfile(os.path.join(actual, *case_id(dtype).split("/"), "y.bin"),
                        dtype=np.uint16 if dtype == "bfloat16" else dtype)
        if dtype == "bfloat16":
            a = a.view(resolve_dtype("bfloat16"))
        a = a.reshape(g.shape).astype(np.float32)   # msprobe compares bfloat16 as float32
        result, msg = compare_ops_apply(a, g, False, "")
        info["seconds"] = time.perf_counter() - t0
        info["result"] = [str(v) for v in result]
    info["peak_rss_mib"] = peak_rss_mib()
    return info


SUM_FIELDS = ("rmse", "cosine", "mean_rel")


def same_report(a: dict, b: dict) -> str:
    diff = []
    for k, v in a.items():
        if k in SUM_FIELDS and v is not None and b[k] is not None:
            if abs(v - b[k]) > 1e-12 * max(abs(v), abs(b[k])):
                diff.append(k)
        elif v != b[k]:
            diff.append(k)
    if diff:
        return "DIFFERENT: " + ", ".join(diff)
    return "equal (every count, maximum, element and bin; RMSE, cosine, mean rel within 1e-12)"


def run_child(kind, golden, actual, dtype, env=None) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", kind, golden, actual, dtype],
                         capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    lines = out.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        sys.exit(f"{kind} child failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    info = json.loads(lines[-1])
    info["wall"] = wall
    if kind == "cli":
        info["seconds"] = wall
        info["summary"] = lines[-2] if len(lines) > 1 else ""
    return info


def have_msprobe() -> bool:
    import importlib.util
    return importlib.util.find_spec("msprobe") is not None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=float, default=26,
                    help="log2 of the number of output elements (default 26: 256 MiB of float32)")
    ap.add_argument("--dir", default=None, help="where to write the pair (default: a temp dir)")
    ap.add_argument("--reference", action="store_true",
                    help="also time the reference step (fast=False) and check the same report")
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--no-msprobe", action="store_true",
                    help="leave msprobe out (it holds the whole pair in memory, about 56 bytes "
                         "per element; left out by itself above 2^27 elements)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        info = child(*args.child)
        print(json.dumps(info))
        return
    base = args.dir or tempfile.gettempdir()
    need = 14 * 2 ** args.elements * 1.1
    free = shutil.disk_usage(base).free
    if free < need:
        sys.exit(f"need {need / 2**30:.1f} GiB free in {base}, have {free / 2**30:.1f} GiB")
    d = tempfile.mkdtemp(prefix="refspec-bench-", dir=base)
    load0 = os.getloadavg()
    try:
        t0 = time.perf_counter()
        golden, n = write_pair(d, args.elements, args.dtype)
        itemsize = 2 if args.dtype != "float32" else 4
        asize = n * itemsize
        gsize = os.path.getsize(golden)
        print(f"wrote golden {gsize / 2**30:.2f} GiB + two actuals of {asize / 2**20:.0f} MiB "
              f"({n} {args.dtype} elements, compression none) in {time.perf_counter() - t0:.1f} s; "
              f"{os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
        sparse, dense = os.path.join(d, "sparse"), os.path.join(d, "dense")
        rows = []
        cold_env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(d, "numba-cold"))
        rows.append(("CLI, sparse actual (whole process)", run_child("cli", golden, sparse, args.dtype), asize))
        rows.append(("CLI, dense actual (whole process)", run_child("cli", golden, dense, args.dtype), asize))
        rows.append(("CLI, dense, cold numba cache (compiles)",
                     run_child("cli", golden, dense, args.dtype, cold_env), asize))
        api_s = run_child("api", golden, sparse, args.dtype)
        api_d = run_child("api", golden, dense, args.dtype)
        rows.append(("compare() in process, sparse", api_s, asize))
        rows.append(("compare() in process, dense", api_d, asize))
        ref = None
        if args.reference:
            ref = run_child("reference", golden, sparse, args.dtype)
            rows.append(("compare(fast=False) reference, sparse", ref, asize))
        rows.append(("NumPy reads the actual bytes once", run_child("numpy", golden, sparse, args.dtype), asize))
        rows.append(("h5py reads exact + rounded golden once", run_child("h5py", golden, sparse, args.dtype), gsize))
        ms = None
        ms_note = "msprobe: not installed (pip install mindstudio-probe), not measured"
        if args.no_msprobe or args.elements > 27:
            ms_note = "msprobe: left out (--no-msprobe, or more than 2^27 elements)"
        elif have_msprobe():
            ms = run_child("msprobe", golden, dense, args.dtype)
            rows.append(("msprobe compare_ops_apply, dense (in process)", ms, asize))
        print(f"{'':<48} {'time':>8} {'GB/s':>7} {'peak RSS':>10}")
        for label, r, nbytes in rows:
            print(f"{label:<48} {r['seconds']:6.2f} s {nbytes / r['seconds'] / 1e9:7.2f} "
                  f"{r['peak_rss_mib']:6.0f} MiB")
        print("(GB/s: bytes of actual output per second; for the h5py row, of golden file)")
        print(f"sparse: {api_s['summary']}")
        print(f"dense: {api_d['summary']}")
        if ref is not None:
            print(f"reference / fused (sparse, in process): {ref['seconds'] / api_s['seconds']:.1f}x;"
                  f" report {same_report(api_s['metrics'], ref['metrics'])}")
        if ms is not None:
            print(f"msprobe / refspec compare() in process (dense): "
                  f"{ms['seconds'] / api_d['seconds']:.1f}x; msprobe / refspec CLI whole process "
                  f"(dense): {ms['seconds'] / rows[1][1]['seconds']:.1f}x")
        else:
            print(ms_note)
        load1 = os.getloadavg()
        print(f"load average after the runs: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
