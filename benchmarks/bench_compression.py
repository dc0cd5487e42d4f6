"""Golden-file compression: size against write and read speed, all settings in one run.

Builds realistic golden cases with the spec functions (random inputs rounded to float32,
bfloat16 and float16, outputs rounded once, exact float64 outputs, per-element sum_abs), writes
the same cases with each HDF5 filter setting through refspec.goldens.GoldenWriter, and reads every
dataset back whole through the reader (LazyArray.blocks, as a streaming comparator does).

Prints, per setting: stored size / uncompressed size, write MB/s, full-read MB/s (MB of
decoded data per second) from the page cache ("read": decompression + HDF5 cost) and after
asking the kernel to drop the file's cached pages ("cold read": from the disk, where the OS
honours posix_fadvise), and each figure relative to "none".

    python benchmarks/bench_compression.py            # about 1.5 minutes on one core
    python benchmarks/bench_compression.py --quick    # smaller cases, a few seconds
"""

from __future__ import annotations

from dataclasses import replace
import argparse
import os
import tempfile
import time

import numpy as np

import refspec.goldens as goldens
from refspec.goldens.example import nrc_backward_case, rope_grad_case

SETTINGS = [  # (label, compression, shuffle)
    ("none", "none", False),
    ("lzf", "lzf", False),
    ("lzf+shuffle", "lzf", True),
    ("gzip:1", "gzip:1", False),
    ("gzip:4", "gzip:4", False),
    ("gzip:1+shuffle", "gzip:1", True),
    ("gzip:4+shuffle", "gzip:4", True),
]


def build_cases(quick: bool) -> dict:
    """case id -> write_case keyword arguments, computed by the spec functions."""
    B, N, S, D = (1, 4, 128, 64) if quick else (2, 8, 512, 128)
    cases = {}
    for dtype in ("float32", "bfloat16", "float16"):
        cases[f"rope_grad/dtype={dtype}/B{B}N{N}S{S}D{D}"] = rope_grad_case(
            B=B, N=N, S=S, D=D, dtype=dtype, mode=0, seed=1)
    Sq, Seq = (64, 16) if quick else (512, 128)
    cases[f"nrc_grad/dtype=bfloat16/Sq{Sq}"] = nrc_backward_case(
        B=1, N=N, Sq=Sq, Sk=Sq, Seq=Seq, Sek=Seq, D=D, dtype="bfloat16", norm_type=2,
        norm_added_type=2, rope_type=2, seed=2)
    return cases


def logical_bytes(cases: dict) -> int:
    total = 0
    for kw in cases.values():
        for group in ("inputs", "expected"):
            total += sum(np.asarray(a).nbytes for a in kw[group].values() if a is not None)
        total += sum(np.asarray(a).size * 8 for a in kw["exact"].values())
        total += sum(t.sum_abs.size * 8 for t in kw["terms"].values() if t.sum_abs is not None)
    return total


def write(path: str, cases: dict, compression: str, shuffle: bool) -> float:
    t0 = time.perf_counter()
    with goldens.GoldenWriter(path, sweep_name="bench", sweep_definition="", sweep_seed=0,
                              compression=compression, shuffle=shuffle, force=True) as w:
        for case_id, kw in cases.items():
            w.write_case(replace(kw, case_id=case_id))
    return time.perf_counter() - t0


def drop_cache(path: str) -> bool:
    """Ask the kernel to forget the file's cached pages (so the next read comes from disk)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def read_all(path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = 0
    with goldens.open(path) as gf:
        for case in gf:
            for group in (case.inputs, case.expected, case.exact, case.sum_abs):
                for name in group:
                    for _, block in group[name].blocks(64 << 20):
                        n += block.nbytes
    return time.perf_counter() - t0, n


def breakdown(path: str) -> dict:
    """(group, dtype) -> [stored bytes, raw bytes] over every dataset of the file."""
    out = {}
    with goldens.open(path) as gf:
        for case in gf:
            for title, group in (("inputs", case.inputs), ("expected", case.expected),
                                 ("exact", case.exact), ("sum_abs", case.sum_abs)):
                for name in group:
                    arr = group[name]
                    acc = out.setdefault((title, arr.dtype.name), [0, 0])
                    acc[0] += arr.stored_nbytes
                    acc[1] += arr.nbytes
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small cases (a smoke run)")
    ap.add_argument("--repeat", type=int, default=3, help="reads per setting (best is kept)")
    ap.add_argument("--write-repeat", type=int, default=2, help="writes per setting (best is kept)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    cases = build_cases(args.quick)
    total = logical_bytes(cases)
    print(f"{len(cases)} cases, {total / 1e6:.1f} MB uncompressed "
          f"(built by the spec in {time.perf_counter() - t0:.1f} s)")
    rows, parts = [], {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        for label, compression, shuffle in SETTINGS:
            path = os.path.join(tmp, f"{label.replace(':', '_').replace('+', '_')}.h5")
            wt = min(write(path, cases, compression, shuffle) for _ in range(args.write_repeat))
            size = os.path.getsize(path)
            cold = [drop_cache(path) and read_all(path)[0] for _ in range(args.repeat)]
            reads = [read_all(path) for _ in range(args.repeat)]
            rt = min(t for t, _ in reads)
            assert reads[0][1] == total, (reads[0][1], total)
            ct = min(cold) if all(cold) else float("nan")
            rows.append((label, size, total / wt / 1e6, total / rt / 1e6, total / ct / 1e6))
            parts[label] = breakdown(path)
            os.remove(path)
    base = rows[0]
    print(f"{'setting':<16}{'size/raw':>9}{'write MB/s':>12}{'read MB/s':>11}{'cold read':>11}"
          f"{'size vs none':>14}{'read vs none':>14}")
    for label, size, wmb, rmb, cmb in rows:
        print(f"{label:<16}{size / total:>9.3f}{wmb:>12.0f}{rmb:>11.0f}{cmb:>11.0f}"
              f"{size / base[1]:>14.3f}{rmb / base[3]:>14.2f}")
    print("\nstored/raw by kind of dataset (raw MB in brackets):")
    kinds = sorted(parts["none"])
    print(f"{'setting':<16}" + "".join(f"{g[:5] + ' ' + d:>17}" for g, d in kinds))
    print(f"{'':<16}" + "".join(f"{'(' + format(parts['none'][k][1] / 1e6, '.1f') + ')':>17}"
                              for k in kinds))
    for label, *_ in rows:
        print(f"{label:<16}" + "".join(f"{parts[label][k][0] / parts[label][k][1]:>17.3f}"
                                      for k in kinds))


if __name__ == "__main__":
    main()
