"""Golden-generation speed and memory, each measured against its peers in the same run.

    python benchmarks/bench_generate.py                 # a, b, c (about 1 minute)
    python benchmarks/bench_generate.py --small         # checks that it runs, measures nothing

(a) One large RotaryPositionEmbeddingGrad case (B=8, N=16, S=512, D=128, half, BNSD, cos 11SD,
    float32, with x): the public spec function's exact float64 outputs against PyTorch autograd
    in float64 on the same inputs (how the vendor's golden scripts work), torch on one thread;
    and the whole case as the generator builds it (inputs, exact and rounded outputs, tolerance
    terms; with two threads as `refspec generate --jobs 1` runs it on this machine, and with one
    as each --jobs worker does) against the same torch time.
(b) One large NormRopeConcatBackward case (B=2, N=32, Sq=Sk=1024, Seq=Sek=256, D=128, types 2/2,
    half RoPE, Sr=1280, float32): the same three measurements (torch: forward with layer_norm,
    concat, transpose, RoPE; backward with the same upstream gradients).
(c) Peak memory of building and writing each of those cases in a fresh process, against the
    float64 size of its inputs plus outputs: NumPy's allocations (tracemalloc) and, in a second
    process, the growth of the resident set (peak RSS, VmHWM, minus RSS before the case).
The standard sweep with --jobs 1 and --jobs 2 is measured by bench_store.py, (d).

Targets (recorded in benchmarks/README.md): (a), (b) exact >= 3x faster
than torch; whole case faster than torch's exact outputs alone; (c) <= 4x. The
script prints the measured ratios; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import refspec
from refspec import ops
from refspec.goldens.cases import build_case
from refspec.goldens.sweep import Case, case_params

from results import print_results

ROPE_VALUES = dict(soc="A2", mode="half", layout="BNSD", cos="11SD", dtype="float32", x=True,
                   dist="random", fault="none")
ROPE_SHAPE = dict(B=8, N=16, S=512, D=128)
NRC_VALUES = dict(soc="A2", norm_type=2, norm_added_type=2, rope_type="half", concat_order=0,
                  dtype="float32", dist="random", fault="none")
NRC_SHAPE = dict(B=2, N=32, Sq=1024, Sk=1024, Seq=256, Sek=256, D=128, Sr=1280)


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def case_of(op_id, values, shape, seed=2024):
    op = ops.get(op_id)
    return Case(f"{op_id}/bench", op_id, case_params(op, {**values, **shape}), seed)


def inputs_of(case):
    return ops.get(case.op).generation.sample(case.params, case.seed, None)


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_one_thread():
    """(torch set to one thread, or None; the results' first rows: the machine, the versions
    and the load average)."""
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(1)
    return torch, {"cpus": os.cpu_count(),
                   "torch": None if torch is None else f"{torch.__version__}, {torch.get_num_threads()} thread",
                   "numpy": np.__version__, "load average": os.getloadavg()}


def compare_to_torch(r, refspec_exact, torch_run, repeat):
    """Time torch next to refspec and add the ratios the targets name."""
    r["torch autograd f64 s"] = best(torch_run, repeat)
    r["torch / refspec exact (target >= 3)"] = r["torch autograd f64 s"] / refspec_exact
    r["torch exact / refspec whole case, 2 threads (target > 1)"] = (
        r["torch autograd f64 s"] / r["whole case (build_case) s"])
    r["torch exact / refspec whole case, 1 thread"] = r["torch autograd f64 s"] / r["whole case, one thread s"]


# --- (a) ---------------------------------------------------------------------------------------

def bench_rope(repeat, torch):
    case = case_of("rope_grad", ROPE_VALUES, ROPE_SHAPE)
    inp = inputs_of(case)
    dy, cos, sin, x = inp["dy"], inp["cos"], inp["sin"], inp["x"]
    r = {"case": case.id}
    r["refspec spec exact s"] = best(lambda: refspec.rotary_position_embedding_grad(
        dy, cos, sin, x, 0, soc="A2", out_dtype=np.float64), repeat)
    r["whole case (build_case) s"] = best(lambda: build_case(case, threads=2), repeat)
    r["whole case, one thread s"] = best(lambda: build_case(case), repeat)
    if torch is not None:
        def run():
            X = torch.from_numpy(x).double().requires_grad_()
            C = torch.from_numpy(cos).double().requires_grad_()
            S = torch.from_numpy(sin).double().requires_grad_()
            x1, x2 = X.chunk(2, -1)
            y = X * C + torch.cat((-x2, x1), -1) * S
            y.backward(torch.from_numpy(dy).double())
            return X.grad, C.grad, S.grad
        compare_to_torch(r, r["refspec spec exact s"], run, repeat)
        got = refspec.rotary_position_embedding_grad(dy, cos, sin, x, 0, out_dtype=np.float64)
        r["max |refspec - torch|"] = max(float(np.max(np.abs(g - t.numpy()))) for g, t in zip(got, run()))
    return r


# --- (b) ---------------------------------------------------------------------------------------

def bench_nrc(repeat, torch):
    case = case_of("nrc_grad", NRC_VALUES, NRC_SHAPE)
    inp = inputs_of(case)
    attrs = dict(norm_type=2, norm_added_type=2, rope_type=2, concat_order=0)
    r = {"case": case.id}
    r["refspec spec exact s"] = best(lambda: refspec.norm_rope_concat_backward(
        **inp, **attrs, soc="A2", out_dtype=np.float64), repeat)
    r["whole case (build_case) s"] = best(lambda: build_case(case, threads=2), repeat)
    r["whole case, one thread s"] = best(lambda: build_case(case), repeat)
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
        compare_to_torch(r, r["refspec spec exact s"], run, repeat)
        got = refspec.norm_rope_concat_backward(**inp, **attrs, out_dtype=np.float64).grad_query
        r["max |refspec - torch| grad_query (float32 stats)"] = float(np.max(np.abs(got - run().numpy())))
    return r


# --- (c) ---------------------------------------------------------------------------------------

PEAK_SCRIPT = r"""
import json, os, sys, tempfile, tracemalloc
from dataclasses import replace
import refspec.goldens as goldens
from refspec import ops
from refspec.goldens.cases import build_case
from refspec.goldens.sweep import Case, case_params
op, values, shape = json.loads(sys.argv[1])
case = Case(op + "/peak", op, case_params(ops.get(op), {**values, **shape}), 2024)
def status(key):                       # /proc: VmHWM is this process's own peak RSS
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":"))
rss0 = status("VmRSS")
trace = sys.argv[2] == "trace"
if trace:
    tracemalloc.start()
