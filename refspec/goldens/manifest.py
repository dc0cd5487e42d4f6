"""The manifest of a sweep's golden data: every case id and the SHA-256 of every dataset.

``goldens/smoke.manifest.json`` pins the ``smoke`` sweep: a test regenerates it and compares
each digest, so an unintended change to the spec or the generator cannot pass unnoticed. A
digest covers a dataset's raw bytes as the reader returns them (C order, little-endian;
bfloat16 as its 16-bit patterns), independent of HDF5 layout, chunking, compression and
timestamps. Rebuild or check it with::

    python -m refspec.goldens.manifest                       # rewrite goldens/smoke.manifest.json
    python -m refspec.goldens.manifest --check               # compare, exit 1 on any difference
    python -m refspec.goldens.manifest --from smoke.h5 -o -  # the manifest of an existing file
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

from .. import goldens
from ..spec.dtypes import dtype_name
from .atomic import write_text_atomic

__all__ = ["FORMAT", "array_digest", "data_entry", "file_manifest", "memory_manifest",
           "sweep_manifest", "compare", "main"]

FORMAT = "refspec-manifest-1"
_GROUPS = ("inputs", "expected", "exact", "sum_abs", "written")


def array_digest(arr) -> str:
    """"<dtype> <d0>x<d1>... <sha256 of the raw little-endian C-order bytes>"."""
    a = np.asarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    shape = "x".join(str(s) for s in a.shape) or "scalar"
    return f"{dtype_name(a.dtype)} {shape} {hashlib.sha256(a.tobytes()).hexdigest()}"


def _case_entry(case) -> dict:
    datasets = {}
    for group in _GROUPS:
        arrays = getattr(case, group)
        for name in arrays:
            datasets[f"{group}/{name}"] = array_digest(arrays[name].read())
    return {"seed": case.seed, "expected_error_code": case.expected_error or 0,
            "datasets": dict(sorted(datasets.items()))}


def data_entry(data) -> dict:
    """The manifest entry of a case built in memory (``refspec.goldens.cases.CaseData``): the
    same digests as ``file_manifest`` gives for the written case."""
    groups = {"inputs": data.inputs, "expected": data.expected, "exact": data.exact,
              "sum_abs": {k: data.terms[k].sum_abs for k in data.expected
                          if data.terms[k].sum_abs is not None}, "written": data.written()}
    datasets = {f"{g}/{name}": array_digest(np.asarray(a, dtype=np.float64) if g in ("exact", "sum_abs") else a)
                for g, arrays in groups.items() for name, a in arrays.items() if a is not None}
    return {"seed": data.seed, "expected_error_code": 0 if data.error is None else data.error.code,
            "datasets": dict(sorted(datasets.items()))}


def _header(sweep: str, tier: str, seed) -> dict:
    return {"format": FORMAT, "sweep": sweep, "tier": tier, "sweep_seed": seed,
            "digest": "sha256 of each dataset's raw bytes: C order, little-endian, bfloat16 as "
                      "uint16 bits; entries read '<dtype> <shape> <sha256>'",
            "regenerate": "python -m refspec.goldens.manifest"}


def memory_manifest(sweep_ref: str = "smoke", tier: str | None = None) -> dict:
    """The manifest of a sweep tier built in memory (no HDF5 file; fast)."""
    from .cases import build_case
    from .sweep import load_sweep
    sweep = load_sweep(sweep_ref)
    tier = sweep.check_tier(tier)
    cases = {c.id: data_entry(build_case(c)) for c in sweep.cases(tier)}
    return {**_header(sweep.name, tier, sweep.seed), "cases": cases}


def file_manifest(path, tier: str | None = None) -> dict:
    """The manifest of a golden file (cases in file order)."""
    with goldens.open(path) as gf:
        attrs = gf.attrs
        cases = {case.case_id: _case_entry(case) for case in gf}
    return {**_header(attrs.get("sweep_name"), tier or attrs.get("tier", ""), attrs.get("sweep_seed")),
            "cases": cases}


def sweep_manifest(sweep_ref: str = "smoke", tier: str | None = None, jobs: int = 1,
                   compression: str = "none") -> dict:
    """Generate a sweep tier into a temporary file and return its manifest."""
    from .engine import Run, generate
    from .sweep import load_sweep
    sweep = load_sweep(sweep_ref)
    tier = sweep.check_tier(tier)
    with tempfile.TemporaryDirectory(prefix="refspec-manifest-") as tmp:
        out = os.path.join(tmp, f"{sweep.name}.h5")
        generate(Run.of(sweep, compression=compression, extra_attrs={"tier": tier}),
                 sweep.cases(tier), out, jobs=jobs)
        return file_manifest(out, tier)


def compare(expected: dict, actual: dict) -> list[str]:
    """Differences between two manifests, one line each (empty when they agree)."""
    out = []
    for key in ("format", "sweep", "tier", "sweep_seed"):
        if expected.get(key) != actual.get(key):
            out.append(f"{key}: {expected.get(key)!r} != {actual.get(key)!r}")
    e, a = expected.get("cases", {}), actual.get("cases", {})
    for cid in e:
        if cid not in a:
            out.append(f"missing case {cid}")
    for cid in a:
        if cid not in e:
            out.append(f"new case {cid}")
    if list(c for c in e if c in a) != list(c for c in a if c in e):
        out.append("case order differs")
    for cid in e:
        if cid not in a:
            continue
        ec, ac = e[cid], a[cid]
        for key in ("seed", "expected_error_code"):
            if ec.get(key) != ac.get(key):
                out.append(f"{cid}: {key} {ec.get(key)!r} != {ac.get(key)!r}")
        ed, ad = ec.get("datasets", {}), ac.get("datasets", {})
        for name in sorted(set(ed) | set(ad)):
            if ed.get(name) != ad.get(name):
                out.append(f"{cid}: {name}: {ed.get(name)} != {ad.get(name)}")
    return out


def _default_path() -> str:
    """goldens/smoke.manifest.json of the source tree (the top-level goldens/ folder)."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(top, "goldens", "smoke.manifest.json")


