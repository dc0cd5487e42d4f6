"""The ``refspec`` command line (click). Subcommands live in their own modules and register here."""

from __future__ import annotations

import click

from ._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="refspec")
def main():
    """refspec: reference data for Ascend RoPE / NormRopeConcat backward kernels.

    Generate HDF5 golden sets from the executable NumPy specification, inspect and export them,
    and judge a kernel's outputs against them.
    """


if __name__ == "__main__":  # pragma: no cover
    main()
