"""What the diagnosis of failing outputs costs: the same comparison with and without it, in
the same run.

    python benchmarks/bench_diagnosis.py                       # 100 failing outputs
    python benchmarks/bench_diagnosis.py --failing 300
    python benchmarks/bench_diagnosis.py --golden FILE.h5      # another golden file

Writes the quick tier of the standard sweep (``refspec generate --sweep standard --tier quick``)
into a temporary directory unless ``--golden`` names a file. ``--failing`` outputs, taken at an
even stride over every output of the file's positive cases (so the large ones are among them),
get a kernel's mistake each, in turn: the golden's negative, twice the golden, zeros, the
halves of the last axis exchanged, one ulp off everywhere; every other output is the rounded
golden. Then ``refspec.compare`` judges all of it with ``diagnose=False`` and with the diagnosis
(best of ``--repeat`` runs each, in one process after a warm-up comparison), and prints both
times, the added seconds, the slowest outputs' diagnosis and how many failing outputs got a
first finding of each kind. It asserts nothing.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import refspec
import refspec.goldens as goldens
from refspec.spec.dtypes import round_to

from results import print_results

MISTAKES = ("negated", "doubled", "zeros", "halves", "one_ulp")


def wrong(expected: np.ndarray, exact: np.ndarray, mistake: str) -> np.ndarray:
    """A kernel's wrong output of the golden's dtype."""
    dt = expected.dtype
    if mistake == "negated":
        return -expected
    if mistake == "doubled":
        return round_to(2 * exact, dt)
    if mistake == "zeros":
        return np.zeros_like(expected)
    if mistake == "halves" and expected.ndim and expected.shape[-1] % 2 == 0:
        h = expected.shape[-1] // 2
        return np.ascontiguousarray(np.concatenate([expected[..., h:], expected[..., :h]], -1))
    with np.errstate(all="ignore"):
        return np.nextafter(expected.astype(np.float64), np.inf).astype(dt) if dt.itemsize > 2 \
            else round_to(exact * (1 + 2.0 ** -7), dt)


def actuals(path: str, failing: int) -> tuple[dict, int]:
    """{case id: {output: array}} for every positive case, ``failing`` outputs wrong."""
    with goldens.open(path) as gf:
        rows = [(cid, name) for cid in gf.case_ids() if not gf[cid].is_negative
                for name in gf[cid].output_names]
        stride = max(1, len(rows) // max(failing, 1))
        mistakes = {rows[i]: MISTAKES[k % len(MISTAKES)]
                    for k, i in enumerate(range(0, len(rows), stride)) if k < failing}
        out: dict = {}
        for cid, name in rows:
            case = gf[cid]
            expected = case.expected[name][()]
            if (cid, name) in mistakes:
                expected = wrong(expected, np.asarray(case.exact[name][()]), mistakes[(cid, name)])
            out.setdefault(cid, {})[name] = expected
    return out, len(rows)


def timed(path, actual, repeat: int, **options):
    best, report = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = refspec.compare(path, actual, only_present=True, **options)
        best = min(best, time.perf_counter() - t0)
    return best, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--golden")
    ap.add_argument("--failing", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.golden
        if path is None:
            path = os.path.join(tmp, "standard-quick.h5")
            subprocess.run([sys.executable, "-m", "refspec", "generate", "--sweep", "standard",
                            "--tier", "quick", "-o", path], check=True, stdout=subprocess.DEVNULL)
        actual, n_rows = actuals(path, args.failing)
        timed(path, {k: actual[k] for k in list(actual)[:3]}, 1)       # warm-up
        plain, quiet = timed(path, actual, args.repeat, diagnose=False)
        diag, report = timed(path, actual, args.repeat)
        failing = [r for r in report.results if r.status == "fail"]
        first = collections.Counter(r.diagnosis[0].kind if r.diagnosis else "(none)"
                                    for r in failing)
        elements = sorted(((int(np.prod(r.shape or ())), r.case_id, r.output) for r in failing),
                          reverse=True)[:3]
        print_results({
            "golden": f"{path} ({n_rows} outputs of positive cases)",
            "load average at the start": os.getloadavg()[0],
            "failing outputs": len(failing),
            "same verdicts": [r.status for r in quiet.results] == [r.status for r in report.results],
            "compare, no diagnosis (s)": plain,
            "compare with the diagnosis (s)": diag,
            "added by the diagnosis (s)": diag - plain,
            "per failing output (ms)": 1e3 * (diag - plain) / max(len(failing), 1),
            "first findings": dict(first),
            "largest failing outputs (elements)": {f"{cid} {out}": n for n, cid, out in elements},
        })


if __name__ == "__main__":
    main()
