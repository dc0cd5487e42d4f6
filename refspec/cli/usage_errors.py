"""How the command line reports a user's mistake: one line on stderr, exit code 2."""

from __future__ import annotations

import contextlib
import errno
import os
import re

import click

__all__ = ["CliError", "Interrupted", "OutputPath", "check_output_file", "full_disk_file",
           "on_full_disk"]


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


class OutputPath(click.ParamType):
    """The type of every option and argument naming what a command writes: a file
    (``check_output_file``), or with ``directory=True`` a folder, which may not be an existing
    file. Checked as the command line is read, so a mistake is refspec's one line naming the
    option and the path, ending in ``give``."""

    name = "path"

    def __init__(self, give: str = "give a file name", directory: bool = False):
        self.give, self.directory = give, directory

    def convert(self, value, param, ctx):
        label = value if param is None or not param.opts[0].startswith("-") \
            else f"{max(param.opts, key=len)} {value}"
        if not self.directory:
            check_output_file(value, label, self.give)
        elif os.path.exists(value) and not os.path.isdir(value):
            raise CliError(f"{label}: is a file; {self.give}")
        return value


def full_disk_file(exc: OSError) -> str | None:
    """The file a full-disk error was writing ("" when it does not say), or None when ``exc``
    is not a full disk (HDF5 says so inside its own message: ``... filename = '...', errno =
    28, ...``)."""
    text = str(exc)
    if exc.errno != errno.ENOSPC and "No space left on device" not in text \
            and "errno = 28" not in text:
        return None
    found = re.search(r"filename = '([^']*)'", text)
    return getattr(exc, "filename", None) or (found.group(1) if found else "")


@contextlib.contextmanager
def on_full_disk(hint: str):
    """A full disk inside the block is one line: the file, and ``hint`` (what to do next)."""
    try:
        yield
    except OSError as exc:
        name = full_disk_file(exc)
        if name is None:
            raise
        raise CliError(f"{name + ': ' if name else ''}no space left on the device; {hint}") \
            from None
