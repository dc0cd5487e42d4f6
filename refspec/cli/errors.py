"""How the command line reports a user's mistake: one line on stderr, exit code 2."""

from __future__ import annotations

import click

__all__ = ["CliError", "Interrupted", "fail"]


class CliError(click.ClickException):
    """A usage or input error: reported as one line, exit code 2."""

    exit_code = 2


class Interrupted(CliError):
    """Ctrl-C: one line saying what was kept and how to continue, exit code 130."""

    exit_code = 130


def fail(message: str):
    """Raise ``CliError`` with ``message`` (what is wrong and what is allowed)."""
    raise CliError(message)
