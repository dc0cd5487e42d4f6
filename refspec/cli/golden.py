"""``refspec golden`` and ``refspec check-dump``: goldens of the user's own inputs
(docs/real_runs.md, docs/vendor_ut.md).

    refspec golden DIR... -o OUT.h5                                  case folders
    refspec golden --msprobe DUMP_PATH --map MAP.toml -o OUT.h5      the mapped calls of a dump
    refspec golden --vendor-ut DIR --ut-args "B N D ..." -o OUT.h5   the vendor's UT data
    refspec check-dump DUMP_PATH --map MAP.toml [-o OUT.h5] [compare's options]
"""

from __future__ import annotations

import os
import tempfile

import click

from .. import goldens
from ..spec.errors import one_line
from .compare import compare_command
from .usage_errors import CliError, OutputPath
from .generate import GIVE_H5, check_golden_output, generate_command

__all__ = ["register", "golden_command", "check_dump_command"]


def _describe(dirs, msprobe, mapping, vendor_ut, ut_args, soc):
    """The user cases of the one source given (CliError for a bad combination or bad input)."""
    from ..inputs.user_cases import InputError
    given = [name for name, v in (("DIR", dirs), ("--msprobe", msprobe),
                                  ("--vendor-ut", vendor_ut)) if v]
    if len(given) != 1:
        raise CliError("give one source of inputs: case folders (DIR...), --msprobe DUMP_PATH "
                       "--map MAP.toml, or --vendor-ut DIR --ut-args \"...\""
                       + (f" (got {' and '.join(given)})" if given else ""))
    if bool(mapping) != bool(msprobe):
        raise CliError("--msprobe DUMP_PATH and --map MAP.toml go together")
    if bool(ut_args) != bool(vendor_ut):
        raise CliError("--vendor-ut DIR needs --ut-args \"B N D Sq+Seq Sk+Sek Sq Sk Sr DTYPE "
                       "TILINGKEY\" (the arguments gen_data.py was run with), and --ut-args "
                       "goes with --vendor-ut")
    if soc is not None and not vendor_ut:
        raise CliError("--soc applies to --vendor-ut (a case.json states its profile, a "
                       "mapping file each [[api]]'s)")
    try:
        if dirs:
            from ..inputs.case_folders import describe_folders
            return "case-folders", describe_folders(dirs)
        if msprobe:
            from ..inputs.msprobe_calls import describe_dump
            return "msprobe", describe_dump(msprobe, mapping)
        from ..inputs.vendor_ut import describe_vendor_ut
        return "vendor-ut", [describe_vendor_ut(vendor_ut, ut_args,
                                                None if soc == "none" else (soc or "A2"))]
    except InputError as exc:
        raise CliError(str(exc)) from None


def _write(kind, cases, out, force, compression, summary_line=True):
    from ..inputs.user_cases import InputError, write_user_cases
    definition = "\n".join(f"{c.case_id}\t{c.where}" for c in cases)
    try:
        summary, negatives = write_user_cases(out, cases, sweep_name=kind,
                                              sweep_definition=definition,
                                              compression=compression, force=force)
    except InputError as exc:
        raise CliError(str(exc)) from None
    for case_id, err in negatives:
        click.echo(f"negative case {case_id}: the profile rejects it with {err.code} "
                   f"{err.status}: {one_line(err)}")
    if summary_line:
        click.echo(summary.line())
    return summary


@click.command("golden")
@click.argument("dirs", nargs=-1, type=click.Path())
@click.option("--msprobe", "msprobe", type=click.Path(), default=None, metavar="DUMP_PATH",
              help="An msprobe dump (DUMP_PATH/step*/rank*/dump.json); needs --map.")
@click.option("--map", "mapping", type=click.Path(dir_okay=False), default=None,
              metavar="MAP.toml", help="Which API calls of the dump are which operator.")
@click.option("--vendor-ut", "vendor_ut", type=click.Path(), default=None, metavar="DIR",
              help="The folder the vendor's NormRopeConcatGrad gen_data.py wrote.")
@click.option("--ut-args", "ut_args", default=None, metavar="ARGS",
              help="gen_data.py's arguments: \"B N D Sq+Seq Sk+Sek Sq Sk Sr DTYPE TILINGKEY\".")
@click.option("--soc", default=None, type=click.Choice(("A2", "A3", "none")),
              help="Chip profile of --vendor-ut data (default A2; A3 has the same rules).")
def golden_command(dirs, msprobe, mapping, vendor_ut, ut_args, soc, force, compression, out):
    """Golden cases of your own inputs: case folders (the `refspec export` layout), the mapped
    API calls of an msprobe dump, or the vendor's UT data. Each case is validated by its chip
    profile (a rejected one is written as a negative case) and computed exactly as generated
    cases are."""
    check_golden_output(out, force=force)
    kind, cases = _describe(dirs, msprobe, mapping, vendor_ut, ut_args, soc)
    _write(kind, cases, out, force, compression)
    return 0


#: --force, --compression and -o as `refspec generate` has them
golden_command.params += [p for p in generate_command.params
                          if p.name in ("force", "compression", "out")]


#: the options of `refspec compare` that check-dump passes on (all but the golden, the actual
#: outputs, the mapping file and --msprobe, which check-dump sets)
_COMPARE_OPTIONS = [p for p in compare_command.params
                    if p.name not in ("golden", "actual", "mapping", "msprobe")]


def _check_dump(dump_path, mapping, out, force, **compare_options):
    """Make the goldens of the mapped calls of DUMP_PATH and judge the dumped outputs against
    them, call by call; prints the comparison report (exit code 1 if anything fails). The
    golden file is kept only with -o."""
    if out is not None:
        check_golden_output(out, force=force)
    kind, cases = _describe((), dump_path, mapping, None, None, None)
    ctx = click.get_current_context()
    with tempfile.TemporaryDirectory(prefix="refspec-check-dump-") as tmp:
        path = out if out is not None else os.path.join(tmp, "goldens.h5")
        summary = _write(kind, cases, path, force, goldens.DEFAULT_COMPRESSION,
                         summary_line=False)
        click.echo(f"goldens: {summary.cases} calls ({summary.negative} rejected by their "
                   f"profile)" + (f", kept in {out}" if out is not None else ""))
        return ctx.invoke(compare_command, golden=path, actual=None, mapping=None,
                          msprobe=dump_path, **compare_options)


check_dump_command = click.Command(
    "check-dump", callback=_check_dump, help=_check_dump.__doc__,
    params=[click.Argument(["dump_path"], type=click.Path()),
            click.Option(["--map", "mapping"], type=click.Path(dir_okay=False), required=True,
                         metavar="MAP.toml", help="Which API calls of the dump are which operator "
                                                  "(docs/real_runs.md)."),
            click.Option(["--output", "-o", "out"], type=OutputPath(GIVE_H5), default=None,
                         metavar="OUT.h5", help="Keep the golden file here."),
            click.Option(["--force"], is_flag=True, help="Replace an existing -o file."),
            *_COMPARE_OPTIONS])


def register(group) -> None:
    group.add_command(golden_command)
    group.add_command(check_dump_command)
