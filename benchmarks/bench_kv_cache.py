"""KvRmsNormRopeCache at DeepSeek decode sizes: the whole golden case against a torch script
doing the same work on one thread, measured in the same run.

    python benchmarks/bench_kv_cache.py            # PA_BNSD and PA_NZ (about 1 minute)
    python benchmarks/bench_kv_cache.py --small    # checks that it runs, measures nothing

The case (vllm-ascend's MLA decode step): 64 tokens (B = 64, S = 1, N = 1) of kv
(64, 1, 1, 576) bfloat16, RMSNorm of the first Dv = 512 values, the interleaved RoPE of the last
Dk = 64, written into a paged k_cache (1024, 128, 1, 64) and ckv_cache (1024, 128, 1, 512) at
vLLM's slot mapping, with k_rope and c_kv returned (is_output_kv): 75.5 M cache elements, 151 MB
of bfloat16 cache that the golden holds twice (before and after the call).

refspec: the whole case as ``refspec generate`` builds it (drawing the inputs, the caches'
sentinels, the exact outputs, the tolerance terms, each output rounded once) and writes it into
an HDF5 golden file (GoldenWriter), with one thread (as each ``--jobs`` worker runs it) and with
two (as ``--jobs 1`` runs a large case). torch (one thread): the same inputs drawn (normal kv
and gamma, cos/sin of the positions, the sentinel caches as one period of codes repeated),
RMSNorm and the interleaved rotation in float64, rounded to bfloat16, the caches cloned and the
tokens' rows put at the slot mapping (PA_NZ: the fractal view of the cache), and the inputs, the
four outputs and the float64 values of the written rows written with h5py; timed once as it is
and once with the file fsynced at the end, as the golden writer fsyncs its file before renaming
it into place. torch does less than refspec (no sums of absolute terms, no list of written
offsets, no metadata, no validation), so the ratio is conservative. A third torch variant stores each array
of 64 KiB or more as the golden file does (1 MiB chunks, HDF5's Fletcher32) and fsyncs: the
script writing a file with the golden's guarantees. Target: the whole case no
slower than torch (torch / refspec >= 1). The script prints the times, the ratios and whether
torch's caches equal refspec's golden bit for bit; it asserts nothing.

Where refspec's time goes, in the same run (each step the best of ``--repeat``, one thread):
drawing the inputs, computing the case (the spec's exact outputs with the caches as their
writes, the terms, each output rounded once), writing it and closing the file (the index, the
fsync and the rename); and the four cache arrays (the two caches before and after the call)
written once as the golden writer stores them (``refspec.goldens.h5_objects.write_arrays``:
chunks of 1 MiB, each with HDF5's Fletcher32 checksum), in the same chunks without a checksum,
and as torch's script does (h5py, contiguous, no checksum), each into a new file (no fsync).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from refspec import goldens, ops
from refspec.goldens.cases import build_case, compute_case
from refspec.goldens.format import LIBVER, MIN_CHUNKED_BYTES, chunk_shape, compression_filters
from refspec.goldens.h5_objects import DatasetMaker, write_arrays

from bench_generate import best, case_of, torch_one_thread
from results import print_results

VALUES = dict(soc="A2", kcache="kv", ckvcache="kv", index="decode", output_kv=True,
              dtype="bfloat16", dist="rotary", fault="none")
SHAPE = dict(B=64, S=1, N=1, Dv=512, Dk=64, blocks=1024, slots=128)
MODES = ("PA_BNSD", "PA_NZ")


def refspec_case(case, path: Path, threads: int) -> None:
    """The whole case, built and written into a new golden file."""
    data = build_case(case, threads=threads)
    with goldens.GoldenWriter(str(path), sweep_name="bench", sweep_definition="", sweep_seed=0,
                              force=True) as w:
        w.write_case(data)


def steps(case, path: Path, repeat: int) -> dict:
    """The whole case step by step (one thread), each step the best of ``repeat`` runs."""
    op = ops.get(case.op)
    times = {}
    for _ in range(repeat):
        t = [time.perf_counter()]
        inputs = op.generation.sample(case.params, case.seed, None)
        t.append(time.perf_counter())
        data = compute_case(op, case.id, case.params, case.seed, inputs)
        t.append(time.perf_counter())
        w = goldens.GoldenWriter(str(path), sweep_name="bench", sweep_definition="",
                                 sweep_seed=0, force=True)
        w.write_case(data)
        t.append(time.perf_counter())
        w.close()
        t.append(time.perf_counter())
        for name, a, b in zip(("draw", "compute", "write", "close"), t, t[1:]):
            times[name] = min(times.get(name, b - a), b - a)
        del data, inputs
    r = {f"refspec step: {k} s": v for k, v in times.items()}
    data = build_case(case)
    caches = {k: data.inputs[k] for k in ("k_cache", "ckv_cache")}
    after = {k: data.expected[k] for k in caches}

    def timed(write) -> float:
        """The best time of ``write(f)`` into a new file (the last run's removed untimed)."""
        times = []
        for _ in range(repeat):
            path.unlink(missing_ok=True)
            t = time.perf_counter()
            with h5py.File(path, "x", libver=LIBVER) as f:
                write(f)
            times.append(time.perf_counter() - t)
        return min(times)

    def golden_way(f):
        maker = DatasetMaker(compression_filters(goldens.DEFAULT_COMPRESSION))
        write_arrays(f, "inputs", caches, maker)
        write_arrays(f, "expected", after, maker)

    def plain_way(f, chunked=False):
        for group, arrays in (("inputs", caches), ("expected", after)):
            for name, a in arrays.items():
                chunks = chunk_shape(a.shape, a.itemsize) if chunked else None
                f.create_dataset(f"{group}/{name}", data=a.view(np.uint16), chunks=chunks)
    r["the four cache arrays, golden writer's datasets (1 MiB chunks, Fletcher32) s"] = \
        timed(golden_way)
    r["the four cache arrays, h5py in the same chunks without a checksum s"] = \
        timed(lambda f: plain_way(f, chunked=True))
    r["the four cache arrays, h5py contiguous s"] = timed(plain_way)
    return r


# --- the torch script ---------------------------------------------------------------------------

def torch_case(shape: dict, mode: str, path: Path, torch, inputs=None, fsync=False,
               checksummed=False) -> dict:
    """The same work in torch on one thread; returns its caches (bfloat16 tensors). ``inputs``
    (refspec's drawn inputs, for the bit-for-bit check) replaces torch's own draw when given;
    ``fsync``: the file is flushed to disk before returning, as the golden writer does;
    ``checksummed``: each array of 64 KiB or more stored as the golden file stores it (its 1 MiB
    chunks with HDF5's Fletcher32 checksum), the rest contiguous."""
    B, S, N, Dv, Dk = (shape[k] for k in ("B", "S", "N", "Dv", "Dk"))
    blocks, slots = shape["blocks"], shape["slots"]
    bf16, f64 = torch.bfloat16, torch.float64
    g = torch.Generator().manual_seed(2024)
    if inputs is None:
        kv = torch.randn(B, N, S, Dv + Dk, generator=g).to(bf16)
        gamma = (1 + 0.1 * torch.randn(Dv, generator=g)).to(bf16)
        inv = 10000.0 ** (-torch.arange(0, Dk, 2, dtype=f64) / Dk)
        ang = torch.arange(S, dtype=f64)[:, None] * inv[None, :]
        ang = torch.cat((ang, ang), -1).expand(B, N, S, Dk)
        cos, sin = ang.cos().to(bf16), ang.sin().to(bf16)
        per = -(-(slots + S) // slots)                     # vLLM's slot mapping
        table = torch.randperm(blocks, generator=g)[:B * per].reshape(B, per)
        start = torch.randint(0, slots, (B, 1), generator=g) + torch.arange(S)
        index = (table.gather(1, start // slots) * slots + start % slots).reshape(-1)
        period = 512                                       # bfloat16: 2^(8+1) codes
        caches = {}
        for name, D in (("k_cache", Dk), ("ckv_cache", Dv)):
            j = torch.arange(period)
            k = (j % (period // 2) + 1).to(f64)
            codes = torch.where(j >= period // 2, -k, k).mul(2.0 ** -6).to(bf16)
            n = blocks * slots * N * D
            caches[name] = codes.repeat(-(-n // period))[:n].reshape(blocks, slots, N, D)
    else:
        t = {k: torch.from_numpy(np.ascontiguousarray(v).view(np.int16)).view(bf16)
             if v.dtype.itemsize == 2 and v.dtype.kind != "i" else torch.from_numpy(v)
             for k, v in inputs.items()}
        kv, gamma, cos, sin, index = (t[k] for k in ("kv", "gamma", "cos", "sin", "index"))
        caches = {k: t[k] for k in ("k_cache", "ckv_cache")}
    x = kv.to(f64)
    c = x[..., :Dv]
    c = c / torch.sqrt(c.square().mean(-1, keepdim=True) + 1e-5) * gamma.to(f64)
    k = x[..., Dv:]
    k = (torch.cat((k[..., 0::2], k[..., 1::2]), -1) * cos.to(f64)
         + torch.cat((-k[..., 1::2], k[..., 0::2]), -1) * sin.to(f64))
    out = {}
    tokens = index.reshape(-1)
    keep = tokens >= 0
    for name, values in (("k_cache", k), ("ckv_cache", c)):
        cache = caches[name].clone()
        D = values.shape[-1]
        rows = values.to(bf16).permute(0, 2, 1, 3).reshape(B * S, N * D)[keep]
        if mode == "PA_NZ":                               # (blocks, N*D/16, slots, 16)
            nz = cache.view(blocks, N * D // 16, slots, 16)
            slot = tokens[keep]
            nz[slot // slots, :, slot % slots, :] = rows.reshape(-1, N * D // 16, 16)
        else:
            cache.view(blocks * slots, N * D)[tokens[keep]] = rows
        out[name] = cache
    out["k_rope"], out["c_kv"] = k.to(bf16), c.to(bf16)
    with h5py.File(path, "w") as f:
        def put(group, name, tensor):
            arr = tensor.contiguous()
            a = arr.view(torch.int16).numpy() if arr.dtype == bf16 else arr.numpy()
            big = checksummed and a.nbytes >= MIN_CHUNKED_BYTES
            f.create_dataset(f"{group}/{name}", data=a, fletcher32=big,
                             chunks=chunk_shape(a.shape, a.itemsize) if big else None)
        for name, tensor in (("kv", kv), ("gamma", gamma), ("cos", cos), ("sin", sin),
                             ("index", index), *caches.items()):
            put("inputs", name, tensor)
        for name, tensor in out.items():
            put("expected", name, tensor)
        put("exact", "k_rope", k)
        put("exact", "c_kv", c)
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return out


def bench(mode: str, shape: dict, repeat: int, torch, tmp: Path) -> dict:
    case = case_of("kv_rope_cache", {**VALUES, "cache_mode": mode}, shape)
    r = {"case": case.id}
    r["refspec whole case + HDF5, 1 thread s"] = best(
        lambda: refspec_case(case, tmp / "r1.h5", 1), repeat)
    r["refspec whole case + HDF5, 2 threads s"] = best(
        lambda: refspec_case(case, tmp / "r2.h5", 2), repeat)
    r["golden file MB"] = round((tmp / "r1.h5").stat().st_size / 1e6, 1)
    r.update(steps(case, tmp / "s.h5", repeat))
    if torch is None:
        return r
    r["torch script + h5py, 1 thread s"] = best(lambda: torch_case(shape, mode, tmp / "t.h5",
                                                                   torch), repeat)
    r["torch script + h5py + fsync, 1 thread s"] = best(
        lambda: torch_case(shape, mode, tmp / "t.h5", torch, fsync=True), repeat)
    r["torch script + h5py as the golden stores arrays (chunks, Fletcher32) + fsync, 1 thread s"] = \
        best(lambda: torch_case(shape, mode, tmp / "t.h5", torch, fsync=True, checksummed=True),
             repeat)
    r["torch file MB"] = round((tmp / "t.h5").stat().st_size / 1e6, 1)
    one, two = (r[f"refspec whole case + HDF5, {n} s"] for n in ("1 thread", "2 threads"))
    r["torch / refspec, 1 thread (target >= 1)"] = r["torch script + h5py, 1 thread s"] / one
    r["torch / refspec, 2 threads"] = r["torch script + h5py, 1 thread s"] / two
    r["torch with fsync / refspec, 1 thread"] = r["torch script + h5py + fsync, 1 thread s"] / one
    r["torch writing the golden's storage with fsync / refspec, 1 thread"] = r[
        "torch script + h5py as the golden stores arrays (chunks, Fletcher32) + fsync, 1 thread s"] / one
    data = build_case(case)
    mine = torch_case(shape, mode, tmp / "t.h5", torch, inputs=data.inputs)
    r["torch's caches == the golden's, bit for bit"] = all(
        np.array_equal(mine[n].view(torch.int16).numpy(), data.expected[n].view(np.int16))
        for n in ("k_cache", "ckv_cache"))
    return r


def mode_arguments(doc: str, argv=None) -> tuple:
    """The command line of a benchmark over cache modes (--only, --repeat, --small): the
    arguments and the case's shape sizes."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(MODES), help="comma-separated cache modes of "
                    + ", ".join(MODES))
    ap.add_argument("--repeat", type=int, default=3, help="timings take the best of this many runs")
    ap.add_argument("--small", action="store_true",
                    help="16 blocks and 8 tokens: checks that the script runs, measures nothing")
    args = ap.parse_args(argv)
    return args, dict(SHAPE, B=8, blocks=16) if args.small else SHAPE


def main(argv=None):
    args, shape = mode_arguments(__doc__, argv)
    torch, results = torch_one_thread()
    with tempfile.TemporaryDirectory(prefix="refspec-bench-kv-") as tmp:
        for mode in args.only.split(","):
            results[mode] = bench(mode.strip(), shape, args.repeat, torch, Path(tmp))
    results["load average after"] = os.getloadavg()
    print_results(results)


if __name__ == "__main__":
    main()
