"""Golden-generation speed and memory, each measured against its peers in the same run.

    python benchmarks/bench_generate.py                 # all four measurements
    python benchmarks/bench_generate.py --only a,b,c    # skip the (minutes-long) sweep timing
    python benchmarks/bench_generate.py --only d --tier quick

(a) One large RotaryPositionEmbeddingGrad case (B=8, N=16, S=512, D=128, half, BNSD, cos 11SD,
    float32, with x): refspec's exact float64 outputs (the engine's blocked evaluation) against
    PyTorch autograd in float64 on the same inputs (how the vendor's golden scripts work) and
    against np.copyto of the float64 size of the case's inputs plus outputs (the memory-bandwidth
    floor); the plain spec function and the whole case (inputs, exact, rounded, tolerance terms)
    are shown too.
(b) One large NormRopeConcatBackward case (B=2, N=32, Sq=Sk=1024, Seq=Sek=256, D=128, types 2/2,
    half RoPE, Sr=1280): refspec exact against PyTorch autograd float64 (forward with
    layer_norm, concat, transpose, RoPE; backward with the same upstream gradients).
(c) Peak memory of generating each of those cases (inputs, outputs, terms and writing the HDF5
    file) in a fresh process, against the float64 size of its inputs plus outputs: the peak of
    NumPy's allocations (tracemalloc, with the case computed in that one process) and, in a
    second process, the growth of the resident set (the process's peak RSS, VmHWM, minus its
    RSS before the case) plus what each forked part of the blocked evaluation added to its own.
(d) `refspec generate --sweep standard` with --jobs 1 and --jobs 2 (wall time, fresh processes).

Targets (issue 3): (a) >= 3x faster than torch and <= 6x np.copyto; (b) >= 3x faster than
torch; (c) <= 4x; (d) >= 1.6x. The script prints the measured ratios; it asserts nothing.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import refspec
from refspec import blocked
from refspec.goldens.cases import build_case, draw_inputs
from refspec.goldens.sweep import Case, _case_params

ROPE_VALUES = dict(soc="A2", mode="half", layout="BNSD", cos="11SD", dtype="float32", x=True,
                   dist="random", fault="none")
ROPE_SHAPE = dict(B=8, N=16, S=512, D=128)
NRC_VALUES = dict(soc="A2", norm_type=2, norm_added_type=2, rope_type="half", concat_order=0,
                  dtype="float32", dist="random", fault="none")
NRC_SHAPE = dict(B=2, N=32, Sq=1024, Sk=1024, Seq=256, Sek=256, D=128, Sr=1280)
NRC_NAMES = list(inspect.signature(refspec.norm_rope_concat_backward).parameters)[:21]


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def case_of(op, values, shape, seed=2024):
    p = _case_params(op, values, shape)
    return Case(f"{op}/bench", op, p, seed)


def copy_floor(nbytes, repeat):
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)                 # touch the pages once
    return best(lambda: np.copyto(dst, src), repeat)


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


# --- (a) ---------------------------------------------------------------------------------------

def bench_rope(repeat, torch):
    case = case_of("rope_grad", ROPE_VALUES, ROPE_SHAPE)
    inp = draw_inputs(case)
    dy, cos, sin, x = inp["dy"], inp["cos"], inp["sin"], inp["x"]
    out_elems = dy.size + 2 * cos.size
    nbytes = 8 * (sum(a.size for a in inp.values()) + out_elems)
    r = {"case": case.id, "f64 inputs+outputs MB": nbytes / 1e6}
    r["refspec blocked exact s"] = best(lambda: blocked.rope_grad_blocked(
        dy, cos, sin, x, 0, soc="A2", with_terms=False), repeat)
    r["refspec blocked exact+terms s"] = best(lambda: blocked.rope_grad_blocked(
        dy, cos, sin, x, 0, soc="A2"), repeat)
    r["refspec plain spec exact s"] = best(lambda: refspec.rotary_position_embedding_grad(
        dy, cos, sin, x, 0, soc="A2", out_dtype=np.float64), max(1, repeat - 1))
    r["np.copyto s"] = copy_floor(nbytes, repeat + 2)
    r["whole case (build_case) s"] = best(lambda: build_case(case), 1)
    if torch is not None:
        def run():
            X = torch.from_numpy(x).double().requires_grad_()
            C = torch.from_numpy(cos).double().requires_grad_()
            S = torch.from_numpy(sin).double().requires_grad_()
            x1, x2 = X.chunk(2, -1)
            y = X * C + torch.cat((-x2, x1), -1) * S
            y.backward(torch.from_numpy(dy).double())
            return X.grad, C.grad, S.grad
        r["torch autograd f64 s"] = best(run, repeat)
        got, _ = blocked.rope_grad_blocked(dy, cos, sin, x, 0, soc="A2", with_terms=False)
        ref = run()
        r["max |refspec - torch|"] = max(float(np.max(np.abs(got[k] - t.numpy())))
                                         for k, t in zip(("dx", "dcos", "dsin"), ref))
        r["torch / refspec (target >= 3)"] = r["torch autograd f64 s"] / r["refspec blocked exact s"]
    r["refspec / copyto (target <= 6)"] = r["refspec blocked exact s"] / r["np.copyto s"]
    r["plain spec / copyto"] = r["refspec plain spec exact s"] / r["np.copyto s"]
    return r


# --- (b) ---------------------------------------------------------------------------------------

def bench_nrc(repeat, torch):
    case = case_of("nrc_grad", NRC_VALUES, NRC_SHAPE)
    inp = draw_inputs(case)
    tensors = {n: inp.get(n) for n in NRC_NAMES}
    attrs = dict(norm_type=2, norm_added_type=2, rope_type=2, concat_order=0)
    r = {"case": case.id}
    r["refspec blocked exact s"] = best(lambda: blocked.nrc_grad_blocked(tensors, attrs, "A2"), repeat)
    r["refspec plain spec exact s"] = best(lambda: refspec.norm_rope_concat_backward(
        **tensors, **attrs, soc="A2", out_dtype=np.float64), 1)
    r["whole case (build_case) s"] = best(lambda: build_case(case), 1)
    if torch is not None:
        B, N, Sq, Sk, Seq, Sek, D, Sr = (NRC_SHAPE[k] for k in ("B", "N", "Sq", "Sk", "Seq", "Sek", "D", "Sr"))

        def run():
            leaves = {k: torch.from_numpy(inp[k]).double().requires_grad_()
                      for k in ("query", "key", "encoder_query", "encoder_key", "norm_query_weight",
                                "norm_key_weight", "norm_added_query_weight", "norm_added_key_weight")}
            value = torch.zeros((B, Sk, N, D), dtype=torch.float64, requires_grad=True)
            evalue = torch.zeros((B, Sek, N, D), dtype=torch.float64, requires_grad=True)
            c = torch.from_numpy(inp["rope_cos"]).double()
            s = torch.from_numpy(inp["rope_sin"]).double()

            def ln(t, w):
                return torch.nn.functional.layer_norm(t, (D,), w, torch.zeros(D, dtype=torch.float64), 1e-5)

            def rope(h):
                h1, h2 = h[..., :D // 2], h[..., D // 2:]
                rot = torch.cat((-h2, h1), -1)
                return torch.cat((h[:, :, :Sr] * c + rot[:, :, :Sr] * s, h[:, :, Sr:]), 2)

            qo = rope(torch.cat((ln(leaves["query"], leaves["norm_query_weight"]),
                                 ln(leaves["encoder_query"], leaves["norm_added_query_weight"])), 1).transpose(1, 2))
            ko = rope(torch.cat((ln(leaves["key"], leaves["norm_key_weight"]),
                                 ln(leaves["encoder_key"], leaves["norm_added_key_weight"])), 1).transpose(1, 2))
            vo = torch.cat((value, evalue), 1).transpose(1, 2)
            torch.autograd.backward((qo, ko, vo), tuple(torch.from_numpy(inp[k]).double() for k in
                                                        ("grad_query_output", "grad_key_output", "grad_value_output")))
            return leaves["query"].grad
        r["torch autograd f64 s"] = best(run, repeat)
        got = blocked.nrc_grad_blocked(tensors, attrs, "A2")["grad_query"]
        r["max |refspec - torch| grad_query (float32 stats)"] = float(np.max(np.abs(got - run().numpy())))
        r["torch / refspec (target >= 3)"] = r["torch autograd f64 s"] / r["refspec blocked exact s"]
    return r


# --- (c) ---------------------------------------------------------------------------------------

PEAK_SCRIPT = r"""
import json, os, sys, tempfile, tracemalloc
import numpy as np
import refspec.goldens as goldens
from refspec.goldens.cases import build_case
from refspec.goldens.sweep import Case, _case_params
op, values, shape = json.loads(sys.argv[1])
p = _case_params(op, values, shape)
case = Case(op + "/peak", op, p, 2024)
def status(key):                       # /proc: VmHWM is this process's own peak RSS
    with open("/proc/self/status") as fh:  # (ru_maxrss would include the parent's at fork)
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":"))
def rss():
    return status("VmRSS")
