"""How the command line reports a user's mistake: one line on stderr, exit code 2."""

from __future__ import annotations

import os

import click

__all__ = ["CliError", "Interrupted", "check_output_file"]


class CliError(click.ClickException):
    """A usage or input error: reported as one line, exit code 2."""

    exit_code = 2


class Interrupted(CliError):
    """Ctrl-C: one line saying what was kept and how to continue, exit code 130."""

    exit_code = 130


def check_output_file(path: str, label: str, give: str = "give a file name") -> None:
    """``CliError`` (starting with ``label``) unless ``path`` can be written as a file: not a
    directory, in a directory that exists and is writable."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise CliError(f"{label}: is a directory; {give}")
    if not os.path.isdir(directory):
        raise CliError(f"{label}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise CliError(f"{label}: directory {directory} is not writable")