data = build_case(case)
with tempfile.TemporaryDirectory() as tmp:
    with goldens.GoldenWriter(os.path.join(tmp, "p.h5"), sweep_name="peak", sweep_definition="",
                              sweep_seed=0) as w:
        w.write_case(replace(data, case_id='peak/case'))
f64 = 8 * (sum(a.size for a in data.inputs.values()) + sum(a.size for a in data.exact.values()))
if trace:
    print(json.dumps({"tracemalloc peak MB": tracemalloc.get_traced_memory()[1] / 1e6,
                      "f64 inputs+outputs MB": f64 / 1e6}))
else:
    print(json.dumps({"peak RSS - RSS before MB": (status("VmHWM") - rss0) / 1e6}))
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="a,b,c", help="comma-separated subset of a,b,c")
    ap.add_argument("--repeat", type=int, default=3, help="timings take the best of this many runs")
    ap.add_argument("--small", action="store_true",
                    help="1/8 of the sequence lengths: checks that the script runs, measures nothing")
    args = ap.parse_args(argv)
    if args.small:
        ROPE_SHAPE["S"] //= 8
        for k in ("Sq", "Sk", "Seq", "Sek", "Sr"):
            NRC_SHAPE[k] //= 8
    which = set(args.only.split(","))
    torch, results = torch_one_thread()
    if "a" in which:
        results["(a) RotaryPositionEmbeddingGrad"] = bench_rope(args.repeat, torch)
    if "b" in which:
        results["(b) NormRopeConcatBackward"] = bench_nrc(args.repeat, torch)
    if "c" in which:
        results["(c) peak memory"] = bench_peak()
    results["load average after"] = os.getloadavg()
    print_results(results)

if __name__ == "__main__":
    main()
