"""The RoPE family's forwards at inference sizes: golden-generation speed against a torch float64
transcription measured in the same run.

    python benchmarks/bench_family.py              # every operator (about 1 minute)
    python benchmarks/bench_family.py --small      # checks that it runs, measures nothing

One large case of each (T = 8192 tokens, 32 query heads, D = 128):

- apply_rope_v2: query (1, 8192, 32, 128) and key (1, 8192, 8, 128) in BSND, half mode, cos BS1D;
- rope_cache: 8192 tokens of 32 query and 8 key heads of 128, a cache of 32768 rows, GPT-NeoX
  style with rotary_dim 128, and the same in mrope mode (sections 16, 24, 24);
- interleave_rope: x (1, 32, 8192, 128) with cos B1SD (the 950 profile: A2/A3 take D = 64 only).

Each in bfloat16, the dtype inference runs. For each: the public spec function's exact float64
outputs, and the whole case as the generator builds it (inputs, exact and rounded outputs,
tolerance terms; two threads as `refspec generate --jobs 1` runs it here, one as each --jobs
worker does), against the same outputs from a straightforward torch transcription in float64 on
one thread (the documents' lines: chunk, cat, index_select). Target (benchmarks/README.md):
torch / spec exact >= 3. The script prints the ratios and the largest difference between the
two; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import refspec
from refspec.goldens.cases import build_case

from bench_generate import best, case_of, inputs_of, torch_one_thread
from results import print_results

CASES = {
    "apply_rope_v2": (dict(soc="A2", layout="BSND", rotary_mode="half", cos="BS1D",
                           dtype="bfloat16", dist="rotary", fault="none"),
                      dict(B=1, S=8192, Nq=32, Nk=8, D=128)),
    "rope_cache": (dict(soc="A2", style="neox", mrope="none", head_size=128, positions="shuffled",
                        dtype="bfloat16", dist="rotary", fault="none"),
                   dict(T=8192, Nq=32, Nk=8, R=128, M=32768)),
    "rope_cache mrope": (dict(soc="A2", style="neox", mrope="16,24,24", head_size=128,
                              positions="shuffled", dtype="bfloat16", dist="rotary",
                              fault="none"),
                         dict(T=8192, Nq=32, Nk=8, R=128, M=32768)),
    "interleave_rope": (dict(soc="950", cos="B1SD", dtype="bfloat16", dist="rotary",
                             fault="none"),
                        dict(B=1, N=32, S=8192, D=128)),
}


# --- torch float64 transcriptions of the documents' lines --------------------------------------

def _rotate_half(t, torch):
    t1, t2 = t.chunk(2, dim=-1)
    return torch.cat((-t2, t1), dim=-1)


def torch_apply_rope(inp, torch):
    """q*cos + rotate_half(q)*sin, likewise k (docs/apply_rotary_pos_emb.md §1)."""
    c, s = (torch.from_numpy(inp[n].astype(np.float64)) for n in ("cos", "sin"))
    return tuple(q * c + _rotate_half(q, torch) * s for q in
                 (torch.from_numpy(inp[n].astype(np.float64)) for n in ("query", "key")))


def torch_rope_cache(inp, head_size, sections, torch):
    """vLLM's rotary embedding on the cache rows of the positions; mrope: section j of the
    angles from position row j (docs/rope_with_sin_cos_cache.md §1)."""
    cache = torch.from_numpy(inp["cos_sin_cache"].astype(np.float64))
    pos = torch.from_numpy(inp["positions"])
    cos, sin = cache[pos].chunk(2, dim=-1)
    if sections is not None:
        cos, sin = (torch.cat([m[i] for i, m in enumerate(t.split(sections, dim=-1))], dim=-1)
                    for t in (cos, sin))
    c, s = torch.cat((cos, cos), -1)[:, None, :], torch.cat((sin, sin), -1)[:, None, :]
    outs = []
    for name in ("query", "key"):
        x = torch.from_numpy(inp[name].astype(np.float64))
        h = x.view(x.shape[0], -1, head_size)
        R = c.shape[-1]
        rot = h[..., :R] * c + _rotate_half(h[..., :R], torch) * s
        outs.append(torch.cat((rot, h[..., R:]), dim=-1).reshape(x.shape))
    return tuple(outs)


def torch_interleave_rope(inp, torch):
    """q = the pairs of x taken apart, q*cos + rotate_half(q)*sin (docs/interleave_rope.md §1)."""
    x = torch.from_numpy(inp["x"].astype(np.float64))
    c, s = (torch.from_numpy(inp[n].astype(np.float64)) for n in ("cos", "sin"))
    q = x.reshape(*x.shape[:-1], -1, 2).transpose(-1, -2).reshape(x.shape)
    return (q * c + _rotate_half(q, torch) * s,)


def _spec_and_torch(name, values, inp, torch):
    """(the spec function's exact outputs as a thunk, torch's as a thunk or None)."""
    if name == "apply_rope_v2":
        def spec():
            return refspec.apply_rotary_pos_emb_v2(inp["query"], inp["key"], inp["cos"],
                                                   inp["sin"], "BSND", "half", soc="A2",
                                                   out_dtype=np.float64)
        ref = torch and (lambda: torch_apply_rope(inp, torch))
    elif name.startswith("rope_cache"):
        sections = None if values["mrope"] == "none" else (16, 24, 24)

        def spec():
            return refspec.rope_with_sin_cos_cache(inp["positions"], inp["query"], inp["key"],
                                                   inp["cos_sin_cache"], 128, sections, True,
                                                   soc="A2", out_dtype=np.float64)
        ref = torch and (lambda: torch_rope_cache(inp, 128, sections, torch))
    else:
        def spec():
            return (refspec.interleave_rope(inp["x"], inp["cos"], inp["sin"], soc="950",
                                            out_dtype=np.float64),)
        ref = torch and (lambda: torch_interleave_rope(inp, torch))
    return spec, ref


def bench(name, values, shape, repeat, torch):
    op = name.split()[0]
    case = case_of(op, values, shape)
    inp = inputs_of(case)
    spec, ref = _spec_and_torch(name, values, inp, torch)
    r = {"case": case.id, "elements out": sum(a.size for a in spec())}
    r["refspec spec exact s"] = best(spec, repeat)
    r["whole case (build_case), 2 threads s"] = best(lambda: build_case(case, threads=2), repeat)
    r["whole case, one thread s"] = best(lambda: build_case(case), repeat)
    if ref is not None:
        r["torch f64, 1 thread s"] = best(ref, repeat)
        r["torch / refspec exact (target >= 3)"] = r["torch f64, 1 thread s"] / r["refspec spec exact s"]
        r["torch / refspec whole case, 2 threads"] = (r["torch f64, 1 thread s"]
                                                     / r["whole case (build_case), 2 threads s"])
        r["max |refspec - torch|"] = max(float(np.max(np.abs(a - b.numpy())))
                                         for a, b in zip(spec(), ref()))
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    ap.add_argument("--repeat", type=int, default=3, help="timings take the best of this many runs")
    ap.add_argument("--small", action="store_true",
                    help="1/32 of the tokens: checks that the script runs, measures nothing")
    args = ap.parse_args(argv)
    torch, results = torch_one_thread()
    for name in args.only.split(","):
        values, shape = CASES[name.strip()]
        if args.small:
            shape = {k: v // 32 if k in ("S", "T") else v for k, v in shape.items()}
        results[name] = bench(name.strip(), values, shape, args.repeat, torch)
    results["load average after"] = os.getloadavg()
    print_results(results)


if __name__ == "__main__":
    main()
