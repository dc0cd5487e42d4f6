"""What checking the golden file costs a comparison: `refspec.compare()` of one large output
in this source tree (every dataset of the case checked before it is judged, each block of the
expected output read and checked against the exact one as the pass reads it) against another
tree on the same files (``--against SRC``, e.g. ``git archive main | tar -x -C SRC``: a tree
without these checks), in fresh processes, alternated, best of ``--repeat``.

    python benchmarks/bench_compare_checks.py --against SRC                  # 2^25 float32
    python benchmarks/bench_compare_checks.py --against SRC --dtype bfloat16 --elements 25

The pair is bench_compare.py's (one RotaryPositionEmbedding output of random exact values, an
actual one ulp off in one element of 997: every output passes), written by this tree. Each
measurement is bench_compare.py's in-process child: imports and the compiled pass loaded
first, then only the comparison timed; its peak RSS (VmHWM) too. Before that, in this process,
the check alone: the CPU time of reading the output's exact and expected blocks as the pass
reads them, with and without the check. The script asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_compare import DTYPES, run_child, write_pair  # noqa: E402


def check_alone(golden: str, dtype: str, repeat: int) -> None:
    """In this process, CPU seconds (``time.process_time``: less sensitive to other processes
    than wall time) of reading the output's exact and expected blocks as the pass does
    (``BlockReader``, the pass's block plan), with and without checking each expected block
    against the exact one (``check_rounding``), best of ``repeat``; and of the case's other
    datasets checked before it is judged (``check_golden_case``)."""
    import time

    import refspec.goldens as goldens
    from bench_compare import case_id
    from refspec.comparator.judging.golden_output import check_golden_case, golden_output
    from refspec.comparator.judging.measure import check_rounding
    from refspec.comparator.judging.streaming import READ_ELEMENTS, BlockReader, plan_blocks
    import numpy as np

    with goldens.open(golden) as gf:
        case = gf[case_id(dtype)]
        out = golden_output(case, "y")
        plan = list(plan_blocks(out.shape, READ_ELEMENTS, out.exact.chunks))
        times = {}
        for checked in (False, True, False, True) * repeat:
            g_rd, e_rd = BlockReader(out.exact, np.float64), BlockReader(case.expected["y"])
            t0 = time.process_time()
            for key, flat0, count in plan:
                g, e = g_rd.read(key, flat0, count), e_rd.read(key, flat0, count)
                if checked:
                    check_rounding(case.expected["y"], out, flat0, e, g)
            t = time.process_time() - t0
            times[checked] = min(times.get(checked, t), t)
        t0 = time.process_time()
        check_golden_case(gf[case_id(dtype)])
        before = time.process_time() - t0
    print(f"reading exact and expected blocks: {times[False]:.3f} s CPU; with the check "
          f"{times[True]:.3f} s ({times[True] / times[False]:.2f}x); the case's datasets "
          f"checked before judging: {before * 1e3:.1f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="another source tree (its refspec/)")
    ap.add_argument("--elements", type=float, default=25, help="log2 of the output's elements")
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    here = os.path.dirname(HERE)
    trees = {"this tree": here, "against": os.path.abspath(args.against)}
    d = tempfile.mkdtemp(prefix="refspec-bench-checks-")
    try:
        golden, n = write_pair(d, args.elements, args.dtype)
        print(f"{n} {args.dtype} elements, golden {os.path.getsize(golden) / 2**20:.0f} MiB; "
              f"load average {os.getloadavg()[0]:.2f}")
        check_alone(golden, args.dtype, args.repeat)
        best = {k: None for k in trees}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=tree)
                info = run_child("api", golden, os.path.join(d, "sparse"), args.dtype, env)
                if best[name] is None or info["seconds"] < best[name]["seconds"]:
                    best[name] = info
        for name, info in best.items():
            print(f"{name:10s} {info['seconds']:.3f} s  peak RSS {info['peak_rss_mib']:.0f} MiB  "
                  f"{info['status']}")
        print(f"ratio this tree / against: "
              f"{best['this tree']['seconds'] / best['against']['seconds']:.2f}; "
              f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
