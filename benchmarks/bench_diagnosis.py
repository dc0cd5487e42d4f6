"""How well the diagnosis of failing outputs does, and what it costs.

    python benchmarks/bench_diagnosis.py                       # the corpus score (smoke sweep)
    python benchmarks/bench_diagnosis.py --golden FILE.h5      # the corpus on another golden file
    python benchmarks/bench_diagnosis.py --golden FILE.h5 --kernels 'rg_*' 'rope_grad_correct_*'
    python benchmarks/bench_diagnosis.py --failing 100         # the cost on the quick tier
    python benchmarks/bench_diagnosis.py --failing 300 --golden FILE.h5

The score: every kernel of the corpus of broken kernels (tests/impls/diagnosis_corpus.py, each
labelled with the finding that names its mistake) and of its correct kernels (float32 and I/O
dtype arithmetic) is run with ``refspec run`` on the smoke sweep (written into a temporary
directory unless ``--golden`` names a file), each on the cases of its operator. Printed: the
fraction of the broken kernels' failing outputs whose first finding names the mistake (the
corpus's matching rule: kind and key detail), the fraction of failing outputs with no finding,
the correct kernels' false bug calls (a failing output with a finding that claims a logic
error), and the time the diagnosis adds (the whole corpus judged with ``diagnose=False`` and
with the diagnosis, in one process); per operator and per kernel, the share named and the most
common first finding of the outputs not named. ``--kernels`` scores the corpus kernels whose
names match one of its shell patterns only (a subset costs a fraction of the CPU).

The cost (``--failing N``): writes the quick tier of the standard sweep (``refspec generate
--sweep standard --tier quick``) into a temporary directory unless ``--golden`` names a file.
``--failing`` outputs, taken at an
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
import fnmatch
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "impls"))
import diagnosis_corpus as corpus  # noqa: E402  (tests/impls/diagnosis_corpus.py)

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


def corpus_score(path: str, patterns=None) -> None:
    """The corpus score on ``path`` (see the module docstring), of the kernels matching one of
    ``patterns`` (None: all)."""
    kernels = [k for k in [*corpus.BROKEN.values(), *corpus.CORRECT.values()]
               if patterns is None or any(fnmatch.fnmatch(k.name, p) for p in patterns)]
    broken_kernels = [k for k in kernels if k.mistakes]
    quiet = corpus.score(path, kernels, diagnose=False)
    sc = corpus.score(path, kernels)
    broken, correct = sc.broken(), sc.correct()
    ops = collections.Counter(k.op for k in broken_kernels)
    per_op: dict = {}
    for r in broken:
        named, n = per_op.get(r.op, (0, 0))
        per_op[r.op] = (named + r.named, n + 1)
    missed = collections.defaultdict(collections.Counter)
    for r in broken:
        if not r.named:
            missed[r.kernel][r.first.split(":")[0] or "(none)"] += 1
    print_results({
        "golden": path,
        "load average at the start": os.getloadavg()[0],
        "broken kernels": f"{len(broken_kernels)} ({dict(ops)})",
        "correct kernels": len(kernels) - len(broken_kernels),
        "broken kernels that fail nothing": sc.silent_kernels or "none",
        "failing outputs of the broken kernels": len(broken),
        "named by the first finding": f"{sc.named:.3f} ({sum(r.named for r in broken)})",
        "named, mean over the kernels": f"{sc.named_per_kernel:.3f}",
        "empty diagnosis (every failing output)": f"{sc.empty:.3f} "
                                                  f"({sum(not r.first for r in sc.rows)} of {len(sc.rows)})",
        "failing outputs of the correct kernels": len(correct),
        "false bug calls on them": f"{sc.false_bugs} ({sc.false_bugs / max(len(correct), 1):.3f})",
        "corpus judged without the diagnosis (s)": quiet.seconds,
        "corpus judged with it (s)": sc.seconds,
        "added by the diagnosis (s)": sc.seconds - quiet.seconds,
        "per failing output (ms)": 1e3 * (sc.seconds - quiet.seconds) / max(len(sc.rows), 1),
        "named per operator": {op: f"{a}/{n}" for op, (a, n) in per_op.items()},
        "named per kernel (first findings of the others)": {
            k: f"{a}/{n}" + (f" {dict(missed[k])}" if a < n else "")
            for k, (a, n) in sc.per_kernel().items()},
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--golden")
    ap.add_argument("--failing", type=int, help="the cost mode: this many failing outputs")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--kernels", nargs="+", metavar="PATTERN",
                    help="score only the corpus kernels whose names match")
    args = ap.parse_args()
    if args.failing is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = args.golden
            if path is None:
                path = os.path.join(tmp, "smoke.h5")
                subprocess.run([sys.executable, "-m", "refspec", "generate", "-o", path],
                               check=True, stdout=subprocess.DEVNULL)
            corpus_score(path, args.kernels)
        return
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
