"""``python -m refspec``: the same command line as the ``refspec`` console script."""

from refspec.cli import main

main()
