"""``refspec compare GOLDEN ACTUAL``: judge a kernel's outputs against golden cases
(docs/compare.md). Exit code 0 when every output passes, 1 when any fails or has an input
problem, 2 for usage errors (bad flags, unreadable golden file, unusable actual path)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace

import click

from .. import ops
from ..comparator.judging.standards import STANDARD_NAMES
from ..goldens.format import CorruptGoldenError, UnknownCaseError
from .usage_errors import CliError, OutputPath

__all__ = ["register", "compare_command"]




@click.command("compare")
@click.argument("golden", type=click.Path(dir_okay=False))
@click.argument("actual", type=click.Path(), required=False)
@click.option("--case", "cases", multiple=True, metavar="ID",
              help="Case id or shell pattern (repeatable); default: every case.")
@click.option("--standard", type=click.Choice(STANDARD_NAMES), default="default", show_default=True,
              help="Accuracy standard (docs/compare.md lists each one's numbers and sources).")
@click.option("--rtol", type=float, default=None, help="Override the standard's rtol for this run.")
@click.option("--atol", type=float, default=None, help="Override the standard's atol for this run.")
@click.option("--saturation", is_flag=True,
              help="Accept max-finite where the golden is +-Inf (devices in saturation mode).")
@click.option("--map", "mapping", type=click.Path(dir_okay=False), default=None,
              help="Mapping file (TOML/JSON): dump tensor or npz key -> case and output.")
@click.option("--msprobe", "msprobe", type=click.Path(), default=None, metavar="DUMP_PATH",
              help="An msprobe dump, judged against goldens made from it (refspec golden).")
@click.option("--ratio-level", type=click.Choice(("L0", "L1", "L2")), default=None,
              help="Thresholds of the ratio standard (default: by operator, msprobe levels).")
@click.option("--json", "json_path", type=OutputPath(), default=None, help="Write the JSON report.")
@click.option("--junit", "junit_path", type=OutputPath(), default=None, help="Write JUnit XML.")
@click.option("--html", "html_path", type=OutputPath(), default=None,
              help="Write a self-contained HTML report with pictures of failing outputs.")
@click.option("--heatmap-axes", default=None, metavar="XY",
              help="Two axis letters for the HTML error heatmaps, e.g. SD (default: last two).")
@click.option("--top", type=click.IntRange(0, 1000), default=10, show_default=True,
              help="Worst elements kept per output.")
@click.option("--failures-only", is_flag=True,
              help="Terminal report: leave out the summary of the passes (the total stays).")
@click.option("-v", "--verbose", is_flag=True, help="Terminal report: one row for every output.")
@click.option("--only-present", is_flag=True,
              help="Cases with no output and no status.json were left out on purpose: they are "
                   "listed as not run but do not fail the run.")
@click.option("--op", "operators", multiple=True, metavar="OP",
              help=f"Only the cases of this operator: {', '.join(ops.ids())} (repeatable).")
@click.option("--soc", "socs", multiple=True, metavar="S",
              help="Only the cases of this chip profile: A2, A3, 950, none (repeatable). The "
                   "math-only profile's statuses are judged only with --soc none.")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=1, show_default=True,
              metavar="N", help="Worker processes judging groups of cases side by side "
                                "(0 = one per CPU); the report is the same.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Judge on this Dask scheduler's workers (also $REFSPEC_SCHEDULER); they must "
                   "see GOLDEN and ACTUAL.")
@click.option("--allow-incomplete", is_flag=True,
              help="Judge against a golden file not marked complete (an interrupted generate), "
                   "the cases it holds; without it such a file is refused.")
def compare_command(golden, actual, mapping, msprobe, **options):
    """Judge the outputs in ACTUAL against the golden HDF5 file GOLDEN.

    ACTUAL: a `refspec export` directory with the kernel's <output>.bin and status.json
    ({"code": N}, 0 = accepted) next to each case's inputs, any <case_id>/<output>.bin|.npy
    tree, a .npz/.npy file, an HDF5 file in refspec's schema, or an msprobe dump directory
    (with --map).
    """
    if actual is None and msprobe is None:
        raise CliError("missing ACTUAL (the kernel's outputs) or --msprobe DUMP_PATH")

    def source():
        if msprobe is None:
            return actual, mapping
        from ..comparator.sources.msprobe_dumps import msprobe_source
        return msprobe_source(golden, msprobe, actual, mapping), None
    return compare_and_report(golden, source, **options)


#: the options of `refspec compare` that say which reports are written and how the terminal
#: report looks; every other option is a field of
#: ``refspec.comparator.judging.options.CompareOptions``
REPORT_OPTIONS = ("json_path", "junit_path", "html_path", "failures_only", "verbose")


def compare_options(options: dict):
    """The ``CompareOptions`` of the command line's comparison options (click's names are its
    field names): repeated options as lists (None when not given), ``--jobs 0`` one per CPU,
    the scheduler's address, heat maps for an HTML report."""
    from ..comparator.judging.options import CompareOptions
    from ..goldens.executors import scheduler_address

    given = {k: v for k, v in options.items() if k not in REPORT_OPTIONS}
    for name in ("cases", "operators", "socs"):
        given[name] = list(given[name]) or None
    given["jobs"] = given["jobs"] or (os.cpu_count() or 1)
    given["scheduler"] = scheduler_address(given["scheduler"])
    if given["heatmap_axes"] is not None and not (given["heatmap_axes"].isalpha()
                                                  and 1 <= len(given["heatmap_axes"]) <= 2):
        raise CliError(f"--heatmap-axes {given['heatmap_axes']!r}: give one or two axis "
                       "letters, e.g. SD")
    return CompareOptions(heatmaps=any(f.heatmaps for f in _formats(options)), **given)


