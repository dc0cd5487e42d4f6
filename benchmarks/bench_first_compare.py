"""A new user's first comparison: `refspec compare` of the exported smoke set, whole process,
with an empty numba cache (just installed) and again with the cache warm, side by side.

    python benchmarks/bench_first_compare.py
    python benchmarks/bench_first_compare.py --against SRC    # also an earlier source tree

Writes into a temporary directory: `refspec generate -o smoke.h5`, `refspec export`, and each
case folder's goldens linked as its outputs with a `status.json` (a kernel that returns the
goldens). Each measurement is a fresh process (`python -m refspec compare smoke.h5 DIR`) from
that directory, with `NUMBA_CACHE_DIR` set to a new empty directory for the cold run and kept for
the warm ones (best of three). With `--against SRC` (``git archive REV | tar -x -C SRC``) the same
runs with SRC first on PYTHONPATH on the same files. It asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from bench_store import golden_outputs_as_actuals
from results import print_results


def _time(cmd, cwd, env) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def runs(tmp: str, src: str | None) -> dict:
    """Cold and warm `refspec compare` of the tree ``src`` (None: the installed one)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(dir=tmp))
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "refspec", "compare", "smoke.h5", "out"]
    cold = _time(cmd, tmp, env)
    warm = min(_time(cmd, tmp, env) for _ in range(3))
    return {"first run, empty numba cache (s)": cold, "warm, best of 3 (s)": warm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = [sys.executable, "-m", "refspec"]
        subprocess.run(run + ["generate", "-o", "smoke.h5"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(run + ["export", "smoke.h5", "-o", "out"], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        golden_outputs_as_actuals(os.path.join(tmp, "out"))
        results = {"load average at the start": os.getloadavg()[0], "this tree": runs(tmp, None)}
        if args.against:
            results[f"against {args.against}"] = runs(tmp, os.path.abspath(args.against))
        results["load average at the end"] = os.getloadavg()[0]
        print_results(results)


if __name__ == "__main__":
    main()
