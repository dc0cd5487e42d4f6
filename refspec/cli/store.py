"""``refspec show``, ``refspec export``, ``refspec merge`` and ``refspec pack``: inspect, export,
join and pack golden files (docs/goldens.md). Errors are one line on stderr with exit code 2
(refspec.cli)."""

from __future__ import annotations

import json
import os
from collections import Counter

import click

from ..goldens.executors import SCHEDULER_ENV, SchedulerUnavailable, WorkerLost
from ..goldens.export import FORMATS, export_cases
from ..goldens.format import UnknownCaseError
from ..goldens.integrity import verify_case
from ..goldens.selection import SweepError, profiles
from ..goldens.read import GoldenCase, GoldenFile, LazyArray
from ..goldens.shards import merge as merge_shards
from ..goldens.shards import pack as pack_file
from .usage_errors import CliError, OutputPath, on_full_disk

__all__ = ["register", "show", "export", "merge", "pack", "file_summary", "case_summary"]

#: the option that reads an incomplete golden file (an interrupted run, a partial merge)
ALLOW_INCOMPLETE = click.option(
    "--allow-incomplete", is_flag=True,
    help="Read a file that is not marked complete (an interrupted run, a partial merge): "
         "the cases it holds.")

#: root attributes `show` prints first, in this order
_FILE_ATTRS = ("schema_version", "refspec_version", "numpy_version", "h5py_version",
               "hdf5_version", "created", "compression", "shuffle", "merged_from")


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _array_info(arr: LazyArray) -> dict:
    return {"shape": list(arr.shape), "dtype": arr.attrs.get("dtype", arr.dtype.name),
            "bytes": arr.nbytes, "stored_bytes": arr.stored_nbytes,
            "compression": arr.compression, "chunks": list(arr.chunks) if arr.chunks else None}


def case_summary(case: GoldenCase) -> dict:
    """Everything `refspec show FILE CASE` prints."""
    outputs = {}
    for name in case.output_names:
        info = _array_info(case.expected[name])
        info.update(case.output_meta(name))
        info["exact"] = _array_info(case.exact[name]) if name in case.exact else None
        info["sum_abs"] = _array_info(case.sum_abs[name]) if name in case.sum_abs else None
        outputs[name] = info
    error = None
    if case.expected_error is not None:
        error = {"code": case.expected_error, "status": case.expected_error_status,
                 "message": case.expected_error_message}
    return {"case_id": case.case_id, "op": case.op, "params": case.params, "seed": case.seed,
            "soc": case.soc or None, "distribution": case.distribution, "expected_error": error,
            "inputs": {n: _array_info(case.inputs[n]) for n in case.input_names},
            "outputs": outputs, "regenerate": case.regenerate}


def file_summary(gf: GoldenFile) -> dict:
    """Everything `refspec show FILE` prints: root attributes, counts, sizes (from the index
    at the file's root, without opening the cases)."""
    rows = gf.summary()
    files = [gf.path] + gf.part_files
    return {"file": gf.path, "attrs": gf.attrs, "sweep_name": gf.attrs.get("sweep_name"),
            "complete": gf.complete, "partial": gf.attrs.get("partial"), "cases": len(rows),
            "by_op": dict(Counter(r.op for r in rows)),
            "by_dtype": dict(Counter(r.dtype for r in rows)),
            "by_soc": dict(Counter(r.soc or "none" for r in rows)),
            "negative": sum(r.negative for r in rows),
            "data_bytes": sum(r.data_bytes for r in rows),
            "stored_bytes": sum(r.stored_bytes for r in rows),
            "part_files": gf.part_files,
            "file_bytes": sum(os.path.getsize(p) for p in files if os.path.exists(p))}


