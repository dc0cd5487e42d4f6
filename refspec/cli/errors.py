"""How the command line reports a user's mistake: one line on stderr, exit code 2."""

from __future__ import annotations

import click

__all__ = ["CliError", "fail"]


class CliError(click.ClickException):
    """A usage or input error: reported as one line, exit code 2."""

    exit_code = 2


def fail(message: str):
    """Raise :class:`CliError` with ``message`` (what is wrong and what is allowed)."""
    raise CliError(message)
