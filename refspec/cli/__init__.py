"""The ``refspec`` command line (click), the top layer: it parses arguments, calls the layers
below and formats their errors (docs/architecture.md).

Each module holds a few commands and registers them on ``main``. Every user error ends the
same way: one line on stderr starting with ``refspec: error:``, exit code 2, no traceback
(raise ``refspec.cli.usage_errors.CliError``, or let an ``refspec.spec.errors.AclnnError``
or ``OSError`` escape a command).
"""

from __future__ import annotations

import logging
import sys

import click

from .._version import __version__
from ..spec.errors import AclnnError, one_line
from . import compare, generate, golden, run_impl, store
from .usage_errors import CliError, Interrupted, full_disk_file

__all__ = ["CliError", "main"]



class RefspecGroup(click.Group):
    """A click group whose errors are one line on stderr and whose commands may return an exit
    code (the comparator returns 1 when something fails).

    Ctrl-C prints one line and goes on as a KeyboardInterrupt: the process entry (``__call__``:
    the console script, ``python -m refspec``) ends with exit code 130, and a caller that runs
    the command in its own process (click's test runner inside a test session) is interrupted
    too, instead of seeing one more command that exited with 130."""

    def __call__(self, *args, **kwargs):
        try:
            return self.main(*args, **kwargs)
        except KeyboardInterrupt:
            sys.exit(130)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not (sys.argv[1:] if args is None else list(args)):
            # bare `refspec`: the normal help, not a usage error
            with self.make_context(prog_name or "refspec", ["--help"], resilient_parsing=True) as ctx:
                click.echo(ctx.get_help())
            sys.exit(0)
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                              standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            if not isinstance(exc.__context__, KeyboardInterrupt):
                click.echo("refspec: error: aborted", err=True)
                sys.exit(130)
            click.echo("refspec: error: interrupted", err=True)
            raise KeyboardInterrupt from None
        except Interrupted as exc:
            click.echo(f"refspec: error: {one_line(exc.format_message())}", err=True)
            raise KeyboardInterrupt from None
        except click.ClickException as exc:
            click.echo(f"refspec: error: {one_line(exc.format_message())}", err=True)
            sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
        except AclnnError as exc:
            click.echo(f"refspec: error: {one_line(f'{exc} (aclnn {exc.code} {exc.status})')}", err=True)
            sys.exit(2)
        except OSError as exc:
            click.echo(f"refspec: error: {one_line(os_error_text(exc))}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("refspec: error: interrupted", err=True)
            raise
        sys.exit(rv if isinstance(rv, int) else 0)


def os_error_text(exc: OSError) -> str:
    """An operating-system error as one line naming the file: a full disk says so, also when
    HDF5 reports it inside its own message (``... filename = '...', errno = 28, ...``)."""
    filename = getattr(exc, "filename", None)
    full = full_disk_file(exc)
    if full is not None:
        return f"{full + ': ' if full else ''}no space left on the device"
    return (f"{filename}: " if filename else "") + (exc.strerror or str(exc))


@click.group(cls=RefspecGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="refspec")
def main():
    """refspec: reference data for Ascend RoPE-family and NormRopeConcat kernels.

    Generate HDF5 golden sets from the executable NumPy specification, inspect and export them,
    and judge a kernel's outputs against them.
    """
    log = logging.getLogger("refspec")
    if not any(isinstance(h, _Notices) for h in log.handlers):
        log.addHandler(_Notices())


class _Notices(logging.Handler):
    """The library's notices (logger ``refspec``: a compile that takes a while), one line each
    on stderr as ``refspec: <notice>``."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"refspec: {record.getMessage()}", err=True)


for _module in (generate, store, compare, run_impl, golden):
    _module.register(main)
