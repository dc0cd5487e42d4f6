"""``refspec run GOLDEN --impl MODULE``: feed every golden case's inputs to an implementation's
functions and judge what they return, exactly as ``refspec compare`` judges a kernel's files
(docs/run.md). Exit code 0 when everything judged passes, 1 when anything fails, 2 for usage
errors (an implementation that cannot be imported, a framework or device that cannot be used)."""

from __future__ import annotations

import click

from .compare import compare_and_report, compare_command

__all__ = ["register", "run_command"]

#: the options of `refspec compare` that `refspec run` shares (all but what names the actual
#: outputs, and --only-present, which --require-all replaces)
_SHARED = [p for p in compare_command.params
           if p.name not in ("golden", "actual", "mapping", "msprobe", "only_present")]


def _run(golden, impl, framework, device, autograd, repeat, require_all, **options):
    """Feed each case of the golden file GOLDEN to the function of the same name in the
    implementation IMPL (a module, a .py file, or MODULE:OBJECT) and judge its results like
    `refspec compare`: same standards, statuses and reports. --framework torch passes tensors on
    --device; --autograd judges the backward cases through the forward functions and torch
    autograd. Each case's median time of --repeat calls goes into the reports."""
    from ..comparator.sources.implementation import Implementation

    implementation = Implementation(impl, framework, device, autograd, repeat)
    return compare_and_report(golden, lambda: (implementation, None),
                              only_present=not require_all, **options)


run_command = click.Command(
    "run", callback=_run, help=_run.__doc__, short_help="Run an implementation on the goldens and "
                                                        "judge its results.",
    params=[click.Argument(["golden"], type=click.Path(dir_okay=False)),
            click.Option(["--impl", "impl"], required=True, metavar="MODULE",
                         help="The implementation: a module name, a .py file, or MODULE:OBJECT, "
                              "providing the spec's functions under the same names."),
            click.Option(["--framework"], type=click.Choice(("numpy", "torch")), default="numpy",
                         show_default=True, help="How inputs are passed: NumPy arrays or torch "
                                                 "tensors."),
            click.Option(["--device"], default=None, metavar="DEVICE",
                         help="torch device of the tensors: cpu, cuda, cuda:1, npu, ... "
                              "(default cpu)."),
            click.Option(["--autograd"], is_flag=True,
                         help="Judge backward cases through the forward functions and torch "
                              "autograd (needs --framework torch)."),
            click.Option(["--repeat"], type=click.IntRange(0, 1000), default=3, show_default=True,
                         metavar="N", help="Timed calls per case after the judged one (their "
                                           "median is reported; 0: no timing)."),
            click.Option(["--require-all"], is_flag=True,
                         help="Cases not run (a function the implementation lacks) fail the run."),
            *_SHARED])


def register(group) -> None:
    group.add_command(run_command)