def dumps(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=False) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m refspec.goldens.manifest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", default="smoke", help="sweep name or TOML path (default smoke)")
    parser.add_argument("--tier", default=None, help="tier (default: the sweep's default)")
    parser.add_argument("--from", dest="source", default=None, metavar="FILE.h5",
                        help="take the digests of an existing golden file instead of generating")
    parser.add_argument("-o", "--output", default=None,
                        help="manifest path (default goldens/smoke.manifest.json; '-' = stdout)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the manifest at --output instead of writing it")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for generating")
    args = parser.parse_args(argv)
    path = args.output or _default_path()
    try:
        manifest = (file_manifest(args.source, args.tier) if args.source
                    else sweep_manifest(args.sweep, args.tier, jobs=args.jobs))
    except (OSError, ValueError) as exc:
        print(f"refspec.goldens.manifest: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(path, encoding="utf-8") as fh:
                expected = json.load(fh)
        except (OSError, ValueError) as exc:
            print(f"refspec.goldens.manifest: error: {path}: {exc}", file=sys.stderr)
            return 2
        diffs = compare(expected, manifest)
        for line in diffs[:50]:
            print(line)
        if len(diffs) > 50:
            print(f"... and {len(diffs) - 50} more differences")
        print(f"{path}: {'matches' if not diffs else f'{len(diffs)} differences'} "
              f"({len(manifest['cases'])} cases)")
        return 1 if diffs else 0
    text = dumps(manifest)
    if path == "-":
        sys.stdout.write(text)
        return 0
    write_text_atomic(path, text)
    print(f"wrote {path}: {len(manifest['cases'])} cases")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
