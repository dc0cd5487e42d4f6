"""Streaming comparison of a large golden/actual pair: peak memory and throughput.

    python benchmarks/bench_compare.py --reference     # golden 4.5 GiB + two actuals of 1.5 GiB
    python benchmarks/bench_compare.py --elements 26   # 2^26 elements: a quick run
    python benchmarks/bench_compare.py --dtype bfloat16 # a 2-byte output (float16 likewise)

Writes into a temporary directory (removed at the end): a golden HDF5 file with one
RotaryPositionEmbedding case whose output ``y`` (an elementwise output; float32 unless
``--dtype`` says otherwise) has the exact
float64 values, the rounded ones and their self statistics (refspec.selfstats), stored under the
golden store's default compression with its chunking, written block by block; and two kernels'
``y.bin`` in the export layout: *sparse* (the rounded values, one element in 997 off by one ulp)
and *dense* (every element off by one ulp, up or down at random: the screen cannot help). A
bfloat16 or float16 output one ulp off exceeds the default standard's tolerance, so those
reports fail: only their speed matters here. Then,
each in a fresh child process:

1. ``refspec.compare(golden, sparse)`` and ``refspec.compare(golden, dense)``: wall time, peak
   RSS (``VmHWM`` of the child), throughput in bytes of actual output per second, and which path judged
   (``screened``: bit comparison with the rounded golden plus the self statistics; ``full``);
   with ``--reference`` also ``compare(golden, sparse, fast=False)`` (every block through the
   reference step), its report checked against the screened one: every count, histogram bin,
   maximum, index and worst element equal, the float sums (RMSE, cosine, mean relative error)
   within 1e-12 relative;
2. NumPy reading the same actual bytes once (``np.fromfile`` in 64 MiB blocks);
3. h5py reading the golden's exact and expected datasets once.

The files are freshly written, so all read from a warm page cache. Run it alone: the numbers
are one core's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from refspec.spec.dtypes import resolve_dtype

DTYPES = ("float32", "float16", "bfloat16")


def case_id(dtype: str) -> str:
    return f"rope/bench/mode=half/layout=BNSD/cos=11SD/dtype={dtype}"


def one_ulp(bits: np.ndarray, away: np.ndarray | bool) -> np.ndarray:
    """The bit patterns of the neighbours one ulp away from zero (``away``) or towards it
    (never across zero: a zero moves away)."""
    magnitude = bits & bits.dtype.type((1 << (8 * bits.itemsize - 1)) - 1)
    step = np.where(away | (magnitude == 0), 1, -1)
    return (bits.astype(np.int64) + step).astype(bits.dtype)


def write_pair(d: str, n_log2: float, dtype: str = "float32") -> tuple[str, str, int]:
    import refspec
    import refspec.goldens as goldens
    import refspec.selfstats as selfstats
    from refspec._version import __version__
    from refspec.goldens.format import chunk_shape, compression_filters, encode_array
    from refspec.goldens.write import append_index, create_golden_file, require_case_parent
    from refspec.selfstats import SelfStatsBuilder

    B, N, D = 8, 32, 128
    S = int(round(2 ** n_log2 / (B * N * D)))
    shape = (B, N, S, D)
    n = B * N * S * D
    path = os.path.join(d, "golden.h5")
    f = create_golden_file(path, {"schema_version": 1, "refspec_version": __version__,
                                  "sweep_name": "bench", "sweep_definition": "", "sweep_seed": 0,
                                  "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    filters = compression_filters(goldens.DEFAULT_COMPRESSION)
    CASE_ID = case_id(dtype)
    dt = np.dtype(resolve_dtype(dtype))
    out_dir = os.path.join(d, "actual", *CASE_ID.split("/"))
    os.makedirs(out_dir)
    with f:
        parent = require_case_parent(f, CASE_ID)
        g = parent.create_group(CASE_ID.rsplit("/", 1)[1])
        params = {"op": "rope", "mode": 0, "layout": "BNSD", "cos_pattern": "11SD",
                  "dtype": dtype, "B": B, "N": N, "S": S, "D": D}
        for k, v in dict(case_id=CASE_ID, op="rotary_position_embedding", params=json.dumps(params),
                         seed=0, soc="", distribution="random", expected_error_code=0,
                         regenerate="benchmarks/bench_compare.py").items():
            g.attrs[k] = v
        g.create_group("inputs")
        stored_dt, enc = encode_array(np.zeros(1, dt))
        exp = g.create_group("expected").create_dataset(
            "y", shape, stored_dt.dtype, chunks=chunk_shape(shape, dt.itemsize), **filters)
        exp.attrs.update(**enc, comparison_class="elementwise", reduced_terms=-1, axes="BNSD")
        ex = g.create_group("exact").create_dataset(
            "y", shape, np.float64, chunks=chunk_shape(shape, 8), **filters)
        ex.attrs["dtype"] = "float64"
        rng = np.random.default_rng(1)
        stats = SelfStatsBuilder(dt)
        dense_dir = os.path.join(d, "dense", *CASE_ID.split("/"))
        os.makedirs(dense_dir)
        with open(os.path.join(out_dir, "y.bin"), "wb") as fh, \
                open(os.path.join(dense_dir, "y.bin"), "wb") as fd:
            for b in range(B):
                for n0 in range(0, N, max(1, (1 << 22) // (S * D))):
                    n1 = min(N, n0 + max(1, (1 << 22) // (S * D)))
                    exact = rng.standard_normal((1, n1 - n0, S, D))
                    rounded = refspec.round_to(exact, dt)
                    ex[b:b + 1, n0:n1] = exact
                    exp[b:b + 1, n0:n1] = encode_array(rounded)[0]
                    stats.add(rounded, exact)
                    flat = np.ascontiguousarray(rounded).reshape(-1).view(f"u{dt.itemsize}")
                    up = rng.integers(0, 2, flat.size).astype(bool)
                    fd.write(memoryview(one_ulp(flat, up)).cast("B"))
                    flat[::997] = one_ulp(flat[::997], True)
                    fh.write(memoryview(flat).cast("B"))
        exp.attrs["self_stats"] = selfstats.dumps(stats.finish())
        append_index(f, CASE_ID)
        f.attrs["complete"] = True
    return path, os.path.join(d, "actual"), n


def child(kind: str, golden: str, actual: str, dtype: str) -> dict:
    CASE_ID = case_id(dtype)
    t0 = time.perf_counter()
    info = {}
    if kind in ("compare", "reference", "dense"):
        import dataclasses

        from refspec.comparator import compare
        if kind == "dense":
            actual = os.path.join(os.path.dirname(actual), "dense")
        report = compare(golden, actual, fast=kind != "reference")
        r = report.results[0]
        info = {"status": r.status, "elements": r.metrics.n, "mismatches": r.metrics.failures,
                "summary": report.summary_line(), "path": r.metrics.path,
                "metrics": dataclasses.asdict(r.metrics)}
    elif kind == "numpy":
        path = os.path.join(actual, *CASE_ID.split("/"), "y.bin")
        total = 0
        with open(path, "rb") as fh:
            while True:
                block = np.fromfile(fh, dtype=np.uint8, count=1 << 26)
                if block.size == 0:
                    break
                total += block.size
        info = {"bytes": total}
    elif kind == "h5py":
        import refspec.goldens as goldens
        with goldens.open(golden) as gf:
            case = gf[CASE_ID]
            for arr in (case.exact["y"], case.expected["y"]):
                for _ in arr.blocks(64 << 20):
                    pass
    info["seconds"] = time.perf_counter() - t0
    info["peak_rss_mib"] = peak_rss_mib()
    return info


def peak_rss_mib() -> float:
    """This process's peak resident memory: VmHWM (reset by exec, so the parent's size at the
    fork does not count), else ru_maxrss (which keeps the parent's across fork and exec)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: float sums: the screened path's tolerance against the full path (refspec.compare.screen)
SUM_FIELDS = ("rmse", "cosine", "mean_rel")


def same_report(a: dict, b: dict) -> str:
    """"identical" / "equal (sums within 1e-12 relative)" / what differs."""
    diff = []
    for k, v in a.items():
        if k == "path":
            continue
        if k in SUM_FIELDS and v is not None and b[k] is not None:
            if abs(v - b[k]) > 1e-12 * max(abs(v), abs(b[k])):
                diff.append(k)
        elif v != b[k]:
            diff.append(k)
    if diff:
        return "DIFFERENT: " + ", ".join(diff)
    if all(a[k] == b[k] for k in SUM_FIELDS):
        return "identical"
    return "equal (every count, maximum, index and worst element; sums within 1e-12 relative)"


def run_child(kind, golden, actual, dtype) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, golden, actual, dtype],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{kind} child failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=float, default=np.log2(3 * 2 ** 27),
                    help="log2 of the number of output elements (default: 3*2^27, 1.5 GiB float32)")
    ap.add_argument("--dir", default=None, help="where to write the pair (default: a temp dir)")
    ap.add_argument("--reference", action="store_true",
                    help="also time the reference step (fast=False) and check the same report")
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="the output's dtype (default float32; 2-byte dtypes halve the actual's bytes)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    base = args.dir or tempfile.gettempdir()
    need = 20 * 2 ** args.elements * 1.1
    free = shutil.disk_usage(base).free
    if free < need:
        sys.exit(f"need {need / 2**30:.1f} GiB free in {base}, have {free / 2**30:.1f} GiB")
    d = tempfile.mkdtemp(prefix="refspec-bench-", dir=base)
    try:
        t0 = time.perf_counter()
        golden, actual, n = write_pair(d, args.elements, args.dtype)
        gsize = os.path.getsize(golden)
        asize = n * np.dtype(resolve_dtype(args.dtype)).itemsize
        print(f"wrote golden {gsize / 2**30:.2f} GiB + actual {asize / 2**30:.2f} GiB "
              f"({n} {args.dtype} elements, compression {__import__('refspec.goldens').goldens.DEFAULT_COMPRESSION}) "
              f"in {time.perf_counter() - t0:.1f} s")
        cmp_ = run_child("compare", golden, actual, args.dtype)
        dense = run_child("dense", golden, actual, args.dtype)
        npy = run_child("numpy", golden, actual, args.dtype)
        h5 = run_child("h5py", golden, actual, args.dtype)
        load = os.getloadavg()

        def row(label, r, nbytes=asize):
            return (f"{label:<44} {r['seconds']:7.2f} s {nbytes / r['seconds'] / 1e9:6.2f} GB/s "
                    f"{r['peak_rss_mib']:6.0f} MiB")

        print(f"{'':<44} {'time':>9} {'speed':>11} {'peak RSS':>10}")
        print(row(f"compare, sparse actual ({cmp_['path']} path)", cmp_))
        print(row(f"compare, dense actual ({dense['path']} path)", dense))
        ref = None
        if args.reference:
            ref = run_child("reference", golden, actual, args.dtype)
            print(row("compare, sparse actual, reference (fast=False)", ref))
        print(row("numpy reads the actual bytes once", npy))
        print(row("h5py reads the golden's exact+expected once", h5, gsize))
        print(f"sparse: {cmp_['summary']}")
        print(f"dense: {dense['summary']}")
        print(f"ratio compare / numpy read of the actual bytes: sparse "
              f"{cmp_['seconds'] / npy['seconds']:.2f}x, dense {dense['seconds'] / npy['seconds']:.2f}x")
        if ref is not None:
            print(f"reference / screened (sparse): {ref['seconds'] / cmp_['seconds']:.1f}x; report "
                  f"{same_report(cmp_['metrics'], ref['metrics'])}")
        print(f"load average after the runs: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
