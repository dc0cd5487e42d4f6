"""``refspec compare GOLDEN ACTUAL``: judge a kernel's outputs against golden cases
(docs/compare.md). Exit code 0 when every output passes, 1 when any fails or has an input
problem, 2 for usage errors (bad flags, unreadable golden file, unusable actual path)."""

from __future__ import annotations

import os
import sys

import click

from .. import ops
from ..comparator.standards import STANDARD_NAMES
from ..goldens.format import UnknownCaseError
from .usage_errors import CliError, check_output_file

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
@click.option("--json", "json_path", type=click.Path(), default=None, help="Write the JSON report.")
@click.option("--junit", "junit_path", type=click.Path(), default=None, help="Write JUnit XML.")
@click.option("--html", "html_path", type=click.Path(), default=None,
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
def compare_command(golden, actual, cases, standard, rtol, atol, saturation, mapping, ratio_level,
                    json_path, junit_path, html_path, heatmap_axes, top, failures_only, verbose,
                    only_present, operators, socs, jobs, scheduler, msprobe):
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
        from ..comparator.dump_source import msprobe_source
        return msprobe_source(golden, msprobe, actual, mapping), None
    return judge(golden, source, cases=cases, standard=standard, rtol=rtol, atol=atol,
                 saturation=saturation, ratio_level=ratio_level, json_path=json_path,
                 junit_path=junit_path, html_path=html_path, heatmap_axes=heatmap_axes, top=top,
                 failures_only=failures_only, verbose=verbose, only_present=only_present,
                 operators=operators, socs=socs, jobs=jobs, scheduler=scheduler)


def judge(golden, source, *, cases, standard, rtol, atol, saturation, ratio_level, json_path,
          junit_path, html_path, heatmap_axes, top, failures_only, verbose, only_present,
          operators, socs, jobs, scheduler) -> int:
    """Judge the actual outputs ``source()`` gives (``(actual, mapping)``) against GOLDEN and
    print and write the reports; the exit code (``refspec compare`` and ``refspec run``)."""
    from ..comparator import CompareUsageError, MappingError, compare
    from ..comparator.frameworks import FrameworkError
    from ..comparator.implementation import ImplementationError
    from ..comparator.render_text import render_text, terminal_width
    from ..goldens.executors import SchedulerUnavailable, WorkerLost, scheduler_address

    for path, flag in ((json_path, "--json"), (junit_path, "--junit"), (html_path, "--html")):
        if path is not None:
            check_output_file(path, f"{flag} {path}")
    if heatmap_axes is not None and not (heatmap_axes.isalpha() and 1 <= len(heatmap_axes) <= 2):
        raise CliError(f"--heatmap-axes {heatmap_axes!r}: give one or two axis letters, e.g. SD")
    try:
        actual, mapping = source()
        report = compare(golden, actual, cases=list(cases) or None, standard=standard, rtol=rtol,
                         atol=atol, saturation=saturation, mapping=mapping, top=top,
                         ratio_level=ratio_level, heatmaps=html_path is not None,
                         heatmap_axes=heatmap_axes, only_present=only_present,
                         operators=list(operators) or None, socs=list(socs) or None,
                         jobs=jobs or (os.cpu_count() or 1),
                         scheduler=scheduler_address(scheduler))
    except (CompareUsageError, MappingError, UnknownCaseError, FrameworkError,
            ImplementationError, SchedulerUnavailable) as exc:
        raise CliError(str(exc)) from None
    except WorkerLost as exc:
        raise CliError(f"{exc}; nothing was written (--jobs 1 judges in this process and shows "
                       "the cause)") from None
    click.echo(render_text(report, width=terminal_width(), verbose=verbose,
                           failures_only=failures_only))
    if json_path:
        from ..comparator.render_json import write_json
        write_json(report, json_path)
    if junit_path:
        from ..comparator.render_junit import write_junit
        write_junit(report, junit_path)
    if html_path:
        from ..comparator.render_html import write_html
        write_html(report, html_path)
    sys.stdout.flush()
    return report.exit_code


def register(group) -> None:
    group.add_command(compare_command)