rss0 = rss()
trace = sys.argv[2] == "trace"
# a forked part of the blocked evaluation (refspec.forked) is a process of its own: record what
# each child adds over the pages it shares with this process at fork time (an upper bound:
# inputs it only reads are not counted, pages it writes are)
import refspec.forked as forked
grown = tempfile.NamedTemporaryFile("r", suffix=".children", delete=False).name
plain_child = forked._child
def _child(fn, part, status_w, release_r):
    start = rss()
    def measured(p):
        fn(p)
        with open(grown, "a") as fh:
            fh.write(f"{status('VmHWM') - start}\n")
    plain_child(measured, part, status_w, release_r)
forked._child = _child
if trace:
    forked.single_process()            # tracemalloc sees this process only
if trace:
    tracemalloc.start()
data = build_case(case)
with tempfile.TemporaryDirectory() as tmp:
    with goldens.GoldenWriter(os.path.join(tmp, "p.h5"), sweep_name="peak", sweep_definition="",
                              sweep_seed=0) as w:
        w.write_case("peak/case", **data.writer_kwargs(""))
f64 = 8 * (sum(a.size for a in data.inputs.values()) + sum(a.size for a in data.exact.values()))
if trace:
    print(json.dumps({"tracemalloc peak MB": tracemalloc.get_traced_memory()[1] / 1e6,
                      "f64 inputs+outputs MB": f64 / 1e6}))