def compare_and_report(golden, source, **options) -> int:
    """Judge the actual outputs ``source()`` gives (``(actual, mapping)``) against GOLDEN with
    the command line's ``options`` (``REPORT_OPTIONS`` and ``compare_options``) and print and
    write the reports; the exit code (``refspec compare``, ``refspec run``, ``refspec
    check-dump``)."""
    from ..comparator import CompareUsageError, MappingError
    from ..comparator.sources.frameworks import FrameworkError
    from ..comparator.sources.implementation import ImplementationError
    from ..comparator.comparison import compare_with
    from ..goldens.executors import SchedulerUnavailable, WorkerLost

    opts = compare_options(options)
    _clear_reports(options)
    try:
        actual, mapping = source()
        report = compare_with(golden, actual, replace(opts, mapping=mapping))
    except (CompareUsageError, MappingError, UnknownCaseError, FrameworkError,
            ImplementationError, SchedulerUnavailable) as exc:
        raise CliError(str(exc)) from None
    except CorruptGoldenError as exc:
        raise CliError(golden_damaged(exc)) from None
    except WorkerLost as exc:
        raise CliError(f"{exc}; nothing was written (--jobs 1 judges in this process and shows "
                       "the cause)") from None
    _write_reports(report, options)
    return report.exit_code


def golden_damaged(exc: CorruptGoldenError) -> str:
    """The one line of a comparison stopped by a damaged golden file: its own status, the
    file, case and dataset, and that no kernel output was blamed."""
    return (f"GOLDEN DAMAGED: {exc}; a problem of the golden file, not of the kernel's "
            "outputs: no verdict given, no report written (`refspec show --verify "
            "GOLDEN` checks the whole file; generate it again)")


def _formats(options: dict) -> list:
    """The report formats whose files were asked for (``--json PATH`` and the like)."""
    from ..comparator.reports.formats import FORMATS
    return [f for name, f in FORMATS.items() if options.get(f"{name}_path") is not None]


def _clear_reports(options: dict) -> None:
    """The earlier reports at the paths asked for removed before anything is judged: a
    comparison that does not end leaves no report that would pass for its own."""
    from ..comparator.reports.formats import clear_report
    for f in _formats(options):
        clear_report(options[f"{f.name}_path"])


def _write_reports(report, options: dict) -> None:
    """The terminal report, and the JSON, JUnit and HTML files asked for."""
    from ..comparator.reports.formats import write_report
    from ..comparator.reports.render_text import render_text, terminal_width

    click.echo(render_text(report, width=terminal_width(), verbose=options["verbose"],
                           failures_only=options["failures_only"]))
    for f in _formats(options):
        write_report(report, f.name, options[f"{f.name}_path"])
    sys.stdout.flush()


def register(group) -> None:
    group.add_command(compare_command)