def _print_file(s: dict) -> None:
    a = s["attrs"]
    click.echo(f"file:              {s['file']}")
    if s["complete"]:
        state = "yes"
    elif s["partial"]:
        state = f"NO (partial: {s['partial']})"
    else:
        state = "NO (interrupted; continue with --resume)"
    click.echo(f"complete:          {state}")
    if s["part_files"]:
        click.echo(f"{'parts:':<19}{len(s['part_files'])} part files in "
                   f"{os.path.dirname(s['part_files'][0])}{os.sep} (refspec pack makes one "
                   "self-contained file)")
    click.echo(f"sweep:             {s['sweep_name']} (seed {a.get('sweep_seed')})")
    for key in _FILE_ATTRS:
        if key in a:
            click.echo(f"{key + ':':<19}{a[key]}")
    extra = [k for k in a if k not in ("sweep_definition", "sweep_name", "sweep_seed", "complete",
                                       "parts", "partial") + _FILE_ATTRS]
    for key in extra:
        click.echo(f"{key + ':':<19}{a[key]}")
    lines = str(a.get("sweep_definition", "")).count("\n") + 1
    click.echo(f"definition:        {lines} lines of TOML (--json shows it)")
    click.echo(f"cases:             {s['cases']} ({s['negative']} negative)")
    for title, key in (("by op", "by_op"), ("by dtype", "by_dtype"), ("by soc", "by_soc")):
        body = ", ".join(f"{k} {v}" for k, v in sorted(s[key].items())) or "-"
        click.echo(f"{title + ':':<19}{body}")
    click.echo(f"data:              {_human(s['data_bytes'])} ({s['data_bytes']} bytes), stored "
               f"{_human(s['stored_bytes'])}, file {_human(s['file_bytes'])}")


def _array_line(name: str, info: dict) -> str:
    shape = "x".join(str(d) for d in info["shape"]) or "scalar"
    return (f"  {name:<28} {shape:<18} {info['dtype']:<9} {_human(info['bytes']):>10} "
            f"stored {_human(info['stored_bytes']):>10} {info['compression']}")


def _print_case(s: dict) -> None:
    click.echo(f"case:              {s['case_id']}")
    click.echo(f"op:                {s['op']}")
    click.echo("parameters:")
    for k, v in s["params"].items():
        click.echo(f"  {k + ':':<20} {json.dumps(v)}")
    click.echo(f"seed:              {s['seed']}")
    click.echo(f"soc:               {s['soc'] or 'none (math only)'}")
    click.echo(f"distribution:      {s['distribution']}")
    e = s["expected_error"]
    click.echo("expected error:    " + ("none (positive case)" if e is None else
                                     f"{e['code']} {e['status'] or ''}: {e['message'] or ''}"))
    click.echo("inputs:")
    for name, info in s["inputs"].items():
        click.echo(_array_line(name, info))
    if s["outputs"]:
        click.echo("outputs (expected; exact float64 and sum_abs alongside):")
    for name, info in s["outputs"].items():
        k = "-" if info["reduced_terms"] is None else info["reduced_terms"]
        click.echo(_array_line(name, info) + f"  class={info['comparison_class']} K={k} "
                   f"axes={info['axes']} sum_abs={'yes' if info['sum_abs'] else 'no'}")
    click.echo(f"regenerate:        {s['regenerate']}")


def _verify(gf: GoldenFile, case) -> None:
    """Read every dataset of the file (or of one case) and check its checksum and each expected
    output against its exact value; one line saying what was checked."""
    ids = gf.case_ids() if case is None else [case]
    count = 0
    for case_id in ids:
        try:
            c = gf[case_id]
        except UnknownCaseError as exc:
            raise CliError(str(exc)) from None
        verify_case(c)
        count += sum(len(getattr(c, sub)) for sub in ("inputs", "expected", "exact", "sum_abs"))
    click.echo(f"verified {len(ids)} case(s) of {gf.path}: {count} datasets read whole, each "
               "matches its checksum and its description in the index, and every expected "
               "output is its exact value rounded once")


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("case", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--ids", is_flag=True, help="List the case ids, one per line.")
@click.option("--verify", is_flag=True,
              help="Read every dataset (of CASE, or of every case) and check it: its checksum, "
                   "its shape and dtype against the index, and each expected output against "
                   "its exact value rounded once. Exit 2 naming the first problem.")
@ALLOW_INCOMPLETE
def show(file, case, as_json, ids, verify, allow_incomplete):
    """Show what a golden FILE holds, or one CASE of it (parameters, shapes, dtypes, sizes,
    tolerance metadata, how to regenerate it)."""
    with GoldenFile(file, allow_incomplete) as gf:
        if verify:
            _verify(gf, case)
            return 0
        if ids and case is None:
            data = gf.case_ids()
            click.echo(json.dumps(data, indent=2) if as_json else "\n".join(data))
            return 0
        if case is None:
            summary, printer = file_summary(gf), _print_file
        else:
            try:
                summary, printer = case_summary(gf[case]), _print_case
            except UnknownCaseError as exc:
                raise CliError(str(exc)) from None
        if as_json:
            click.echo(json.dumps(summary, indent=2, default=str))
        else:
            printer(summary)
    return 0


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--case", "cases", multiple=True, metavar="ID",
              help="Case id or shell pattern (repeatable; default: every case).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="bin", show_default=True,
              help="bin: raw little-endian C order (tofile); npy: NumPy .npy.")