else:
    with open(grown) as fh:
        children = sum(int(v) for v in fh.read().split())
    print(json.dumps({"peak RSS - RSS before MB": (status("VmHWM") - rss0 + children) / 1e6,
                      "of which forked children MB": children / 1e6}))
os.unlink(grown)
"""


def bench_peak():
    out = {}
    for label, op, values, shape in (("rope_grad (a)", "rope_grad", ROPE_VALUES, ROPE_SHAPE),
                                     ("nrc_grad (b)", "nrc_grad", NRC_VALUES, NRC_SHAPE)):
        r = {}
        for mode in ("rss", "trace"):          # tracemalloc's own bookkeeping would inflate RSS
            proc = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, json.dumps([op, values, shape]), mode],
                                  capture_output=True, text=True, check=True)
            r.update(json.loads(proc.stdout))
        r["tracemalloc peak / f64 size (target <= 4)"] = r["tracemalloc peak MB"] / r["f64 inputs+outputs MB"]
        r["RSS growth / f64 size"] = r["peak RSS - RSS before MB"] / r["f64 inputs+outputs MB"]
        out[label] = r
    return out


# --- (d) ---------------------------------------------------------------------------------------

def bench_sweep(tier):
    exe = [sys.executable, "-m", "refspec"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="refspec-bench-") as tmp:
        for jobs in (1, 2):
            path = os.path.join(tmp, f"standard-j{jobs}.h5")
            t = time.perf_counter()
            proc = subprocess.run(exe + ["generate", "--sweep", "standard", "--tier", tier,
                                         "--jobs", str(jobs), "-o", path],
                                  capture_output=True, text=True, check=True)
            out[f"--jobs {jobs} s"] = time.perf_counter() - t
            out[f"--jobs {jobs} summary"] = proc.stdout.strip()
    out["speed-up (target >= 1.6)"] = out["--jobs 1 s"] / out["--jobs 2 s"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="a,b,c,d", help="comma-separated subset of a,b,c,d")
    ap.add_argument("--repeat", type=int, default=3, help="timings take the best of this many runs")
    ap.add_argument("--tier", default="all", help="tier of the standard sweep for (d)")
    ap.add_argument("--small", action="store_true",
                    help="1/8 of the sequence lengths: checks that the script runs, measures nothing")
    args = ap.parse_args(argv)
    if args.small:
        ROPE_SHAPE["S"] //= 8
        for k in ("Sq", "Sk", "Seq", "Sek", "Sr"):
            NRC_SHAPE[k] //= 8
    which = set(args.only.split(","))
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(os.cpu_count() or 1)
    results = {"cpus": os.cpu_count(), "refspec blocked threads": blocked.THREADS,
               "torch": None if torch is None else f"{torch.__version__}, {torch.get_num_threads()} threads",
               "numpy": np.__version__, "load average": os.getloadavg()}
    if "a" in which:
        results["(a) RotaryPositionEmbeddingGrad"] = bench_rope(args.repeat, torch)
    if "b" in which:
        results["(b) NormRopeConcatBackward"] = bench_nrc(args.repeat, torch)
    if "c" in which:
        results["(c) peak memory"] = bench_peak()
    if "d" in which:
        results[f"(d) standard sweep, tier {args.tier}"] = bench_sweep(args.tier)
    results["load average after"] = os.getloadavg()
    for key, value in results.items():
        if isinstance(value, dict):
            print(key)
            for k, v in value.items():
                if isinstance(v, dict):
                    print(f"  {k}: " + ", ".join(f"{kk} {vv:.3g}" if isinstance(vv, float) else f"{kk} {vv}"
                                                for kk, vv in v.items()))
                else:
                    print(f"  {k}: {v:.4g}" if isinstance(v, float) else f"  {k}: {v}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
