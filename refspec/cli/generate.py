"""``refspec list`` and ``refspec generate`` (docs/sweeps.md).

    refspec list [--sweep NAME|PATH] [--tier T] [--op OP] [--soc S] [--dtype D] [--mode M]
                 [--layout L] [--where AXIS=VALUE] [--json]
    refspec generate [--sweep NAME|PATH] [--tier T] [filters] [--case ID ...] [--seed N]
                     [--jobs N] [--shard K/N] [--resume] [--force]
                     [--compression none|lzf|gzip] -o OUT.h5
"""

from __future__ import annotations

import json
import os
import sys

import click

from .. import goldens, ops
from ..goldens.engine import parts_dir
from ..goldens.executors import SCHEDULER_ENV, SchedulerUnavailable
from ..goldens.selection import filter_cases, normalize_filter, parse_shard, parse_where, shard
from ..goldens.sweep import SweepError, load_sweep
from .usage_errors import CliError, Interrupted, OutputPath, check_output_file, on_full_disk

__all__ = ["register", "list_command", "generate_command"]


def _filter_options(f):
    opts = [
        click.option("--sweep", "sweep_ref", default="smoke", show_default=True,
                     metavar="NAME|PATH", help="Built-in sweep (smoke, standard, full) or a TOML file."),
        click.option("--tier", default=None, metavar="T",
                     help="Tier of the sweep (default: the sweep's default tier; 'all' = every case)."),
        click.option("--op", "ops", multiple=True, metavar="OP",
                     help=f"Only this operator: {', '.join(ops.ids())} (repeatable)."),
        click.option("--soc", "socs", multiple=True, metavar="S",
                     help="Only this chip profile: A2, A3, 950, none (repeatable)."),
        click.option("--dtype", "dtypes", multiple=True, metavar="D",
                     help="Only this dtype: float16, bfloat16, float32, float64 (repeatable)."),
        click.option("--mode", "modes", multiple=True, metavar="M",
                     help="Only this RoPE mode / NormRopeConcat rope_type: half, interleave, "
                          "quarter, interleave-half, none (repeatable)."),
        click.option("--layout", "layouts", multiple=True, metavar="L",
                     help="Only this RoPE layout: BNSD, BSND, SBND, TND (repeatable)."),
        click.option("--where", "where", multiple=True, metavar="AXIS=VALUE",
                     help="Only cases whose axis AXIS has this value, e.g. style=gptj, "
                          "mrope=16,24,24, dist=special (any axis of a record; repeatable, "
                          "one axis given twice: either value)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _select(sweep_ref, tier, filters: dict, case_ids=(), seed=None):
    """(sweep, selected cases) or CliError with one clear line; ``filters`` the values of the
    filter options by their parameter names (``ops``, ``socs``, ..., ``where``)."""
    try:
        sweep = load_sweep(sweep_ref)
        where = [parse_where(w) for w in filters.get("where", ())]
        filters = {kind: {normalize_filter(kind[:-1], v) for v in values}
                   for kind, values in filters.items() if kind != "where"}
        if case_ids:
            cases = [sweep.case(cid, seed) for cid in dict.fromkeys(case_ids)]
        else:
            cases = sweep.cases(tier, seed)
        return sweep, filter_cases(cases, where=where, **filters)
    except SweepError as exc:
        raise CliError(str(exc)) from None


@click.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True,
              help="One JSON document: every case with its parameters, seed and expected error.")
def list_command(sweep_ref, tier, as_json, **filters):
    """List the case ids of a sweep, one per line."""
    sweep, cases = _select(sweep_ref, tier, filters)
    if not as_json:
        for case in cases:
            click.echo(case.id)
        return 0
    from ..goldens.cases import probe
    rows = []
    for case in cases:
        err = probe(case.params)
        rows.append({"id": case.id, "op": case.op, "block": case.block, "seed": case.seed,
                     "params": case.params,
                     "expected_error_code": None if err is None else err.code,
                     "expected_error_status": None if err is None else err.status})
    click.echo(json.dumps({"sweep": sweep.name, "tier": sweep.check_tier(tier),
                           "seed": sweep.seed, "cases": rows}, indent=1))
    return 0


GIVE_H5 = "give the path of the .h5 file to write"
#: what to do after a full disk stopped a generate run
FULL_DISK_HINT = ("free some and run the same command with --resume to continue (the cases "
                  "written so far are kept), or write a smaller selection (--tier, --op, "
                  "--shard K/N)")


def check_golden_output(out: str, resume: bool = False, force: bool = False) -> None:
    """A usage error unless the golden file ``out`` can be written: a writable place, and
    nothing there already unless ``force`` (replace it) or ``resume`` (continue it)."""
    check_output_file(out, out, GIVE_H5)
    if resume and force:
        raise CliError("--resume and --force exclude each other: --resume continues a run, "
                       "--force starts over")
    if not (resume or force):
        for path in (out, goldens.part_path(out), parts_dir(out)):
            if os.path.exists(path):
                what = "exists" if path == out else "exists (an interrupted run)"
                raise CliError(f"{path}: {what}; use --resume to continue it or --force to "
                               "start over")


@click.command("generate")
@_filter_options
@click.option("--case", "case_ids", multiple=True, metavar="ID",
              help="Only this case id (any tier of the sweep; repeatable).")
@click.option("--seed", type=int, default=None, metavar="N",
              help="Data seed (default: the sweep's seed); each case's seed derives from it and the case id.")
@click.option("--jobs", "-j", type=click.IntRange(0), default=1, show_default=True, metavar="N",
              help="Worker processes (0 = one per CPU), each writing part files under "
                   "OUT.h5.parts/ that OUT.h5 links to; the data are the same whatever N is.")
@click.option("--scheduler", default=None, envvar=SCHEDULER_ENV, metavar="ADDRESS",
              help=f"Run the parts on this Dask scheduler (also ${SCHEDULER_ENV}); its workers "
                   "must see OUT's directory.")
@click.option("--shard", "shard_spec", default=None, metavar="K/N",
              help="Only the cases whose index in the selection mod N is K-1; join shards with "
                   "`refspec merge`.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run (OUT.h5.part, or OUT.h5.parts/ of a --jobs run).")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@click.option("--compression", type=click.Choice(["none", "lzf", "gzip"]),
              default=goldens.DEFAULT_COMPRESSION, show_default=True,
              help="HDF5 compression of the datasets (see docs/goldens.md).")
@click.option("--output", "-o", "out", required=True, metavar="OUT.h5",
              type=OutputPath(GIVE_H5), help="The golden file to write.")
def generate_command(sweep_ref, tier, case_ids, seed, jobs, scheduler, shard_spec, resume,
                     force, compression, out, **filters):
    """Generate a golden HDF5 file from a sweep (default: the smoke sweep)."""
    check_golden_output(out, resume, force)
    try:
        with on_full_disk(FULL_DISK_HINT):
            return _generate(sweep_ref, tier, filters, case_ids, seed, jobs, scheduler,
                             shard_spec, resume, force, compression, out)
    except KeyboardInterrupt as exc:
        partial = getattr(exc, "partial", None)
        if partial is None:
            raise Interrupted("interrupted before any case was written") from None
        raise Interrupted(f"interrupted; the cases written so far are in {partial}: run the "
                          "same command with --resume to continue") from None


def _generate(sweep_ref, tier, filters, case_ids, seed, jobs, scheduler, shard_spec, resume,
              force, compression, out):
    from ..goldens.engine import GenerateError, Run, check_expectations, generate
    sweep, cases = _select(sweep_ref, tier, filters, case_ids, seed)
    extra = {"tier": "" if case_ids else sweep.check_tier(tier)}
    if shard_spec is not None:
        try:
            k, n = parse_shard(shard_spec)
        except SweepError as exc:
            raise CliError(str(exc)) from None
        cases = shard(cases, k, n)
        extra["shard"] = f"{k}/{n}"
    if not cases:
        raise CliError(f"no case of sweep {sweep.name!r} matches the selection "
                       "(`refspec list` with the same options shows what there is)")
    try:
        check_expectations(sweep, cases)
    except GenerateError as exc:
        raise CliError(str(exc)) from None
    jobs = jobs or os.cpu_count() or 1

    def run(progress):
        return generate(Run.of(sweep, seed, compression, extra), cases, out,
                        jobs=min(jobs, len(cases)), scheduler=scheduler, resume=resume,
                        force=force, progress=progress)

    try:
        if sys.stderr.isatty():
            with click.progressbar(length=len(cases), label="generating", file=sys.stderr,
                                   show_pos=True) as bar:
                summary = run(bar.update)
        else:
            summary = run(None)
    except (GenerateError, SchedulerUnavailable) as exc:
        raise CliError(str(exc)) from None
    click.echo(summary.line())
    return 0


def register(group) -> None:
    group.add_command(list_command)
    group.add_command(generate_command)