@click.option("-o", "--output", "out_dir", required=True,
              type=OutputPath("give the folder to write the cases into", directory=True),
              help="Directory to write DIR/<case_id>/ into.")
@click.option("--soc", "socs", multiple=True, metavar="S",
              help="Only the cases of this chip profile: A2, A3, 950, none (repeatable).")
@click.option("--force", is_flag=True, help="Overwrite files that exist.")
@click.option("--jobs", "-j", type=click.IntRange(0), default=1, show_default=True, metavar="N",
              help="Worker processes exporting groups of cases side by side (0 = one per CPU).")
@click.option("--scheduler", default=None, envvar=SCHEDULER_ENV, metavar="ADDRESS",
              help=f"Export on this Dask scheduler's workers (also ${SCHEDULER_ENV}); they must "
                   "see FILE and the output directory.")
@ALLOW_INCOMPLETE
def export(file, cases, fmt, out_dir, socs, force, jobs, scheduler, allow_incomplete):
    """Export cases of a golden FILE as the vendor test scripts' files: one file per input
    (dy.bin, gradQueryOutput.bin, ...), golden_<output>.bin and case.json per case. With
    --force, each case folder is first emptied of an earlier export's files, the kernel's
    outputs and status.json."""
    try:
        with GoldenFile(file, allow_incomplete) as gf, on_full_disk(
                "free some and export again with --force (each file is written whole or not "
                "at all)"):
            dirs = export_cases(gf, out_dir, cases or None, fmt=fmt, force=force,
                                jobs=jobs or os.cpu_count() or 1, scheduler=scheduler,
                                socs=profiles(socs))
    except (UnknownCaseError, SchedulerUnavailable, WorkerLost, SweepError) as exc:
        raise CliError(str(exc)) from None
    if socs and not dirs:
        raise CliError(f"no case of {file} matches the selection (`refspec show {file}` counts "
                       "its cases by soc)")
    click.echo(f"exported {len(dirs)} case(s) as .{fmt} under {out_dir}", err=True)
    return 0


@click.command()
@click.argument("out", type=OutputPath("give the path of the merged .h5 file to write"))
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--allow-partial", is_flag=True,
              help="Merge an incomplete set of shards (missing or interrupted ones) into a file "
                   "marked partial instead of refusing it.")
def merge(out, shards, force, allow_partial):
    """Merge the shard files of one run (generate --shard K/N) into OUT, in the order of the
    unsharded selection; refuses shards of different runs, and missing or incomplete shards
    unless --allow-partial."""
    merge_shards(out, shards, force=force, allow_partial=allow_partial)
    with GoldenFile(out, allow_incomplete=True) as gf:
        n, partial = len(gf), gf.attrs.get("partial")
    click.echo(f"merged {n} cases from {len(shards)} shard(s) into {out} "
               f"({_human(os.path.getsize(out))})" + (f"; PARTIAL: {partial}" if partial else ""),
               err=True)
    return 0


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out", required=True,
              type=OutputPath("give the path of the .h5 file to write"),
              help="The self-contained golden file to write.")
@click.option("--force", is_flag=True, help="Replace the output if it exists.")
def pack(file, out, force):
    """Copy a golden FILE into one self-contained file (the cases of a --jobs run are copied
    out of its part files; every dataset keeps its bytes)."""
    pack_file(file, out, force=force)
    click.echo(f"packed {file} into {out} ({_human(os.path.getsize(out))})", err=True)
    return 0


def register(group) -> None:
    group.add_command(show)
    group.add_command(export)
    group.add_command(merge)
    group.add_command(pack)
